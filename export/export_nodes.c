/* One graph node → ONNX node(s) in the target opset's form. The graph holds each op in its
 * canonical form (the newest opset's semantics, or an older attribute form the builder or
 * importer kept); each rule below rewrites what differs in opsets 13 to 17. Ops an opset lacks
 * are written as several nodes by export_compose.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "../core/ops/shape.h"
#include "export_internal.h"

enum { MAX_ADDED = 8 };

/* A node as it will be written: inputs by name (value id, or -1 for initializers the exporter
 * adds), the graph's attributes it keeps, and attributes a rule adds. */
typedef struct draft {
  cx_exporter *ex;
  int index;
  const cx_node *n;
  const char *op;
  const char **in;
  int *in_v;
  int n_in;
  const cx_attr *attr[CX_EX_MAX_ATTRS];
  int n_attr;
  cx_attr add[MAX_ADDED];
  int n_add;
} draft;

static cx_status fail(const draft *d, const char *why) {
  return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s) cannot be exported to ONNX opset %lld: %s",
                 d->n->name, d->n->op->name, (long long)d->ex->opset, why);
}

static const cx_attr *find_attr(const draft *d, const char *name) {
  for (int k = 0; k < d->n_attr; k++)
    if (!strcmp(d->attr[k]->name, name)) return d->attr[k];
  return NULL;
}

static void drop_attr(draft *d, const char *name) {
  for (int k = 0; k < d->n_attr; k++)
    if (!strcmp(d->attr[k]->name, name)) {
      d->attr[k] = d->attr[--d->n_attr];
      return;
    }
}

static cx_attr *add_attr(draft *d, const char *name, cx_attr_type type) {
  cx_attr *a = &d->add[d->n_add < MAX_ADDED ? d->n_add++ : MAX_ADDED - 1];
  *a = (cx_attr){.name = (char *)name, .type = type};
  return a;
}

static cx_status set_input(draft *d, int k, const char *name) {
  if (!name) return cx_ex_nomem();
  while (d->n_in <= k) {
    d->in[d->n_in] = "";
    d->in_v[d->n_in++] = -1;
  }
  d->in[k] = name;
  d->in_v[k] = -1;
  return CX_OK;
}

static bool has_input(const draft *d, int k) { return k < d->n_in && *d->in[k]; }

/* Initializer bytes of the value at input k, when it is a constant. */
static const void *input_data(const draft *d, int k) {
  int v = k < d->n_in ? d->in_v[k] : -1;
  if (v < 0 || d->ex->g->values[v].kind != CX_VALUE_CONST) return NULL;
  return d->ex->g->values[v].init;
}

/* Clip's bounds and Pad's constant_value must be scalars. */
static cx_status scalar_input(draft *d, int k, const char *what) {
  if (!has_input(d, k) || d->in_v[k] < 0) return CX_OK;
  const cx_value *x = &d->ex->g->values[d->in_v[k]];
  if (x->shape.ndim == 0) return CX_OK;
  const void *data = input_data(d, k);
  if (cx_shape_numel(&x->shape) != 1 || x->dtype != CX_F32 || !data) {
    char buf[200];
    snprintf(buf, sizeof buf, "%s must be one constant f32 number", what);
    return fail(d, buf);
  }
  return set_input(d, k, cx_ex_const_f32(d->ex, d->n->name, what, *(const float *)data));
}

/* ---- rules ---- */

static cx_status rule_clip(draft *d) {
  static const char *const bound[2] = {"min", "max"};
  for (int b = 0; b < 2; b++) {
    const cx_attr *a = find_attr(d, bound[b]);
    if (has_input(d, b + 1)) CX_TRY(scalar_input(d, b + 1, bound[b]));
    else if (a) CX_TRY(set_input(d, b + 1, cx_ex_const_f32(d->ex, d->n->name, bound[b], a->f)));
    drop_attr(d, bound[b]);
  }
  return CX_OK;
}

static cx_status ints_input(draft *d, int k, const char *attr) {
  const cx_attr *a = find_attr(d, attr);
  if (!a) return CX_OK;
  CX_TRY(set_input(d, k, cx_ex_const_s64(d->ex, d->n->name, attr, a->n, a->ints)));
  drop_attr(d, attr);
  return CX_OK;
}

