#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../train/lr_find.h"
#include "commands.h"
#include "device.h"
#include "onnx_common.h"

typedef struct lr_cli {
  const char *model, *svg;
  bool json;
  int threads;
  cx_lr_find_opts o;
} lr_cli;

static int need_value(const cx_command *c, int argc, int i, const char *a) {
  return i + 1 >= argc ? cx_cli_usage_error(c, "option '%s' needs a value", a) : 0;
}

static int parse_double(const cx_command *c, const char *text, double min, double *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (*end || errno || !(v >= min)) return cx_cli_usage_error(c, "bad value '%s'", text);
  *out = v;
  return 0;
}

static int parse_int(const cx_command *c, const char *text, int64_t min, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (*end || errno || v < min) return cx_cli_usage_error(c, "bad value '%s'", text);
  *out = v;
  return 0;
}

/* "0.286" or "0.485,0.456,0.406": one value per channel (one value: every channel). */
static int parse_channels(const cx_command *c, const char *text, float *out) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", text);
  int n = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    double v = 0;
    if (n == 4) return cx_cli_usage_error(c, "'%s': at most 4 channels", text);
    int rc = parse_double(c, t, -1e9, &v);
    if (rc) return rc;
    out[n++] = (float)v;
  }
  if (n == 0) return cx_cli_usage_error(c, "bad value '%s'", text);
  for (int k = n; k < 4; k++) out[k] = out[n - 1];
  return 0;
}

static int parse_option(const cx_command *c, int argc, char **argv, int *i, lr_cli *l) {
  const char *a = argv[*i];
  double v = 0;
  int64_t n = 0;
  int rc = need_value(c, argc, *i, a);
  if (rc) return rc;
  const char *val = argv[++*i];
  cx_lr_find_opts *o = &l->o;
  if (!strcmp(a, "--data")) o->path = val;
  else if (!strcmp(a, "--part")) o->part = val;
  else if (!strcmp(a, "--svg")) l->svg = val;
  else if (!strcmp(a, "--min")) rc = parse_double(c, val, 0, &o->min_lr);
  else if (!strcmp(a, "--max")) rc = parse_double(c, val, 0, &o->max_lr);
  else if (!strcmp(a, "--steps")) {
    if (!(rc = parse_int(c, val, 2, &n))) o->steps = (int)(n < 1000000 ? n : 1000000);
  } else if (!strcmp(a, "--batch")) rc = parse_int(c, val, 1, &o->batch);
  else if (!strcmp(a, "--seed")) {
    if (!(rc = parse_int(c, val, 0, &n))) o->seed = (uint64_t)n;
  } else if (!strcmp(a, "--threads")) {
    if (!(rc = parse_int(c, val, 1, &n))) l->threads = (int)(n < 1024 ? n : 1024);
  } else if (!strcmp(a, "--workers")) {
    if (!(rc = parse_int(c, val, 0, &n))) o->workers = (int)(n < 64 ? n : 64);
  }
  else if (!strcmp(a, "--weight-decay")) {
    rc = parse_double(c, val, 0, &v);
    o->optim.weight_decay = (float)v;
  } else if (!strcmp(a, "--mean")) rc = parse_channels(c, val, o->aug.mean);
  else if (!strcmp(a, "--std")) rc = parse_channels(c, val, o->aug.std);
  else if (!strcmp(a, "--optimizer")) {
    cx_optim_kind k;
    if (cx_optim_kind_parse(val, &k) != CX_OK) return cx_cli_usage_error(c, "%s", cx_last_error());
    float wd = o->optim.weight_decay;
    o->optim = cx_optim_defaults(k);
    if (k == CX_OPTIM_SGD) o->optim.momentum = 0.9f;
    o->optim.weight_decay = wd;
  } else return cx_cli_usage_error(c, "unknown option '%s'", a);
  return rc;
}

static int parse(const cx_command *c, int argc, char **argv, lr_cli *l) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    int rc = 0;
    if (!strcmp(a, "--json")) l->json = true;
    else if (!strcmp(a, "--quiet")) l->o.quiet = true;
    else if (!strncmp(a, "--", 2)) rc = parse_option(c, argc, argv, &i, l);
    else if (!l->model) l->model = a;
    else rc = cx_cli_usage_error(c, "unexpected argument '%s'", a);
    if (rc) return rc;
  }
  if (!l->model) return cx_cli_usage_error(c, "%s", "a model (an ONNX file or a SPEC) is needed");
  if (!l->o.path) return cx_cli_usage_error(c, "%s", "--data FILE.h5 is needed");
  if (!(l->o.max_lr > l->o.min_lr))
    return cx_cli_usage_error(c, "%s", "--max must be larger than --min");
  return 0;
}

