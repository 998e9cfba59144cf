/* ONNX nodes → the engine's ops in canonical form (newest opset semantics), with initializers
 * added as parameters, statistics or constants according to the input slot that uses them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "onnx_internal.h"

/* Ops the importer rewrites into others, or takes only where they fold (shape arithmetic such as
 * Swin's window-mask construction: Mod, Not, ScatterND); everything else must be in the op
 * table. */
static const char *const rewritten[] = {"Identity", "Squeeze", "Unsqueeze", "Cast", "Constant",
                                        "Einsum", "Tile",
                                        "Shape", "Gather", "ConstantOfShape", "Range", "Equal",
                                        "Where", "Floor", "Ceil", "Mod", "Not", "ScatterND", NULL};

bool cx_onnx_op_known(const char *op) {
  for (int k = 0; rewritten[k]; k++)
    if (!strcmp(rewritten[k], op)) return true;
  const cx_op_def *d = cx_op_find(op);
  return d && !strcmp(d->domain, CX_DOMAIN_ONNX);
}

/* What an initializer becomes when first used at input `slot` of `op`. */
static cx_value_kind slot_kind(const char *op, int slot, int64_t numel) {
  if (!strcmp(op, "BatchNormalization")) return slot >= 3 ? CX_VALUE_STATE : CX_VALUE_PARAM;
  if (!strcmp(op, "Conv") || !strcmp(op, "Gemm") || !strcmp(op, "MatMul")) return CX_VALUE_PARAM;
  bool eltwise = !strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") ||
                 !strcmp(op, "Div") || !strcmp(op, "Sum") || !strcmp(op, "PRelu");
  /* a scalar in arithmetic is a fixed constant (x / 6 in a hard-swish), not a weight */
  return eltwise && numel > 1 ? CX_VALUE_PARAM : CX_VALUE_CONST;
}

static int add_initializer(cx_onnx_importer *im, const Onnx__TensorProto *t, const char *name,
                           cx_value_kind kind) {
  cx_dtype dt;
  cx_shape s;
  void *data;
  if (cx_onnx_tensor_bytes(t, im->base_dir, name, &dt, &s, &data) != CX_OK) return -1;
  if (cx_onnx_dtype_is_float(dt) && dt != CX_F32) { /* the engine computes in f32 */
    float *f = malloc(sizeof(float) * (size_t)(cx_shape_numel(&s) + 1));
    for (int64_t k = 0; k < cx_shape_numel(&s); k++) f[k] = (float)cx_dtype_load(dt, data, (size_t)k);
    free(data);
    data = f;
    dt = CX_F32;
  }
  if (dt != CX_F32) kind = CX_VALUE_CONST;
  int v = cx_graph_init(im->g, kind, name, dt, &s, data);
  free(data);
  return v;
}

static int add_const(cx_onnx_importer *im, const char *name, const cx_onnx_const *c) {
  bool fl = cx_onnx_dtype_is_float(c->dtype);
  cx_dtype dt = fl ? CX_F32 : c->dtype == CX_BOOL ? CX_BOOL : CX_S64;
  int64_t n = cx_shape_numel(&c->shape);
  void *data = malloc(8 * (size_t)(n ? n : 1));
  for (int64_t k = 0; k < n; k++) {
    if (dt == CX_S64) ((int64_t *)data)[k] = c->i[k];
    else cx_dtype_store(dt, data, (size_t)k, fl ? c->f[k] : (double)c->i[k]);
  }
  int v = cx_graph_init(im->g, CX_VALUE_CONST, name, dt, &c->shape, data);
  free(data);
  return v;
}

