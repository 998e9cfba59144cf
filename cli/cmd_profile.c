#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/program_input.h"
#include "../core/rng.h"
#include "../train/optim_program.h"
#include "../train/profile.h"
#include "../train/train_graph.h"
#include "commands.h"
#include "device.h"
#include "onnx_common.h"

typedef struct profile_opts {
  const char *model, *trace, *device;
  int64_t batch, steps, warmup;
  int threads, top;
  bool training, json;
  cx_precision precision;
} profile_opts;

static const char *const precision_names[] = {"fp32", "bf16", "fp16"};

static cx_status build(const profile_opts *o, cx_program **p, int64_t *classes) {
  cx_graph *model = NULL, *g = NULL;
  CX_TRY(cx_cli_load_model(o->model, &model, NULL));
  cx_status s = CX_OK;
  int logits = cx_model_logits(model);
  *classes = logits >= 0 && model->values[logits].shape.ndim == 2
                 ? model->values[logits].shape.d[1] : 0;
  if (o->training) {
    s = cx_train_graph(model, 0, 0, &g);
    cx_graph_free(model);
  } else g = model;
  cx_compile_opts co = {.batch = o->batch, .training = o->training,
                        .loss = o->training ? "loss" : NULL,
                        .precision = o->precision};
  if (s == CX_OK && (s = cx_cli_backend(o->device, &co.backend)) != CX_OK)
    cx_error_prefix("--device");
  if (s == CX_OK && (s = co.backend->check_precision(co.backend, o->precision)) != CX_OK)
    cx_error_prefix("--precision %s", precision_names[o->precision]);
  if (s == CX_OK) s = cx_program_compile(g, &co, p);
  cx_graph_free(g);
  return s;
}

/* Normal f32 inputs; integer inputs (labels) uniform in [0, classes), else 0: made in host
 * memory, then written into the program. */
static cx_status fill_inputs(cx_program *p, int64_t classes) {
  const cx_graph *g = cx_program_graph(p);
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].kind != CX_VALUE_INPUT) continue;
    const cx_tensor *t = cx_program_value_tensor(p, v);
    int64_t n = cx_tensor_numel(t);
    void *host = calloc(1, cx_tensor_nbytes(t) + 1);
    if (!host) return cx_fail(CX_ERR_NOMEM, "out of memory");
    uint64_t key = cx_rng_key(7, (uint64_t)v, 0);
    if (t->dtype == CX_F32)
      for (int64_t i = 0; i < n; i++) ((float *)host)[i] = cx_rng_normal(key, (uint64_t)i);
    else if (t->dtype == CX_S64)
      for (int64_t i = 0; i < n; i++)
        ((int64_t *)host)[i] = classes > 0 ? (int64_t)(cx_rng_uniform(key, (uint64_t)i) *
                                                       (float)classes) % classes : 0;
    cx_status s = cx_program_write_input(p, g->values[v].name, host, cx_tensor_nbytes(t));
    free(host);
    CX_TRY(s);
  }
  return CX_OK;
}

/* One step: forward, and in training backward and an SGD step (timed as "optimizer"). */
static cx_status run_step(cx_program *p, cx_optimizer *opt, cx_trace *tr, int64_t step,
                          double *opt_s) {
  CX_TRY(cx_program_forward(p));
  if (!opt) return tr ? cx_trace_add_step(tr, p, step) : CX_OK;
  CX_TRY(cx_program_backward(p));
  double t0 = cx_profile_now();
  CX_TRY(cx_optimizer_step_program(opt, p, 0.01f));
  CX_TRY(cx_program_profile_wait(p)); /* the "(optimizer)" row: the update's time on a stream */
  double dt = cx_profile_now() - t0;
  *opt_s += dt;
  if (!tr) return CX_OK;
  CX_TRY(cx_trace_add_step(tr, p, step));
  return cx_trace_add_event(tr, "optimizer", CX_TRACE_HOST, t0, dt, step);
}

