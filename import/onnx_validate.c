/* The one check of an ONNX model before the importer uses any of it (docs/onnx.md lists what is
 * checked). After it passes, the importer may rely on: every name printable and defined once,
 * every node input produced earlier (or empty where the op allows it), every tensor's type known,
 * its element count within CX_ONNX_MAX_ELEMENTS and equal to the data it holds, and every
 * attribute of a known kind with the type (and for flags the range) the op's schema gives. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "onnx_internal.h"

enum { MAX_IR_VERSION = 11 }; /* ONNX 1.18 writes IR 11 */

/* ---- a set of names (open addressing, FNV-1a), so that a large model checks in linear time ---- */

typedef struct name_set {
  const char **slot;
  size_t cap, n;
} name_set;

static size_t hash(const char *s) {
  size_t h = 1469598103934665603u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
  return h;
}

static bool set_has(const name_set *set, const char *s) {
  if (!set->cap) return false;
  for (size_t k = hash(s) & (set->cap - 1); set->slot[k]; k = (k + 1) & (set->cap - 1))
    if (!strcmp(set->slot[k], s)) return true;
  return false;
}

/* Adds s; false when it was there already. */
static bool set_add(name_set *set, const char *s) {
  if (set_has(set, s)) return false;
  if (2 * (set->n + 1) > set->cap) {
    name_set bigger = {calloc(set->cap ? 2 * set->cap : 64, sizeof(char *)),
                       set->cap ? 2 * set->cap : 64, 0};
    for (size_t k = 0; k < set->cap; k++)
      if (set->slot[k]) set_add(&bigger, set->slot[k]);
    free(set->slot);
    *set = bigger;
  }
  size_t k = hash(s) & (set->cap - 1);
  while (set->slot[k]) k = (k + 1) & (set->cap - 1);
  set->slot[k] = s;
  set->n++;
  return true;
}

/* ---- names, counts, tensors ---- */

static bool printable(const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if (*p < 0x20 || *p == 0x7f) return false;
  return true;
}

static cx_status check_name(const char *path, const char *what, const char *name) {
  if (!name) return cx_fail(CX_ERR_FORMAT, "%s: %s has no name", path, what);
  if (!printable(name))
    return cx_fail(CX_ERR_FORMAT, "%s: %s '%s' has control characters in its name", path, what,
                   cx_printable(name));
  return CX_OK;
}

bool cx_onnx_numel(const int64_t *dims, size_t n, int64_t limit, int64_t *out) {
  int64_t total = 1;
  for (size_t k = 0; k < n; k++) {
    if (dims[k] < 0 || (dims[k] > 0 && total > limit / dims[k])) return false;
    total *= dims[k];
  }
  *out = total;
  return total <= limit;
}

/* How many values each storage field holds, and which of them the element type uses. */
static size_t typed_count(const Onnx__TensorProto *t, int *fields) {
  size_t counts[] = {t->n_float_data, t->n_int32_data, t->n_int64_data, t->n_double_data,
                     t->n_uint64_data, t->n_string_data};
  size_t total = 0;
  *fields = 0;
  for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
    *fields += counts[k] > 0;
    total += counts[k];
  }
  return total;
}

static const char *typed_field(cx_dtype dt) {
  return dt == CX_F32 ? "float_data" : dt == CX_S64 ? "int64_data" : dt == CX_F64 ? "double_data"
                                                                                  : "int32_data";
}

static size_t typed_have(const Onnx__TensorProto *t, cx_dtype dt) {
  return dt == CX_F32 ? t->n_float_data : dt == CX_S64 ? t->n_int64_data
                      : dt == CX_F64 ? t->n_double_data : t->n_int32_data;
}

/* A tensor (initializer or attribute): known type, dimensions that fit, exactly one place its
 * data is kept, and as many values there as the shape needs. */
