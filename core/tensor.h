#ifndef CX_TENSOR_H
#define CX_TENSOR_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "status.h"

#define CX_MAX_DIMS 8

typedef struct cx_shape {
  int ndim;
  int64_t d[CX_MAX_DIMS]; /* -1 marks a dimension not known until compile (the batch) */
} cx_shape;

typedef enum cx_device_kind { CX_DEVICE_CPU, CX_DEVICE_CUDA } cx_device_kind;

typedef struct cx_device {
  cx_device_kind kind;
  int index;
} cx_device;

/* A view of memory: the tensor never owns its data (the program's arena, a parameter block or the
 * caller does). Strides are in bytes so that views of any dtype can share one description. */
typedef struct cx_tensor {
  cx_dtype dtype;
  cx_shape shape;
  int64_t strides[CX_MAX_DIMS];
  void *data;
  cx_device device;
} cx_tensor;

cx_shape cx_shape_make(int ndim, const int64_t *dims);
int64_t cx_shape_numel(const cx_shape *s);
bool cx_shape_equal(const cx_shape *a, const cx_shape *b);
/* numpy broadcasting of a and b; fails naming both shapes */
cx_status cx_shape_broadcast(const cx_shape *a, const cx_shape *b, cx_shape *out);
/* "[2,3,4]"; buf must hold at least CX_SHAPE_STR bytes */
#define CX_SHAPE_STR 200
const char *cx_shape_str(const cx_shape *s, char *buf);

/* Contiguous row-major view of data on the CPU. */
cx_tensor cx_tensor_view(cx_dtype dtype, const cx_shape *shape, void *data);
int64_t cx_tensor_numel(const cx_tensor *t);
size_t cx_tensor_nbytes(const cx_tensor *t);
bool cx_tensor_is_contiguous(const cx_tensor *t);

/* Channels-last (NHWC) 4-D tensors keep their logical NCHW shape; only the byte strides say that C
 * varies fastest: C = elem, W = C*elem, H = W*C*elem, N = H*W*C*elem. Same size as the plain view,
 * so a buffer can be either. A tensor with H*W == 1 (or C == 1) is both plain and channels-last. */
bool cx_tensor_is_channels_last(const cx_tensor *t);
/* The same data and shape viewed channels-last; t must be 4-D. */
cx_tensor cx_tensor_channels_last_view(const cx_tensor *t);
/* 4-D, channels-last strides, and not also plain (H*W > 1 and C > 1): the kernels' test for
 * taking their NHWC path. */
bool cx_tensor_nhwc(const cx_tensor *t);

#endif
