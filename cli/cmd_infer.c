#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/npy.h"
#include "../core/program_input.h"
#include "../import/onnx.h"
#include "commands.h"
#include "device.h"
#include "onnx_common.h"

enum { MAX_FILES = 64 };

typedef struct infer_opts {
  const char *model, *out;
  const char *in[MAX_FILES];
  int n_in;
  bool json;
} infer_opts;

/* The arrays read from the -i files. */
typedef struct feeds {
  cx_dtype dtype[MAX_FILES];
  cx_shape shape[MAX_FILES];
  void *data[MAX_FILES];
  int n;
} feeds;

static void feeds_free(feeds *f) {
  for (int k = 0; k < f->n; k++) free(f->data[k]);
}

/* Output k's file: OUT itself for the first, OUT with "_k" before its ".npy" for the others. */
static void output_path(const char *out, int k, char *buf, size_t size) {
  size_t len = strlen(out);
  bool npy = len >= 4 && !strcmp(out + len - 4, ".npy");
  if (k == 0) snprintf(buf, size, "%s", out);
  else snprintf(buf, size, "%.*s_%d%s", (int)(npy ? len - 4 : len), out, k, npy ? ".npy" : "");
}

/* Each file must match its graph input: the same dtype, and the same shape with N (the batch)
 * taken from the first file's first dimension. */
static cx_status check_feed(const infer_opts *o, const cx_value *x, int k, const feeds *f,
                            int64_t batch) {
  char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
  if (f->dtype[k] != x->dtype)
    return cx_fail(CX_ERR_ARG, "%s: holds %s values, but input '%s' of %s takes %s", o->in[k],
                   cx_dtype_name(f->dtype[k]), x->name, o->model, cx_dtype_name(x->dtype));
  bool fits = f->shape[k].ndim == x->shape.ndim;
  for (int d = 0; fits && d < x->shape.ndim; d++)
    fits = f->shape[k].d[d] == (x->shape.d[d] < 0 ? batch : x->shape.d[d]);
  if (!fits)
    return cx_fail(CX_ERR_SHAPE, "%s: shape %s, but input '%s' of %s takes %s (N = %lld, from %s)",
                   o->in[k], cx_shape_str(&f->shape[k], a), x->name, o->model,
                   cx_cli_shape_str(&x->shape, b), (long long)batch, o->in[0]);
  return CX_OK;
}

static cx_status read_feeds(const infer_opts *o, const cx_graph *g, feeds *f, int64_t *batch) {
  int ids[MAX_FILES];
  int n = cx_cli_graph_inputs(g, ids, MAX_FILES);
  if (n != o->n_in)
    return cx_fail(CX_ERR_ARG, "%s has %d input(s), %d file(s) given with -i", o->model, n,
                   o->n_in);
  for (f->n = 0; f->n < n; f->n++)
    CX_TRY(cx_npy_read(o->in[f->n], &f->dtype[f->n], &f->shape[f->n], &f->data[f->n]));
  *batch = 1; /* a model without a batch dimension runs as it is */
  const cx_shape *s0 = &g->values[ids[0]].shape;
  for (int d = s0->ndim - 1; d >= 0; d--)
    if (s0->d[d] < 0) *batch = f->shape[0].ndim > d ? f->shape[0].d[d] : 1;
  if (*batch < 1)
    return cx_fail(CX_ERR_SHAPE, "%s: batch dimension %lld", o->in[0], (long long)*batch);
  for (int k = 0; k < n; k++) CX_TRY(check_feed(o, &g->values[ids[k]], k, f, *batch));
  return CX_OK;
}

static void print_output(const infer_opts *o, int k, const char *name, const char *path,
                         const cx_tensor *t) {
  if (o->json) {
    printf("%s{\"name\":", k ? "," : "");
    cx_json_string(stdout, name);
    printf(",\"path\":");
    cx_json_string(stdout, path);
    printf(",\"dtype\":\"%s\",\"shape\":", cx_dtype_name(t->dtype));
    cx_cli_shape(stdout, &t->shape, true);
    printf("}");
  } else {
    char s[CX_SHAPE_STR];
    printf("wrote %s: '%s' %s %s\n", path, name, cx_dtype_name(t->dtype),
           cx_shape_str(&t->shape, s));
  }
}

static cx_status write_outputs(const infer_opts *o, const cx_graph *g, cx_program *p) {
  for (int k = 0; k < g->n_outputs; k++) {
    const char *name = g->values[g->outputs[k]].name;
    const cx_tensor *t = cx_program_tensor(p, name);
    if (!t) return cx_fail(CX_ERR_ARG, "output '%s' is not in the compiled program", name);
    char path[4200];
    output_path(o->out, k, path, sizeof path);
    void *host = malloc(cx_tensor_nbytes(t) + 1);
    if (!host) return cx_fail(CX_ERR_NOMEM, "out of memory");
    cx_status s = cx_program_read(p, t, host);
    if (s == CX_OK) s = cx_npy_write(path, t->dtype, &t->shape, host);
    free(host);
    CX_TRY(s);
  }
  return CX_OK;
}