static cx_status check_tensor(const char *path, const char *what, const Onnx__TensorProto *t) {
  const char *name = cx_printable(t->name ? t->name : "");
  cx_dtype dt;
  if (!cx_onnx_dtype(t->data_type, &dt))
    return cx_fail(CX_ERR_UNSUPPORTED, "%s: %s '%s': element type %s (%d) is not supported", path,
                   what, name, cx_onnx_dtype_name(t->data_type), t->data_type);
  if (t->n_dims > CX_MAX_DIMS)
    return cx_fail(CX_ERR_FORMAT, "%s: %s '%s' has %zu dimensions (at most %d)", path, what, name,
                   t->n_dims, CX_MAX_DIMS);
  int64_t n;
  if (!cx_onnx_numel(t->dims, t->n_dims, CX_ONNX_MAX_ELEMENTS, &n)) {
    char dims[160] = "";
    for (size_t k = 0, at = 0; k < t->n_dims && at < sizeof dims - 24; k++)
      at += (size_t)snprintf(dims + at, sizeof dims - at, "%s%lld", k ? ", " : "",
                             (long long)t->dims[k]);
    return cx_fail(CX_ERR_FORMAT, "%s: %s '%s' has dimensions [%s]: negative, or more than %d "
                   "elements", path, what, name, dims, CX_ONNX_MAX_ELEMENTS);
  }
  int fields;
  size_t typed = typed_count(t, &fields);
  bool external = t->has_data_location &&
                  t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  int sources = (t->has_raw_data && t->raw_data.len > 0) + (typed > 0) + external;
  if (sources > 1 || fields > 1)
    return cx_fail(CX_ERR_FORMAT, "%s: %s '%s' keeps its data in more than one place (raw_data, "
                   "a typed field such as float_data, external data): exactly one is allowed",
                   path, what, name);
  size_t bytes = (size_t)n * cx_dtype_size(dt);
  if (external) return CX_OK; /* its length is checked against the file when it is read */
  if (t->has_raw_data && t->raw_data.len > 0) {
    if (t->raw_data.len != bytes)
      return cx_fail(CX_ERR_FORMAT, "%s: %s '%s': raw_data has %zu bytes, its shape needs %zu",
                     path, what, name, t->raw_data.len, bytes);
    return CX_OK;
  }
  if (typed_have(t, dt) != (size_t)n || typed != (size_t)n)
    return cx_fail(CX_ERR_FORMAT, "%s: %s '%s' (%s) holds %zu values in %s, its shape needs %lld",
                   path, what, name, cx_onnx_dtype_name(t->data_type), typed_have(t, dt),
                   typed_field(dt), (long long)n);
  return CX_OK;
}

/* A graph input or output: a tensor of a known element type, and dimensions that are symbolic
 * or between 0 and 2^30. */
static cx_status check_value_info(const char *path, const char *what,
                                  const Onnx__ValueInfoProto *vi) {
  const char *name = cx_printable(vi->name);
  const Onnx__TypeProto *tp = vi->type;
  if (!tp && !strcmp(what, "graph output")) return CX_OK; /* an output's type may be inferred */
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
    return cx_fail(CX_ERR_UNSUPPORTED, "%s: %s '%s' is not a tensor", path, what, name);
  cx_dtype dt;
  int32_t et = tp->tensor_type->elem_type;
  if (!cx_onnx_dtype(et, &dt))
    return cx_fail(CX_ERR_UNSUPPORTED, "%s: %s '%s' has element type %s (%d)", path, what, name,
                   cx_onnx_dtype_name(et), et);
  const Onnx__TensorShapeProto *sp = tp->tensor_type->shape;
  if (!sp) return CX_OK; /* outputs may leave their shape to inference; add_inputs asks for one */
  if (sp->n_dim > CX_MAX_DIMS)
    return cx_fail(CX_ERR_FORMAT, "%s: %s '%s' has %zu dimensions (at most %d)", path, what, name,
                   sp->n_dim, CX_MAX_DIMS);
  for (size_t d = 0; d < sp->n_dim; d++) {
    const Onnx__TensorShapeProto__Dimension *dim = sp->dim[d];
    if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
        (dim->dim_value < 0 || dim->dim_value > CX_ONNX_MAX_DIM))
      return cx_fail(CX_ERR_FORMAT, "%s: %s '%s' dimension %zu is %lld (0 to %d allowed)", path,
                     what, name, d, (long long)dim->dim_value, CX_ONNX_MAX_DIM);
    if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && dim->dim_param)
      CX_TRY(check_name(path, "a dimension name", dim->dim_param));
  }
  return CX_OK;
}

/* ---- nodes ---- */

/* Inputs ONNX requires of the ops the importer folds or rewrites (the op table's min_in covers the
 * rest), from the opset where the count last changed. */
static const struct { const char *op; int64_t since; int n; } required[] = {
    {"Identity", 1, 1}, {"Squeeze", 1, 1},  {"Unsqueeze", 1, 1}, {"Unsqueeze", 13, 2},
    {"Cast", 1, 1},     {"Shape", 1, 1},    {"Gather", 1, 2},    {"ConstantOfShape", 1, 1},
    {"Range", 1, 3},    {"Equal", 1, 2},    {"Where", 1, 3},     {"Floor", 1, 1},
    {"Ceil", 1, 1},     {"Sqrt", 1, 1},     {"Neg", 1, 1},       {"Slice", 10, 3},
    {"Pad", 11, 2},     {"Reshape", 5, 2},  {"Mod", 10, 2},      {"Pow", 1, 2},
    {"Not", 1, 1},      {"ScatterND", 11, 3}, {"Tile", 6, 2},    {"Einsum", 12, 1},
};