/* Opset 1's attribute form → inputs (same meaning, steps 1). */
static cx_status rule_slice(draft *d) {
  if (has_input(d, 1)) return CX_OK;
  CX_TRY(ints_input(d, 1, "starts"));
  CX_TRY(ints_input(d, 2, "ends"));
  return ints_input(d, 3, "axes");
}

/* Pads for every axis (opset 18's axes input does not exist before), as inputs. */
static cx_status rule_pad(draft *d) {
  const cx_graph *g = d->ex->g;
  const void *in_data[4] = {NULL};
  cx_shape in_shape[4] = {{0}};
  for (int k = 0; k < d->n->n_in && k < 4; k++) {
    if (d->n->in[k] < 0) continue;
    in_shape[k] = d->ex->shape[0][d->n->in[k]];
    in_data[k] = g->values[d->n->in[k]].kind == CX_VALUE_CONST ? g->values[d->n->in[k]].init : NULL;
  }
  cx_pad_plan p;
  CX_TRY(cx_pad_plan_make(d->n, &in_shape[0], in_data, in_shape, &p));
  int64_t pads[2 * CX_MAX_DIMS];
  int r = in_shape[0].ndim;
  for (int k = 0; k < r; k++) {
    pads[k] = p.before[k];
    pads[k + r] = p.after[k];
  }
  CX_TRY(set_input(d, 1, cx_ex_const_s64(d->ex, d->n->name, "pads", 2 * r, pads)));
  const cx_attr *value = find_attr(d, "value");
  if (has_input(d, 2)) CX_TRY(scalar_input(d, 2, "constant_value"));
  else if (value && value->f != 0.0f)
    CX_TRY(set_input(d, 2, cx_ex_const_f32(d->ex, d->n->name, "constant_value", value->f)));
  if (d->n_in > 3) d->n_in = 3;
  drop_attr(d, "pads");
  drop_attr(d, "value");
  return CX_OK;
}

static cx_status rule_dropout(draft *d) {
  const cx_attr *ratio = find_attr(d, "ratio");
  if (ratio && !has_input(d, 1))
    CX_TRY(set_input(d, 1, cx_ex_const_f32(d->ex, d->n->name, "ratio", ratio->f)));
  drop_attr(d, "ratio");
  return CX_OK;
}

/* Sizes as input 1, or none for equal parts; taken from the inferred output shapes so that the
 * attribute forms (split, num_outputs) and the uneven last part of opset 18 all come out right. */
static cx_status rule_split(draft *d) {
  drop_attr(d, "split");
  drop_attr(d, "num_outputs");
  if (has_input(d, 1)) return CX_OK;
  const cx_exporter *ex = d->ex;
  int rank = ex->shape[0][d->n->in[0]].ndim, axis;
  CX_TRY(cx_axis_normalize(d->n, cx_node_int(d->n, "axis", 0), rank, &axis));
  int64_t *sizes = cx_ex_alloc(d->ex, sizeof(int64_t) * (size_t)d->n->n_out);
  if (!sizes) return cx_ex_nomem();
  bool equal = true, fixed = true;
  for (int k = 0; k < d->n->n_out; k++) {
    int v = d->n->out[k], v0 = d->n->out[0];
    sizes[k] = ex->shape[0][v].d[axis];
    fixed &= sizes[k] == ex->shape[1][v].d[axis];
    equal &= sizes[k] == ex->shape[0][v0].d[axis] &&
             ex->shape[1][v].d[axis] == ex->shape[1][v0].d[axis];
  }
  if (equal) return CX_OK;
  if (!fixed) return fail(d, "uneven parts along an axis that depends on the batch");
  return set_input(d, 1, cx_ex_const_s64(d->ex, d->n->name, "split", d->n->n_out, sizes));
}

static cx_status rule_reduce_sum(draft *d) {
  if (!has_input(d, 1)) CX_TRY(ints_input(d, 1, "axes"));
  drop_attr(d, "axes");
  return CX_OK;
}

