#ifndef CX_NPY_H
#define CX_NPY_H

#include <stdio.h>

#include "dtype.h"
#include "status.h"
#include "tensor.h"

/* NumPy .npy files (format 1.0, 2.0 and 3.0), little-endian C-order arrays of
 * f32 '<f4', f16 '<f2', s8 '|i1', u8 '|u1', s32 '<i4', s64 '<i8', bool '|b1' and f64 '<f8'.
 * Anything else (Fortran order, big-endian, other dtypes, malformed or truncated files) fails with
 * CX_ERR_FORMAT and a message that starts with the path. */

/* *data is malloc'ed (at least one byte, even for empty arrays); the caller frees it. Bool
 * elements are stored as 0/1 bytes. On failure nothing is allocated. */
cx_status cx_npy_read(const char *path, cx_dtype *dtype, cx_shape *shape, void **data);
/* The same from an open stream positioned at the start of the file (which must end where the
 * data does); path names it in messages. */
cx_status cx_npy_read_stream(FILE *f, const char *path, cx_dtype *dtype, cx_shape *shape,
                             void **data);

/* Writes version 1.0 (2.0 when the header does not fit). The file is written as
 * "<path>.tmp.<pid>" and renamed over path once complete, so path never holds a half file. */
cx_status cx_npy_write(const char *path, cx_dtype dtype, const cx_shape *shape, const void *data);

#endif
