/* The profiler (train/profile.h) on the golden CNN's training program: every backward node is
 * charged to a forward node, the tables add up to the program's own timings, and the Chrome
 * trace holds one complete event per node and step on the forward or backward track. The LR
 * range test's analysis (train/lr_find.h) on made-up curves: the suggestion sits on the steepest
 * fall of the smoothed loss, and the chart is written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/program.h"
#include "../import/onnx.h"
#include "../kernels/cpu/cpu.h"
#include "../train/lr_find.h"
#include "../train/profile.h"
#include "../train/train_graph.h"
#include "check.h"

static cx_program *compile_golden(void) {
  cx_graph *model = NULL, *tg = NULL;
  cx_program *p = NULL;
  cx_status s = cx_onnx_import("fixtures/golden/cnn.onnx", &model, NULL);
  if (s == CX_OK) s = cx_train_graph(model, 0, 0, &tg);
  cx_compile_opts o = {.batch = 4, .training = true, .loss = "loss", .backend = cx_backend_cpu()};
  if (s == CX_OK) s = cx_program_compile(tg, &o, &p);
  CHECK(s == CX_OK, "golden CNN: %s", cx_last_error());
  cx_graph_free(model);
  cx_graph_free(tg);
  if (!p) return NULL;
  cx_tensor *x = cx_program_tensor(p, "input"), *y = cx_program_tensor(p, "labels");
  for (int64_t i = 0; i < cx_tensor_numel(x); i++) ((float *)x->data)[i] = (float)sin(i * 0.1);
  for (int64_t i = 0; i < cx_tensor_numel(y); i++) ((int64_t *)y->data)[i] = i % 10;
  return p;
}

static double timing_total(const cx_program *p, int from, int to) {
  double t = 0;
  for (int i = from; i < to; i++) t += cx_program_timings(p)[i].total;
  return t;
}

static void check_tables(const cx_program *p, const cx_profile *pr, int64_t steps) {
  int n_fwd = cx_program_forward_nodes(p), n_all = cx_program_graph(p)->n_nodes;
  CHECK(pr->steps == steps, "steps %lld, expected %lld", (long long)pr->steps, (long long)steps);
  /* no "(other)" row: every backward node found its forward node */
  CHECK(pr->n_nodes == n_fwd, "%d node rows for %d forward nodes", pr->n_nodes, n_fwd);
  double fwd = timing_total(p, 0, n_fwd) * 1e3 / steps;
  double bwd = timing_total(p, n_fwd, n_all) * 1e3 / steps;
  CHECK(fabs(pr->forward_ms - fwd) < 1e-9 && fabs(pr->backward_ms - bwd) < 1e-9,
        "totals %g + %g ms, timings %g + %g", pr->forward_ms, pr->backward_ms, fwd, bwd);
  double ops = 0, nodes = 0;
  for (int k = 0; k < pr->n_ops; k++) ops += pr->ops[k].forward_ms + pr->ops[k].backward_ms;
  for (int k = 0; k < pr->n_nodes; k++) nodes += pr->nodes[k].forward_ms + pr->nodes[k].backward_ms;
  CHECK(fabs(ops - fwd - bwd) < 1e-9 && fabs(nodes - fwd - bwd) < 1e-9,
        "op rows %g ms, node rows %g ms, program %g ms", ops, nodes, fwd + bwd);
  for (int k = 1; k < pr->n_nodes; k++)
    CHECK(pr->nodes[k - 1].forward_ms + pr->nodes[k - 1].backward_ms >=
              pr->nodes[k].forward_ms + pr->nodes[k].backward_ms, "node rows not sorted at %d", k);
  bool conv_bwd = false;
  for (int k = 0; k < pr->n_ops; k++)
    conv_bwd |= !strcmp(pr->ops[k].name, "Conv") && pr->ops[k].backward_ms > 0 &&
                pr->ops[k].nodes == 2;
  CHECK(conv_bwd, "no Conv row with 2 nodes and backward time");
}

/* Counts occurrences of s in the file. */
static int count_in_file(const char *path, const char *s) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[4096];
  int n = 0;
  while (fgets(line, sizeof line, f))
    for (const char *at = strstr(line, s); at; at = strstr(at + 1, s)) n++;
  fclose(f);
  return n;
}