/* ReduceMean takes axes as an attribute until opset 18, and has no noop_with_empty_axes. */
static cx_status rule_reduce_mean(draft *d) {
  bool noop = cx_node_int(d->n, "noop_with_empty_axes", 0) != 0;
  drop_attr(d, "noop_with_empty_axes");
  int n_axes = find_attr(d, "axes") ? find_attr(d, "axes")->n : 0;
  if (has_input(d, 1)) {
    const int64_t *axes = input_data(d, 1);
    if (!axes || d->ex->g->values[d->in_v[1]].dtype != CX_S64)
      return fail(d, "axes must be a constant int64 tensor");
    n_axes = (int)cx_shape_numel(&d->ex->g->values[d->in_v[1]].shape);
    cx_attr *a = add_attr(d, "axes", CX_ATTR_INTS);
    a->ints = (int64_t *)axes;
    a->n = n_axes;
    drop_attr(d, "axes");
    d->n_in = 1;
  }
  if (noop && n_axes == 0) { /* reduces nothing: the input itself */
    d->op = "Identity";
    d->n_attr = d->n_add = 0;
    d->n_in = 1;
  }
  return CX_OK;
}

static cx_status rule_batch_norm(draft *d) {
  const cx_attr *t = find_attr(d, "training_mode");
  if (t && t->i != 0 && d->ex->opset < 14) return fail(d, "training_mode needs opset 14");
  if (t && t->i == 0) drop_attr(d, "training_mode");
  return CX_OK;
}

static cx_status rule_reshape(draft *d) {
  const cx_attr *a = find_attr(d, "allowzero");
  if (!a || d->ex->opset >= 14) return CX_OK;
  if (a->i != 0) {
    const int64_t *shape = input_data(d, 1);
    if (!shape) return fail(d, "allowzero=1 with a shape that is not a constant needs opset 14");
    int64_t n = cx_shape_numel(&d->ex->g->values[d->in_v[1]].shape);
    for (int64_t k = 0; k < n; k++)
      if (shape[k] == 0) return fail(d, "allowzero=1 with a zero in the shape needs opset 14");
  }
  drop_attr(d, "allowzero");
  return CX_OK;
}

static cx_status rule_average_pool(draft *d) {
  const cx_attr *a = find_attr(d, "dilations");
  for (int k = 0; a && k < a->n; k++)
    if (a->ints[k] != 1) return fail(d, "dilations other than 1 need opset 19");
  drop_attr(d, "dilations");
  return CX_OK;
}

static cx_status rule_sce(draft *d) {
  const cx_attr *a = find_attr(d, "label_smoothing");
  if (a && a->f != 0.0f) return fail(d, "label_smoothing is not part of ONNX");
  drop_attr(d, "label_smoothing");
  return CX_OK;
}

/* HardSwish arrived in opset 14; before, x · HardSigmoid(x; 1/6, 1/2), which is its definition. */
static cx_status rule_hard_swish(draft *d) {
  if (d->ex->opset >= 14) return CX_OK;
  cx_exporter *ex = d->ex;
  char base[1024];
  snprintf(base, sizeof base, "%s/hard_sigmoid", d->n->name);
  const char *hs_out = cx_ex_unique_name(ex, base); /* node and value share the name */
  if (!hs_out) return cx_ex_nomem();
  Onnx__NodeProto *hs = cx_ex_node(ex, "HardSigmoid", hs_out, d->in, 1, &hs_out, 1);
  if (!hs) return cx_ex_nomem();
  CX_TRY(cx_ex_attr_float(ex, hs, "alpha", 1.0f / 6.0f));
  CX_TRY(cx_ex_attr_float(ex, hs, "beta", 0.5f));
  d->op = "Mul";
  return set_input(d, 1, hs_out);
}

/* Opset 17's LayerNormalization (below 17 it is composed: export_compose.c); stash_type 1
 * (statistics in f32) is its default and what the engine computes. */
static cx_status rule_layer_norm(draft *d) {
  const cx_attr *a = find_attr(d, "stash_type");
  if (a && a->i != 1) return fail(d, "stash_type other than 1 (f32 statistics)");
  drop_attr(d, "stash_type");
  return CX_OK;
}

