/* compress eval MODEL --data FILE.h5: top-1, top-5 and loss of a classifier on a data set. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../train/train_config.h"
#include "../train/trainer.h"
#include "commands.h"
#include "device.h"
#include "onnx_common.h"

typedef struct eval_args {
  const char *model, *data, *part, *mean, *std, *scale, *device;
  int64_t batch, threads;
  bool json;
} eval_args;

typedef struct eval_run {
  cx_preprocess pre;
  const char *source; /* "metadata" or "flags" */
  cx_eval_result r;
  double seconds;
} eval_run;

static const char *const how =
    "give the input preprocessing: --mean and --std (per channel, applied after --scale), "
    "e.g. --mean 0.485,0.456,0.406 --std 0.229,0.224,0.225 [--scale 1/255]";

/* The preprocessing from the flags when given, else from the model's metadata. */
static cx_status preprocessing(const eval_args *a, const cx_onnx_info *info, eval_run *e) {
  const char *keys[32], *values[32];
  for (int k = 0; k < info->n_metadata; k++)
    keys[k] = info->metadata[k][0], values[k] = info->metadata[k][1];
  bool found;
  cx_status s = cx_preprocess_from_metadata(info->n_metadata, keys, values, &e->pre, &found);
  bool flags = a->mean || a->std || a->scale;
  if (s != CX_OK && !flags)
    return cx_error_prefix("%s: %s, or %s", a->model, "its preprocessing metadata is malformed",
                           how), s;
  if (!flags && found) return e->source = "metadata", CX_OK;
  if (!flags)
    return cx_fail(CX_ERR_ARG, "%s has no preprocessing in its metadata (compress train writes "
                   "it): %s", a->model, how);
  e->source = "flags";
  e->pre = (cx_preprocess){.channels = 1, .scale = 1.0 / 255, .mean = {0}, .std = {1}};
  int nm = 1, ns = 1;
  if (a->scale && !cx_preprocess_parse_scale(a->scale, &e->pre.scale))
    return cx_fail(CX_ERR_ARG, "--scale '%s': \"1/255\", \"1/N\" or a positive number", a->scale);
  if (a->mean && !cx_preprocess_parse_values(a->mean, e->pre.mean, &nm, false))
    return cx_fail(CX_ERR_ARG, "--mean '%s': 1 to 4 comma-separated numbers", a->mean);
  if (a->std && !cx_preprocess_parse_values(a->std, e->pre.std, &ns, true))
    return cx_fail(CX_ERR_ARG, "--std '%s': 1 to 4 comma-separated positive numbers", a->std);
  if (a->mean && a->std && nm != ns)
    return cx_fail(CX_ERR_ARG, "--mean has %d values and --std %d: give one per channel", nm, ns);
  e->pre.channels = nm > ns ? nm : ns;
  if (nm == 1 && ns > 1)
    for (int c = 1; c < ns; c++) e->pre.mean[c] = e->pre.mean[0];
  if (ns == 1 && nm > 1)
    for (int c = 1; c < nm; c++) e->pre.std[c] = e->pre.std[0];
  return CX_OK;
}

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static cx_status evaluate(const eval_args *a, eval_run *e) {
  cx_graph *g = NULL;
  cx_onnx_info info;
  CX_TRY(cx_cli_load_model(a->model, &g, &info));
  char *old = NULL;
  int n = cx_cli_rename_input(g, &old);
  cx_status s = n == 1 || cx_graph_find_value(g, "input") >= 0 ? CX_OK
                : cx_fail(CX_ERR_ARG, "%s has %d inputs; eval takes a model with one, the images",
                          a->model, n);
  if (s == CX_OK) s = preprocessing(a, &info, e);
  int64_t ch = s == CX_OK ? g->values[cx_graph_find_value(g, "input")].shape.d[1] : 0;
  if (s == CX_OK && e->pre.channels != 1 && e->pre.channels != ch)
    s = cx_fail(CX_ERR_ARG, "%d mean/std values (from the %s), but %s takes %lld channels",
                e->pre.channels, e->source, a->model, (long long)ch);
  cx_augment aug = {.crop = CX_CROP_NONE};
  if (s == CX_OK) cx_preprocess_to_augment(&e->pre, &aug);
  double t0 = seconds();
  const cx_backend *be = NULL;
  if (s == CX_OK && (s = cx_cli_backend(a->device, &be)) != CX_OK) cx_error_prefix("--device");
  if (s == CX_OK) s = cx_evaluate(g, be, a->data, a->part, &aug, a->batch, &e->r);
  e->seconds = seconds() - t0;
  free(old);
  cx_graph_free(g);
  return s;
}

static void print_values(const float *v, int n) {
  for (int i = 0; i < n; i++) printf("%s%.9g", i ? "," : "", (double)v[i]);
}