int cx_onnx_value(cx_onnx_importer *im, const char *name, cx_value_kind kind, const char *node) {
  name = cx_onnx_resolve_alias(im, name);
  int v = cx_graph_find_value(im->g, name);
  if (v >= 0) return v;
  const Onnx__TensorProto *t = cx_onnx_find_initializer(im, name);
  if (t) return add_initializer(im, t, name, kind);
  const cx_onnx_folded *f = cx_onnx_find_folded(im, name);
  if (f) {
    const cx_onnx_const *a = &f->v[0], *b = &f->v[1];
    bool same = cx_shape_equal(&a->shape, &b->shape);
    for (int64_t k = 0; same && k < cx_shape_numel(&a->shape); k++)
      same = a->f ? a->f[k] == b->f[k] : a->i[k] == b->i[k];
    if (!same) {
      cx_fail(CX_ERR_UNSUPPORTED, "%s uses '%s', which depends on the batch size in a way that "
              "cannot stay symbolic; export the model with a fixed batch size", node, name);
      return -1;
    }
    return add_const(im, name, a);
  }
  cx_fail(CX_ERR_FORMAT, "%s: input '%s' is produced by no earlier node, initializer or graph "
          "input", node, name);
  return -1;
}

cx_shape cx_onnx_var_shape(const cx_onnx_importer *im, int v, int variant) {
  const cx_value *x = &im->g->values[v];
  if (x->kind == CX_VALUE_ACT) return im->shape[variant][v];
  cx_shape s = x->shape;
  for (int d = 0; d < s.ndim; d++)
    if (s.d[d] < 0) s.d[d] = variant + 1;
  return s;
}

cx_status cx_onnx_infer(cx_onnx_importer *im, int node) {
  cx_graph *g = im->g;
  if (g->n_values > im->cap_shape) {
    int cap = g->n_values * 2;
    for (int v = 0; v < CX_ONNX_VARIANTS; v++)
      im->shape[v] = realloc(im->shape[v], sizeof(cx_shape) * (size_t)cap);
    im->cap_shape = cap;
  }
  const cx_node *n = &g->nodes[node];
  for (int variant = 0; variant < CX_ONNX_VARIANTS; variant++) {
    cx_shape in_shape[64], out_shape[16] = {{0}};
    cx_dtype in_dtype[64], out_dtype[16] = {0};
    const void *in_data[64];
    for (int k = 0; k < n->n_in && k < 64; k++) {
      int v = n->in[k];
      in_shape[k] = v >= 0 ? cx_onnx_var_shape(im, v, variant) : (cx_shape){0};
      in_dtype[k] = v >= 0 ? g->values[v].dtype : CX_F32;
      in_data[k] = v >= 0 && g->values[v].kind == CX_VALUE_CONST ? g->values[v].init : NULL;
    }
    cx_infer_ctx ctx = {.node = n, .in_shape = in_shape, .in_dtype = in_dtype,
                        .in_data = in_data, .out_shape = out_shape, .out_dtype = out_dtype};
    CX_TRY(n->op->infer(&ctx));
    for (int k = 0; k < n->n_out; k++) {
      im->shape[variant][n->out[k]] = out_shape[k];
      g->values[n->out[k]].dtype = out_dtype[k];
    }
  }
  return CX_OK;
}

static const Onnx__AttributeProto *attr(const Onnx__NodeProto *n, const char *name) {
  for (size_t k = 0; k < n->n_attribute; k++)
    if (n->attribute[k]->name && !strcmp(n->attribute[k]->name, name)) return n->attribute[k];
  return NULL;
}

/* Attributes that older opsets had and the canonical forms do not. */
static bool dropped_attr(const char *op, const char *a) {
  static const char *const always[] = {"consumed_inputs", "is_test", NULL};
  for (int k = 0; always[k]; k++)
    if (!strcmp(a, always[k])) return true;
  if (!strcmp(op, "BatchNormalization")) return !strcmp(a, "spatial") || !strcmp(a, "training_mode");
  if (!strcmp(op, "Gemm")) return !strcmp(a, "broadcast");
  if (!strcmp(op, "Clip")) return !strcmp(a, "min") || !strcmp(a, "max");
  if (!strcmp(op, "Slice")) return !strcmp(a, "starts") || !strcmp(a, "ends") || !strcmp(a, "axes");
  if (!strcmp(op, "Pad")) return !strcmp(a, "pads") || !strcmp(a, "value");
  if (!strcmp(op, "Dropout")) return !strcmp(a, "ratio") || !strcmp(a, "seed");
  if (!strcmp(op, "Reshape")) return !strcmp(a, "shape");
  return false;
}

