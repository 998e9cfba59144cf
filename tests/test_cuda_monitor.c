/* Profiling and monitoring on the CUDA backend.
 *
 * `test_cuda_monitor` (any build with the backend, no GPU needed): the NVML loader refuses, with
 * "NVML not available" and the reason, a library that is missing, a library without NVML's
 * functions, and (on a machine without the driver) the driver's own library name; through a
 * stand-in library (tests/fake_nvml.c) it finds a GPU by bus id, reads its utilization and
 * memory (utilization -1 where the GPU does not report it), names the call that fails for a bus
 * id no GPU has, and shuts NVML down as often as it initialised it.
 *
 * `test_cuda_monitor gpu` (skips without a GPU): a ResNet-20 training step on the GPU profiled
 * with CUDA events: every node timed once a step, times >= 0 (> 0 for the convolutions and
 * BatchNorms), starting in schedule order inside the step, adding up to no more than the step's
 * wall time and to a sane share of it; the Chrome trace holds one event per node and step; the
 * backend's device_stats and NVML report the GPU's memory (total > 0, in use at least what the
 * program planned). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/program.h"
#include "../core/op.h"
#include "../core/program_input.h"
#include "../core/rng.h"
#include "../kernels/cuda/cuda_backend.h"
#include "../models/zoo.h"
#include "../train/profile.h"
#include "../train/train_graph.h"
#include "check.h"

#ifdef CX_HAVE_CUDA
#include "../kernels/cuda/nvml.h"

/* ---- the loader, on any machine ---- */

static void expect_unavailable(const char *library, const char *why) {
  static char sentinel;
  cx_nvml *n = (cx_nvml *)&sentinel; /* must come back NULL */
  cx_status s = cx_nvml_open(library, "0000:00:00.0", &n);
  const char *msg = cx_last_error();
  CHECK(s == CX_ERR_UNSUPPORTED && n == NULL && strncmp(msg, "NVML not available: ", 20) == 0 &&
            strstr(msg, why),
        "%s: status %d, '%s' (expected 'NVML not available: ...%s...')", library, s, msg, why);
  printf("%s: %s\n", library, msg);
}

static void test_loader(void) {
  expect_unavailable("libcx-no-such-nvml.so.1", "libcx-no-such-nvml.so.1");
  expect_unavailable("libm.so.6", "libm.so.6 has no nvmlInit_v2");
  /* the driver's library: here (no driver) not available; on a GPU machine it loads, and a bus
   * id no GPU has is refused naming the call */
  cx_nvml *n = NULL;
  cx_status s = cx_nvml_open(CX_NVML_LIBRARY, "0000:ff:1f.7", &n);
  const char *msg = cx_last_error();
  CHECK((s == CX_ERR_UNSUPPORTED && strstr(msg, "NVML not available: ")) ||
            (s == CX_ERR_BACKEND && strstr(msg, "nvmlDeviceGetHandleByPciBusId_v2 failed")),
        "%s: status %d, '%s'", CX_NVML_LIBRARY, s, msg);
  printf("%s, no such GPU: %s\n", CX_NVML_LIBRARY, msg);
  cx_nvml_close(n);
}

/* The loader's whole path through tests/fake_nvml.c (CX_FAKE_NVML: its path). */
static void test_fake_library(void) {
  void *fake = dlopen(CX_FAKE_NVML, RTLD_NOW | RTLD_LOCAL); /* the loader's own handle shares it */
  int (*inits)(void) = fake ? (int (*)(void))dlsym(fake, "fake_nvml_inits") : NULL;
  void (*util_supported)(int) =
      fake ? (void (*)(int))dlsym(fake, "fake_nvml_set_util_supported") : NULL;
  CHECK(inits && util_supported, "%s: %s", CX_FAKE_NVML, dlerror());
  if (!inits || !util_supported) return;
  cx_nvml *n = NULL;
  cx_status s = cx_nvml_open(CX_FAKE_NVML, "0000:3b:00.0", &n);
  CHECK(s == CX_OK && n && inits() == 1, "open: %s", cx_last_error());
  cx_nvml_sample x = {0};
  CHECK(n && cx_nvml_read(n, &x) == CX_OK && x.util_percent == 87 &&
            x.mem_total == 80ull << 30 && x.mem_used == 3ull << 30,
        "read: util %d, %llu of %llu bytes: %s", x.util_percent, x.mem_used, x.mem_total,
        cx_last_error());
  util_supported(0); /* a MIG instance: no utilization, memory still */
  CHECK(n && cx_nvml_read(n, &x) == CX_OK && x.util_percent == -1 && x.mem_total == 80ull << 30,
        "read without utilization: util %d: %s", x.util_percent, cx_last_error());
  util_supported(1);
  cx_nvml_close(n);
  CHECK(inits() == 0, "%d inits left after close", inits());
  n = NULL;
  s = cx_nvml_open(CX_FAKE_NVML, "0000:00:01.0", &n);
  CHECK(s == CX_ERR_BACKEND && !n &&
            strstr(cx_last_error(), "nvmlDeviceGetHandleByPciBusId_v2 failed: Not Found") &&
            strstr(cx_last_error(), "nvml.c:"),
        "a bus id without a GPU: status %d, '%s'", s, cx_last_error());
  CHECK(inits() == 0, "%d inits left after a failed open", inits());
  dlclose(fake);
}

