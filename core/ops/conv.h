#ifndef CX_OPS_CONV_H
#define CX_OPS_CONV_H

#include "../graph.h"

/* The geometry of a 2-D convolution, resolved once from a Conv or ConvGrad node (strides, pads,
 * auto_pad, dilations, group) and the shapes of X and W. Shape inference, the CPU kernels and the
 * reference all read it, so that they cannot disagree about padding. */
typedef struct cx_conv_geom {
  int64_t n, c_in, h, w;  /* X: [n, c_in, h, w] */
  int64_t c_out, kh, kw;  /* W: [c_out, c_in / group, kh, kw] */
  int64_t group;
  int64_t sh, sw;         /* strides */
  int64_t dh, dw;         /* dilations (1: none) */
  int64_t pt, pl, pb, pr; /* pads: top, left, bottom, right */
  int64_t oh, ow;         /* Y: [n, c_out, oh, ow] */
} cx_conv_geom;

/* Fails with CX_ERR_SHAPE (naming the node and the shapes) when the attributes do not fit. */
cx_status cx_conv_geom_make(const cx_node *n, const cx_shape *x, const cx_shape *w,
                            cx_conv_geom *g);

/* ConvGrad's optional attribute `outputs`: three 0/1 flags for dX, dW, dB. An output that is not
 * wanted gets shape [0], so no memory and no work goes to it. Absent: all three wanted. */
void cx_conv_grad_wanted(const cx_node *n, bool want[3]);

/* Depthwise 3x3 with stride 1 or 2 and no dilation: the shape the hand-written CPU path takes. */
static inline bool cx_conv_geom_is_dw3x3(const cx_conv_geom *g) {
  return g->group == g->c_in && g->c_out == g->c_in && g->kh == 3 && g->kw == 3 && g->dh == 1 &&
         g->dw == 1 && (g->sh == 1 || g->sh == 2) && (g->sw == 1 || g->sw == 2);
}

#endif