static void copy_attrs(cx_onnx_importer *im, const Onnx__NodeProto *n, int node, const char *op) {
  for (size_t k = 0; k < n->n_attribute; k++) {
    const Onnx__AttributeProto *a = n->attribute[k];
    if (!a->name || dropped_attr(op, a->name)) continue;
    switch (a->type) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT: cx_node_set_float(im->g, node, a->name, a->f); break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: cx_node_set_int(im->g, node, a->name, a->i); break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: {
      char s[256];
      size_t len = a->s.len < sizeof s - 1 ? a->s.len : sizeof s - 1;
      if (len) memcpy(s, a->s.data, len); /* an empty string may have no data at all */
      s[len] = '\0';
      cx_node_set_string(im->g, node, a->name, s);
      break;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
      cx_node_set_ints(im->g, node, a->name, a->ints, (int)a->n_ints);
      break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
      cx_node_set_floats(im->g, node, a->name, a->floats, (int)a->n_floats);
      break;
    default: break; /* tensors and graphs: not used by the op set */
    }
  }
}

int cx_onnx_const_input(cx_onnx_importer *im, const char *node, const char *what, cx_dtype dt,
                       int n, const double *vals) {
  char base[600];
  snprintf(base, sizeof base, "%s/%s", node, what);
  char *name = cx_graph_unique_name(im->g, base);
  cx_shape s = n < 0 ? (cx_shape){0} : (cx_shape){1, {n}};
  int count = n < 0 ? 1 : n;
  void *data = malloc(8 * (size_t)(count + 1));
  for (int k = 0; k < count; k++) cx_dtype_store(dt, data, (size_t)k, vals[k]);
  if (dt == CX_S64)
    for (int k = 0; k < count; k++) ((int64_t *)data)[k] = (int64_t)vals[k];
  int v = cx_graph_init(im->g, CX_VALUE_CONST, name, dt, &s, data);
  free(data);
  free(name);
  return v;
}

static int ints_input(cx_onnx_importer *im, const char *node, const char *what,
                      const Onnx__AttributeProto *a) {
  double v[64];
  int n = a ? (int)(a->n_ints < 64 ? a->n_ints : 64) : 0;
  for (int k = 0; k < n; k++) v[k] = (double)a->ints[k];
  return cx_onnx_const_input(im, node, what, CX_S64, n, v);
}

/* A Reshape target for `out` given the input's two variant shapes: dimensions that follow the
 * batch become 0 (copy the input's) where they sit at the same axis, else the one -1. */
int cx_onnx_reshape_target(cx_onnx_importer *im, const char *node, const cx_shape in[2],
                          const cx_shape out[2]) {
  double v[CX_MAX_DIMS];
  int free_dims = 0;
  for (int d = 0; d < out[0].ndim; d++) {
    if (out[0].d[d] == out[1].d[d]) v[d] = (double)out[0].d[d];
    else if (d < in[0].ndim && in[0].d[d] == out[0].d[d] && in[1].d[d] == out[1].d[d]) v[d] = 0;
    else v[d] = -1, free_dims++;
  }
  if (free_dims > 1) {
    cx_fail(CX_ERR_UNSUPPORTED, "node '%s': its output shape depends on the batch size in more than "
            "one dimension", node);
    return -1;
  }
  return cx_onnx_const_input(im, node, "shape", CX_S64, out[0].ndim, v);
}

