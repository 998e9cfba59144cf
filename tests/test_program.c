/* The compiled program: memory plan, gradient-ready hook, gradient accumulation, end-to-end fit. */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/plan.h"
#include "../core/program.h"
#include "../core/rng.h"
#include "../kernels/cpu/cpu.h"
#include "../models/tiny_cnn.h"
#include "../train/optim.h"
#include "op_check.h"
#include "check.h"

static int conv_bn(cx_graph *g, const char *name, int x, int c, bool relu, uint64_t seed) {
  char n[64];
  snprintf(n, sizeof n, "%s.w", name);
  int w = oc_param(g, n, &S(c, c, 3, 3), -0.1f, 0.1f, seed);
  snprintf(n, sizeof n, "%s.conv", name);
  int conv = cx_graph_node(g, "Conv", n, (int[]){x, w}, 2, 1);
  cx_node_set_ints(g, conv, "pads", (int64_t[]){1, 1, 1, 1}, 4);
  int in[5] = {cx_node_output(g, conv, 0)};
  const char *suffix[4] = {"scale", "bias", "mean", "var"};
  for (int k = 0; k < 4; k++) {
    snprintf(n, sizeof n, "%s.%s", name, suffix[k]);
    in[k + 1] = k < 2 ? oc_param(g, n, &S(c), 0.5f, 1.0f, seed + 1 + (uint64_t)k)
                      : cx_graph_init(g, CX_VALUE_STATE, n, CX_F32, &S(c), NULL);
  }
  snprintf(n, sizeof n, "%s.bn", name);
  int y = cx_graph_op(g, "BatchNormalization", n, in, 5);
  if (!relu) return y;
  snprintf(n, sizeof n, "%s.relu", name);
  return cx_graph_op(g, "Relu", n, &y, 1);
}

/* Four ResNet basic blocks at 16 channels. */
static cx_graph *resnet_style(void) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "x", CX_F32, &S(-1, 16, 16, 16));
  for (int b = 0; b < 4; b++) {
    char n[32];
    snprintf(n, sizeof n, "block%d.a", b);
    int y = conv_bn(g, n, x, 16, true, 100 + (uint64_t)b * 10);
    snprintf(n, sizeof n, "block%d.b", b);
    y = conv_bn(g, n, y, 16, false, 105 + (uint64_t)b * 10);
    snprintf(n, sizeof n, "block%d.add", b);
    y = cx_graph_op(g, "Add", n, (int[]){x, y}, 2);
    snprintf(n, sizeof n, "block%d.relu", b);
    x = cx_graph_op(g, "Relu", n, &y, 1);
  }
  cx_graph_mark_output(g, x);
  return g;
}

static void check_no_overlap(cx_program *p, const char *what) {
  const cx_buffer_info *b;
  int n = cx_program_buffers(p, &b);
  cx_plan_request *r = calloc((size_t)n + 1, sizeof *r);
  for (int i = 0; i < n; i++)
    r[i] = (cx_plan_request){.value = b[i].value, .bytes = b[i].bytes, .first = b[i].first,
                             .last = b[i].last, .offset = b[i].offset};
  CHECK(cx_plan_check(r, n) == 0, "%s: two live buffers overlap", what);
  free(r);
}

static void test_memory_plan(void) {
  cx_graph *g = resnet_style();
  cx_program *inf = NULL, *tr = NULL;
  cx_compile_opts o = {.batch = 8, .backend = cx_backend_cpu()};
  setenv("CX_FUSE", "off", 1); /* the planner alone: fusions leave fewer buffers to reuse */
  CHECK(cx_program_compile(g, &o, &inf) == CX_OK, "compile inference: %s", cx_last_error());
  unsetenv("CX_FUSE");
  o.training = true;
  CHECK(cx_program_compile(g, &o, &tr) == CX_OK, "compile training: %s", cx_last_error());
  if (inf && tr) {
    cx_memory_plan mi = cx_program_memory(inf), mt = cx_program_memory(tr);
    printf("inference arena %zu of %zu bytes; training arena %zu of %zu bytes\n", mi.arena_bytes,
           mi.unplanned_bytes, mt.arena_bytes, mt.unplanned_bytes);
    check_no_overlap(inf, "inference");
    check_no_overlap(tr, "training");
    CHECK(mi.arena_bytes * 4 <= mi.unplanned_bytes, "inference arena %zu not well below %zu",
          mi.arena_bytes, mi.unplanned_bytes);
    CHECK(mt.arena_bytes * 3 <= mt.unplanned_bytes * 2, "training arena %zu not below 2/3 of %zu",
          mt.arena_bytes, mt.unplanned_bytes);
    CHECK(mi.arena_bytes * 2 < mt.arena_bytes, "inference keeps activations for backward");
  }
  cx_program_free(inf);
  cx_program_free(tr);
  cx_graph_free(g);
}

/* What the hook saw: when it fired (the schedule index of the backward node that had just run,
 * from the profiler's call counts) and a copy of the gradient at that moment. */
