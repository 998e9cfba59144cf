/* cx_onnx_export: BatchNormalization folding (core/graph_fold_bn.h), shapes, nodes in the target opset's form, then the
 * model packed and written under a temporary name that is renamed once complete
 * (cx_file_replace). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/file_replace.h"
#include "../core/graph_fold_bn.h"
#include "../core/graph_shapes.h"
#include "export_internal.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ONNX raw_data is little-endian; the exporter writes host bytes as they are"
#endif

enum { MAX_MODEL_BYTES = 2047 * 1024 * 1024 }; /* protobuf's limit */

/* The IR version that came with each opset (onnx/helper.py's VERSION_TABLE). */
static int64_t ir_version(int64_t opset) { return opset <= 14 ? 7 : 8; }

static cx_status alloc_state(cx_exporter *ex) {
  size_t nv = (size_t)ex->g->n_values + 1, nn = (size_t)ex->g->n_nodes + 1;
  ex->order = cx_ex_alloc(ex, sizeof(int) * nn);
  ex->shape[0] = cx_ex_alloc(ex, sizeof(cx_shape) * nv);
  ex->shape[1] = cx_ex_alloc(ex, sizeof(cx_shape) * nv);
  ex->sym = cx_ex_alloc(ex, sizeof(cx_shape) * nv);
  ex->dtype = cx_ex_alloc(ex, sizeof(cx_dtype) * nv);
  ex->used = cx_ex_alloc(ex, sizeof(bool) * nv);
  ex->qdq_pairs = cx_ex_alloc(ex, sizeof(int) * nv);
  if (!ex->order || !ex->shape[0] || !ex->shape[1] || !ex->sym || !ex->dtype || !ex->used ||
      !ex->qdq_pairs)
    return cx_ex_nomem();
  return CX_OK;
}

static cx_status analyse(cx_exporter *ex) {
  const cx_graph *g = ex->g;
  /* shapes for batch 1 and 2 (core/graph_shapes.h): which dimensions follow the batch */
  CX_TRY(cx_graph_topo_order(g, ex->order));
  CX_TRY(cx_graph_infer_shapes(g, 1, ex->shape[0], ex->dtype));
  CX_TRY(cx_graph_infer_shapes(g, 2, ex->shape[1], ex->dtype));
  for (int v = 0; v < g->n_values; v++)
    cx_shape_symbolic(&ex->shape[0][v], &ex->shape[1][v], &ex->sym[v]);
  return CX_OK;
}

static cx_status write_nodes(cx_exporter *ex) {
  for (int i = 0; i < ex->g->n_nodes; i++) {
    int node = ex->order[i];
    CX_TRY(cx_ex_lower_node(ex, node));
  }
  for (int k = 0; k < ex->g->n_outputs; k++) {
    int v = ex->g->outputs[k];
    ex->used[v] = true;
    const char *name; /* a quantized graph output ends in its own pair, named as the output */
    if (cx_ex_is_activation_fq(ex, v) && !ex->qdq_pairs[v]) CX_TRY(cx_ex_qdq_pair(ex, v, &name));
  }
  for (int v = 0; v < ex->g->n_values; v++) {
    const cx_value *x = &ex->g->values[v];
    bool init = x->kind == CX_VALUE_PARAM || x->kind == CX_VALUE_STATE || x->kind == CX_VALUE_CONST;
    if (ex->used[v] && init) CX_TRY(cx_ex_write_value_init(ex, v));
  }
  return CX_OK;
}

static cx_status value_infos(cx_exporter *ex, Onnx__GraphProto *gp) {
  const cx_graph *g = ex->g;
  gp->input = cx_ex_alloc(ex, sizeof(void *) * ((size_t)g->n_values + 1));
  gp->output = cx_ex_alloc(ex, sizeof(void *) * ((size_t)g->n_outputs + 1));
  if (!gp->input || !gp->output) return cx_ex_nomem();
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].kind != CX_VALUE_INPUT) continue;
    const cx_value *x = &g->values[v];
    if (cx_ex_onnx_dtype(x->dtype) == ONNX__TENSOR_PROTO__DATA_TYPE__UNDEFINED)
      return cx_fail(CX_ERR_UNSUPPORTED, "graph input '%s' has type %s, which ONNX export does "
                     "not write", x->name, cx_dtype_name(x->dtype));
    if (!(gp->input[gp->n_input++] = cx_ex_value_info(ex, x->name, x->dtype, &x->shape)))
      return cx_ex_nomem();
  }
  if (g->n_outputs == 0) return cx_fail(CX_ERR_ARG, "ONNX export: the graph has no outputs");
  for (int k = 0; k < g->n_outputs; k++) {
    int v = g->outputs[k];
    gp->output[gp->n_output] = cx_ex_value_info(ex, g->values[v].name, ex->dtype[v], &ex->sym[v]);
    if (!gp->output[gp->n_output++]) return cx_ex_nomem();
  }
  return CX_OK;
}

