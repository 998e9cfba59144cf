/* Building protobuf-c messages in the exporter's arena. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export_internal.h"

cx_status cx_ex_nomem(void) { return cx_fail(CX_ERR_NOMEM, "ONNX export: out of memory"); }

void *cx_ex_alloc(cx_exporter *ex, size_t bytes) {
  if (ex->n_mem == ex->cap_mem) {
    int cap = ex->cap_mem ? ex->cap_mem * 2 : 256;
    void **m = realloc(ex->mem, sizeof(void *) * (size_t)cap);
    if (!m) return NULL;
    ex->mem = m;
    ex->cap_mem = cap;
  }
  void *p = calloc(1, bytes ? bytes : 1);
  if (p) ex->mem[ex->n_mem++] = p;
  return p;
}

char *cx_ex_strdup(cx_exporter *ex, const char *s) {
  size_t n = strlen(s) + 1;
  char *r = cx_ex_alloc(ex, n);
  if (r) memcpy(r, s, n);
  return r;
}

void cx_ex_free(cx_exporter *ex) {
  for (int k = 0; k < ex->n_mem; k++) free(ex->mem[k]);
  free(ex->mem);
  ex->mem = NULL;
  ex->n_mem = ex->cap_mem = 0;
}

int32_t cx_ex_onnx_dtype(cx_dtype t) {
  switch (t) {
  case CX_F32: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  case CX_F16: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16;
  case CX_BF16: return ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
  case CX_S8: return ONNX__TENSOR_PROTO__DATA_TYPE__INT8;
  case CX_U8: return ONNX__TENSOR_PROTO__DATA_TYPE__UINT8;
  case CX_S32: return ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
  case CX_S64: return ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
  case CX_BOOL: return ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
  case CX_F64: return ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
  default: return ONNX__TENSOR_PROTO__DATA_TYPE__UNDEFINED;
  }
}

static bool name_taken(const cx_exporter *ex, const char *name) {
  if (cx_graph_find_value(ex->g, name) >= 0) return true;
  for (size_t k = 0; k < ex->n_inits; k++)
    if (!strcmp(ex->inits[k]->name, name)) return true;
  for (size_t k = 0; k < ex->n_nodes; k++)
    for (size_t o = 0; o < ex->nodes[k]->n_output; o++)
      if (!strcmp(ex->nodes[k]->output[o], name)) return true;
  return false;
}

const char *cx_ex_unique_name(cx_exporter *ex, const char *base) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", base);
  for (int k = 1; name_taken(ex, buf); k++) snprintf(buf, sizeof buf, "%s_%d", base, k);
  return cx_ex_strdup(ex, buf);
}

static bool grow(cx_exporter *ex, void ***arr, size_t n, size_t *cap) {
  if (n < *cap) return true;
  size_t c = *cap ? *cap * 2 : 64;
  void **p = cx_ex_alloc(ex, sizeof(void *) * c);
  if (!p) return false;
  if (n) memcpy(p, *arr, sizeof(void *) * n);
  *arr = p;
  *cap = c;
  return true;
}

static Onnx__TensorProto *tensor(cx_exporter *ex, const char *name, cx_dtype dtype,
                                 const cx_shape *shape, const void *data) {
  Onnx__TensorProto *t = cx_ex_alloc(ex, sizeof *t);
  int64_t *dims = cx_ex_alloc(ex, sizeof(int64_t) * (size_t)(shape->ndim + 1));
  if (!t || !dims) return NULL;
  onnx__tensor_proto__init(t);
  t->name = (char *)name;
  t->has_data_type = 1;
  t->data_type = cx_ex_onnx_dtype(dtype);
  t->n_dims = (size_t)shape->ndim;
  memcpy(dims, shape->d, sizeof(int64_t) * (size_t)shape->ndim);
  t->dims = dims;
  t->has_raw_data = 1;
  t->raw_data.len = (size_t)cx_shape_numel(shape) * cx_dtype_size(dtype);
  t->raw_data.data = (uint8_t *)data; /* the host is little-endian, as raw_data is */
  return t;
}