static void test_profile(void) {
  cx_program *p = compile_golden();
  if (!p) return;
  cx_profile pr;
  CHECK(cx_profile_collect(p, &pr) != CX_OK, "collect with profiling off succeeded");
  cx_program_set_profiling(p, true);
  cx_trace *tr = NULL;
  CHECK(cx_trace_create(&tr) == CX_OK, "%s", cx_last_error());
  const int steps = 3;
  for (int k = 0; k < steps; k++) {
    CHECK(cx_program_forward(p) == CX_OK && cx_program_backward(p) == CX_OK, "%s", cx_last_error());
    CHECK(cx_trace_add_step(tr, p, k) == CX_OK, "%s", cx_last_error());
  }
  CHECK(cx_trace_add_event(tr, "optimizer", CX_TRACE_HOST, cx_profile_now(), 1e-4, 2) == CX_OK,
        "%s", cx_last_error());
  CHECK(cx_profile_collect(p, &pr) == CX_OK, "%s", cx_last_error());
  check_tables(p, &pr, steps);
  CHECK(cx_profile_add_host(&pr, "(optimizer)", 3e-3) == CX_OK && fabs(pr.host_ms - 1.0) < 1e-9,
        "host phase: %g ms a step", pr.host_ms);
  cx_profile_print(&pr, stdout, 5);
  int n_all = cx_program_graph(p)->n_nodes, n_fwd = cx_program_forward_nodes(p);
  char path[] = "/tmp/cx_trace_XXXXXX";
  int fd = mkstemp(path);
  if (fd >= 0) close(fd);
  CHECK(cx_trace_write(tr, path) == CX_OK, "%s", cx_last_error());
  int x = count_in_file(path, "\"ph\":\"X\"");
  int f = count_in_file(path, "\"tid\":1,\"args\":{\"step\"");
  int b = count_in_file(path, "\"tid\":2,\"args\":{\"step\"");
  CHECK(x == steps * n_all + 1, "%d complete events, expected %d", x, steps * n_all + 1);
  CHECK(f == steps * n_fwd && b == steps * (n_all - n_fwd), "forward %d, backward %d events", f, b);
  CHECK(count_in_file(path, "{\"traceEvents\":[") == 1, "no traceEvents array");
  if (getenv("KEEP")) printf("trace %s\n", path); else remove(path);
  cx_trace_free(tr);
  cx_profile_free(&pr);
  cx_program_free(p);
}

/* A curve flat at 2.3, falling fastest around lr 0.1, lowest near 1, then blowing up. */
static void test_lr_analysis(void) {
  cx_lr_find_opts o = cx_lr_find_defaults();
  cx_lr_find_result r = {.n = o.steps};
  r.lr = calloc(100, sizeof(double));
  r.loss = calloc(100, sizeof(double));
  r.smooth = calloc(100, sizeof(double));
  for (int i = 0; i < r.n; i++) {
    r.lr[i] = cx_lr_find_rate(&o, i);
    double u = log10(r.lr[i]);
    r.loss[i] = 2.3 - 1.5 / (1 + exp(-3 * (u + 1))) + (u > 0 ? 4 * u * u : 0);
  }
  CHECK(fabs(r.lr[0] - 1e-6) < 1e-12 && fabs(r.lr[99] - 10) < 1e-9, "rates %g .. %g", r.lr[0],
        r.lr[99]);
  cx_lr_find_analyse(&r, 0); /* no smoothing: the curve itself */
  CHECK(r.steepest >= 0 && fabs(log10(r.suggested_lr) + 1) < 0.1, "suggested %g, expected 0.1",
        r.suggested_lr);
  CHECK(fabs(log10(r.lr[r.lowest])) < 0.5, "lowest at %g, expected about 1", r.lr[r.lowest]);
  CHECK(fabs(r.min_div10_lr - r.lr[r.lowest] / 10) < 1e-12, "min/10 %g", r.min_div10_lr);
  cx_lr_find_analyse(&r, 0.98); /* lags, but stays on the falling part */
  CHECK(r.steepest >= 0 && r.steepest <= r.lowest && r.suggested_lr > 1e-2 && r.suggested_lr < 10,
        "smoothed: suggested %g", r.suggested_lr);
  char path[] = "/tmp/cx_lr_XXXXXX";
  int fd = mkstemp(path);
  if (fd >= 0) close(fd);
  CHECK(cx_lr_find_svg(&r, path) == CX_OK, "%s", cx_last_error());
  CHECK(count_in_file(path, "</svg>") == 1 && count_in_file(path, "<polyline") == 2,
        "chart incomplete");
  remove(path);
  for (int i = 0; i < r.n; i++) r.loss[i] = 2.3 + 0.01 * i; /* never falls: min/10 */
  cx_lr_find_analyse(&r, 0.98);
  CHECK(r.steepest == -1 && r.suggested_lr == r.min_div10_lr && r.lowest == 0,
        "rising curve: steepest %d, suggested %g", r.steepest, r.suggested_lr);
  cx_lr_find_free(&r);
}

int main(void) {
  test_profile();
  test_lr_analysis();
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