typedef struct hook_log {
  cx_program *p;
  int calls[64], fired_after[64], order[64], n_fired;
  float *grad_at_hook[64];
} hook_log;

static int last_node_run(const cx_program *p) {
  const cx_node_timing *t = cx_program_timings(p);
  int last = -1;
  for (int i = 0; i < cx_program_graph(p)->n_nodes; i++)
    if (t[i].calls > 0) last = i;
  return last;
}

static void on_grad_ready(void *user, int param, const cx_tensor *value, const cx_tensor *grad) {
  (void)value;
  hook_log *h = user;
  h->calls[param]++;
  h->fired_after[param] = last_node_run(h->p);
  h->order[h->n_fired++] = param;
  size_t bytes = (size_t)cx_tensor_numel(grad) * sizeof(float);
  free(h->grad_at_hook[param]);
  h->grad_at_hook[param] = malloc(bytes);
  memcpy(h->grad_at_hook[param], grad->data, bytes);
}

/* The value id of a parameter's gradient in the compiled graph, and the node producing it (the
 * one that finalises it: values are written once). */
static int grad_producer(const cx_program *p, int k) {
  const cx_tensor *g = cx_program_param_grad((cx_program *)p, k);
  for (int v = 0; v < cx_program_graph(p)->n_values; v++)
    if (cx_program_value_tensor(p, v) == g) return cx_program_graph(p)->values[v].producer;
  return -2;
}

/* Each hook fires right after the node that finalises that gradient, while backward goes on
 * (data-parallel training overlaps its reductions with the rest of backward): the deepest
 * block's parameters first, the first block's last, and the gradient is final then. */
static void check_hook_timing(const hook_log *h, cx_program *p) {
  int n = cx_program_param_count(p), n_nodes = cx_program_graph(p)->n_nodes;
  int before_end = 0;
  for (int k = 0; k < n; k++) {
    const char *name = cx_program_param_name(p, k);
    CHECK(h->calls[k] == 1, "hook called %d times for %s", h->calls[k], name);
    int at = grad_producer(p, k);
    CHECK(at >= cx_program_forward_nodes(p) && h->fired_after[k] == at,
          "hook for %s fired after node %d; its gradient is final after node %d", name,
          h->fired_after[k], at);
    before_end += h->fired_after[k] < n_nodes - 1;
    const cx_tensor *g = cx_program_param_grad(p, k);
    CHECK(h->grad_at_hook[k] && memcmp(h->grad_at_hook[k], g->data, (size_t)cx_tensor_numel(g) *
                                       sizeof(float)) == 0,
          "gradient of %s changed after its hook", name);
  }
  CHECK(before_end >= n - 3, "only %d of %d hooks fired before the last backward node", before_end,
        n);
  /* every block3 parameter before any block0 one */
  int last_block3 = -1, first_block0 = n;
  for (int i = 0; i < h->n_fired; i++) {
    const char *name = cx_program_param_name(p, h->order[i]);
    if (!strncmp(name, "block3.", 7)) last_block3 = i;
    if (!strncmp(name, "block0.", 7) && i < first_block0) first_block0 = i;
  }
  CHECK(last_block3 >= 0 && first_block0 < n && last_block3 < first_block0,
        "hooks out of order: the last block3 hook is call %d, the first block0 hook call %d",
        last_block3, first_block0);
}

static void test_grad_hook(void) {
  cx_graph *g = resnet_style();
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = 2, .training = true, .backend = cx_backend_cpu()};
  CHECK(cx_program_compile(g, &o, &p) == CX_OK, "compile: %s", cx_last_error());
  if (p) {
    hook_log h = {.p = p};
    CHECK(cx_program_param_count(p) <= 64, "%d parameters", cx_program_param_count(p));
    cx_program_set_grad_hook(p, on_grad_ready, &h);
    cx_program_set_profiling(p, true); /* its call counts say which node ran last */
    cx_tensor *x = cx_program_tensor(p, "x"), *dy = cx_program_tensor(p, "block3.relu@grad");
    for (int64_t i = 0; i < cx_tensor_numel(x); i++) ((float *)x->data)[i] = cx_rng_normal(1, (uint64_t)i);
    for (int64_t i = 0; i < cx_tensor_numel(dy); i++) ((float *)dy->data)[i] = cx_rng_normal(2, (uint64_t)i);
    CHECK(cx_program_forward(p) == CX_OK && cx_program_backward(p) == CX_OK, "step: %s",
          cx_last_error());
    check_hook_timing(&h, p);
    for (int k = 0; k < 64; k++) free(h.grad_at_hook[k]);
  }
  cx_program_free(p);
  cx_graph_free(g);
}

/* A parameter read by two nodes gets the sum of both contributions. */
static void test_grad_accumulation(void) {
  cx_graph *g = cx_graph_new();
  int w = oc_param(g, "w", &S(3, 5), -1, 1, 3);
  int a = cx_graph_op(g, "Mul", "square", (int[]){w, w}, 2);
  int r = cx_graph_op(g, "Relu", "relu", &w, 1);
  int y = cx_graph_op(g, "Add", "sum", (int[]){a, r}, 2);
  cx_graph_mark_output(g, y);
  fails += oc_check("w*w + relu(w)", g, &(oc_opts){.grad = true});
  cx_graph_free(g);
}