/* Axes from the attribute (older opsets) or a constant second input (newer ones). */
static int node_axes(cx_onnx_importer *im, const Onnx__NodeProto *n, int64_t *axes) {
  const Onnx__AttributeProto *a = attr(n, "axes");
  if (a) {
    if (a->n_ints > CX_MAX_DIMS) return -1;
    for (size_t k = 0; k < a->n_ints; k++) axes[k] = a->ints[k];
    return (int)a->n_ints;
  }
  cx_onnx_const c;
  if (n->n_input < 2 || !*n->input[1] || !cx_onnx_input_const(im, n->input[1], 0, &c)) return 0;
  int64_t count = cx_shape_numel(&c.shape);
  if (count > CX_MAX_DIMS || !c.i) count = -1; /* axes are integers */
  for (int k = 0; k < count; k++) axes[k] = c.i[k];
  cx_onnx_const_free(&c);
  return (int)count;
}

/* The output shape of Squeeze / Unsqueeze / Reshape in one variant. */
static cx_status reshaped(cx_onnx_importer *im, const Onnx__NodeProto *n, const cx_shape in[2],
                          int variant, cx_shape *out) {
  const cx_shape *x = &in[variant];
  int64_t axes[CX_MAX_DIMS];
  int na = node_axes(im, n, axes);
  if (na < 0) return cx_fail(CX_ERR_FORMAT, "axes: more than %d, or not integers", CX_MAX_DIMS);
  *out = (cx_shape){0};
  bool unsqueeze = !strcmp(n->op_type, "Unsqueeze");
  if (unsqueeze || !strcmp(n->op_type, "Squeeze")) {
    int rank = unsqueeze ? x->ndim + na : x->ndim;
    if (rank > CX_MAX_DIMS) return cx_fail(CX_ERR_UNSUPPORTED, "too many dimensions");
    bool listed[CX_MAX_DIMS] = {false};
    for (int k = 0; k < na; k++) {
      int64_t a = axes[k] < 0 ? axes[k] + rank : axes[k];
      if (a < 0 || a >= rank || listed[a])
        return cx_fail(CX_ERR_FORMAT, "axis %lld is out of range or repeated", (long long)axes[k]);
      if (!unsqueeze && (in[0].d[a] != 1 || in[1].d[a] != 1))
        return cx_fail(CX_ERR_SHAPE, "axis %lld: dimension is not 1", (long long)axes[k]);
      listed[a] = true;
    }
    for (int d = 0, src = 0; d < rank; d++) {
      if (unsqueeze) out->d[out->ndim++] = listed[d] ? 1 : x->d[src++];
      else if (!(listed[d] || (na == 0 && in[0].d[d] == 1 && in[1].d[d] == 1)))
        out->d[out->ndim++] = x->d[d];
    }
  } else { /* Reshape with a target that follows the batch */
    cx_onnx_const t;
    if (!cx_onnx_input_const(im, n->input[1], variant, &t))
      return cx_fail(CX_ERR_UNSUPPORTED, "the shape input is not known at import");
    int64_t rank = cx_shape_numel(&t.shape), known = 1, at = -1;
    bool ok = rank <= CX_MAX_DIMS && t.i;
    out->ndim = ok ? (int)rank : 0;
    for (int d = 0; ok && d < out->ndim; d++) {
      out->d[d] = t.i[d];
      if (out->d[d] == 0 && d < x->ndim) out->d[d] = x->d[d];
      if (out->d[d] == -1 && at < 0) at = d;
      else if (out->d[d] < 0 || (out->d[d] > 0 && known > CX_ONNX_MAX_ELEMENTS / out->d[d])) ok = false;
      else known *= out->d[d];
    }
    cx_onnx_const_free(&t);
    if (!ok) return cx_fail(CX_ERR_FORMAT, "the target shape is not a list of at most %d sizes "
                            "(one -1, none negative, at most 2^30 elements)", CX_MAX_DIMS);
    if (at >= 0 && known > 0) out->d[at] = cx_shape_numel(x) / known;
  }
  return CX_OK;
}