/* The attributes each op may carry in opsets 13 to 17, after the rules. */
typedef struct op_rule {
  const char *op;
  cx_status (*rule)(draft *d);
  const char *attrs; /* space-separated */
} op_rule;

static const op_rule rules[] = {
    {"Add", NULL, ""}, {"Sub", NULL, ""}, {"Mul", NULL, ""}, {"Div", NULL, ""},
    {"Sum", NULL, ""}, {"Neg", NULL, ""}, {"Relu", NULL, ""}, {"Sigmoid", NULL, ""},
    {"Tanh", NULL, ""}, {"Exp", NULL, ""}, {"Log", NULL, ""}, {"Sqrt", NULL, ""},
    {"LeakyRelu", NULL, "alpha"}, {"HardSigmoid", NULL, "alpha beta"},
    {"HardSwish", rule_hard_swish, ""}, {"Clip", rule_clip, ""},
    {"Conv", NULL, "auto_pad dilations group kernel_shape pads strides"},
    {"BatchNormalization", rule_batch_norm, "epsilon momentum training_mode"},
    {"MaxPool", NULL, "auto_pad ceil_mode dilations kernel_shape pads storage_order strides"},
    {"AveragePool", rule_average_pool, "auto_pad ceil_mode count_include_pad kernel_shape pads "
                                       "strides"},
    {"GlobalAveragePool", NULL, ""}, {"Gemm", NULL, "alpha beta transA transB"},
    {"MatMul", NULL, ""}, {"Flatten", NULL, "axis"}, {"Reshape", rule_reshape, "allowzero"},
    {"Transpose", NULL, "perm"}, {"Concat", NULL, "axis"}, {"Split", rule_split, "axis"},
    {"Slice", rule_slice, ""}, {"Pad", rule_pad, "mode"}, {"Expand", NULL, ""},
    {"Identity", NULL, ""}, {"Dropout", rule_dropout, "seed"},
    {"ReduceSum", rule_reduce_sum, "keepdims noop_with_empty_axes"},
    {"ReduceMean", rule_reduce_mean, "axes keepdims"},
    {"ReduceMax", rule_reduce_mean, "axes keepdims"}, /* ReduceMean's opset history */
    {"Softmax", NULL, "axis"},
    {"LogSoftmax", NULL, "axis"}, {"Erf", NULL, ""}, {"Reciprocal", NULL, ""},
    {"Pow", NULL, ""}, {"Where", NULL, ""}, {"Gather", NULL, "axis"},
    {"GatherND", NULL, "batch_dims"}, {"Equal", NULL, ""}, {"Less", NULL, ""},
    {"Greater", NULL, ""}, {"LessOrEqual", NULL, ""}, {"GreaterOrEqual", NULL, ""},
    {"Not", NULL, ""}, {"Cast", NULL, "to"},
    {"LayerNormalization", rule_layer_norm, "axis epsilon"},
    {"SoftmaxCrossEntropyLoss", rule_sce, "ignore_index reduction"},
    /* opset 13's form, unchanged through 17 (19 adds saturate for float8 types) */
    {"QuantizeLinear", NULL, "axis"}, {"DequantizeLinear", NULL, "axis"},
    {NULL, NULL, NULL},
};

static bool listed(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = strstr(list, name); p; p = strstr(p + 1, name))
    if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return true;
  return false;
}

static cx_status check_attrs(const draft *d, const char *allowed) {
  for (int k = 0; k < d->n_attr; k++)
    if (!listed(allowed, d->attr[k]->name)) {
      char why[300];
      snprintf(why, sizeof why, "attribute '%s' is not part of %s", d->attr[k]->name, d->op);
      return fail(d, why);
    }
  return CX_OK;
}

