/* Ops that the target opset lacks, written as several ONNX nodes of their definition:
 * LayerNormalization below opset 17 (ReduceMean, Sub, Mul, ReduceMean, Add, Sqrt, Div, Mul, Add,
 * the form PyTorch writes at opset 13), Gelu below opset 20 (the Erf or Tanh formula, as PyTorch
 * writes it) and ExpandBatch (ours) as an Expand whose target takes the batch from Shape(Ref).
 * The last node of each writes the original output's name, so readers need no renaming. */
#include <stdio.h>
#include <string.h>

#include "../core/op.h"
#include "export_internal.h"

/* Writes op(in...) into a new value named "<node>/<tag>" (or `out` when given); returns the
 * output's name, NULL when out of memory. Graph values among the inputs are marked used by the
 * caller (mark_used). */
static const char *part(cx_exporter *ex, const cx_node *n, const char *tag, const char *op,
                        const char *const *in, int n_in, const char *out,
                        Onnx__NodeProto **node) {
  char base[1024];
  snprintf(base, sizeof base, "%s/%s", n->name, tag);
  const char *name = out ? out : cx_ex_unique_name(ex, base);
  const char *node_name = out ? cx_ex_unique_name(ex, base) : name;
  if (!name || !node_name) return NULL;
  Onnx__NodeProto *p = cx_ex_node(ex, op, node_name, in, n_in, &name, 1);
  if (node) *node = p;
  return p ? name : NULL;
}

static void mark_used(cx_exporter *ex, const cx_node *n) {
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] >= 0) ex->used[n->in[k]] = true;
}

static const char *in_name(const cx_exporter *ex, const cx_node *n, int k) {
  return ex->g->values[n->in[k]].name;
}

static const char *out_name(const cx_exporter *ex, const cx_node *n) {
  return ex->g->values[n->out[0]].name;
}

static cx_status fail(const cx_exporter *ex, const cx_node *n, const char *why) {
  return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s) cannot be exported to ONNX opset %lld: %s",
                 n->name, n->op->name, (long long)ex->opset, why);
}

/* ReduceMean over `axes` with keepdims 1, in the opset's form (axes an attribute before 18). */
static const char *mean(cx_exporter *ex, const cx_node *n, const char *tag, const char *x,
                        const int64_t *axes, int na) {
  Onnx__NodeProto *p = NULL;
  const char *y = part(ex, n, tag, "ReduceMean", &x, 1, NULL, &p);
  if (!y || cx_ex_attr_ints(ex, p, "axes", axes, na) != CX_OK) return NULL;
  return y;
}

static cx_status layer_norm(cx_exporter *ex, int index) {
  const cx_node *n = &ex->g->nodes[index];
  for (int k = 1; k < n->n_out; k++)
    if (n->out[k] >= 0)
      return fail(ex, n, "its Mean and InvStdDev outputs exist only from opset 17");
  int rank = ex->shape[0][n->in[0]].ndim, axis = 0;
  CX_TRY(cx_axis_normalize(n, cx_node_int(n, "axis", -1), rank, &axis));
  int64_t axes[CX_MAX_DIMS];
  int na = 0;
  for (int d = axis; d < rank; d++) axes[na++] = d;
  float eps = cx_node_float(n, "epsilon", 1e-5f);
  bool bias = n->n_in > 2 && n->in[2] >= 0;
  const char *x = in_name(ex, n, 0), *m, *d, *sq, *var, *ve, *sd, *z, *y;
  if (!(m = mean(ex, n, "mean", x, axes, na)) ||
      !(d = part(ex, n, "centered", "Sub", (const char *[]){x, m}, 2, NULL, NULL)) ||
      !(sq = part(ex, n, "squared", "Mul", (const char *[]){d, d}, 2, NULL, NULL)) ||
      !(var = mean(ex, n, "variance", sq, axes, na)))
    return cx_ex_nomem();
  const char *e = cx_ex_const_f32(ex, n->name, "epsilon", eps);
  if (!e || !(ve = part(ex, n, "variance_eps", "Add", (const char *[]){var, e}, 2, NULL, NULL)) ||
      !(sd = part(ex, n, "std", "Sqrt", &ve, 1, NULL, NULL)) ||
      !(z = part(ex, n, "normalized", "Div", (const char *[]){d, sd}, 2, NULL, NULL)) ||
      !(y = part(ex, n, "scaled", "Mul", (const char *[]){z, in_name(ex, n, 1)}, 2,
                 bias ? NULL : out_name(ex, n), NULL)))
    return cx_ex_nomem();
  if (bias && !part(ex, n, "shifted", "Add", (const char *[]){y, in_name(ex, n, 2)}, 2,
                    out_name(ex, n), NULL))
    return cx_ex_nomem();
  mark_used(ex, n);
  return CX_OK;
}

/* approximate "none": x * (Erf(x / sqrt 2) + 1) * 0.5;
 * "tanh": x * (Tanh(sqrt(2/pi) * (x + 0.044715 x^3)) + 1) * 0.5. */
