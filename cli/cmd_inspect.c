#include <stdlib.h>
#include <string.h>

#include "../core/graph_cost.h"
#include "../core/op.h"
#include "../core/graph_shapes.h"
#include "../import/onnx.h"
#include "commands.h"
#include "onnx_common.h"
#include "report.h"

/* What inspect reports about a model: the graph after import (canonical ops, shape arithmetic
 * folded), shapes symbolic in the batch, and per node its parameters and multiply-accumulates
 * for one sample. */
typedef struct model_report {
  const char *path;
  cx_onnx_info info;
  cx_graph *g;
  cx_shape *sym, *one; /* by value id: symbolic, and for batch 1 */
  cx_dtype *dtype;
  int64_t *params, *macs; /* by node */
  int64_t total_params, total_macs;
} model_report;

static cx_status analyse(model_report *r) {
  CX_TRY(cx_cli_load_model(r->path, &r->g, &r->info));
  size_t nv = (size_t)r->g->n_values + 1, nn = (size_t)r->g->n_nodes + 1;
  r->sym = calloc(nv, sizeof(cx_shape));
  r->one = calloc(nv, sizeof(cx_shape));
  r->dtype = calloc(nv, sizeof(cx_dtype));
  r->params = calloc(nn, sizeof(int64_t));
  r->macs = calloc(nn, sizeof(int64_t));
  if (!r->sym || !r->one || !r->dtype || !r->params || !r->macs)
    return cx_fail(CX_ERR_NOMEM, "out of memory");
  CX_TRY(cx_graph_symbolic_shapes(r->g, r->sym, r->dtype));
  CX_TRY(cx_graph_infer_shapes(r->g, 1, r->one, r->dtype));
  for (int i = 0; i < r->g->n_nodes; i++) {
    r->params[i] = cx_graph_node_params(r->g, &r->g->nodes[i]);
    r->macs[i] = cx_graph_node_macs(r->g, &r->g->nodes[i], r->one, NULL);
    r->total_macs += r->macs[i];
  }
  cx_graph_cost cost;
  CX_TRY(cx_graph_measure_cost(r->g, &cost));
  r->total_params = cost.params;
  return CX_OK;
}

static void report_free(model_report *r) {
  cx_graph_free(r->g);
  free(r->sym);
  free(r->one);
  free(r->dtype);
  free(r->params);
  free(r->macs);
}

/* Op types in order of first use, with counts. */
static int histogram(const cx_graph *g, const char **ops, int *counts) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const char *op = g->nodes[i].op->name;
    int k = 0;
    while (k < n && strcmp(ops[k], op)) k++;
    if (k == n) ops[n] = op, counts[n++] = 0;
    counts[k]++;
  }
  return n;
}

static void print_values(const model_report *r, const int *ids, int n, bool json) {
  for (int k = 0; k < n; k++) {
    int v = ids[k];
    if (json) {
      printf("%s{\"name\":", k ? "," : "");
      cx_json_string(stdout, r->g->values[v].name);
      printf(",\"dtype\":\"%s\",\"shape\":", cx_dtype_name(r->dtype[v]));
      cx_cli_shape(stdout, &r->sym[v], true);
      printf("}");
    } else {
      printf("  %-24s %-5s ", r->g->values[v].name, cx_dtype_name(r->dtype[v]));
      cx_cli_shape(stdout, &r->sym[v], false);
      printf("\n");
    }
  }
}

static void print_json(const model_report *r, const int *in, int n_in) {
  const cx_graph *g = r->g;
  printf("{\"path\":");
  cx_json_string(stdout, r->path);
  printf(",\"ir_version\":%lld,\"opset\":%lld,\"producer\":", (long long)r->info.ir_version,
         (long long)r->info.opset);
  cx_json_string(stdout, r->info.producer);
  printf(",\"producer_version\":");
  cx_json_string(stdout, r->info.producer_version);
  printf(",\"metadata\":{");
  for (int k = 0; k < r->info.n_metadata; k++) {
    printf("%s", k ? "," : "");
    cx_json_string(stdout, r->info.metadata[k][0]);
    printf(":");
    cx_json_string(stdout, r->info.metadata[k][1]);
  }
  printf("},\"inputs\":[");
  print_values(r, in, n_in, true);
  printf("],\"outputs\":[");
  print_values(r, g->outputs, g->n_outputs, true);
  printf("],\"ops\":{");
  const char **ops = malloc(sizeof(char *) * ((size_t)g->n_nodes + 1));
  int *counts = malloc(sizeof(int) * ((size_t)g->n_nodes + 1));
  int n_ops = ops && counts ? histogram(g, ops, counts) : 0;
  for (int k = 0; k < n_ops; k++) printf("%s\"%s\":%d", k ? "," : "", ops[k], counts[k]);
  free(ops);
  free(counts);
  printf("},\"nodes\":[");
  for (int i = 0; i < g->n_nodes; i++) {
    const cx_node *n = &g->nodes[i];
    printf("%s{\"name\":", i ? "," : "");
    cx_json_string(stdout, n->name);
    printf(",\"op\":\"%s\",\"output_shape\":", n->op->name);
    cx_cli_shape(stdout, &r->sym[n->out[0]], true);
    printf(",\"params\":%lld,\"macs\":%lld}", (long long)r->params[i], (long long)r->macs[i]);
  }
  printf("],\"total_params\":%lld,\"total_macs\":%lld}\n", (long long)r->total_params,
         (long long)r->total_macs);
}