int cx_onnx_required_inputs(const char *op, int64_t opset) {
  const cx_op_def *def = cx_op_find(op);
  int n = def && !strcmp(def->domain, CX_DOMAIN_ONNX) ? def->min_in : 0, from_table = 0;
  int64_t latest = 0;
  for (size_t k = 0; k < sizeof required / sizeof *required; k++)
    if (!strcmp(required[k].op, op) && required[k].since <= opset && required[k].since > latest) {
      latest = required[k].since;
      from_table = required[k].n;
    }
  return n > from_table ? n : from_table;
}

/* Integer attributes that ONNX defines as flags or counts, wherever they appear. */
static const struct { const char *name; int64_t min, max; } int_range[] = {
    {"transA", 0, 1},    {"transB", 0, 1},         {"keepdims", 0, 1},
    {"ceil_mode", 0, 1}, {"count_include_pad", 0, 1}, {"storage_order", 0, 1},
    {"allowzero", 0, 1}, {"noop_with_empty_axes", 0, 1}, {"training_mode", 0, 1},
    {"select_last_index", 0, 1}, {"group", 1, INT32_MAX},
};

static bool attr_type(Onnx__AttributeProto__AttributeType t, cx_attr_type *out) {
  switch (t) {
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT: *out = CX_ATTR_FLOAT; return true;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: *out = CX_ATTR_INT; return true;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: *out = CX_ATTR_STRING; return true;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS: *out = CX_ATTR_FLOATS; return true;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS: *out = CX_ATTR_INTS; return true;
  default: return false;
  }
}

static const char *attr_type_name(cx_attr_type t) {
  static const char *names[] = {"INT", "FLOAT", "INTS", "FLOATS", "STRING"};
  return names[t];
}

static cx_status check_attr(const char *path, const char *node, const char *op,
                            const Onnx__AttributeProto *a) {
  const char *name = cx_printable(a->name);
  cx_attr_type t;
  if (a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR) {
    if (!a->t)
      return cx_fail(CX_ERR_FORMAT, "%s: node '%s' (%s): tensor attribute '%s' holds no tensor",
                     path, node, op, name);
    return check_tensor(path, "a tensor attribute", a->t);
  }
  if (!attr_type(a->type, &t))
    return cx_fail(CX_ERR_UNSUPPORTED, "%s: node '%s' (%s): attribute '%s' is of kind %d (graphs, "
                   "sparse tensors, type protos and lists of tensors are not taken)", path, node,
                   op, name, (int)a->type);
  const cx_op_def *def = cx_op_find(op);
  for (const cx_attr_schema *s = def ? def->attrs : NULL; s && s->name; s++)
    if (!strcmp(s->name, a->name) && s->type != t)
      return cx_fail(CX_ERR_FORMAT, "%s: node '%s' (%s): attribute '%s' is %s, %s expects %s",
                     path, node, op, name, attr_type_name(t), op, attr_type_name(s->type));
  for (size_t k = 0; t == CX_ATTR_INT && k < sizeof int_range / sizeof *int_range; k++)
    if (!strcmp(int_range[k].name, a->name) && (a->i < int_range[k].min || a->i > int_range[k].max))
      return cx_fail(CX_ERR_FORMAT, "%s: node '%s' (%s): attribute '%s' is %lld (%lld to %lld "
                     "allowed)", path, node, op, name, (long long)a->i,
                     (long long)int_range[k].min, (long long)int_range[k].max);
  return CX_OK;
}

static cx_status check_node(const char *path, int64_t opset, const Onnx__NodeProto *n, size_t at,
                            name_set *defined) {
  char node[300];
  CX_TRY(check_name(path, "a node", n->name ? n->name : ""));
  CX_TRY(check_name(path, "an op type", n->op_type ? n->op_type : ""));
  CX_TRY(check_name(path, "a domain", n->domain ? n->domain : ""));
  const char *op = n->op_type ? n->op_type : "";
  if (n->name && *n->name) snprintf(node, sizeof node, "%s", n->name);
  else snprintf(node, sizeof node, "%s_%zu", op, at);
  if (!*op) return cx_fail(CX_ERR_FORMAT, "%s: node '%s' has no op type", path, node);
  int need = cx_onnx_required_inputs(op, opset);
  if ((int64_t)n->n_input < need)
    return cx_fail(CX_ERR_FORMAT, "%s: node '%s' (%s) has %zu input(s), %s needs %d", path, node,
                   op, n->n_input, op, need);
  for (size_t k = 0; k < n->n_input; k++) {
    CX_TRY(check_name(path, "a node input", n->input[k]));
    if (!*n->input[k] && (int)k < need)
      return cx_fail(CX_ERR_FORMAT, "%s: node '%s' (%s): input %zu is empty, and %s requires it",
                     path, node, op, k, op);
    if (*n->input[k] && !set_has(defined, n->input[k]))
      return cx_fail(CX_ERR_FORMAT, "%s: node '%s' (%s): input %zu '%s' is produced by no earlier "
                     "node, initializer or graph input", path, node, op, k,
                     cx_printable(n->input[k]));
  }
  if (n->n_output < 1) return cx_fail(CX_ERR_FORMAT, "%s: node '%s' (%s) has no outputs", path,
                                      node, op);
  for (size_t k = 0; k < n->n_attribute; k++) {
    const Onnx__AttributeProto *a = n->attribute[k];
    CX_TRY(check_name(path, "an attribute", a->name));
    for (size_t j = 0; j < k; j++)
      if (!strcmp(n->attribute[j]->name, a->name))
        return cx_fail(CX_ERR_FORMAT, "%s: node '%s' (%s): attribute '%s' is given twice", path,
                       node, op, cx_printable(a->name));
    CX_TRY(check_attr(path, node, op, a));
  }
  for (size_t k = 0; k < n->n_output; k++) {
    CX_TRY(check_name(path, "a node output", n->output[k]));
    if (*n->output[k] && !set_add(defined, n->output[k]))
      return cx_fail(CX_ERR_FORMAT, "%s: node '%s' (%s): output '%s' is already defined (a value "
                     "has exactly one producer)", path, node, op, cx_printable(n->output[k]));
  }
  return CX_OK;
}