static cx_status gelu(cx_exporter *ex, int index) {
  const cx_node *n = &ex->g->nodes[index];
  const char *approx = cx_node_string(n, "approximate", "none");
  bool tanh_form = !strcmp(approx, "tanh");
  if (!tanh_form && strcmp(approx, "none")) return fail(ex, n, "approximate is not none or tanh");
  const char *x = in_name(ex, n, 0), *inner, *t;
  if (!tanh_form) {
    const char *r2 = cx_ex_const_f32(ex, n->name, "sqrt2", 1.41421356f);
    if (!r2 || !(inner = part(ex, n, "scaled", "Div", (const char *[]){x, r2}, 2, NULL, NULL)) ||
        !(t = part(ex, n, "erf", "Erf", &inner, 1, NULL, NULL)))
      return cx_ex_nomem();
  } else {
    const char *c = cx_ex_const_f32(ex, n->name, "coefficient", 0.044715f);
    const char *k = cx_ex_const_f32(ex, n->name, "sqrt_2_over_pi", 0.797884561f);
    const char *x2, *x3, *cx3, *s, *ks;
    if (!c || !k || !(x2 = part(ex, n, "x2", "Mul", (const char *[]){x, x}, 2, NULL, NULL)) ||
        !(x3 = part(ex, n, "x3", "Mul", (const char *[]){x2, x}, 2, NULL, NULL)) ||
        !(cx3 = part(ex, n, "cx3", "Mul", (const char *[]){x3, c}, 2, NULL, NULL)) ||
        !(s = part(ex, n, "sum", "Add", (const char *[]){x, cx3}, 2, NULL, NULL)) ||
        !(ks = part(ex, n, "scaled", "Mul", (const char *[]){s, k}, 2, NULL, NULL)) ||
        !(t = part(ex, n, "tanh", "Tanh", &ks, 1, NULL, NULL)))
      return cx_ex_nomem();
  }
  const char *one = cx_ex_const_f32(ex, n->name, "one", 1.0f);
  const char *half = cx_ex_const_f32(ex, n->name, "half", 0.5f), *t1, *xt;
  if (!one || !half || !(t1 = part(ex, n, "plus_one", "Add", (const char *[]){t, one}, 2, NULL,
                                   NULL)) ||
      !(xt = part(ex, n, "times_x", "Mul", (const char *[]){x, t1}, 2, NULL, NULL)) ||
      !part(ex, n, "half", "Mul", (const char *[]){xt, half}, 2, out_name(ex, n), NULL))
    return cx_ex_nomem();
  mark_used(ex, n);
  return CX_OK;
}

/* ExpandBatch(X, shape, Ref; batch_axes): the target is Concat of shape's entries, the batch
 * axes replaced by Shape(Ref)[0:1], then a plain Expand. */
static cx_status expand_batch(cx_exporter *ex, int index) {
  const cx_node *n = &ex->g->nodes[index];
  const cx_value *sv = &ex->g->values[n->in[1]];
  if (sv->kind != CX_VALUE_CONST || !sv->init || sv->dtype != CX_S64)
    return fail(ex, n, "its shape is not a constant int64 tensor");
  const int64_t *shape = sv->init, *axes = NULL;
  int k = (int)cx_shape_numel(&sv->shape), na = cx_node_ints(n, "batch_axes", &axes);
  if (k > CX_MAX_DIMS) return fail(ex, n, "its shape has too many dimensions");
  const char *ref = in_name(ex, n, 2), *dims, *batch, *parts[CX_MAX_DIMS];
  if (!(dims = part(ex, n, "ref_shape", "Shape", &ref, 1, NULL, NULL))) return cx_ex_nomem();
  const char *zero = cx_ex_const_s64(ex, n->name, "starts", 1, (int64_t[]){0});
  const char *one = cx_ex_const_s64(ex, n->name, "ends", 1, (int64_t[]){1});
  if (!zero || !one ||
      !(batch = part(ex, n, "batch", "Slice", (const char *[]){dims, zero, one}, 3, NULL, NULL)))
    return cx_ex_nomem();
  for (int d = 0; d < k; d++) {
    bool is_batch = false;
    for (int j = 0; j < na; j++) is_batch |= axes[j] == d;
    char what[32];
    snprintf(what, sizeof what, "dim%d", d);
    parts[d] = is_batch ? batch : cx_ex_const_s64(ex, n->name, what, 1, &shape[d]);
    if (!parts[d]) return cx_ex_nomem();
  }
  Onnx__NodeProto *cat = NULL;
  const char *target = part(ex, n, "target", "Concat", parts, k, NULL, &cat);
  if (!target || cx_ex_attr_int(ex, cat, "axis", 0) != CX_OK) return cx_ex_nomem();
  if (!part(ex, n, "expand", "Expand", (const char *[]){in_name(ex, n, 0), target}, 2,
            out_name(ex, n), NULL))
    return cx_ex_nomem();
  ex->used[n->in[0]] = ex->used[n->in[2]] = true; /* the shape is written as parts instead */
  return CX_OK;
}

cx_status cx_ex_lower_composed(cx_exporter *ex, int index, bool *done) {
  const char *op = ex->g->nodes[index].op->name;
  *done = true;
  if (!strcmp(op, "LayerNormalization") && ex->opset < 17) return layer_norm(ex, index);
  if (!strcmp(op, "Gelu") && ex->opset < 20) return gelu(ex, index);
  if (!strcmp(op, "ExpandBatch")) return expand_batch(ex, index);
  *done = false;
  return CX_OK;
}
