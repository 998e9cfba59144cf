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
 *     (H5HG_read would copy that many bytes), fails the read instead.
 *   - Every local heap's free list (an old-style group's link names) must end within its data
 *     segment: libhdf5 follows it, allocating a node per block, and a loop never ends.
 *   - Every version 1 B-tree node (group and chunk indexes) must sit one level below the one
 *     parent that names it: libhdf5 recurses into children unchecked (data/h5_guard_btree.h).
 *   - Every version 1 object header it reads is walked, and an attribute message that libhdf5
 *     would decode past its end, or whose variable-length value would make it allocate without
 *     bound or look up an object its heap lacks, fails the read (data/h5_guard_ohdr.h). */

#include <hdf5.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/status.h"

/* A file-access property list with the guard driver, for H5Fopen(path, H5F_ACC_RDONLY, fapl);
 * the caller closes it with H5Pclose. -1 when HDF5 refuses to register the driver. */
hid_t cx_h5_guard_fapl(void);

/* Why the driver last refused a read on this thread (NULL: it did not), and forgets it: for
 * the error message when libhdf5 cleared its own error stack. */
const char *cx_h5_guard_refusal(void);

/* Before H5Dread of the n variable-length strings of data set ds in file (opened with the
 * guard driver; path and what for the message): their references, checked as the header check
 * checks an attribute's. Only contiguous storage is checked (what our writer and h5py write);
 * a compact or chunked one is left to libhdf5. */
cx_status cx_h5_guard_vlen_strings(hid_t file, hid_t ds, int64_t n, const char *path,
                                   const char *what);

/* Every element data set ds (dims[0..rank), elem bytes each in the file) declares is in file:
 * a contiguous or compact data set stores all their bytes, a chunked one has every chunk
 * written (and, unfiltered, all their bytes), and no storage is larger than the file. HDF5
 * reads unwritten chunks as zeros, so otherwise a few bytes of header could declare 2^40
 * elements, which the caller would allocate and read; and libhdf5 1.10 copies a compact data
 * set that stores fewer bytes than it declares from a NULL buffer (SIGSEGV). path and name for
 * the message. */
cx_status cx_h5_check_stored(hid_t file, const char *path, hid_t ds, const char *name, int rank,
                             const hsize_t *dims, size_t elem);

/* 0 when path is a regular file, else a message naming it ("is a FIFO, not a regular file"). */
cx_status cx_h5_check_regular(const char *path);

/* The check the driver makes on a global heap collection read into buf[0, len) (it starts with
 * "GCOL"), for the tests: false when libhdf5's walk of its objects would not end. */
bool cx_h5_gheap_ok(const unsigned char *buf, size_t len);

/* The check the driver makes on a local heap's data segment seg[0, size) whose free list starts
 * at offset head, for the tests: false when libhdf5's walk of that list would not end, or
 * would read a free block past the segment. */
bool cx_h5_lheap_free_list_ok(const unsigned char *seg, uint64_t size, uint64_t head);

#endif
