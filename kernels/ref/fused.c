/* References for the inference pass's fused ops (core/ops/fused.c): the Conv, Gemm or MatMul
 * reference, the summed input or the bias, then the activation's own reference, run on a node
 * of that activation op carrying the fused node's act_* attributes under the activation's names. */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/op.h"
#include "ref.h"

/* y = act(y) in place, for the activation fused node n names (none: unchanged). */
static cx_status activation(const cx_node *n, cx_ref_tensor *y) {
  const char *act = cx_node_string(n, "activation", NULL);
  if (!act) return CX_OK;
  bool swish = !strcmp(act, "Swish");
  const char *op = swish ? "Sigmoid" : act;
  static const char *const from[] = {"act_alpha", "act_beta", "act_min", "act_max"};
  static const char *const to[] = {"alpha", "beta", "min", "max"};
  cx_attr attrs[4];
  int n_attrs = 0;
  for (int k = 0; k < 4; k++) {
    const cx_attr *at = cx_node_attr(n, from[k]);
    if (at) attrs[n_attrs++] = (cx_attr){.name = (char *)to[k], .type = CX_ATTR_FLOAT, .f = at->f};
  }
  int in0 = 0;
  cx_node an = {.name = n->name, .op = cx_op_find(op), .n_in = 1, .n_out = 1,
                .n_attrs = n_attrs, .in = &in0, .out = &in0, .attrs = attrs};
  cx_ref_fn fn = cx_ref_find(op);
  if (!an.op || !fn) return cx_fail(CX_ERR_ARG, "node '%s': no reference for activation '%s'",
                                    n->name, cx_printable(act));
  int64_t count = cx_shape_numel(&y->shape);
  cx_ref_tensor out = *y;
  out.data = calloc((size_t)count + 1, sizeof(double));
  if (!out.data) return cx_fail(CX_ERR_NOMEM, "out of memory");
  cx_ref_args a = {.node = &an, .in = y, .n_in = 1, .out = &out, .n_out = 1};
  cx_status s = fn(&a);
  for (int64_t i = 0; s == CX_OK && i < count; i++)
    y->data[i] = swish ? y->data[i] * out.data[i] : out.data[i];
  free(out.data);
  return s;
}

static cx_status ref_conv_fused(const cx_ref_args *a) {
  cx_ref_args c = *a;
  c.n_in = a->n_in > 3 ? 3 : a->n_in;
  CX_TRY(cx_ref_find("Conv")(&c));
  if (a->n_in > 3 && a->in[3].data)
    for (int64_t i = 0; i < cx_shape_numel(&a->out[0].shape); i++)
      a->out[0].data[i] += a->in[3].data[i];
  return activation(a->node, &a->out[0]);
}

static cx_status ref_gemm_fused(const cx_ref_args *a) {
  CX_TRY(cx_ref_find("Gemm")(a));
  return activation(a->node, &a->out[0]);
}

static cx_status ref_matmul_fused(const cx_ref_args *a) {
  cx_ref_args m = *a;
  m.n_in = 2;
  CX_TRY(cx_ref_find("MatMul")(&m));
  if (a->n_in > 2 && a->in[2].data) {
    int64_t cols = a->in[2].shape.d[0], count = cx_shape_numel(&a->out[0].shape);
    for (int64_t i = 0; i < count; i++) a->out[0].data[i] += a->in[2].data[i % cols];
  }
  return activation(a->node, &a->out[0]);
}

const cx_ref_entry cx_ref_fused[] = {
    {"ConvFused", ref_conv_fused},
    {"GemmFused", ref_gemm_fused},
    {"MatMulFused", ref_matmul_fused},
    {NULL, NULL},
};
