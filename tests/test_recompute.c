/* Gradient checkpointing (core/recompute.h): a training step with recomputed segments gives the
 * loss, gradients and BatchNorm statistics of the same step without, in a smaller arena; random
 * ops draw the same masks when recomputed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/program.h"
#include "../core/rng.h"
#include "../kernels/cpu/cpu.h"
#include "../models/zoo.h"
#include "../train/train_graph.h"
#include "op_check.h"
#include "check.h"

static cx_program *compile(const cx_graph *g, int64_t batch, const char *const *segs, int n) {
  cx_compile_opts o = {.batch = batch, .training = true, .loss = "loss",
                       .backend = cx_backend_cpu(), .seed = 11, .checkpoint_segments = segs,
                       .n_checkpoint_segments = n};
  cx_program *p = NULL;
  if (cx_program_compile(g, &o, &p) != CX_OK) printf("compile: %s\n", cx_last_error());
  return p;
}

/* The same inputs in every program: normal images (or features), labels from 0. */
static void fill(cx_program *p, int64_t classes) {
  const cx_graph *g = cx_program_graph(p);
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].kind != CX_VALUE_INPUT) continue;
    cx_tensor *t = cx_program_tensor(p, g->values[v].name);
    uint64_t key = cx_rng_key(5, (uint64_t)v, 0);
    for (int64_t i = 0; i < cx_tensor_numel(t); i++) {
      if (t->dtype == CX_F32) ((float *)t->data)[i] = cx_rng_normal(key, (uint64_t)i);
      else ((int64_t *)t->data)[i] = (i * 7 + 3) % classes;
    }
  }
}

static bool step(cx_program *p, int64_t classes) {
  fill(p, classes);
  cx_status s = cx_program_forward(p);
  if (s == CX_OK) s = cx_program_backward(p);
  if (s != CX_OK) printf("step: %s\n", cx_last_error());
  return s == CX_OK;
}

/* Largest |a - b| / max(|a|, |b|, 1e-3) over two tensors of one shape. */
static double rel_diff(const cx_tensor *a, const cx_tensor *b) {
  double worst = 0;
  const float *x = a->data, *y = b->data;
  for (int64_t i = 0; i < cx_tensor_numel(a); i++) {
    double d = fabs((double)x[i] - y[i]), m = fmax(fmax(fabs(x[i]), fabs(y[i])), 1e-3);
    if (!(d / m <= worst)) worst = d / m; /* NaN counts as a difference */
  }
  return worst;
}

/* Loss, every parameter gradient and every statistic of two programs that ran one step. */
static void compare(const char *what, cx_program *a, cx_program *b) {
  CHECK(rel_diff(cx_program_tensor(a, "loss"), cx_program_tensor(b, "loss")) <= 1e-6,
        "%s: losses differ: %g and %g", what, *cx_f32(cx_program_tensor(a, "loss")),
        *cx_f32(cx_program_tensor(b, "loss")));
  int n = cx_program_param_count(a), exact = 0;
  CHECK(n == cx_program_param_count(b), "%s: parameter counts differ", what);
  for (int k = 0; k < n && k < cx_program_param_count(b); k++) {
    double d = rel_diff(cx_program_param_grad(a, k), cx_program_param_grad(b, k));
    CHECK(d <= 1e-6, "%s: gradient of '%s' differs by %g (relative)", what,
          cx_program_param_name(a, k), d);
    exact += d == 0;
  }
  const cx_graph *g = cx_program_graph(a);
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].kind != CX_VALUE_STATE) continue;
    const char *name = g->values[v].name;
    double d = rel_diff(cx_program_tensor(a, name), cx_program_tensor(b, name));
    CHECK(d == 0, "%s: statistic '%s' differs by %g: updated twice?", what, name, d);
  }
  printf("%s: %d of %d gradients bit-identical\n", what, exact, n);
}

static void report(const char *what, const cx_program *plain, const cx_program *rc) {
  cx_memory_plan a = cx_program_memory(plain), b = cx_program_memory(rc);
  printf("%s: arena %.2f MiB, with recompute %.2f MiB (%d nodes recomputed; reported baseline "
         "%.2f MiB)\n", what, a.arena_bytes / 1048576.0, b.arena_bytes / 1048576.0,
         b.recomputed_nodes, b.arena_no_recompute_bytes / 1048576.0);
  CHECK(b.arena_no_recompute_bytes == a.arena_bytes, "%s: the baseline arena %zu is not the "
        "plain program's %zu", what, b.arena_no_recompute_bytes, a.arena_bytes);
  CHECK(a.recomputed_nodes == 0 && a.arena_no_recompute_bytes == a.arena_bytes,
        "%s: a plain program reports recomputation", what);
}

static cx_graph *zoo_train_graph(const char *spec) {
  cx_graph *m = NULL, *g = NULL;
  if (cx_model_build(spec, &m, NULL) != CX_OK || cx_train_graph(m, 0, 0, &g) != CX_OK)
    printf("%s: %s\n", spec, cx_last_error());
  cx_graph_free(m);
  return g;
}