static void report(const infer_opts *o, const cx_graph *g, cx_program *p, int64_t batch,
                   double elapsed) {
  if (o->json) {
    printf("{\"model\":");
    cx_json_string(stdout, o->model);
    printf(",\"batch\":%lld,\"seconds\":%.6f,\"outputs\":[", (long long)batch, elapsed);
  }
  for (int k = 0; k < g->n_outputs; k++) {
    const char *name = g->values[g->outputs[k]].name;
    char path[4200];
    output_path(o->out, k, path, sizeof path);
    print_output(o, k, name, path, cx_program_tensor(p, name));
  }
  if (o->json) printf("]}\n");
}

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static cx_status run_model(const infer_opts *o, const cx_graph *g, const feeds *f, int64_t batch) {
  cx_program *p = NULL;
  cx_compile_opts co = {.batch = batch};
  CX_TRY(cx_cli_backend(NULL, &co.backend));
  CX_TRY(cx_program_compile(g, &co, &p));
  int ids[MAX_FILES];
  cx_cli_graph_inputs(g, ids, MAX_FILES);
  cx_status s = CX_OK;
  for (int k = 0; s == CX_OK && k < f->n; k++) /* shapes checked: each file fills its input */
    s = cx_program_write_input(p, g->values[ids[k]].name, f->data[k],
                               (size_t)cx_shape_numel(&f->shape[k]) * cx_dtype_size(f->dtype[k]));
  double t0 = seconds();
  if (s == CX_OK) s = cx_program_forward(p);
  double elapsed = seconds() - t0;
  if (s == CX_OK) s = write_outputs(o, g, p);
  if (s == CX_OK) report(o, g, p, batch, elapsed);
  cx_program_free(p);
  return s;
}

static int parse(int argc, char **argv, infer_opts *o) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--json")) o->json = true;
    else if (!strcmp(a, "-i") || !strcmp(a, "-o")) {
      if (i + 1 >= argc) return cx_cli_usage_error(&cx_cmd_infer, "option '%s' needs a file", a);
      if (a[1] == 'o') o->out = argv[++i];
      else if (o->n_in == MAX_FILES) return cx_cli_usage_error(&cx_cmd_infer, "too many '%s'", a);
      else o->in[o->n_in++] = argv[++i];
    } else if (a[0] == '-') return cx_cli_usage_error(&cx_cmd_infer, "unknown option '%s'", a);
    else if (!o->model) o->model = a;
    else return cx_cli_usage_error(&cx_cmd_infer, "unexpected argument '%s'", a);
  }
  if (!o->model) return cx_cli_usage_error(&cx_cmd_infer, "%s", "no model given");
  if (!o->n_in) return cx_cli_usage_error(&cx_cmd_infer, "%s", "no input given (-i IN.npy)");
  if (!o->out) return cx_cli_usage_error(&cx_cmd_infer, "%s", "no output given (-o OUT.npy)");
  return 0;
}

static int run(int argc, char **argv) {
  infer_opts o = {0};
  int rc = parse(argc, argv, &o);
  if (rc) return rc;
  cx_graph *g = NULL;
  feeds f = {0};
  int64_t batch = 1;
  cx_status s = cx_cli_load_model(o.model, &g, NULL);
  if (s == CX_OK) s = read_feeds(&o, g, &f, &batch);
  if (s == CX_OK) s = run_model(&o, g, &f, batch);
  feeds_free(&f);
  cx_graph_free(g);
  return s == CX_OK ? 0 : cx_cli_fail(&cx_cmd_infer);
}

const cx_command cx_cmd_infer = {
    .name = "infer",
    .summary = "Run an ONNX model on .npy inputs and write its outputs as .npy",
    .usage = "usage: compress infer MODEL.onnx -i IN.npy [-i IN2.npy ...] -o OUT.npy [--json]\n\n"
             "Imports the model, compiles an inference program on the CPU for the batch size\n"
             "given by the first input's batch dimension, runs it once and writes the outputs.\n"
             "The -i files are the graph's inputs in order; each must have the input's dtype\n"
             "and shape (N, the batch, the same in all). The first output goes to OUT.npy,\n"
             "output k > 0 to OUT_k.npy.\n\n"
             "    -i IN.npy    an input (repeat for models with several)\n"
             "    -o OUT.npy   where to write the first output\n"
             "    --json       print one JSON object with the outputs' names, paths and shapes\n",
    .run = run,
};