static void print_result(const eval_args *a, const eval_run *e) {
  if (!a->json) {
    printf("%s on %s%s%s: top-1 %.2f%%  top-5 %.2f%%  loss %.4f (%lld images, %.1f s)\n",
           a->model, a->data, a->part ? " part " : "", a->part ? a->part : "", e->r.top1,
           e->r.top5, e->r.loss, (long long)e->r.n, e->seconds);
    return;
  }
  printf("{\"model\":");
  cx_json_string(stdout, a->model);
  printf(",\"data\":");
  cx_json_string(stdout, a->data);
  printf(",\"part\":");
  cx_json_string(stdout, a->part ? a->part : "");
  printf(",\"images\":%lld,\"batch\":%lld,\"top1\":%.17g,\"top5\":%.17g,\"loss\":%.17g,"
         "\"seconds\":%.3f,\"preprocess\":{\"source\":\"%s\",\"scale\":%.17g,\"mean\":[",
         (long long)e->r.n, (long long)a->batch, e->r.top1, e->r.top5, e->r.loss, e->seconds,
         e->source, e->pre.scale);
  print_values(e->pre.mean, e->pre.channels);
  printf("],\"std\":[");
  print_values(e->pre.std, e->pre.channels);
  printf("]}}\n");
}

static int parse(int argc, char **argv, eval_args *a) {
  static const char *const valued[] = {"--data", "--part", "--batch", "--mean", "--std",
                                       "--scale", "--threads", "--device", NULL};
  for (int i = 0; i < argc; i++) {
    const char *k = argv[i];
    int v = -1;
    for (int j = 0; valued[j]; j++)
      if (!strcmp(k, valued[j])) v = j;
    if (!strcmp(k, "--json")) a->json = true;
    else if (v >= 0 && i + 1 >= argc)
      return cx_cli_usage_error(&cx_cmd_eval, "option '%s' needs a value", k);
    else if (v >= 0) {
      const char *x = argv[++i];
      const char **slot[] = {&a->data, &a->part, NULL, &a->mean, &a->std, &a->scale, NULL,
                             &a->device};
      int64_t *num = v == 2 ? &a->batch : &a->threads;
      char *end;
      if (slot[v]) *slot[v] = x;
      else if ((*num = strtoll(x, &end, 10)) < 1 || *end || *num > 1 << 20)
        return cx_cli_usage_error(&cx_cmd_eval, "option '%s' takes a positive number", k);
    } else if (k[0] == '-') return cx_cli_usage_error(&cx_cmd_eval, "unknown option '%s'", k);
    else if (!a->model) a->model = k;
    else return cx_cli_usage_error(&cx_cmd_eval, "unexpected argument '%s'", k);
  }
  if (!a->model) return cx_cli_usage_error(&cx_cmd_eval, "%s", "no model given");
  if (!a->data) return cx_cli_usage_error(&cx_cmd_eval, "%s", "no data given (--data FILE.h5)");
  return 0;
}

static int run(int argc, char **argv) {
  eval_args a = {.batch = 100};
  int rc = parse(argc, argv, &a);
  if (rc) return rc;
  eval_run e = {0};
  if (a.threads > 0) omp_set_num_threads((int)a.threads);
  if (evaluate(&a, &e) != CX_OK) return cx_cli_fail(&cx_cmd_eval);
  print_result(&a, &e);
  return 0;
}

const cx_command cx_cmd_eval = {
    .name = "eval",
    .summary = "Top-1, top-5 and loss of a classifier on a data set",
    .usage =
        "usage: compress eval MODEL --data FILE.h5 [--part NAME] [--batch N] [--threads N]\n"
        "                     [--json] [--mean a,b,c --std a,b,c] [--scale 1/255]\n"
        "                     [--device DEV]\n\n"
        "Runs MODEL (an ONNX file or a model spec) on every image of a data set part and\n"
        "prints top-1 and top-5 accuracy (percent) and the mean cross-entropy. The images\n"
        "are fed as NCHW floats, (pixel * scale - mean) / std per channel. A model written by\n"
        "'compress train' records its preprocessing in its metadata; for another model give\n"
        "it with the flags (which also override the metadata).\n\n"
        "    --data FILE.h5   the data set (docs/data.md)\n"
        "    --part NAME      a part of it, e.g. val (default: the main part)\n"
        "    --batch N        images per forward pass (default 100)\n"
        "    --threads N      compute threads (default: OpenMP's, OMP_NUM_THREADS)\n"
        "    --mean a,b,c     per-channel mean, on scaled pixels (one value: every channel)\n"
        "    --std a,b,c      per-channel standard deviation\n"
        "    --scale S        pixel scale: 1/255 (default) for [0,1], 1 for 0..255\n"
        "    --json           print one JSON object\n"
        "    --device DEV     cpu, cuda or auto (default cpu; docs/cuda.md)\n",
    .run = run,
};
