#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/file_replace.h"
#include "../core/op.h"
#include "../export/onnx_export.h"
#include "../import/onnx.h"
#include "commands.h"
#include "onnx_common.h"

typedef struct convert_opts {
  const char *in, *out;
  int opset;
  bool fold_bn, json;
} convert_opts;

typedef struct convert_result {
  cx_onnx_info in_info, out_info;
  int in_nodes, out_nodes, bn_before, bn_after;
} convert_result;

static int count_op(const cx_graph *g, const char *op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += !strcmp(g->nodes[i].op->name, op);
  return n;
}

/* The source model's metadata (input preprocessing, ...) is carried over. */
static cx_status write_model(const convert_opts *o, const cx_graph *g, const cx_onnx_info *info,
                             const char *path) {
  cx_onnx_metadata meta[32];
  for (int k = 0; k < info->n_metadata; k++)
    meta[k] = (cx_onnx_metadata){info->metadata[k][0], info->metadata[k][1]};
  cx_onnx_export_opts eo = {.opset = o->opset, .fold_bn = o->fold_bn,
                            .producer_version = CX_VERSION, .metadata = meta,
                            .n_metadata = info->n_metadata};
  return cx_onnx_export(g, path, &eo);
}

/* The message of a failed write or read-back names OUT, not the temporary file it went to. */
static cx_status name_output(cx_status s, const char *tmp, const char *out) {
  const char *msg = cx_last_error(), *at = strstr(msg, tmp);
  if (!at) return s;
  return cx_fail(s, "%.*s%s%s", (int)(at - msg), msg, out, at + strlen(tmp));
}

/* Import, export under a temporary name beside OUT, import that again, and only then rename it
 * to OUT: a model we cannot read back fails here and OUT is left as it was. */
static cx_status convert(const convert_opts *o, convert_result *r) {
  cx_graph *g = NULL, *back = NULL;
  CX_TRY(cx_cli_load_model(o->in, &g, &r->in_info));
  r->in_nodes = g->n_nodes;
  r->bn_before = count_op(g, "BatchNormalization");
  char *tmp = cx_file_tmp_name(o->out);
  cx_status s = tmp ? write_model(o, g, &r->in_info, tmp)
                    : cx_fail(CX_ERR_NOMEM, "%s: out of memory", o->out);
  cx_graph_free(g);
  if (s == CX_OK) {
    s = cx_onnx_import(tmp, &back, &r->out_info);
    if (s == CX_OK) {
      r->out_nodes = back->n_nodes;
      r->bn_after = count_op(back, "BatchNormalization");
      cx_graph_free(back);
      s = cx_file_put_in_place(tmp, o->out);
    } else {
      cx_error_prefix("the written model does not load again");
      remove(tmp);
    }
  }
  if (s != CX_OK && tmp) s = name_output(s, tmp, o->out);
  free(tmp);
  return s;
}

static void print_result(const convert_opts *o, const convert_result *r) {
  if (o->json) {
    printf("{\"input\":");
    cx_json_string(stdout, o->in);
    printf(",\"output\":");
    cx_json_string(stdout, o->out);
    printf(",\"input_opset\":%lld,\"opset\":%lld,\"input_nodes\":%d,\"nodes\":%d,"
           "\"folded_batch_norms\":%d}\n", (long long)r->in_info.opset,
           (long long)r->out_info.opset, r->in_nodes, r->out_nodes, r->bn_before - r->bn_after);
    return;
  }
  printf("%s (opset %lld, %d nodes) -> %s (opset %lld, %d nodes", o->in,
         (long long)r->in_info.opset, r->in_nodes, o->out, (long long)r->out_info.opset,
         r->out_nodes);
  if (o->fold_bn) printf("; %d BatchNormalization folded", r->bn_before - r->bn_after);
  printf(")\n");
}

static int parse(const cx_command *c, int argc, char **argv, convert_opts *o) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--json")) o->json = true;
    else if (!strcmp(a, "--fold-bn")) o->fold_bn = true;
    else if (!strcmp(a, "--opset")) {
      if (i + 1 >= argc) return cx_cli_usage_error(c, "option '%s' needs a value", a);
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < CX_ONNX_EXPORT_MIN_OPSET || v > CX_ONNX_EXPORT_MAX_OPSET)
        return cx_cli_usage_error(c, "--opset '%s': 13 to 17 can be written",
                                  argv[i]);
      o->opset = (int)v;
    } else if (a[0] == '-') return cx_cli_usage_error(c, "unknown option '%s'", a);
    else if (!o->in) o->in = a;
    else if (!o->out) o->out = a;
    else return cx_cli_usage_error(c, "unexpected argument '%s'", a);
  }
  if (!o->out) return cx_cli_usage_error(c, "%s", "a model (IN.onnx or a SPEC) and OUT.onnx are needed");
  return 0;
}

static int run_as(const cx_command *c, int argc, char **argv) {
  convert_opts o = {.opset = CX_ONNX_EXPORT_MIN_OPSET};
  int rc = parse(c, argc, argv, &o);
  if (rc) return rc;
  convert_result r = {0};
  if (convert(&o, &r) != CX_OK) return cx_cli_fail(c);
  print_result(&o, &r);
  return 0;
}

static int run(int argc, char **argv) { return run_as(&cx_cmd_convert, argc, argv); }
static int run_export(int argc, char **argv) { return run_as(&cx_cmd_export_model, argc, argv); }

const cx_command cx_cmd_convert = {
    .name = "convert",
    .summary = "Rewrite an ONNX model at another opset, optionally folding BatchNormalization",
    .usage = "usage: compress convert IN.onnx OUT.onnx [--opset N] [--fold-bn] [--json]\n\n"
             "Imports IN.onnx (opsets 7 to 21) and writes it again as OUT.onnx in the form of\n"
             "opset N, keeping node names, the symbolic batch and the model's metadata, then\n"
             "reads OUT.onnx back to make sure it loads. Shape arithmetic and Identity nodes\n"
             "that the importer folds do not come back.\n\n"
             "    --opset N    the opset to write, 13 to 17 (default 13)\n"
             "    --fold-bn    fold inference BatchNormalization into the Conv or Gemm before it\n"
             "    --json       print one JSON object with both opsets and node counts\n",
    .run = run,
};

const cx_command cx_cmd_export_model = {
    .name = "export-model",
    .summary = "Write a built-in architecture (a model spec) as an ONNX model",
    .usage = "usage: compress export-model SPEC OUT.onnx [--opset N] [--fold-bn] [--json]\n\n"
             "Builds the architecture SPEC (see 'compress models'), e.g.\n"
             "mobilenet_v2:width=0.5,classes=10,input=1x28x28, with its initial weights and\n"
             "writes it as OUT.onnx (symbolic batch N), then reads it back to make sure it\n"
             "loads. ONNX Runtime runs the file as written.\n\n"
             "    --opset N    the opset to write, 13 to 17 (default 13)\n"
             "    --fold-bn    fold inference BatchNormalization into the Conv before it\n"
             "    --json       print one JSON object with the opset and node counts\n",
    .run = run_export,
};