static void test_tiny_cnn_fits(void) {
  cx_graph *g = cx_tiny_cnn(1, 12, 10, 5);
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = 16, .training = true, .loss = "loss", .backend = cx_backend_cpu()};
  CHECK(cx_program_compile(g, &o, &p) == CX_OK, "compile: %s", cx_last_error());
  if (!p) return;
  cx_tensor *x = cx_program_tensor(p, "images"), *y = cx_program_tensor(p, "labels");
  for (int64_t i = 0; i < cx_tensor_numel(x); i++) ((float *)x->data)[i] = cx_rng_normal(7, (uint64_t)i);
  for (int64_t i = 0; i < 16; i++) ((int64_t *)y->data)[i] = i % 10;
  int n = cx_program_param_count(p);
  cx_tensor *params[64], *grads[64];
  for (int k = 0; k < n && k < 64; k++) {
    params[k] = cx_program_param(p, k);
    grads[k] = cx_program_param_grad(p, k);
  }
  cx_optim_config c = cx_optim_defaults(CX_OPTIM_SGD);
  cx_optimizer *opt = NULL;
  CHECK(n <= 64 && cx_optimizer_create(&c, cx_program_backend(p), cx_program_stream(p), n, params,
                                        NULL, &opt) == CX_OK, "sgd: %s",
        cx_last_error());
  float first = 0, last = 0;
  for (int step = 0; opt && step < 150; step++) {
    if (cx_program_forward(p) != CX_OK || cx_program_backward(p) != CX_OK ||
        cx_optimizer_step(opt, grads, 0.05f) != CX_OK) {
      CHECK(0, "step %d: %s", step, cx_last_error());
      break;
    }
    last = *(float *)cx_program_tensor(p, "loss")->data;
    if (step == 0) first = last;
  }
  printf("tiny CNN: loss %.4f -> %.4f\n", first, last);
  /* Steps run without allocating: the heap's in-use bytes do not move over further steps. */
  struct mallinfo2 before = mallinfo2();
  for (int step = 0; step < 3; step++)
    if (cx_program_forward(p) != CX_OK || cx_program_backward(p) != CX_OK) break;
  struct mallinfo2 after = mallinfo2();
  CHECK(before.uordblks == after.uordblks, "steps allocated: heap in use %zu -> %zu bytes",
        before.uordblks, after.uordblks);
  CHECK(isfinite(last) && last * 10 <= first, "loss fell only from %g to %g", first, last);
  cx_optimizer_free(opt);
  cx_program_free(p);
  cx_graph_free(g);
}

static void test_errors(void) {
  cx_graph *g = cx_graph_new();
  int a = oc_param(g, "a", &S(2, 3), 0, 1, 1), b = oc_param(g, "b", &S(4), 0, 1, 2);
  int y = cx_graph_op(g, "Add", "bad_add", (int[]){a, b}, 2);
  cx_graph_mark_output(g, y);
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = 1, .backend = cx_backend_cpu()};
  CHECK(cx_program_compile(g, &o, &p) == CX_ERR_SHAPE, "mismatched Add compiled");
  CHECK(strstr(cx_last_error(), "bad_add") && strstr(cx_last_error(), "[2,3]") &&
            strstr(cx_last_error(), "[4]"), "message should name node and shapes: %s",
        cx_last_error());
  cx_graph_free(g);
}

/* A NaN made by one op is traced to that op. */
static void test_nonfinite_located(void) {
  cx_graph *g = cx_graph_new();
  int w = oc_param(g, "w", &S(4), 1, 2, 3);
  int c = oc_const(g, "c", &S(4), 0, 1, 4);
  ((float *)g->values[c].init)[2] = 5; /* w - c < 0 at element 2 */
  int d = cx_graph_op(g, "Sub", "shift", (int[]){w, c}, 2);
  int r = cx_graph_op(g, "Sqrt", "root", &d, 1);
  int y = cx_graph_op(g, "Relu", "after", &r, 1);
  cx_graph_mark_output(g, y);
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = 1, .training = true, .backend = cx_backend_cpu()};
  CHECK(cx_program_compile(g, &o, &p) == CX_OK, "compile: %s", cx_last_error());
  if (p) {
    char msg[512] = "";
    CHECK(cx_program_forward(p) == CX_OK, "forward");
    CHECK(cx_program_locate_nonfinite(p, msg, sizeof msg) == CX_OK, "locate");
    printf("located: %s\n", msg);
    CHECK(strstr(msg, "'root' (Sqrt, forward pass)") != NULL, "wrong node named: %s", msg);
  }
  cx_program_free(p);
  cx_graph_free(g);
}

int main(void) {
  test_nonfinite_located();
  test_memory_plan();
  test_grad_hook();
  test_grad_accumulation();
  test_tiny_cnn_fits();
  test_errors();
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