static cx_status push_init(cx_exporter *ex, Onnx__TensorProto *t) {
  if (!t || !grow(ex, (void ***)&ex->inits, ex->n_inits, &ex->cap_inits)) return cx_ex_nomem();
  ex->inits[ex->n_inits++] = t;
  return CX_OK;
}

const char *cx_ex_add_init(cx_exporter *ex, const char *name, cx_dtype dtype, const cx_shape *shape,
                           const void *data) {
  size_t bytes = (size_t)cx_shape_numel(shape) * cx_dtype_size(dtype);
  void *copy = cx_ex_alloc(ex, bytes);
  char *n = cx_ex_strdup(ex, name);
  if (!copy || !n) return NULL;
  if (bytes) memcpy(copy, data, bytes);
  return push_init(ex, tensor(ex, n, dtype, shape, copy)) == CX_OK ? n : NULL;
}

const char *cx_ex_const_s64(cx_exporter *ex, const char *node, const char *what, int n,
                            const int64_t *v) {
  char base[1024];
  snprintf(base, sizeof base, "%s/%s", node, what);
  const char *name = cx_ex_unique_name(ex, base);
  cx_shape s = {.ndim = 1, .d = {n}};
  return name ? cx_ex_add_init(ex, name, CX_S64, &s, v) : NULL;
}

const char *cx_ex_const_f32(cx_exporter *ex, const char *node, const char *what, float v) {
  char base[1024];
  snprintf(base, sizeof base, "%s/%s", node, what);
  const char *name = cx_ex_unique_name(ex, base);
  cx_shape s = {0};
  return name ? cx_ex_add_init(ex, name, CX_F32, &s, &v) : NULL;
}

cx_status cx_ex_write_value_init(cx_exporter *ex, int v) {
  const cx_value *x = &ex->g->values[v];
  if (cx_ex_onnx_dtype(x->dtype) == ONNX__TENSOR_PROTO__DATA_TYPE__UNDEFINED)
    return cx_fail(CX_ERR_UNSUPPORTED, "initializer '%s' has type %s, which ONNX export does not "
                   "write", x->name, cx_dtype_name(x->dtype));
  return push_init(ex, tensor(ex, x->name, x->dtype, &x->shape, x->init));
}

Onnx__NodeProto *cx_ex_node(cx_exporter *ex, const char *op, const char *name,
                            const char *const *in, int n_in, const char *const *out, int n_out) {
  Onnx__NodeProto *n = cx_ex_alloc(ex, sizeof *n);
  char **ins = cx_ex_alloc(ex, sizeof(char *) * (size_t)(n_in + 1));
  char **outs = cx_ex_alloc(ex, sizeof(char *) * (size_t)(n_out + 1));
  Onnx__AttributeProto **attrs = cx_ex_alloc(ex, sizeof(void *) * CX_EX_MAX_ATTRS);
  if (!n || !ins || !outs || !attrs) return NULL;
  if (!grow(ex, (void ***)&ex->nodes, ex->n_nodes, &ex->cap_nodes)) return NULL;
  onnx__node_proto__init(n);
  n->op_type = (char *)op;
  n->name = (char *)name;
  for (int k = 0; k < n_in; k++) ins[k] = (char *)in[k];
  for (int k = 0; k < n_out; k++) outs[k] = (char *)out[k];
  n->input = ins;
  n->n_input = (size_t)n_in;
  n->output = outs;
  n->n_output = (size_t)n_out;
  n->attribute = attrs;
  ex->nodes[ex->n_nodes++] = n;
  return n;
}

static Onnx__AttributeProto *new_attr(cx_exporter *ex, Onnx__NodeProto *n, const char *name,
                                      Onnx__AttributeProto__AttributeType type) {
  if (n->n_attribute >= CX_EX_MAX_ATTRS) return NULL;
  Onnx__AttributeProto *a = cx_ex_alloc(ex, sizeof *a);
  if (!a) return NULL;
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  a->type = type;
  n->attribute[n->n_attribute++] = a;
  return a;
}

