/* Profiling on a stream and device monitoring, run on the CPU through a backend that is the CPU's
 * plus the optional hooks a GPU fills (core/backend.h): events stamped with the host clock, and a
 * made-up device.
 *
 * Events: a training step's node times are read once, at the end of its backward pass (one wait
 * and two readings per node: 1 + 2n elapsed calls a step, not a wait per node); every node is
 * counted once a step; start times follow the schedule inside the step's wall time; a node run
 * again before the step ended is read first; a failed event names the node; the trace holds one
 * event per node and step.
 * Monitoring: the trainer's progress line and its step info carry the device's utilization and
 * memory and the program's planned bytes (plain and progress-bar lines); a device_stats failure
 * is told once and training goes on; the CPU backend's lines have none of it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/program.h"
#include "../data/data.h"
#include "../kernels/cpu/cpu.h"
#include "../train/profile.h"
#include "../train/train_graph.h"
#include "../train/trainer.h"
#include "check.h"
#include "op_check.h"
#include "tiny_task.h"

enum { N = 64, SIDE = 8, K = 4, BATCH = 8 };

static char dir[64], data_path[128];

/* ---- a CPU backend with host-clock events ---- */

struct cx_event {
  double t;
};

static int n_elapsed, n_records, fail_record_at = -1;

static cx_status ev_create(cx_event **out) {
  *out = calloc(1, sizeof **out);
  return *out ? CX_OK : cx_fail(CX_ERR_NOMEM, "out of memory");
}

static cx_status ev_record(cx_event *e, cx_stream *s) {
  (void)s;
  if (n_records++ == fail_record_at) return cx_fail(CX_ERR_BACKEND, "made-up event failure");
  e->t = cx_profile_now();
  return CX_OK;
}

static cx_status ev_elapsed(cx_event *from, cx_event *to, double *seconds) {
  n_elapsed++;
  *seconds = to->t - from->t;
  return CX_OK;
}

static void ev_free(cx_event *e) { free(e); }

static int stats_calls;
static bool stats_fail;

static cx_status fake_stats(const cx_backend *b, cx_device_stats *out) {
  (void)b;
  stats_calls++;
  if (stats_fail) return cx_fail(CX_ERR_BACKEND, "made-up monitoring failure");
  *out = (cx_device_stats){.util_percent = 42, .mem_used = (size_t)1536 << 20,
                           .mem_total = (size_t)4096 << 20};
  return CX_OK;
}

static cx_backend with_hooks(void) {
  cx_backend b = *cx_backend_cpu();
  b.name = "cpu+hooks";
  b.event_create = ev_create;
  b.event_record = ev_record;
  b.event_elapsed = ev_elapsed;
  b.event_free = ev_free;
  b.device_stats = fake_stats;
  return b;
}

/* ---- the model and data ---- */

static void make_data(void) {
  snprintf(data_path, sizeof data_path, "%s/set.h5", dir);
  CHECK(tiny_dataset_write(data_path, N, SIDE, K) == CX_OK, "writing the set: %s",
        cx_last_error());
}

static cx_program *compile_training(const cx_backend *b) {
  cx_graph *m = tiny_cnn(SIDE, K), *tg = NULL;
  cx_program *p = NULL;
  cx_status s = cx_train_graph(m, 0, 0, &tg);
  cx_compile_opts o = {.batch = BATCH, .training = true, .loss = "loss", .backend = b};
  if (s == CX_OK) s = cx_program_compile(tg, &o, &p);
  CHECK(s == CX_OK, "compile: %s", cx_last_error());
  cx_graph_free(m);
  cx_graph_free(tg);
  if (!p) return NULL;
  cx_tensor *x = cx_program_tensor(p, "input"), *y = cx_program_tensor(p, "labels");
  for (int64_t i = 0; i < cx_tensor_numel(x); i++) ((float *)x->data)[i] = (float)(i % 7) * 0.1f;
  for (int64_t i = 0; i < cx_tensor_numel(y); i++) ((int64_t *)y->data)[i] = i % K;
  return p;
}

/* ---- events ---- */