static void print_text(const model_report *r, const int *in, int n_in) {
  const cx_graph *g = r->g;
  printf("%s: ONNX IR %lld, opset %lld, producer %s %s\n", r->path, (long long)r->info.ir_version,
         (long long)r->info.opset, *r->info.producer ? r->info.producer : "(none)",
         r->info.producer_version);
  for (int k = 0; k < r->info.n_metadata; k++)
    printf("  metadata %s = %s\n", r->info.metadata[k][0], r->info.metadata[k][1]);
  printf("inputs:\n");
  print_values(r, in, n_in, false);
  printf("outputs:\n");
  print_values(r, g->outputs, g->n_outputs, false);
  const char **ops = malloc(sizeof(char *) * ((size_t)g->n_nodes + 1));
  int *counts = malloc(sizeof(int) * ((size_t)g->n_nodes + 1));
  int n_ops = ops && counts ? histogram(g, ops, counts) : 0;
  printf("ops:");
  for (int k = 0; k < n_ops; k++) printf("%s %s %d", k ? "," : "", ops[k], counts[k]);
  printf("\n\n%-28s %-20s %-18s %12s %14s\n", "node", "op", "output", "params", "MACs");
  free(ops);
  free(counts);
  for (int i = 0; i < g->n_nodes; i++) {
    const cx_node *n = &g->nodes[i];
    printf("%-28s %-20s ", n->name, n->op->name);
    char shape[CX_SHAPE_STR];
    printf("%-18s %12lld %14lld\n", cx_cli_shape_str(&r->sym[n->out[0]], shape),
           (long long)r->params[i], (long long)r->macs[i]);
  }
  printf("%-28s %-20s %-18s %12lld %14lld  (MACs per sample)\n", "total", "", "",
         (long long)r->total_params, (long long)r->total_macs);
}

static int run(int argc, char **argv) {
  bool json = false;
  const char *path = NULL;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) json = true;
    else if (argv[i][0] == '-')
      return cx_cli_usage_error(&cx_cmd_inspect, "unknown option '%s'", argv[i]);
    else if (!path) path = argv[i];
    else return cx_cli_usage_error(&cx_cmd_inspect, "unexpected argument '%s'", argv[i]);
  }
  if (!path) return cx_cli_usage_error(&cx_cmd_inspect, "%s", "no model given");
  model_report r = {.path = path};
  cx_status s = analyse(&r);
  if (s != CX_OK) {
    report_free(&r);
    return cx_cli_fail(&cx_cmd_inspect);
  }
  int n_in = cx_cli_graph_inputs(r.g, NULL, 0);
  int *in = malloc(sizeof(int) * ((size_t)n_in + 1));
  cx_cli_graph_inputs(r.g, in, n_in);
  if (json) print_json(&r, in, n_in);
  else print_text(&r, in, n_in);
  free(in);
  report_free(&r);
  return 0;
}

const cx_command cx_cmd_inspect = {
    .name = "inspect",
    .summary = "Describe an ONNX model: inputs, outputs, ops, per-layer shapes, params, MACs",
    .usage = "usage: compress inspect MODEL.onnx [--json]\n\n"
             "Imports the model and prints its IR version, opset, producer and metadata, its\n"
             "inputs and outputs with shapes (N is the batch), a histogram of op types, and a\n"
             "table with one row per node: name, op, output shape, trainable parameters and\n"
             "multiply-accumulates for one sample (Conv, Gemm, MatMul), then the totals. The\n"
             "nodes are those of the imported graph: Identity and shape arithmetic are folded.\n\n"
             "    --json    print one JSON object instead\n",
    .run = run,
};
