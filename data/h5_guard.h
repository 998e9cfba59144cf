#ifndef CX_DATA_H5_GUARD_H
#define CX_DATA_H5_GUARD_H

/* Reading HDF5 files that may be damaged or hostile (data sets, checkpoints): a read-only HDF5
 * file driver that refuses what would make libhdf5 1.10 hang (docs/data.md, "Damaged files").
 *
 *   - It opens regular files only: a FIFO, a device or a directory is refused before anything
 *     blocks on it (the open itself is non-blocking).
 *   - Every block HDF5 reads that is a global heap collection (the variable-length strings of
 *     attributes and of /class_names live there) is walked as libhdf5's deserializer walks it;
 *     a collection whose walk would not advance (a free-space object of size 0, where
 *     H5HG__cache_heap_deserialize loops forever), or with an object that runs past its end
 *     (H5HG_read would copy that many bytes), fails the read instead. */

#include <hdf5.h>
#include <stdbool.h>
#include <stddef.h>

#include "../core/status.h"

/* A file-access property list with the guard driver, for H5Fopen(path, H5F_ACC_RDONLY, fapl);
 * the caller closes it with H5Pclose. -1 when HDF5 refuses to register the driver. */
hid_t cx_h5_guard_fapl(void);

/* 0 when path is a regular file, else a message naming it ("is a FIFO, not a regular file"). */
cx_status cx_h5_check_regular(const char *path);

/* The check the driver makes on a global heap collection read into buf[0, len) (it starts with
 * "GCOL"), for the tests: false when libhdf5's walk of its objects would not end. */
bool cx_h5_gheap_ok(const unsigned char *buf, size_t len);

#endif