static void test_event_steps(void) {
  cx_backend b = with_hooks();
  cx_program *p = compile_training(&b);
  if (!p) return;
  int n = cx_program_graph(p)->n_nodes;
  n_records = n_elapsed = 0;
  CHECK(cx_program_set_profiling(p, true) == CX_OK, "%s", cx_last_error());
  cx_trace *tr = NULL;
  CHECK(cx_trace_create(&tr) == CX_OK, "%s", cx_last_error());
  const int steps = 3;
  for (int k = 0; k < steps; k++) {
    double t0 = cx_profile_now();
    int e0 = n_elapsed;
    CHECK(cx_program_forward(p) == CX_OK, "forward: %s", cx_last_error());
    CHECK(n_elapsed == e0, "step %d: %d readings before the step ended", k, n_elapsed - e0);
    CHECK(cx_program_backward(p) == CX_OK, "backward: %s", cx_last_error());
    double t1 = cx_profile_now();
    CHECK(n_elapsed - e0 == 1 + 2 * n, "step %d: %d readings, expected one wait and 2 x %d", k,
          n_elapsed - e0, n);
    const cx_node_timing *t = cx_program_timings(p);
    double sum = 0;
    for (int i = 0; i < n; i++) {
      CHECK(t[i].calls == k + 1, "node %d: %lld calls after %d steps", i, (long long)t[i].calls,
            k + 1);
      CHECK(t[i].last >= 0 && t[i].last_start >= t0 - 1e-6 &&
                t[i].last_start + t[i].last <= t1 + 1e-6,
            "node %d: [%.9f, +%.9f] outside the step [%.9f, %.9f]", i, t[i].last_start,
            t[i].last, t0, t1);
      if (i > 0)
        CHECK(t[i].last_start >= t[i - 1].last_start + t[i - 1].last - 1e-9,
              "node %d starts before node %d ended", i, i - 1);
      sum += t[i].last;
    }
    CHECK(sum > 0 && sum <= t1 - t0 + 1e-6, "nodes %.6f s in a step of %.6f s", sum, t1 - t0);
    CHECK(cx_trace_add_step(tr, p, k) == CX_OK, "%s", cx_last_error());
  }
  CHECK(n_records == 2 * n * steps, "%d events recorded, expected %d", n_records, 2 * n * steps);
  CHECK(cx_trace_events(tr) == (int64_t)n * steps, "%lld trace events, expected %d",
        (long long)cx_trace_events(tr), n * steps);
  cx_profile pr;
  CHECK(cx_profile_collect(p, &pr) == CX_OK && pr.steps == steps, "collect: %s",
        cx_last_error());
  cx_profile_free(&pr);
  cx_trace_free(tr);

  /* a training program's forward pass run twice before backward: its nodes are read before
   * their events are queued again */
  CHECK(cx_program_set_profiling(p, true) == CX_OK, "%s", cx_last_error());
  int n_fwd = cx_program_forward_nodes(p);
  CHECK(cx_program_forward(p) == CX_OK && cx_program_forward(p) == CX_OK &&
            cx_program_backward(p) == CX_OK, "%s", cx_last_error());
  const cx_node_timing *t = cx_program_timings(p);
  for (int i = 0; i < n; i++)
    CHECK(t[i].calls == (i < n_fwd ? 2 : 1), "node %d: %lld calls", i, (long long)t[i].calls);

  /* an event that cannot be queued fails the pass, naming the node */
  CHECK(cx_program_set_profiling(p, true) == CX_OK, "%s", cx_last_error());
  n_records = 0;
  fail_record_at = 3; /* node 1's end */
  cx_status s = cx_program_forward(p);
  const char *name = cx_program_graph(p)->nodes[1].name;
  CHECK(s == CX_ERR_BACKEND && strstr(cx_last_error(), "made-up event failure") &&
            strstr(cx_last_error(), name),
        "failed event: status %d, '%s' (node '%s')", s, cx_last_error(), name);
  fail_record_at = -1;
  CHECK(cx_program_backward(p) == CX_OK, "after the failure: %s", cx_last_error());
  CHECK(cx_program_set_profiling(p, false) == CX_OK && !cx_program_timings(p), "off");
  cx_program_free(p);
}

/* ---- monitoring in the trainer ---- */

typedef struct seen {
  int n, with_device;
  cx_train_step_info last;
} seen;