static cx_status run_steps(const profile_opts *o, cx_program *p, cx_trace *tr, cx_profile *pr) {
  cx_optimizer *opt = NULL;
  if (o->training) {
    cx_optim_config c = cx_optim_defaults(CX_OPTIM_SGD);
    c.weight_decay = 5e-4f;
    CX_TRY(cx_optimizer_for_program(&c, p, &opt));
  }
  double opt_s = 0;
  cx_status s = CX_OK;
  for (int64_t k = 0; k < o->warmup && s == CX_OK; k++) s = run_step(p, opt, NULL, k, &opt_s);
  if (s == CX_OK) s = cx_program_set_profiling(p, true);
  opt_s = 0;
  for (int64_t k = 0; k < o->steps && s == CX_OK; k++) s = run_step(p, opt, tr, k, &opt_s);
  if (s == CX_OK) s = cx_profile_collect(p, pr);
  if (s == CX_OK && opt) s = cx_profile_add_host(pr, "(optimizer)", opt_s);
  cx_optimizer_free(opt);
  return s;
}

/* "cuda" or "N threads" */
static const char *device_str(const cx_program *p) {
  static char buf[32];
  const cx_backend *be = cx_program_backend(p);
  if (be->device != CX_DEVICE_CPU) return be->name;
  snprintf(buf, sizeof buf, "%d threads", omp_get_max_threads());
  return buf;
}

static cx_status profile(const profile_opts *o, cx_profile *pr, cx_trace **tr) {
  cx_program *p = NULL;
  int64_t classes = 0;
  CX_TRY(build(o, &p, &classes));
  cx_status s = fill_inputs(p, classes);
  if (s == CX_OK && o->trace) s = cx_trace_create(tr);
  if (s == CX_OK) s = run_steps(o, p, *tr, pr);
  if (s == CX_OK && o->trace) s = cx_trace_write(*tr, o->trace);
  if (s == CX_OK && !o->json) {
    printf("%s, batch %lld, %s (%s), %s: ", o->model, (long long)o->batch,
           o->training ? "training" : "inference", precision_names[o->precision],
           device_str(p));
    cx_profile_print(pr, stdout, o->top);
    if (o->trace)
      printf("\ntrace of %lld steps (%lld events): %s\n", (long long)o->steps,
             (long long)cx_trace_events(*tr), o->trace);
  } else if (s == CX_OK) cx_profile_print_json(pr, stdout);
  /* the profile's names point into the program: printed before it goes */
  cx_program_free(p);
  return s;
}

static int parse_int(const cx_command *c, int argc, char **argv, int *i, int64_t min,
                     int64_t *out) {
  const char *a = argv[*i];
  if (*i + 1 >= argc) return cx_cli_usage_error(c, "option '%s' needs a value", a);
  char *end;
  errno = 0;
  long long v = strtoll(argv[++*i], &end, 10);
  if (*end || errno || v < min) return cx_cli_usage_error(c, "bad value '%s'", argv[*i]);
  *out = v;
  return 0;
}

