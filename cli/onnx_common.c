#include "onnx_common.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/status.h"
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