/* ---- a profiled step on the GPU ---- */

enum { BATCH = 128, CLASSES = 10, STEPS = 3 };

static cx_program *compile_resnet20(void) {
  cx_graph *m = NULL, *tg = NULL;
  cx_program *p = NULL;
  cx_status s = cx_model_build("resnet20:classes=10,input=3x32x32", &m, NULL);
  if (s == CX_OK) s = cx_train_graph(m, 0, 0, &tg);
  cx_compile_opts o = {.batch = BATCH, .training = true, .loss = "loss",
                       .backend = cx_backend_cuda()};
  if (s == CX_OK) s = cx_program_compile(tg, &o, &p);
  CHECK(s == CX_OK, "compile: %s", cx_last_error());
  cx_graph_free(m);
  cx_graph_free(tg);
  if (!p) return NULL;
  int64_t nx = (int64_t)BATCH * 3 * 32 * 32;
  float *x = malloc(sizeof(float) * (size_t)nx);
  int64_t *y = malloc(sizeof(int64_t) * BATCH);
  for (int64_t i = 0; x && i < nx; i++) x[i] = cx_rng_normal(1, (uint64_t)i);
  for (int64_t i = 0; y && i < BATCH; i++) y[i] = i % CLASSES;
  s = x && y ? cx_program_write_input(p, "input", x, sizeof(float) * (size_t)nx)
             : cx_fail(CX_ERR_NOMEM, "out of memory");
  if (s == CX_OK) s = cx_program_write_input(p, "labels", y, sizeof(int64_t) * BATCH);
  CHECK(s == CX_OK, "inputs: %s", cx_last_error());
  free(x);
  free(y);
  return p;
}

/* One profiled step, timed by the host around it (the stream idle before and after). */
static void check_step(cx_program *p, int k, cx_trace *tr) {
  const cx_backend *b = cx_program_backend(p);
  CHECK(b->sync(cx_program_stream(p)) == CX_OK, "sync: %s", cx_last_error());
  double t0 = cx_profile_now();
  cx_status s = cx_program_forward(p);
  if (s == CX_OK) s = cx_program_backward(p);
  double t1 = cx_profile_now();
  CHECK(s == CX_OK, "step %d: %s", k, cx_last_error());
  if (s != CX_OK) return;
  const cx_graph *g = cx_program_graph(p);
  const cx_node_timing *t = cx_program_timings(p);
  double sum = 0;
  int positive = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const char *op = g->nodes[i].op->name;
    bool computes = !strncmp(op, "Conv", 4) || !strncmp(op, "BatchNorm", 9);
    CHECK(t[i].calls == k + 1 && t[i].last >= 0 && (!computes || t[i].last > 0),
          "step %d, node '%s' (%s): %lld calls, %.3g s", k, g->nodes[i].name, op,
          (long long)t[i].calls, t[i].last);
    /* the anchor on the host clock is good to the wait's wake-up: a few microseconds */
    CHECK(t[i].last_start >= t0 - 1e-4 && t[i].last_start + t[i].last <= t1 + 1e-4,
          "step %d, node '%s': [%.6f, +%.6f] outside the step [%.6f, %.6f]", k, g->nodes[i].name,
          t[i].last_start, t[i].last, t0, t1);
    if (i > 0)
      CHECK(t[i].last_start >= t[i - 1].last_start + t[i - 1].last - 2e-6,
            "step %d: node %d starts before node %d ended", k, i, i - 1);
    sum += t[i].last;
    positive += t[i].last > 0;
  }
  double wall = t1 - t0;
  printf("step %d: %d nodes (%d > 0) %.3f ms of a %.3f ms step (%.0f%%)\n", k, g->n_nodes,
         positive, sum * 1e3, wall * 1e3, 100 * sum / wall);
  /* the nodes follow each other on one stream: together no longer than the step; and the step
   * is mostly theirs (the rest: launching the first node, the final wait) */
  CHECK(sum <= wall * 1.01 + 1e-4 && sum >= wall * 0.25, "nodes %.3f ms in a step of %.3f ms",
        sum * 1e3, wall * 1e3);
  CHECK(cx_trace_add_step(tr, p, k) == CX_OK, "trace: %s", cx_last_error());
}