static cx_status add_as_reshape(cx_onnx_importer *im, const Onnx__NodeProto *n, const char *name,
                                int x) {
  cx_shape in[2] = {cx_onnx_var_shape(im, x, 0), cx_onnx_var_shape(im, x, 1)}, out[2];
  for (int v = 0; v < 2; v++) CX_TRY(reshaped(im, n, in, v, &out[v]));
  int target = cx_onnx_reshape_target(im, name, in, out);
  if (target < 0) return CX_ERR_UNSUPPORTED;
  int node = cx_graph_node_named(im->g, "Reshape", name, (int[]){x, target}, 2,
                                 (const char *const *)n->output, 1);
  if (node < 0) return cx_graph_status(im->g);
  return cx_onnx_infer(im, node);
}

static void add_alias(cx_onnx_importer *im, const char *from, const char *to) {
  if (im->n_alias == im->cap_alias) {
    im->cap_alias = im->cap_alias ? im->cap_alias * 2 : 16;
    im->alias_from = realloc(im->alias_from, sizeof(char *) * (size_t)im->cap_alias);
    im->alias_to = realloc(im->alias_to, sizeof(char *) * (size_t)im->cap_alias);
  }
  im->alias_from[im->n_alias] = strdup(from);
  im->alias_to[im->n_alias++] = strdup(to);
}

static double attr_float(const Onnx__NodeProto *n, const char *name, double fallback) {
  const Onnx__AttributeProto *a = attr(n, name);
  return a && a->has_f ? a->f : fallback;
}

/* Inputs that older opsets gave as attributes become constant inputs, as the newest opsets have
 * them. Returns the number of inputs in `in`. */
static int legacy_inputs(cx_onnx_importer *im, const Onnx__NodeProto *n, const char *name,
                         int *in, int n_in) {
  const char *op = n->op_type;
  if (!strcmp(op, "Clip") && im->opset < 11) {
    double lo = attr_float(n, "min", -INFINITY), hi = attr_float(n, "max", INFINITY);
    in[1] = cx_onnx_const_input(im, name, "min", CX_F32, -1, &lo);
    in[2] = cx_onnx_const_input(im, name, "max", CX_F32, -1, &hi);
    return 3;
  }
  if (!strcmp(op, "Slice") && im->opset < 10) {
    in[1] = ints_input(im, name, "starts", attr(n, "starts"));
    in[2] = ints_input(im, name, "ends", attr(n, "ends"));
    if (attr(n, "axes")) in[3] = ints_input(im, name, "axes", attr(n, "axes"));
    return attr(n, "axes") ? 4 : 3;
  }
  if (!strcmp(op, "Pad") && im->opset < 11) {
    double value = attr_float(n, "value", 0);
    in[1] = ints_input(im, name, "pads", attr(n, "pads"));
    in[2] = cx_onnx_const_input(im, name, "value", CX_F32, -1, &value);
    return 3;
  }
  if (!strcmp(op, "Dropout") && im->opset < 12) {
    double ratio = attr_float(n, "ratio", 0.5);
    in[1] = cx_onnx_const_input(im, name, "ratio", CX_F32, -1, &ratio);
    return 2;
  }
  return n_in;
}

/* Outputs the engine does not produce (BatchNormalization's training outputs, Dropout's mask,
 * MaxPool's indices) must not be used by the model. */
static int used_outputs(const cx_onnx_importer *im, const Onnx__NodeProto *n, int max_out) {
  int count = (int)n->n_output;
  while (count > 1 && !*n->output[count - 1]) count--;
  if (count <= max_out) return count;
  const Onnx__GraphProto *gp = im->model->graph;
  for (int k = max_out; k < count; k++) {
    if (!*n->output[k]) continue;
    for (size_t j = 0; j < gp->n_node; j++)
      for (size_t i = 0; i < gp->node[j]->n_input; i++)
        if (!strcmp(gp->node[j]->input[i], n->output[k])) return -1 - k;
    for (size_t j = 0; j < gp->n_output; j++)
      if (!strcmp(gp->output[j]->name, n->output[k])) return -1 - k;
  }
  return max_out;
}