static cx_status pack_and_write(cx_exporter *ex, const Onnx__ModelProto *m, const char *path) {
  size_t len = onnx__model_proto__get_packed_size(m);
  if (len > MAX_MODEL_BYTES)
    return cx_fail(CX_ERR_UNSUPPORTED, "%s: the model would take %zu bytes; protobuf holds at most "
                   "2 GB", path, len);
  uint8_t *buf = cx_ex_alloc(ex, len);
  if (!buf) return cx_ex_nomem();
  onnx__model_proto__pack(m, buf);
  return cx_file_replace(path, buf, len);
}

static cx_status metadata(cx_exporter *ex, const cx_onnx_export_opts *o, Onnx__ModelProto *m) {
  if (o->n_metadata <= 0) return CX_OK;
  m->metadata_props = cx_ex_alloc(ex, sizeof(void *) * (size_t)o->n_metadata);
  if (!m->metadata_props) return cx_ex_nomem();
  for (int k = 0; k < o->n_metadata; k++) {
    Onnx__StringStringEntryProto *e = cx_ex_alloc(ex, sizeof *e);
    if (!e) return cx_ex_nomem();
    onnx__string_string_entry_proto__init(e);
    if (!o->metadata[k].key || !*o->metadata[k].key)
      return cx_fail(CX_ERR_ARG, "ONNX export: metadata entry %d has no key", k);
    e->key = (char *)o->metadata[k].key;
    e->value = (char *)(o->metadata[k].value ? o->metadata[k].value : "");
    m->metadata_props[m->n_metadata_props++] = e;
  }
  return CX_OK;
}

static cx_status export_model(cx_exporter *ex, const cx_onnx_export_opts *o, const char *path) {
  CX_TRY(alloc_state(ex));
  CX_TRY(analyse(ex));
  CX_TRY(write_nodes(ex));
  Onnx__GraphProto gp = ONNX__GRAPH_PROTO__INIT;
  gp.name = (char *)(o->graph_name && *o->graph_name ? o->graph_name : "compress");
  gp.node = ex->nodes;
  gp.n_node = ex->n_nodes;
  gp.initializer = ex->inits;
  gp.n_initializer = ex->n_inits;
  CX_TRY(value_infos(ex, &gp));
  Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT;
  opset.domain = "";
  opset.has_version = 1;
  opset.version = ex->opset;
  Onnx__OperatorSetIdProto *opsets[] = {&opset};
  Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
  m.has_ir_version = 1;
  m.ir_version = ir_version(ex->opset);
  m.opset_import = opsets;
  m.n_opset_import = 1;
  m.producer_name = "compress";
  m.producer_version = (char *)(o->producer_version ? o->producer_version : "");
  m.doc_string = (char *)o->doc_string;
  m.graph = &gp;
  CX_TRY(metadata(ex, o, &m));
  return pack_and_write(ex, &m, path);
}

cx_status cx_onnx_export(const cx_graph *g, const char *path, const cx_onnx_export_opts *o) {
  cx_onnx_export_opts defaults = {0};
  if (!o) o = &defaults;
  int64_t opset = o->opset ? o->opset : CX_ONNX_EXPORT_MIN_OPSET;
  CX_TRY(cx_ex_check_qdq_opset(g, opset, path));
  if (opset < CX_ONNX_EXPORT_MIN_OPSET || opset > CX_ONNX_EXPORT_MAX_OPSET)
    return cx_fail(CX_ERR_UNSUPPORTED, "%s: opset %lld cannot be written (%d to %d can)", path,
                   (long long)opset, CX_ONNX_EXPORT_MIN_OPSET, CX_ONNX_EXPORT_MAX_OPSET);
  CX_TRY(cx_graph_validate(g));
  cx_graph *folded = NULL;
  cx_status s = o->fold_bn ? cx_graph_fold_bn(g, false, &folded, NULL) : CX_OK;
  cx_exporter ex = {.g = folded ? folded : g, .opset = opset};
  if (s == CX_OK) s = export_model(&ex, o, path);
  cx_ex_free(&ex);
  cx_graph_free(folded);
  if (s != CX_OK && !strstr(cx_last_error(), path)) cx_error_prefix("%s", path);
  return s;
}
