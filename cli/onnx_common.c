#include "onnx_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/op.h"
#include "../core/status.h"
#include "../core/graph_shapes.h"
#include "../models/zoo.h"

int cx_cli_fail(const cx_command *c) {
  fprintf(stderr, "compress %s: %s\n", c->name, cx_last_error());
  return 1;
}

const char *cx_cli_shape_str(const cx_shape *s, char *buf) {
  size_t at = 0;
  buf[at++] = '[';
  for (int d = 0; d < s->ndim && at < CX_SHAPE_STR - 24; d++) {
    const char *sep = d ? "," : "";
    size_t room = CX_SHAPE_STR - at;
    if (s->d[d] >= 0) at += (size_t)snprintf(buf + at, room, "%s%lld", sep, (long long)s->d[d]);
    else at += (size_t)snprintf(buf + at, room, "%s%s", sep, s->d[d] == -1 ? "N" : "?");
  }
  snprintf(buf + at, CX_SHAPE_STR - at, "]");
  return buf;
}

void cx_cli_shape(FILE *f, const cx_shape *s, bool json) {
  if (!json) {
    char buf[CX_SHAPE_STR];
    fputs(cx_cli_shape_str(s, buf), f);
    return;
  }
  fputc('[', f);
  for (int d = 0; d < s->ndim; d++) {
    if (d) fputc(',', f);
    if (s->d[d] >= 0) fprintf(f, "%lld", (long long)s->d[d]);
    else fputs(s->d[d] == -1 ? "\"N\"" : "\"?\"", f);
  }
  fputc(']', f);
}

int cx_cli_graph_inputs(const cx_graph *g, int *ids, int max) {
  int n = 0;
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].kind == CX_VALUE_INPUT) {
      if (n < max) ids[n] = v;
      n++;
    }
  return n;
}

cx_status cx_cli_load_model(const char *src, cx_graph **g, cx_onnx_info *info) {
  struct stat st;
  if (stat(src, &st) == 0 || strstr(src, ".onnx")) return cx_onnx_import(src, g, info);
  if (info) memset(info, 0, sizeof *info);
  cx_model_info mi;
  cx_status s = cx_model_build(src, g, &mi);
  if (s != CX_OK) cx_error_prefix("'%s' is no file, and not a model spec", src);
  return s;
}

int64_t cx_cli_node_macs(const cx_node *n, const cx_shape *one) {
  const char *op = n->op->name;
  if (n->n_in < 2 || n->n_out < 1) return 0;
  const cx_shape *a = &one[n->in[0]], *w = &one[n->in[1]], *y = &one[n->out[0]];
  int64_t out = cx_shape_numel(y);
  if (!strcmp(op, "Conv") && w->ndim >= 1 && w->d[0] > 0)
    return out * (cx_shape_numel(w) / w->d[0]); /* Cin/group · kernel per output element */
  if (!strcmp(op, "Gemm") && a->ndim == 2)
    return out * a->d[cx_node_int(n, "transA", 0) ? 0 : 1];
  if (!strcmp(op, "MatMul") && a->ndim >= 1) return out * a->d[a->ndim - 1];
  return 0;
}

cx_status cx_cli_graph_cost(const cx_graph *g, int64_t *params, int64_t *macs) {
  size_t nv = (size_t)g->n_values + 1;
  cx_shape *one = calloc(nv, sizeof *one);
  cx_dtype *dtype = calloc(nv, sizeof *dtype);
  cx_status s = one && dtype ? cx_graph_infer_shapes(g, 1, one, dtype)
                             : cx_fail(CX_ERR_NOMEM, "out of memory");
  *macs = 0;
  for (int i = 0; s == CX_OK && i < g->n_nodes; i++) *macs += cx_cli_node_macs(&g->nodes[i], one);
  *params = cx_graph_param_count(g);
  free(one);
  free(dtype);
  return s;
}