static int parse(const cx_command *c, int argc, char **argv, profile_opts *o) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    int64_t v = 0;
    int rc = 0;
    if (!strcmp(a, "--json")) o->json = true;
    else if (!strcmp(a, "--training")) o->training = true;
    else if (!strcmp(a, "--batch")) rc = parse_int(c, argc, argv, &i, 1, &o->batch);
    else if (!strcmp(a, "--steps")) rc = parse_int(c, argc, argv, &i, 1, &o->steps);
    else if (!strcmp(a, "--warmup")) rc = parse_int(c, argc, argv, &i, 0, &o->warmup);
    else if (!strcmp(a, "--threads")) {
      if (!(rc = parse_int(c, argc, argv, &i, 1, &v))) o->threads = (int)v;
    } else if (!strcmp(a, "--top")) {
      if (!(rc = parse_int(c, argc, argv, &i, 0, &v))) o->top = (int)v;
    } else if (!strcmp(a, "--precision")) {
      if (i + 1 >= argc) return cx_cli_usage_error(c, "option '%s' needs a value", a);
      const char *p = argv[++i];
      int k = 0;
      while (k < 3 && strcmp(p, precision_names[k])) k++;
      if (k == 3) return cx_cli_usage_error(c, "--precision '%s': fp32, bf16 or fp16", p);
      o->precision = (cx_precision)k;
    } else if (!strcmp(a, "--device")) {
      if (i + 1 >= argc) return cx_cli_usage_error(c, "option '%s' needs a value", a);
      o->device = argv[++i];
    } else if (!strcmp(a, "--trace")) {
      if (i + 1 >= argc) return cx_cli_usage_error(c, "option '%s' needs a value", a);
      o->trace = argv[++i];
    } else if (a[0] == '-') return cx_cli_usage_error(c, "unknown option '%s'", a);
    else if (!o->model) o->model = a;
    else return cx_cli_usage_error(c, "unexpected argument '%s'", a);
    if (rc) return rc;
  }
  if (!o->model) return cx_cli_usage_error(c, "%s", "a model (an ONNX file or a SPEC) is needed");
  return 0;
}

static int run(int argc, char **argv) {
  profile_opts o = {.batch = 32, .steps = 10, .warmup = 2, .top = 20};
  int rc = parse(&cx_cmd_profile, argc, argv, &o);
  if (rc) return rc;
  if (o.threads > 0) omp_set_num_threads(o.threads);
  cx_profile pr = {0};
  cx_trace *tr = NULL;
  cx_status s = profile(&o, &pr, &tr);
  cx_profile_free(&pr);
  cx_trace_free(tr);
  return s == CX_OK ? 0 : cx_cli_fail(&cx_cmd_profile);
}

const cx_command cx_cmd_profile = {
    .name = "profile",
    .summary = "Time every op of a model's forward (and backward) pass; write a Chrome trace",
    .usage =
        "usage: compress profile SPEC_OR_ONNX [--batch N] [--steps N] [--training]\n"
        "                        [--trace FILE.json] [--json] [--warmup N] [--top N]\n"
        "                        [--threads N] [--precision fp32|bf16|fp16]\n"
        "                        [--device cpu|cuda|auto]\n\n"
        "Builds the model (an ONNX file or a built-in spec such as\n"
        "resnet20:input=1x28x28, see 'compress models'), feeds it random inputs and runs\n"
        "--warmup steps untimed, then --steps timed ones. Prints, per op type and per node,\n"
        "the forward and backward milliseconds a step and their share of the step.\n"
        "Backward nodes count towards the forward node they differentiate. With\n"
        "--training, each step is forward, backward (softmax cross-entropy on random\n"
        "labels) and an SGD step, shown as '(optimizer)'.\n\n"
        "    --batch N          batch size (default 32)\n"
        "    --steps N          timed steps (default 10)\n"
        "    --warmup N         untimed steps first (default 2)\n"
        "    --training         profile a training step instead of inference\n"
        "    --trace FILE.json  write a Chrome trace of the timed steps (forward, backward\n"
        "                       and host tracks), for chrome://tracing or ui.perfetto.dev\n"
        "    --top N            nodes in the per-node table (default 20, 0: all)\n"
        "    --threads N        OpenMP threads (default: OMP_NUM_THREADS or all CPUs)\n"
        "    --precision P      fp32 (default), bf16 or fp16: convolutions and matmuls in\n"
        "                       that type (f32 accumulation); bf16 on the CPU needs\n"
        "                       AVX512-BF16, fp16 a GPU\n"
        "    --device DEV       cpu (default), cuda or auto; on a GPU each node is timed\n"
        "                       by CUDA events queued around it, read once a step\n"
        "    --json             print one JSON object (every op type and node) instead\n",
    .run = run,
};

