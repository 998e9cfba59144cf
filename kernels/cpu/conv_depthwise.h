#ifndef CX_CPU_CONV_DEPTHWISE_H
#define CX_CPU_CONV_DEPTHWISE_H

#include <stdbool.h>

#include "../../core/ops/conv.h"

/* Depthwise 3x3 convolution (cx_conv_geom_is_dw3x3: group == C_in == C_out, stride 1 or 2, no
 * dilation, any pads) on contiguous NCHW f32 data, written by hand because oneDNN 2.6 runs it far
 * below peak on plain layouts. Every function writes every element of its outputs and needs no
 * scratch. `avx512` picks the vector path (the caller checks cx_conv_dw_have_avx512()). */

bool cx_conv_dw_have_avx512(void);

/* y = conv(x, w) + b; b may be NULL */
void cx_conv_dw3x3_forward(const cx_conv_geom *g, const float *x, const float *w, const float *b,
                           float *y, bool avx512);
/* dx = the gradient of x for output gradient dy */
void cx_conv_dw3x3_backward_data(const cx_conv_geom *g, const float *dy, const float *w, float *dx,
                                 bool avx512);
/* dw and db (each may be NULL) for input x and output gradient dy */
void cx_conv_dw3x3_backward_weights(const cx_conv_geom *g, const float *x, const float *dy,
                                    float *dw, float *db, bool avx512);

/* Small planes (fewer than 16 output columns, at most 256 pixels, 16 channels or more): 16 channels
 * per vector instead of 16 columns (conv_depthwise_small.c, AVX-512 only). The entry points above
 * call these themselves when the shape fits. */
bool cx_conv_dw3x3_small_fits(const cx_conv_geom *g);
void cx_conv_dw3x3_small_forward(const cx_conv_geom *g, const float *x, const float *w,
                                 const float *b, float *y);
void cx_conv_dw3x3_small_backward_data(const cx_conv_geom *g, const float *dy, const float *w,
                                       float *dx);
void cx_conv_dw3x3_small_backward_weights(const cx_conv_geom *g, const float *x, const float *dy,
                                          float *dw, float *db);

/* Channels-last: dw and db (each may be NULL) from x [N,H,W,C] and dy [N,OH,OW,C], for the shapes
 * where oneDNN has no depthwise kernel of its own (conv_depthwise_nhwc.c). Needs
 * cx_conv_dw3x3_nhwc_wgrad_scratch(g, threads) bytes of scratch; runs on up to `threads`. */
size_t cx_conv_dw3x3_nhwc_wgrad_scratch(const cx_conv_geom *g, int threads);
void cx_conv_dw3x3_nhwc_backward_weights(const cx_conv_geom *g, const float *x, const float *dy,
                                         float *dw, float *db, void *scratch, int threads);

#endif