static cx_status add_plain(cx_onnx_importer *im, const Onnx__NodeProto *n, const char *name) {
  const char *op = n->op_type;
  const cx_op_def *def = cx_op_find(op);
  int in[64], n_in = (int)n->n_input;
  if (n_in > 48) return cx_fail(CX_ERR_UNSUPPORTED, "node '%s': %d inputs", name, n_in);
  for (int k = 0; k < n_in; k++) {
    in[k] = -1;
    if (!*n->input[k]) continue;
    const Onnx__TensorProto *t = cx_onnx_find_initializer(im, n->input[k]);
    int64_t numel = 1; /* cx_onnx_validate has bounded it */
    if (t) cx_onnx_numel(t->dims, t->n_dims, CX_ONNX_MAX_ELEMENTS, &numel);
    char where[600];
    snprintf(where, sizeof where, "node '%s' (%s)", name, op);
    in[k] = cx_onnx_value(im, n->input[k], slot_kind(op, k, numel), where);
    if (in[k] < 0) return cx_graph_status(im->g) ? cx_graph_status(im->g) : CX_ERR_FORMAT;
  }
  n_in = legacy_inputs(im, n, name, in, n_in);
  while (n_in > def->min_in && in[n_in - 1] < 0) n_in--;
  int n_out = used_outputs(im, n, def->max_out);
  if (n_out < 0)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): output %d ('%s') is used, but the engine "
                   "computes only the first %d output(s) of %s", name, op, -1 - n_out,
                   n->output[-1 - n_out], def->max_out, op);
  int node = cx_graph_node_named(im->g, op, name, in, n_in, (const char *const *)n->output, n_out);
  if (node < 0) return cx_graph_status(im->g);
  copy_attrs(im, n, node, op);
  if ((!strcmp(op, "Softmax") || !strcmp(op, "LogSoftmax")) && im->opset < 13) {
    /* Before opset 13 these flattened the input to 2-D at `axis` (default 1); that equals the
     * new single-axis form when the axis is the last one. */
    int x = in[0];
    cx_shape s = cx_onnx_var_shape(im, x, 1);
    int64_t axis = cx_node_int(&im->g->nodes[node], "axis", 1);
    if (axis < 0) axis += s.ndim;
    for (int d = (int)axis + 1; d < s.ndim; d++)
      if (s.d[d] != 1)
        return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s, opset %lld): axis %lld is not the last "
                       "non-unit axis of a %d-D input", name, op, (long long)im->opset,
                       (long long)axis, s.ndim);
    cx_node_set_int(im->g, node, "axis", axis);
  }
  return cx_onnx_infer(im, node);
}

/* The graph input that carries the symbolic batch (its first dimension), or -1. */
static int batch_input(const cx_onnx_importer *im) {
  for (int k = 0; k < im->g->n_values; k++) {
    const cx_value *v = &im->g->values[k];
    if (v->kind == CX_VALUE_INPUT && v->shape.ndim > 0 && v->shape.d[0] < 0) return k;
  }
  return -1;
}

/* Expand to a shape that follows the batch (ViT's class token: Expand(token, [N, 1, D]) with N
 * from Shape(x)): the axes whose folded size is the batch in both variants become ExpandBatch's
 * batch_axes, read from the batch input when the program is compiled. *done stays false when
 * the shape does not depend on the batch (a plain Expand then). */