/* Runs one step of g with and without the segments and compares; returns the arena ratio. */
static double check_model(const char *what, const cx_graph *g, int64_t batch, int64_t classes,
                          const char *const *segs, int n) {
  cx_program *plain = compile(g, batch, NULL, 0), *rc = compile(g, batch, segs, n);
  CHECK(plain && rc, "%s: does not compile", what);
  double ratio = 1;
  if (plain && rc && step(plain, classes) && step(rc, classes)) {
    compare(what, plain, rc);
    report(what, plain, rc);
    ratio = (double)cx_program_memory(rc).arena_bytes / (double)cx_program_memory(plain).arena_bytes;
    CHECK(cx_program_memory(rc).recomputed_nodes > 0, "%s: nothing recomputed", what);
  }
  cx_program_free(plain);
  cx_program_free(rc);
  return ratio;
}

static void test_resnet20(void) {
  cx_graph *g = zoo_train_graph("resnet20:classes=10,input=1x28x28");
  if (!g) return (void)fails++;
  const char *blocks[] = {"blocks"};
  double r = check_model("resnet20 blocks", g, 4, 10, blocks, 1);
  CHECK(r < 0.6, "resnet20 blocks: the arena is %.0f%% of the plain one; want < 60%%", 100 * r);
  const char *some[] = {"layer1", "layer2.0", "layer3"};
  r = check_model("resnet20 layer1,layer2.0,layer3", g, 4, 10, some, 3);
  CHECK(r < 0.8, "resnet20 prefixes: the arena is %.0f%% of the plain one", 100 * r);
  cx_graph_free(g);
}

/* Dropout inside a segment, between convolutions: the recomputed mask must be the forward one. */
static cx_graph *dropout_graph(void) {
  cx_graph *m = cx_graph_new();
  int x = cx_graph_input(m, "input", CX_F32, &S(-1, 3, 8, 8));
  int w1 = oc_param(m, "blk.0.w1", &S(8, 3, 3, 3), -0.3f, 0.3f, 1);
  int w2 = oc_param(m, "blk.0.w2", &S(8, 8, 3, 3), -0.3f, 0.3f, 2);
  int wf = oc_param(m, "fc.w", &S(5, 512), -0.05f, 0.05f, 3);
  int y = cx_graph_op(m, "Conv", "blk.0.conv1", (int[]){x, w1}, 2);
  cx_node_set_ints(m, m->n_nodes - 1, "pads", (int64_t[]){1, 1, 1, 1}, 4);
  y = cx_graph_op(m, "Relu", "blk.0.relu", &y, 1);
  float ratio = 0.4f;
  int r = cx_graph_const_f32(m, "blk.0.drop.p", &(cx_shape){.ndim = 0}, &ratio);
  y = cx_graph_op(m, "Dropout", "blk.0.drop", (int[]){y, r}, 2);
  y = cx_graph_op(m, "Conv", "blk.0.conv2", (int[]){y, w2}, 2);
  cx_node_set_ints(m, m->n_nodes - 1, "pads", (int64_t[]){1, 1, 1, 1}, 4);
  y = cx_graph_op(m, "Tanh", "blk.0.tanh", &y, 1);
  y = cx_graph_op(m, "Flatten", "flatten", &y, 1);
  y = cx_graph_op(m, "Gemm", "fc", (int[]){y, wf}, 2);
  cx_node_set_int(m, m->n_nodes - 1, "transB", 1);
  cx_graph_mark_output(m, y);
  cx_graph *g = NULL;
  if (cx_graph_status(m) != CX_OK || cx_train_graph(m, 0, 0, &g) != CX_OK)
    printf("dropout graph: %s\n", cx_last_error());
  cx_graph_free(m);
  return g;
}

static void test_dropout(void) {
  cx_graph *g = dropout_graph();
  if (!g) return (void)fails++;
  const char *blocks[] = {"blocks"};
  check_model("conv-dropout-conv", g, 3, 5, blocks, 1);
  cx_graph_free(g);
  g = zoo_train_graph("mobilenet_v2:width=0.25,classes=10,input=3x32x32,dropout=0.5");
  if (!g) return (void)fails++;
  double r = check_model("mobilenet_v2 blocks", g, 2, 10, blocks, 1);
  CHECK(r < 0.75, "mobilenet_v2 blocks: the arena is %.0f%% of the plain one", 100 * r);
  cx_graph_free(g);
}

static void test_refusals(void) {
  cx_graph *g = dropout_graph();
  if (!g) return (void)fails++;
  const char *typo[] = {"blk.0", "blk.1"};
  cx_compile_opts o = {.batch = 2, .training = true, .loss = "loss", .backend = cx_backend_cpu(),
                       .checkpoint_segments = typo, .n_checkpoint_segments = 2};
  cx_program *p = NULL;
  CHECK(cx_program_compile(g, &o, &p) != CX_OK && strstr(cx_last_error(), "'blk.1'"),
        "a prefix that names no node is refused: %s", cx_last_error());
  cx_program_free(p);
  cx_graph_free(g);
}

int main(void) {
  test_resnet20();
  test_dropout();
  test_refusals();
  if (fails) printf("%d check(s) failed\n", fails);
  else printf("test_recompute: all passed\n");
  return fails ? 1 : 0;
}