cx_status cx_ex_attr_int(cx_exporter *ex, Onnx__NodeProto *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = new_attr(ex, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  if (!a) return cx_ex_nomem();
  a->has_i = 1;
  a->i = v;
  return CX_OK;
}

cx_status cx_ex_attr_float(cx_exporter *ex, Onnx__NodeProto *n, const char *name, float v) {
  Onnx__AttributeProto *a = new_attr(ex, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  if (!a) return cx_ex_nomem();
  a->has_f = 1;
  a->f = v;
  return CX_OK;
}

cx_status cx_ex_attr_ints(cx_exporter *ex, Onnx__NodeProto *n, const char *name, const int64_t *v,
                          int count) {
  Onnx__AttributeProto *a = new_attr(ex, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  int64_t *copy = cx_ex_alloc(ex, sizeof(int64_t) * (size_t)(count + 1));
  if (!a || !copy) return cx_ex_nomem();
  if (count) memcpy(copy, v, sizeof(int64_t) * (size_t)count);
  a->ints = copy;
  a->n_ints = (size_t)count;
  return CX_OK;
}

cx_status cx_ex_attr_copy(cx_exporter *ex, Onnx__NodeProto *n, const cx_attr *src) {
  switch (src->type) {
  case CX_ATTR_INT: return cx_ex_attr_int(ex, n, src->name, src->i);
  case CX_ATTR_FLOAT: return cx_ex_attr_float(ex, n, src->name, src->f);
  case CX_ATTR_INTS: return cx_ex_attr_ints(ex, n, src->name, src->ints, src->n);
  case CX_ATTR_FLOATS: {
    Onnx__AttributeProto *a = new_attr(ex, n, src->name,
                                       ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
    if (!a) return cx_ex_nomem();
    a->floats = src->floats;
    a->n_floats = (size_t)src->n;
    return CX_OK;
  }
  case CX_ATTR_STRING: {
    Onnx__AttributeProto *a = new_attr(ex, n, src->name,
                                       ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    if (!a) return cx_ex_nomem();
    a->has_s = 1;
    a->s.data = (uint8_t *)src->s;
    a->s.len = strlen(src->s);
    return CX_OK;
  }
  }
  return cx_fail(CX_ERR_ARG, "attribute '%s' has an unknown type", src->name);
}

Onnx__ValueInfoProto *cx_ex_value_info(cx_exporter *ex, const char *name, cx_dtype dtype,
                                       const cx_shape *shape) {
  Onnx__ValueInfoProto *vi = cx_ex_alloc(ex, sizeof *vi);
  Onnx__TypeProto *type = cx_ex_alloc(ex, sizeof *type);
  Onnx__TypeProto__Tensor *tt = cx_ex_alloc(ex, sizeof *tt);
  if (!vi || !type || !tt) return NULL;
  onnx__value_info_proto__init(vi);
  onnx__type_proto__init(type);
  onnx__type_proto__tensor__init(tt);
  vi->name = (char *)name;
  vi->type = type;
  type->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  type->tensor_type = tt;
  tt->has_elem_type = 1;
  tt->elem_type = cx_ex_onnx_dtype(dtype);
  if (!shape) return vi;
  Onnx__TensorShapeProto *sp = cx_ex_alloc(ex, sizeof *sp);
  Onnx__TensorShapeProto__Dimension **dims = cx_ex_alloc(ex, sizeof(void *) * CX_MAX_DIMS);
  if (!sp || !dims) return NULL;
  onnx__tensor_shape_proto__init(sp);
  sp->dim = dims;
  sp->n_dim = (size_t)shape->ndim;
  for (int d = 0; d < shape->ndim; d++) {
    Onnx__TensorShapeProto__Dimension *dim = cx_ex_alloc(ex, sizeof *dim);
    if (!dim) return NULL;
    onnx__tensor_shape_proto__dimension__init(dim);
    if (shape->d[d] >= 0) {
      dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      dim->dim_value = shape->d[d];
    } else if (shape->d[d] == -1) {
      dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      dim->dim_param = "N";
    } /* else: depends on the batch in a way we do not name; left unknown */
    dims[d] = dim;
  }
  tt->shape = sp;
  return vi;
}