static cx_status add_expand_batch(cx_onnx_importer *im, const Onnx__NodeProto *n,
                                  const char *name, int x, bool *done) {
  *done = false;
  const cx_onnx_folded *f =
      n->n_input > 1 ? cx_onnx_find_folded(im, cx_onnx_resolve_alias(im, n->input[1])) : NULL;
  if (!f || cx_graph_find_value(im->g, n->input[1]) >= 0) return CX_OK;
  const cx_onnx_const *a = &f->v[0], *b = &f->v[1];
  int64_t k = cx_shape_numel(&a->shape), axes[CX_MAX_DIMS];
  int na = 0;
  if (!a->i || !b->i || !cx_shape_equal(&a->shape, &b->shape) || k > CX_MAX_DIMS) return CX_OK;
  double v[CX_MAX_DIMS];
  for (int64_t d = 0; d < k; d++) {
    v[d] = (double)a->i[d];
    if (a->i[d] == b->i[d]) continue;
    if (a->i[d] != 1 || b->i[d] != 2)
      return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (Expand): its shape depends on the batch size "
                     "other than as the batch itself (axis %lld); export the model with a fixed "
                     "batch size", name, (long long)d);
    axes[na++] = d;
  }
  if (!na) return CX_OK;
  *done = true;
  int ref = batch_input(im);
  if (ref < 0)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (Expand): its shape follows the batch, but no "
                   "graph input has a symbolic batch dimension", name);
  int shape = cx_onnx_const_input(im, name, "shape", CX_S64, (int)k, v);
  int node = cx_graph_node_named(im->g, "ExpandBatch", name, (int[]){x, shape, ref}, 3,
                                 (const char *const *)n->output, 1);
  if (node < 0) return cx_graph_status(im->g);
  cx_node_set_ints(im->g, node, "batch_axes", axes, na);
  return cx_onnx_infer(im, node);
}

cx_status cx_onnx_add_node(cx_onnx_importer *im, const Onnx__NodeProto *n, const char *name) {
  const char *op = n->op_type;
  if (n->n_output < 1) return cx_fail(CX_ERR_FORMAT, "node '%s' (%s) has no outputs", name, op);
  bool has_input = n->n_input > 0 && *n->input[0];
  int x = -1;
  if (has_input) {
    char where[600];
    snprintf(where, sizeof where, "node '%s' (%s)", name, op);
    x = cx_onnx_value(im, n->input[0], CX_VALUE_PARAM, where);
    if (x < 0) return cx_graph_status(im->g) ? cx_graph_status(im->g) : CX_ERR_FORMAT;
  }
  if (!strcmp(op, "Identity") || (!strcmp(op, "Cast") && has_input &&
                                  attr(n, "to") && attr(n, "to")->i == 1 &&
                                  im->g->values[x].dtype == CX_F32)) {
    add_alias(im, n->output[0], im->g->values[x].name);
    return CX_OK;
  }
  if (!strcmp(op, "Squeeze") || !strcmp(op, "Unsqueeze")) return add_as_reshape(im, n, name, x);
  if (!strcmp(op, "Reshape") && n->n_input > 1 && cx_graph_find_value(im->g, n->input[1]) < 0 &&
      cx_onnx_find_folded(im, cx_onnx_resolve_alias(im, n->input[1]))) {
    const cx_onnx_folded *f = cx_onnx_find_folded(im, cx_onnx_resolve_alias(im, n->input[1]));
    bool same = cx_shape_equal(&f->v[0].shape, &f->v[1].shape);
    for (int64_t k = 0; same && k < cx_shape_numel(&f->v[0].shape); k++)
      same = f->v[0].i[k] == f->v[1].i[k];
    if (!same) return add_as_reshape(im, n, name, x);
  }
  if (!strcmp(op, "Einsum")) return cx_onnx_add_einsum(im, n, name);
  if (!strcmp(op, "Tile")) return cx_onnx_add_tile(im, n, name, x);
  if (!strcmp(op, "Expand")) {
    bool done;
    cx_status s = add_expand_batch(im, n, name, x, &done);
    if (s != CX_OK || done) return s;
  }
  if (!cx_op_find(op))
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s': op %s is not supported unless its inputs are "
                   "constants", name, op);
  return add_plain(im, n, name);
}
