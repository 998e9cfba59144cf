#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "onnx.h"
#include "onnx_internal.h"

enum { MAX_MODEL_BYTES = 2047 * 1024 * 1024 }; /* protobuf's own limit */

static cx_status read_file(const char *path, uint8_t **data, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return cx_fail(CX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (n < 0 || n > MAX_MODEL_BYTES || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return cx_fail(CX_ERR_IO, "%s: cannot read (size %ld; at most 2 GB, larger weights belong in "
                   "external data files)", path, n);
  }
  *data = malloc((size_t)n + 1);
  *len = fread(*data, 1, (size_t)n, f);
  fclose(f);
  if (*len != (size_t)n) {
    free(*data);
    return cx_fail(CX_ERR_IO, "%s: short read", path);
  }
  return CX_OK;
}

const char *cx_onnx_resolve_alias(const cx_onnx_importer *im, const char *name) {
  for (int k = im->n_alias - 1; k >= 0; k--)
    if (!strcmp(im->alias_from[k], name)) return cx_onnx_resolve_alias(im, im->alias_to[k]);
  return name;
}

const Onnx__TensorProto *cx_onnx_find_initializer(const cx_onnx_importer *im, const char *name) {
  const Onnx__GraphProto *gp = im->model->graph;
  for (size_t k = 0; k < gp->n_initializer; k++)
    if (gp->initializer[k]->name && !strcmp(gp->initializer[k]->name, name))
      return gp->initializer[k];
  return NULL;
}

/* Graph inputs: cx_onnx_validate has checked their types and dimensions. */
static cx_status add_inputs(cx_onnx_importer *im) {
  const Onnx__GraphProto *gp = im->model->graph;
  for (size_t k = 0; k < gp->n_input; k++) {
    const Onnx__ValueInfoProto *vi = gp->input[k];
    if (cx_onnx_find_initializer(im, vi->name)) continue; /* old IR lists weights */
    const Onnx__TypeProto__Tensor *tt = vi->type->tensor_type;
    cx_dtype dt = CX_F32;
    cx_onnx_dtype(tt->elem_type, &dt);
    const Onnx__TensorShapeProto *sp = tt->shape;
    if (!sp)
      return cx_fail(CX_ERR_UNSUPPORTED, "%s: graph input '%s' has no shape", im->path, vi->name);
    cx_shape s = {.ndim = (int)sp->n_dim};
    for (size_t d = 0; d < sp->n_dim; d++) {
      const Onnx__TensorShapeProto__Dimension *dim = sp->dim[d];
      bool fixed = dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      s.d[d] = fixed ? dim->dim_value : -1;
    }
    cx_graph_input(im->g, vi->name, dt, &s);
    CX_TRY(cx_graph_status(im->g));
  }
  return CX_OK;
}

static cx_status add_outputs(cx_onnx_importer *im) {
  const Onnx__GraphProto *gp = im->model->graph;
  for (size_t k = 0; k < gp->n_output; k++) {
    const char *name = gp->output[k]->name ? gp->output[k]->name : "";
    int v = cx_onnx_value(im, name, CX_VALUE_CONST, "graph output");
    if (v < 0) return cx_graph_status(im->g) ? cx_graph_status(im->g) : CX_ERR_FORMAT;
    cx_graph_mark_output(im->g, v);
  }
  if (gp->n_output == 0) return cx_fail(CX_ERR_FORMAT, "%s: the graph has no outputs", im->path);
  return cx_graph_status(im->g);
}

/* Every op type we cannot take, listed once with opset and node names, before anything runs. */
static cx_status check_supported(const cx_onnx_importer *im) {
  const Onnx__GraphProto *gp = im->model->graph;
  char msg[3000] = "";
  int n_bad = 0;
  for (size_t k = 0; k < gp->n_node; k++) {
    const Onnx__NodeProto *n = gp->node[k];
    const char *op = n->op_type ? n->op_type : "";
    bool other_domain = n->domain && *n->domain && strcmp(n->domain, "ai.onnx");
    if (!other_domain && cx_onnx_op_known(op)) continue;
    bool seen = false;
    for (size_t j = 0; j < k && !seen; j++) {
      const Onnx__NodeProto *m = gp->node[j];
      seen = m->op_type && !strcmp(m->op_type, op);
    }
    if (seen) continue;
    size_t at = strlen(msg);
    at += (size_t)snprintf(msg + at, sizeof msg - at, "\n  %s%s%s (opset %lld): ",
                           other_domain ? n->domain : "", other_domain ? "." : "", op,
                           (long long)im->opset);
    int shown = 0;
    for (size_t j = k; j < gp->n_node && at < sizeof msg - 80; j++) {
      const Onnx__NodeProto *m = gp->node[j];
      if (!m->op_type || strcmp(m->op_type, op)) continue;
      if (shown++ == 6) {
        at += (size_t)snprintf(msg + at, sizeof msg - at, ", ...");
        break;
      }
      at += (size_t)snprintf(msg + at, sizeof msg - at, "%s'%s'", shown > 1 ? ", " : "",
                             m->name && *m->name ? m->name : "(unnamed)");
    }
    n_bad++;
  }
  if (n_bad)
    return cx_fail(CX_ERR_UNSUPPORTED, "%s: %d op type(s) are not supported:%s", im->path, n_bad,
                   msg);
  return CX_OK;
}

static cx_status import_nodes(cx_onnx_importer *im) {
  const Onnx__GraphProto *gp = im->model->graph;
  for (size_t k = 0; k < gp->n_node; k++) {
    const Onnx__NodeProto *n = gp->node[k];
    char name[512];
    if (n->name && *n->name) snprintf(name, sizeof name, "%s", n->name);
    else snprintf(name, sizeof name, "%s_%zu", n->op_type, k);
    cx_status s = cx_onnx_can_fold(im, n) ? cx_onnx_fold(im, n) : cx_onnx_add_node(im, n, name);
    if (s == CX_OK) s = cx_graph_status(im->g);
    if (s != CX_OK) {
      if (!strstr(cx_last_error(), name)) cx_error_prefix("node '%s' (%s)", name, n->op_type);
      cx_error_prefix("%s", im->path);
      return s;
    }
  }
  return CX_OK;
}

static void read_info(const cx_onnx_importer *im, cx_onnx_info *info) {
  const Onnx__ModelProto *m = im->model;
  memset(info, 0, sizeof *info);
  info->ir_version = m->ir_version;
  info->opset = im->opset;
  snprintf(info->producer, sizeof info->producer, "%s", m->producer_name ? m->producer_name : "");
  snprintf(info->producer_version, sizeof info->producer_version, "%s",
           m->producer_version ? m->producer_version : "");
  for (size_t k = 0; k < m->n_metadata_props && info->n_metadata < 32; k++) {
    const Onnx__StringStringEntryProto *e = m->metadata_props[k];
    snprintf(info->metadata[info->n_metadata][0], 256, "%s", e->key ? e->key : "");
    snprintf(info->metadata[info->n_metadata++][1], 256, "%s", e->value ? e->value : "");
  }
}

static cx_status import_model(cx_onnx_importer *im) {
  const Onnx__ModelProto *m = im->model;
  im->opset = -1;
  for (size_t k = 0; k < m->n_opset_import; k++) {
    const char *d = m->opset_import[k]->domain;
    if (!d || !*d || !strcmp(d, "ai.onnx")) im->opset = m->opset_import[k]->version;
  }
  if (im->opset < 0) im->opset = 1; /* IR 1-2 models carry no opset_import: version 1 */
  if (im->opset < 7 || im->opset > 21)
    return cx_fail(CX_ERR_UNSUPPORTED, "%s: opset %lld is not supported (7 to 21 are)", im->path,
                   (long long)im->opset);
  CX_TRY(cx_onnx_validate(m, im->path, im->opset));
  CX_TRY(check_supported(im));
  CX_TRY(add_inputs(im));
  CX_TRY(import_nodes(im));
  CX_TRY(add_outputs(im));
  return cx_graph_validate(im->g);
}

static void free_importer(cx_onnx_importer *im) {
  for (int k = 0; k < im->n_folded; k++) {
    free(im->folded[k].name);
    for (int v = 0; v < CX_ONNX_VARIANTS; v++) cx_onnx_const_free(&im->folded[k].v[v]);
  }
  free(im->folded);
  for (int k = 0; k < im->n_alias; k++) {
    free(im->alias_from[k]);
    free(im->alias_to[k]);
  }
  free(im->alias_from);
  free(im->alias_to);
  for (int v = 0; v < CX_ONNX_VARIANTS; v++) free(im->shape[v]);
  if (im->model) onnx__model_proto__free_unpacked(im->model, NULL);
}

static cx_status import_bytes(const void *data, size_t len, const char *path,
                              const char *base_dir, cx_graph **out, cx_onnx_info *info) {
  *out = NULL;
  cx_onnx_importer im = {.path = path};
  im.model = onnx__model_proto__unpack(NULL, len, data);
  if (!im.model)
    return cx_fail(CX_ERR_FORMAT, "%s: not an ONNX model (the protobuf does not parse: truncated "
                   "or corrupt)", path);
  snprintf(im.base_dir, sizeof im.base_dir, "%s", base_dir);
  im.g = cx_graph_new();
  cx_status s = import_model(&im);
  if (s == CX_OK && info) read_info(&im, info);
  if (s == CX_OK) *out = im.g;
  else cx_graph_free(im.g);
  free_importer(&im);
  return s;
}

cx_status cx_onnx_import_bytes(const void *data, size_t len, const char *name, cx_graph **out,
                               cx_onnx_info *info) {
  return import_bytes(data, len, name, "", out, info);
}

cx_status cx_onnx_import(const char *path, cx_graph **out, cx_onnx_info *info) {
  *out = NULL;
  uint8_t *bytes = NULL;
  size_t len = 0;
  CX_TRY(read_file(path, &bytes, &len));
  char base_dir[4096];
  snprintf(base_dir, sizeof base_dir, "%s", path);
  char *slash = strrchr(base_dir, '/');
  if (slash) *slash = '\0';
  else snprintf(base_dir, sizeof base_dir, ".");
  cx_status s = import_bytes(bytes, len, path, base_dir, out, info);
  free(bytes);
  return s;
}
