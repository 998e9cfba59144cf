#ifndef CX_OPS_POOL_H
#define CX_OPS_POOL_H

#include "../graph.h"

/* Window geometry of MaxPool / AveragePool and their gradient ops, from the node's attributes
 * (kernel_shape, strides, pads, auto_pad, dilations, ceil_mode) and the input shape, following
 * the ONNX spec. Shared by shape inference, the CPU kernels and the references so that all three
 * place windows identically. Spatial ranks 1 to 3. */

#define CX_POOL_MAX_SPATIAL 3

typedef struct cx_pool_geom {
  int nsp;                               /* spatial dimensions */
  int64_t in[CX_POOL_MAX_SPATIAL];       /* input spatial sizes */
  int64_t out[CX_POOL_MAX_SPATIAL];      /* output spatial sizes */
  int64_t k[CX_POOL_MAX_SPATIAL];        /* kernel */
  int64_t s[CX_POOL_MAX_SPATIAL];        /* stride */
  int64_t d[CX_POOL_MAX_SPATIAL];        /* dilation */
  int64_t pad_b[CX_POOL_MAX_SPATIAL];    /* padding before (left/top) */
  int64_t pad_e[CX_POOL_MAX_SPATIAL];    /* padding after, as given or from auto_pad */
} cx_pool_geom;

/* Fails (CX_ERR_SHAPE / CX_ERR_UNSUPPORTED) naming the node and what was expected. */
cx_status cx_pool_geometry(const cx_node *n, const cx_shape *x, cx_pool_geom *g);

/* The output shape [N, C, out...] of a geometry computed for input x. */
cx_shape cx_pool_out_shape(const cx_shape *x, const cx_pool_geom *g);

/* g as three spatial axes, into the caller's arrays of three: 1-D and 2-D pooling get unit leading
 * axes (size 1, kernel 1, stride 1, dilation 1, no padding), so that one 3-D loop serves every
 * rank. Arrays rather than a record because each backend keeps its own (the CUDA one is read by
 * nvcc, which does not see core's headers). */
void cx_pool_geom_3d(const cx_pool_geom *g, int64_t in[3], int64_t out[3], int64_t k[3],
                     int64_t s[3], int64_t d[3], int64_t pad_b[3], int64_t pad_e[3]);

#endif