static cx_status emit(draft *d) {
  cx_exporter *ex = d->ex;
  while (d->n_in > 0 && !*d->in[d->n_in - 1]) d->n_in--;
  const char **out = cx_ex_alloc(ex, sizeof(char *) * (size_t)(d->n->n_out + 1));
  if (!out) return cx_ex_nomem();
  for (int k = 0; k < d->n->n_out; k++) out[k] = ex->g->values[d->n->out[k]].name;
  Onnx__NodeProto *node = cx_ex_node(ex, d->op, d->n->name, d->in, d->n_in, out, d->n->n_out);
  if (!node) return cx_ex_nomem();
  for (int k = 0; k < d->n_attr; k++) CX_TRY(cx_ex_attr_copy(ex, node, d->attr[k]));
  for (int k = 0; k < d->n_add; k++) CX_TRY(cx_ex_attr_copy(ex, node, &d->add[k]));
  for (int k = 0; k < d->n_in; k++)
    if (d->in_v[k] >= 0) ex->used[d->in_v[k]] = true;
  return CX_OK;
}

/* Input k read from a FakeQuantize: a bias must stay f32 (TensorRT refuses a dequantized bias,
 * and ONNX Runtime quantizes a float bias itself); an activation's gets its own
 * QuantizeLinear→DequantizeLinear pair. */
static cx_status quantized_input(draft *d, int k) {
  const cx_graph *g = d->ex->g;
  int p = g->values[d->n->in[k]].producer;
  if (p < 0 || strcmp(g->nodes[p].op->name, "FakeQuantize")) return CX_OK;
  if (k == 2 && (!strcmp(d->op, "Conv") || !strcmp(d->op, "Gemm"))) {
    char why[1200];
    snprintf(why, sizeof why, "its bias comes from FakeQuantize node '%s'; a bias stays f32 in "
             "a QDQ file", g->nodes[p].name);
    return fail(d, why);
  }
  if (!cx_ex_is_activation_fq(d->ex, d->n->in[k])) return CX_OK;
  return cx_ex_qdq_pair(d->ex, d->n->in[k], &d->in[k]);
}

static cx_status make_draft(cx_exporter *ex, int index, draft *d) {
  const cx_node *n = &ex->g->nodes[index];
  *d = (draft){.ex = ex, .index = index, .n = n, .op = n->op->name, .n_in = n->n_in};
  d->in = cx_ex_alloc(ex, sizeof(char *) * (size_t)(n->n_in + 8));
  d->in_v = cx_ex_alloc(ex, sizeof(int) * (size_t)(n->n_in + 8));
  if (!d->in || !d->in_v) return cx_ex_nomem();
  for (int k = 0; k < n->n_in; k++) {
    d->in_v[k] = n->in[k];
    d->in[k] = n->in[k] >= 0 ? ex->g->values[n->in[k]].name : "";
    if (n->in[k] >= 0) CX_TRY(quantized_input(d, k));
  }
  if (n->n_attrs > CX_EX_MAX_ATTRS) return fail(d, "too many attributes");
  for (int k = 0; k < n->n_attrs; k++) d->attr[d->n_attr++] = &n->attrs[k];
  return CX_OK;
}

cx_status cx_ex_lower_node(cx_exporter *ex, int index) {
  const cx_node *n = &ex->g->nodes[index];
  if (!strcmp(n->op->name, "FakeQuantize")) return cx_ex_lower_fake_quantize(ex, index);
  bool composed = false;
  CX_TRY(cx_ex_lower_composed(ex, index, &composed));
  if (composed) return CX_OK;
  if (strcmp(n->op->domain, CX_DOMAIN_ONNX))
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s) is in domain %s, which ONNX export cannot "
                   "write (gradient and loss ops exist only inside compress)", n->name,
                   n->op->name, n->op->domain);
  const op_rule *r = rules;
  while (r->op && strcmp(r->op, n->op->name)) r++;
  if (!r->op)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): the ONNX exporter has no rule for op %s",
                   n->name, n->op->name, n->op->name);
  draft d;
  CX_TRY(make_draft(ex, index, &d));
  if (r->rule) CX_TRY(r->rule(&d));
  const op_rule *out_rule = rules;
  while (out_rule->op && strcmp(out_rule->op, d.op)) out_rule++;
  CX_TRY(check_attrs(&d, out_rule->op ? out_rule->attrs : ""));
  return emit(&d);
}