/* compress bench train: images per second of whole training steps (forward, backward, SGD). */
static cx_status bench(const profile_opts *o, double *images_per_s, double *ms_per_step,
                       const char **device) {
  cx_program *p = NULL;
  int64_t classes = 0;
  CX_TRY(build(o, &p, &classes));
  cx_status s = fill_inputs(p, classes);
  cx_optim_config c = cx_optim_defaults(CX_OPTIM_SGD);
  c.weight_decay = 5e-4f;
  cx_optimizer *opt = NULL;
  if (s == CX_OK) s = cx_optimizer_for_program(&c, p, &opt);
  double unused = 0, t0 = 0;
  const cx_backend *be = s == CX_OK ? cx_program_backend(p) : NULL;
  if (be) *device = be->name;
  for (int64_t k = 0; k < o->warmup + o->steps && s == CX_OK; k++) {
    if (k == o->warmup && (s = be->sync(cx_program_stream(p))) == CX_OK) t0 = cx_profile_now();
    if (s == CX_OK) s = run_step(p, opt, NULL, k, &unused);
  }
  /* a stream backend queues: the steps are done when its stream is */
  if (s == CX_OK) s = be->sync(cx_program_stream(p));
  double dt = cx_profile_now() - t0;
  *images_per_s = (double)(o->batch * o->steps) / dt;
  *ms_per_step = 1e3 * dt / (double)o->steps;
  cx_optimizer_free(opt);
  cx_program_free(p);
  return s;
}

static int run_bench(int argc, char **argv) {
  if (argc < 1 || strcmp(argv[0], "train"))
    return cx_cli_usage_error(&cx_cmd_bench, "%s", "the benchmark to run is 'train'");
  profile_opts o = {.batch = 128, .steps = 20, .warmup = 3, .training = true};
  int rc = parse(&cx_cmd_bench, argc - 1, argv + 1, &o);
  if (rc) return rc;
  if (o.threads > 0) omp_set_num_threads(o.threads);
  double ips = 0, ms = 0;
  const char *device = "cpu";
  if (bench(&o, &ips, &ms, &device) != CX_OK) return cx_cli_fail(&cx_cmd_bench);
  if (o.json) {
    printf("{\"model\":");
    cx_json_string(stdout, o.model);
    printf(",\"batch\":%lld,\"threads\":%d,\"device\":\"%s\",\"precision\":\"%s\","
           "\"steps\":%lld,\"images_per_s\":%.2f,\"ms_per_step\":%.3f}\n", (long long)o.batch,
           omp_get_max_threads(), device, precision_names[o.precision],
           (long long)o.steps, ips, ms);
  } else
    printf("%s: training, batch %lld, %s, %d threads, %s: %.1f images/s (%.1f ms a step)\n",
           o.model, (long long)o.batch, device, omp_get_max_threads(),
           precision_names[o.precision], ips, ms);
  return 0;
}

const cx_command cx_cmd_bench = {
    .name = "bench",
    .summary = "Measure training throughput (images/s) of a model",
    .usage =
        "usage: compress bench train SPEC_OR_ONNX [--batch N] [--threads N]\n"
        "                              [--precision fp32|bf16|fp16] [--device DEV]\n"
        "                              [--steps N] [--warmup N] [--json]\n\n"
        "Times whole training steps — forward, backward (softmax cross-entropy on random\n"
        "labels) and an SGD step — on random inputs after --warmup untimed steps, and\n"
        "prints images per second. bench/run_train.sh runs it beside PyTorch.\n\n"
        "    --batch N          batch size (default 128)\n"
        "    --steps N          timed steps (default 20)\n"
        "    --warmup N         untimed steps first (default 3)\n"
        "    --threads N        OpenMP threads (default: OMP_NUM_THREADS or all CPUs)\n"
        "    --precision P      fp32 (default), bf16 or fp16: convolutions and matmuls in\n"
        "                       that type (f32 accumulation); bf16 on the CPU needs\n"
        "                       AVX512-BF16, fp16 a GPU\n"
        "    --device DEV       cpu (default), cuda or auto\n"
        "    --json             print one JSON object\n",
    .run = run_bench,
};
