/* Biases on the int32 grid of an integer kernel (quantize/internal.h, cx_quant_snap_bias).
 *
 * An integer convolution adds its bias to the int32 accumulator, in units of s_x·s_w[c]; ONNX
 * Runtime makes any QDQ Conv or Gemm with a float bias into that (its BiasQuantization rewrite,
 * at every optimization level above none, on most such nodes), TensorRT adds the float bias.
 * Measured on the full example's student before this step: our INT8 runtime and ONNX Runtime
 * (optimized) shared 99.02% of the test set's predictions, 100.00% with its optimizations off;
 * a channel whose folded weights are large has an s_x·s_w near its output's step, and its
 * rounded bias moved the whole channel by 0.6 of a step. A bias already on the grid rounds to
 * itself, so every runtime then computes the same model, and the graph the stage evaluates is
 * that model. */
#include <math.h>
#include <string.h>

#include "../core/op.h"
#include "internal.h"

/* An initializer's f32 data and element count; NULL for a value computed at run time. */
static float *f32_init(const cx_graph *g, int v, int64_t *numel) {
  if (v < 0 || v >= g->n_values) return NULL;
  const cx_value *x = &g->values[v];
  if (x->kind == CX_VALUE_ACT || x->kind == CX_VALUE_INPUT || !x->init || x->dtype != CX_F32)
    return NULL;
  *numel = cx_shape_numel(&x->shape);
  return x->init;
}

/* The scale of the FakeQuantize producing v, when there is one with a constant scale; whether
 * it quantizes an initializer (a weight) in *weight. */
static const float *fq_scale(const cx_graph *g, int v, bool *weight, int64_t *n) {
  int p = v >= 0 ? g->values[v].producer : -1;
  if (p < 0 || strcmp(g->nodes[p].op->name, "FakeQuantize")) return NULL;
  int64_t nx;
  *weight = f32_init(g, g->nodes[p].in[0], &nx) != NULL;
  return f32_init(g, g->nodes[p].in[1], n);
}

void cx_quant_snap_bias(cx_graph *g) {
  for (int i = 0; i < g->n_nodes; i++) {
    const cx_node *n = &g->nodes[i];
    bool x_weight, w_weight;
    if ((strcmp(n->op->name, "Conv") && strcmp(n->op->name, "Gemm")) || n->n_in < 3 ||
        n->in[2] < 0)
      continue;
    int64_t nb, nx, nw;
    float *b = f32_init(g, n->in[2], &nb);
    const float *sx = b ? fq_scale(g, n->in[0], &x_weight, &nx) : NULL;
    const float *sw = sx ? fq_scale(g, n->in[1], &w_weight, &nw) : NULL;
    /* a weight's scales lie along its output channels (the plan's weight_axis), one per bias */
    if (!sw || x_weight || !w_weight || nx != 1 || (nw != 1 && nw != nb)) continue;
    for (int64_t c = 0; c < nb; c++) {
      float scale = sx[0] * sw[nw == 1 ? 0 : c], q = nearbyintf(b[c] / scale);
      if (isfinite(q) && fabsf(q) < 2147483520.0f) b[c] = q * scale; /* int32, as f32 */
    }
  }
}
