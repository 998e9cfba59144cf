#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/program_input.h"
#include "../core/rng.h"
#include "../models/tiny_cnn.h"
#include "../train/optim.h"
#include "commands.h"
#include "device.h"

typedef struct demo_opts {
  int steps, batch, log_every;
  uint64_t seed;
  bool json;
} demo_opts;

/* Random data with something to learn: each image is its class's random pattern plus noise. */
static cx_status fill_batch(cx_program *p, int batch, int size, int classes, uint64_t seed) {
  int64_t pixels = (int64_t)size * size;
  float *xd = malloc(sizeof(float) * (size_t)(batch * pixels));
  int64_t *yd = malloc(sizeof(int64_t) * (size_t)batch);
  cx_status s = xd && yd ? CX_OK : cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int i = 0; i < batch && s == CX_OK; i++) {
    yd[i] = (int64_t)(cx_rng_uniform(cx_rng_key(seed, 2, 0), (uint64_t)i) * classes);
    for (int64_t j = 0; j < pixels; j++)
      xd[i * pixels + j] = cx_rng_normal(cx_rng_key(seed, 3, (uint64_t)yd[i]), (uint64_t)j) +
                           0.5f * cx_rng_normal(cx_rng_key(seed, 1, 0), (uint64_t)(i * pixels + j));
  }
  if (s == CX_OK) s = cx_program_write_input(p, "images", xd, sizeof(float) * (size_t)(batch * pixels));
  if (s == CX_OK) s = cx_program_write_input(p, "labels", yd, sizeof(int64_t) * (size_t)batch);
  free(xd);
  free(yd);
  return s;
}

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* SGD with momentum over every parameter of the program. */
static cx_status make_optimizer(cx_program *p, cx_optimizer **opt, cx_tensor ***grads) {
  int n = cx_program_param_count(p);
  cx_tensor **params = calloc((size_t)n + 1, sizeof *params);
  const char **names = calloc((size_t)n + 1, sizeof *names);
  *grads = calloc((size_t)n + 1, sizeof **grads);
  if (!params || !names || !*grads) {
    free(params);
    free(names);
    return cx_fail(CX_ERR_NOMEM, "out of memory");
  }
  for (int k = 0; k < n; k++) {
    params[k] = cx_program_param(p, k);
    names[k] = cx_program_param_name(p, k);
    (*grads)[k] = cx_program_param_grad(p, k);
  }
  cx_optim_config c = cx_optim_defaults(CX_OPTIM_SGD);
  c.lr = 0.05f;
  cx_status s = cx_optimizer_create(&c, cx_program_backend(p), cx_program_stream(p), n, params,
                                    names, opt);
  free(params);
  free(names);
  return s;
}

static cx_status train(const demo_opts *o, float *first, float *last, cx_memory_plan *mem,
                       double *elapsed) {
  enum { SIZE = 16, CLASSES = 10 };
  cx_graph *g = cx_tiny_cnn(1, SIZE, CLASSES, o->seed);
  cx_program *p = NULL;
  cx_compile_opts co = {.batch = o->batch, .training = true, .loss = "loss",
                        .seed = o->seed};
  cx_status s = cx_cli_backend(NULL, &co.backend);
  if (s == CX_OK) s = cx_program_compile(g, &co, &p);
  cx_graph_free(g);
  if (s != CX_OK) return s;
  *mem = cx_program_memory(p);
  if (!o->json) cx_program_print(p, stdout);
  cx_optimizer *opt = NULL;
  cx_tensor **grads = NULL;
  s = fill_batch(p, o->batch, SIZE, CLASSES, o->seed);
  if (s == CX_OK) s = make_optimizer(p, &opt, &grads);
  double t0 = seconds();
  for (int step = 0; step < o->steps && s == CX_OK; step++) {
    s = cx_program_forward(p);
    if (s == CX_OK) s = cx_program_backward(p);
    if (s == CX_OK) s = cx_optimizer_step(opt, grads, cx_optimizer_config(opt)->lr);
    if (s != CX_OK) break;
    float loss;
    s = cx_program_read(p, cx_program_tensor(p, "loss"), &loss);
    if (s != CX_OK) break;
    if (step == 0) *first = loss;
    *last = loss;
    if (!o->json && (step % o->log_every == 0 || step == o->steps - 1))
      printf("step %4d  loss %.4f\n", step, loss);
  }
  *elapsed = seconds() - t0;
  cx_optimizer_free(opt);
  free(grads);
  cx_program_free(p);
  return s;
}

static int run(int argc, char **argv) {
  demo_opts o = {.steps = 300, .batch = 32, .log_every = 20, .seed = 1};
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--json") == 0) o.json = true;
    else if ((strcmp(a, "--steps") == 0 || strcmp(a, "--batch") == 0 || strcmp(a, "--seed") == 0)) {
      if (i + 1 >= argc) return cx_cli_usage_error(&cx_cmd_demo, "option '%s' needs a value", a);
      long v = strtol(argv[++i], NULL, 10);
      if (v <= 0) return cx_cli_usage_error(&cx_cmd_demo, "option '%s' needs a positive integer", a);
      if (a[2] == 's' && a[3] == 't') o.steps = (int)v;
      else if (a[2] == 'b') o.batch = (int)v;
      else o.seed = (uint64_t)v;
    } else return cx_cli_usage_error(&cx_cmd_demo, "unknown option '%s'", a);
  }
  float first = 0, last = 0;
  cx_memory_plan mem = {0};
  double elapsed = 0;
  cx_status s = train(&o, &first, &last, &mem, &elapsed);
  if (s != CX_OK) {
    fprintf(stderr, "compress demo: %s\n", cx_last_error());
    return 1;
  }
  if (o.json)
    printf("{\"steps\":%d,\"batch\":%d,\"first_loss\":%.6f,\"final_loss\":%.6f,"
           "\"arena_bytes\":%zu,\"seconds\":%.3f}\n", o.steps, o.batch, first, last,
           mem.arena_bytes, elapsed);
  else
    printf("loss fell from %.4f to %.4f in %d steps (%.0f images/s)\n", first, last, o.steps,
           o.steps * o.batch / elapsed);
  return 0;
}

const cx_command cx_cmd_demo = {
    .name = "demo",
    .summary = "Train a tiny CNN on one random batch and print its loss falling",
    .usage = "usage: compress demo [--steps N] [--batch N] [--seed N] [--json]\n\n"
             "Builds a small CNN with the graph-builder API, compiles it into a training\n"
             "program (printing its planned memory), and fits one fixed batch of random\n"
             "images and labels with SGD + momentum, printing the loss every 20 steps.\n\n"
             "    --steps N   training steps (default 300)\n"
             "    --batch N   batch size (default 32)\n"
             "    --seed N    seed for weights and data (default 1)\n"
             "    --json      print one JSON object with the first and final loss\n",
    .run = run,
};