static void print_text(const lr_cli *l, const cx_lr_find_result *r) {
  const cx_lr_find_opts *o = &l->o;
  printf("%s on %s, batch %lld, %s, %d steps over [%g, %g]\n\n", l->model, o->path,
         (long long)o->batch, cx_optim_kind_name(o->optim.kind), o->steps, o->min_lr, o->max_lr);
  printf("%5s  %10s  %9s  %9s\n", "step", "lr", "loss", "smoothed");
  for (int i = 0; i < r->n; i++)
    printf("%5d  %10.3e  %9.4f  %9.4f%s\n", i + 1, r->lr[i], r->loss[i], r->smooth[i],
           i == r->steepest ? "  <- steepest" : i == r->lowest ? "  <- lowest" : "");
  if (r->diverged)
    printf("\nstopped after %d steps: the smoothed loss rose above %g x its best\n", r->n,
           o->diverge);
  printf("\nsuggested learning rate: %.3g", r->suggested_lr);
  if (r->steepest >= 0) printf(" (steepest descent of the smoothed loss, step %d)\n",
                               r->steepest + 1);
  else printf(" (the smoothed loss never falls: min/10)\n");
  printf("min/10: %.3g (lowest smoothed loss %.4f at lr %.3g)\n", r->min_div10_lr,
         r->smooth[r->lowest], r->lr[r->lowest]);
  if (l->svg) printf("chart: %s\n", l->svg);
}

static void print_json(const lr_cli *l, const cx_lr_find_result *r) {
  printf("{\"model\":");
  cx_json_string(stdout, l->model);
  printf(",\"data\":");
  cx_json_string(stdout, l->o.path);
  printf(",\"optimizer\":\"%s\",\"batch\":%lld,\"min_lr\":%g,\"max_lr\":%g,\"steps\":%d,"
         "\"diverged\":%s,\"suggested_lr\":%.6g,\"steepest_step\":%d,\"min_div10_lr\":%.6g,"
         "\"lowest_step\":%d", cx_optim_kind_name(l->o.optim.kind), (long long)l->o.batch,
         l->o.min_lr, l->o.max_lr, r->n, r->diverged ? "true" : "false", r->suggested_lr,
         r->steepest, r->min_div10_lr, r->lowest);
  printf(",\"points\":[");
  for (int i = 0; i < r->n; i++) {
    /* JSON has no NaN: a non-finite loss is null */
    printf("%s{\"lr\":%.6g,", i ? "," : "", r->lr[i]);
    if (isfinite(r->loss[i])) printf("\"loss\":%.6g,", r->loss[i]);
    else printf("\"loss\":null,");
    if (isfinite(r->smooth[i])) printf("\"smoothed\":%.6g}", r->smooth[i]);
    else printf("\"smoothed\":null}");
  }
  printf("]}\n");
}

static int run(int argc, char **argv) {
  const cx_command *c = &cx_cmd_lr_find;
  lr_cli l = {.o = cx_lr_find_defaults()};
  int rc = parse(c, argc, argv, &l);
  if (rc) return rc;
  if (l.threads > 0) omp_set_num_threads(l.threads);
  if (l.json) l.o.quiet = true;
  cx_graph *model = NULL;
  cx_lr_find_result r = {0};
  cx_status s = cx_cli_load_model(l.model, &model, NULL);
  if (s == CX_OK) s = cx_cli_backend(NULL, &l.o.backend);
  if (s == CX_OK) s = cx_lr_find(model, &l.o, &r);
  if (s == CX_OK && l.svg) s = cx_lr_find_svg(&r, l.svg);
  if (s == CX_OK) (l.json ? print_json : print_text)(&l, &r);
  cx_lr_find_free(&r);
  cx_graph_free(model);
  return s == CX_OK ? 0 : cx_cli_fail(c);
}

const cx_command cx_cmd_lr_find = {
    .name = "lr-find",
    .summary = "Learning-rate range test: loss against an exponentially growing rate",
    .usage =
        "usage: compress lr-find SPEC_OR_ONNX --data FILE.h5 [--min LR] [--max LR]\n"
        "                        [--steps N] [--batch N] [--optimizer sgd|adamw|lamb]\n"
        "                        [--svg OUT.svg] [--json]\n\n"
        "The learning-rate range test (Smith 2017; fastai's lr_find). From the model's\n"
        "initial weights, trains one step on each successive batch of FILE.h5 with the\n"
        "rate growing exponentially from --min to --max, and records the loss and its\n"
        "smoothed value (EMA 0.98, bias-corrected). Stops when the smoothed loss exceeds\n"
        "4 x its best. Suggests the rate where the smoothed loss falls fastest (against\n"
        "log lr), and prints fastai's other rule: a tenth of the rate of the lowest loss.\n"
        "The model is not changed.\n\n"
        "    --data FILE.h5      training data (see 'compress data import')\n"
        "    --part NAME         a part of the file (default: the main part)\n"
        "    --min LR, --max LR  the range (default 1e-6 to 10)\n"
        "    --steps N           steps across the range (default 100)\n"
        "    --batch N           batch size (default 64)\n"
        "    --optimizer NAME    sgd (momentum 0.9, default), adamw or lamb\n"
        "    --weight-decay F    weight decay (default 0)\n"
        "    --mean M[,M..]      per-channel mean of pixels in [0, 1] (default 0)\n"
        "    --std S[,S..]       per-channel standard deviation (default 1)\n"
        "    --seed N            data order (default 0)\n"
        "    --threads N         OpenMP threads; --workers N loader threads\n"
        "    --svg OUT.svg       write the chart (log-scale rate, suggestion marked)\n"
        "    --json              print one JSON object with every point and the suggestions\n"
        "    --quiet             no progress lines on stderr\n",
    .run = run,
};