static void on_step(void *user, const cx_train_step_info *s) {
  seen *w = user;
  w->n++;
  w->with_device += s->device;
  w->last = *s;
}

/* Trains the model for 2 epochs (16 steps, each logged) on backend b; the log in *log. */
static void train(const cx_backend *b, bool bar, seen *w, char **log) {
  size_t len = 0;
  FILE *f = open_memstream(log, &len);
  cx_train_ext ext = {.name = "seen", .self = w, .on_step = on_step};
  cx_train_opts o = cx_train_defaults();
  o.train_path = data_path;
  o.batch_size = BATCH;
  o.epochs = 2;
  o.log_every = 1;
  o.log = f;
  o.progress_bar = bar;
  o.backend = b;
  o.extensions = &ext;
  o.n_extensions = 1;
  cx_graph *g = tiny_cnn(SIDE, K);
  cx_train_result r;
  CHECK(cx_train(g, &o, &r) == CX_OK, "train: %s", cx_last_error());
  fclose(f);
  cx_graph_free(g);
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *at = strstr(s, what); at; at = strstr(at + 1, what)) n++;
  return n;
}

/* The log's first progress line (from its last redraw with a bar), for the reader of the
 * test's output. */
static void show(const char *label, const char *log) {
  const char *at = log ? strstr(log, "img/s") : NULL;
  if (!at) return;
  while (at > log && at[-1] != '\n' && at[-1] != '\r') at--;
  size_t len = strcspn(at, "\r\n");
  printf("%s: %.*s\n", label, (int)len, at);
}

static void test_progress(void) {
  cx_backend b = with_hooks();
  char *log = NULL;
  seen w = {0};
  stats_calls = 0;
  train(&b, false, &w, &log);
  char want[128];
  snprintf(want, sizeof want, "  GPU 42%% 1.50/4.00 GiB (plan %.1f MiB)  ETA",
           w.last.device_plan_mb);
  CHECK(w.n == 16 && w.with_device == 16 && stats_calls == 16, "%d steps, %d with the device, "
        "%d readings", w.n, w.with_device, stats_calls);
  CHECK(w.last.device_util == 42 && w.last.device_memory_used_mb == 1536 &&
            w.last.device_memory_total_mb == 4096 && w.last.device_plan_mb > 0,
        "step info: util %d, %g / %g MiB, plan %g MiB", w.last.device_util,
        w.last.device_memory_used_mb, w.last.device_memory_total_mb, w.last.device_plan_mb);
  show("with a device", log);
  CHECK(log && count(log, want) == 16, "'%s' on %d lines of:\n%s", want, log ? count(log, want) : 0,
        log ? log : "");
  free(log);

  log = NULL;
  train(&b, true, &(seen){0}, &log);
  show("progress bar", log);
  CHECK(log && count(log, " img/s GPU 42% 1.5G ETA ") == 16, "progress bar:\n%s", log ? log : "");
  free(log);

  /* a failing device: told once, no figures, training goes on */
  stats_fail = true;
  stats_calls = 0;
  log = NULL;
  w = (seen){0};
  train(&b, false, &w, &log);
  stats_fail = false;
  CHECK(stats_calls == 1 && w.n == 16 && w.with_device == 0, "%d readings, %d of %d steps with "
        "the device", stats_calls, w.with_device, w.n);
  CHECK(log && count(log, "warning: GPU monitoring stops: made-up monitoring failure\n") == 1 &&
            count(log, "GPU") == 1, "after a failure:\n%s", log ? log : "");
  free(log);

  /* the CPU: nothing of it */
  log = NULL;
  w = (seen){0};
  train(cx_backend_cpu(), false, &w, &log);
  show("CPU", log);
  CHECK(log && w.n == 16 && w.with_device == 0 && count(log, "GPU") == 0 &&
            count(log, "(data wait ") == 16, "CPU lines:\n%s", log ? log : "");
  free(log);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/cx_monitor_XXXXXX");
  if (!mkdtemp(dir)) {
    printf("FAIL: mkdtemp\n");
    return 1;
  }
  make_data();
  test_event_steps();
  test_progress();
  remove(data_path);
  rmdir(dir);
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