static void test_profiled_steps(void) {
  cx_program *p = compile_resnet20();
  if (!p) return;
  for (int k = 0; k < 2; k++) /* warm-up: cuDNN and cuBLAS set up their first calls */
    CHECK(cx_program_forward(p) == CX_OK && cx_program_backward(p) == CX_OK, "warm-up: %s",
          cx_last_error());
  CHECK(cx_program_set_profiling(p, true) == CX_OK, "profiling: %s", cx_last_error());
  cx_trace *tr = NULL;
  CHECK(cx_trace_create(&tr) == CX_OK, "%s", cx_last_error());
  for (int k = 0; k < STEPS && tr; k++) check_step(p, k, tr);
  int n = cx_program_graph(p)->n_nodes;
  char path[] = "/tmp/cx_cuda_trace_XXXXXX";
  int fd = mkstemp(path);
  if (fd >= 0) close(fd);
  CHECK(tr && cx_trace_events(tr) == (int64_t)n * STEPS && cx_trace_write(tr, path) == CX_OK,
        "trace: %lld events for %d nodes x %d steps: %s", tr ? (long long)cx_trace_events(tr) : 0,
        n, STEPS, cx_last_error());
  remove(path);
  cx_trace_free(tr);
  cx_profile pr;
  CHECK(cx_profile_collect(p, &pr) == CX_OK && pr.steps == STEPS && pr.forward_ms > 0 &&
            pr.backward_ms > 0, "collect: %s", cx_last_error());
  cx_profile_print(&pr, stdout, 5);
  cx_profile_free(&pr);

  /* monitoring: the backend's hook, and NVML itself */
  const cx_backend *b = cx_program_backend(p);
  cx_device_stats d = {0};
  CHECK(b->device_stats && b->device_stats(b, &d) == CX_OK, "device_stats: %s", cx_last_error());
  size_t plan = cx_program_device_bytes(p);
  printf("GPU: util %d%%, %.1f of %.1f MiB in use, the program planned %.1f MiB\n",
         d.util_percent, d.mem_used / 1048576.0, d.mem_total / 1048576.0, plan / 1048576.0);
  CHECK(d.mem_total > 0 && d.mem_used >= plan && d.mem_used <= d.mem_total &&
            d.util_percent >= -1 && d.util_percent <= 100,
        "device_stats: util %d, used %zu, total %zu, plan %zu", d.util_percent, d.mem_used,
        d.mem_total, plan);
  const char *why = cx_cuda_nvml_status();
  CHECK(!why, "NVML on a GPU machine: %s", why);
  CHECK(why || d.util_percent >= 0, "NVML gives no utilization on this GPU");
  cx_program_free(p);
}
#endif

int main(int argc, char **argv) {
  bool gpu = argc > 1 && !strcmp(argv[1], "gpu");
#ifdef CX_HAVE_CUDA
  if (gpu && cx_cuda_probe() != CX_OK) {
    printf("skipped: no GPU (%s)\n", cx_last_error());
    return 77;
  }
  if (gpu) test_profiled_steps();
  else {
    test_loader();
    test_fake_library();
  }
#else
  (void)gpu;
  printf("skipped: this build has no CUDA backend\n");
  return 77;
#endif
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