/* ---- the model ---- */

static cx_status check_graph(const char *path, int64_t opset, const Onnx__GraphProto *gp,
                             name_set *defined) {
  for (size_t k = 0; k < gp->n_initializer; k++) {
    const Onnx__TensorProto *t = gp->initializer[k];
    CX_TRY(check_name(path, "an initializer", t->name));
    if (!*t->name) return cx_fail(CX_ERR_FORMAT, "%s: initializer %zu has no name", path, k);
    if (!set_add(defined, t->name))
      return cx_fail(CX_ERR_FORMAT, "%s: initializer '%s' is given twice", path,
                     cx_printable(t->name));
    CX_TRY(check_tensor(path, "initializer", t));
  }
  name_set inputs = {0};
  cx_status s = CX_OK;
  for (size_t k = 0; k < gp->n_input && s == CX_OK; k++) {
    const Onnx__ValueInfoProto *vi = gp->input[k];
    s = check_name(path, "a graph input", vi->name);
    if (s == CX_OK && (!*vi->name || !set_add(&inputs, vi->name)))
      s = cx_fail(CX_ERR_FORMAT, "%s: graph input '%s' is empty or given twice", path,
                  cx_printable(vi->name));
    if (s == CX_OK && !set_has(defined, vi->name)) { /* old IR lists weights among inputs too */
      s = check_value_info(path, "graph input", vi);
      if (s == CX_OK) set_add(defined, vi->name);
    }
  }
  free(inputs.slot);
  CX_TRY(s);
  for (size_t k = 0; k < gp->n_node; k++) CX_TRY(check_node(path, opset, gp->node[k], k, defined));
  if (gp->n_output == 0) return cx_fail(CX_ERR_FORMAT, "%s: the graph has no outputs", path);
  for (size_t k = 0; k < gp->n_output; k++) {
    const Onnx__ValueInfoProto *vi = gp->output[k];
    CX_TRY(check_name(path, "a graph output", vi->name));
    if (!*vi->name || !set_has(defined, vi->name))
      return cx_fail(CX_ERR_FORMAT, "%s: graph output '%s' is produced by no node, initializer or "
                     "graph input", path, cx_printable(vi->name));
    CX_TRY(check_value_info(path, "graph output", vi));
  }
  return CX_OK;
}

cx_status cx_onnx_validate(const Onnx__ModelProto *m, const char *path, int64_t opset) {
  if (!m->has_ir_version || m->ir_version < 1 || m->ir_version > MAX_IR_VERSION)
    return cx_fail(CX_ERR_FORMAT, "%s: ir_version %lld is not one ONNX defines (1 to %d)%s", path,
                   (long long)m->ir_version, MAX_IR_VERSION, m->has_ir_version ? "" : " (missing)");
  for (size_t k = 0; k < m->n_opset_import; k++) {
    const Onnx__OperatorSetIdProto *o = m->opset_import[k];
    CX_TRY(check_name(path, "an opset domain", o->domain ? o->domain : ""));
    if (o->version < 1)
      return cx_fail(CX_ERR_FORMAT, "%s: opset_import of domain '%s' has version %lld", path,
                     cx_printable(o->domain ? o->domain : ""), (long long)o->version);
  }
  if (!m->graph) return cx_fail(CX_ERR_FORMAT, "%s: the model has no graph", path);
  name_set defined = {0};
  cx_status s = check_graph(path, opset, m->graph, &defined);
  free(defined.slot);
  return s;
}
