/* The guard backend (kernels/guard/): memory host code cannot touch, running the CPU kernels.
 *
 * 1. Its memory: alloc gives aligned regions that host code cannot read (small ones and those in
 *    huge pages), copies and memsets in and out of them are exact, a copy or memset running past a region is refused, and free
 *    forgets a region (and names a pointer it never gave).
 * 2. It guards: a forked child that reads a program tensor's data, or writes a gradient's, dies
 *    with SIGSEGV; the same read of a CPU program's tensor does not.
 * 3. ResNet-20, a training step: loss, logits and every parameter gradient bit-identical to the
 *    CPU backend's, with the same channels-last choices, all read through cx_program_read; a
 *    freed program leaves no region behind.
 * 4. Windows nest: two threads stepping two guard programs (and reading between kernels) at once
 *    still compute what one alone does; a window closed under another thread's kernel would
 *    crash it. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../core/program.h"
#include "../core/rng.h"
#include "../kernels/cpu/cpu.h"
#include "../kernels/guard/guard.h"
#include "../models/tiny_cnn.h"
#include "../models/zoo.h"
#include "check.h"
#include "op_check.h"

/* Whether the host may read one byte at p: write(2) from an unreadable buffer fails with EFAULT
 * instead of raising SIGSEGV. */
static bool host_readable(const void *p) {
  int fd[2];
  if (pipe(fd) != 0) return true;
  ssize_t n = write(fd[1], p, 1);
  int err = errno;
  close(fd[0]);
  close(fd[1]);
  return n == 1 || err != EFAULT;
}

static void test_memory(void) {
  const cx_backend *b = cx_backend_guard();
  int live = cx_guard_live_regions();
  unsigned char host[128], back[128];
  for (int i = 0; i < 128; i++) host[i] = (unsigned char)(i * 7 + 1);
  unsigned char *p = b->alloc(100), *q = b->alloc(100);
  CHECK(p && q, "alloc failed");
  if (!p || !q) return;
  long page = sysconf(_SC_PAGESIZE);
  CHECK((uintptr_t)p % 64 == 0, "region %p not 64-byte aligned", (void *)p);
  /* 100 bytes round to 128, which end at the page that stays closed */
  CHECK((uintptr_t)(p + 128) % (uintptr_t)page == 0, "region does not end at a page boundary");
  CHECK(cx_guard_live_regions() == live + 2, "%d live regions, want %d", cx_guard_live_regions(),
        live + 2);
  CHECK(!host_readable(p) && !host_readable(q), "a fresh region is host-readable");

  CHECK(b->copy_async(p, CX_DEVICE_CPU, host, CX_DEVICE_CPU, 100, NULL) == CX_OK, "upload: %s",
        cx_last_error());
  CHECK(b->copy_async(q, CX_DEVICE_CPU, p, CX_DEVICE_CPU, 100, NULL) == CX_OK,
        "device to device: %s", cx_last_error());
  memset(back, 0, sizeof back);
  CHECK(b->copy_async(back, CX_DEVICE_CPU, q, CX_DEVICE_CPU, 100, NULL) == CX_OK &&
            b->sync(NULL) == CX_OK, "download: %s", cx_last_error());
  CHECK(memcmp(back, host, 100) == 0, "round trip through two regions changed the bytes");
  CHECK(!host_readable(p) && !host_readable(q), "a region stays host-readable after a copy");

  b->memset_zero(q + 10, 50, NULL);
  CHECK(b->sync(NULL) == CX_OK, "memset: %s", cx_last_error());
  CHECK(b->copy_async(back, CX_DEVICE_CPU, q, CX_DEVICE_CPU, 100, NULL) == CX_OK, "download");
  bool zeroed = true;
  for (int i = 0; i < 100; i++) zeroed &= back[i] == (i >= 10 && i < 60 ? 0 : host[i]);
  CHECK(zeroed, "memset_zero of bytes 10..59 wrote something else");

  /* the whole rounded region is the caller's; one byte more is an overrun */
  CHECK(b->copy_async(p, CX_DEVICE_CPU, host, CX_DEVICE_CPU, 128, NULL) == CX_OK,
        "a copy of the rounded size: %s", cx_last_error());
  CHECK(b->copy_async(p + 64, CX_DEVICE_CPU, host, CX_DEVICE_CPU, 65, NULL) == CX_ERR_ARG &&
            strstr(cx_last_error(), "overruns"), "an overrunning upload was not refused");
  CHECK(b->copy_async(back, CX_DEVICE_CPU, q + 1, CX_DEVICE_CPU, 128, NULL) == CX_ERR_ARG,
        "an overrunning download was not refused");
  b->memset_zero(p, 129, NULL);
  CHECK(b->sync(NULL) == CX_ERR_ARG && strstr(cx_last_error(), "memset"),
        "an overrunning memset was not reported at sync");
  CHECK(b->sync(NULL) == CX_OK, "a reported error is reported again");

  /* a region in huge pages (2 MiB and more): the same guarantees */
  size_t big_bytes = ((size_t)3 << 20) + 100, big_rounded = ((size_t)3 << 20) + 128;
  unsigned char *big = b->alloc(big_bytes);
  CHECK(big && (uintptr_t)(big + big_rounded) % (uintptr_t)page == 0,
        "a large region does not end at a page boundary");
  if (big) {
    CHECK(!host_readable(big) && !host_readable(big + big_rounded - 1),
          "a large region is host-readable");
    CHECK(b->copy_async(big + big_rounded - 128, CX_DEVICE_CPU, host, CX_DEVICE_CPU, 128, NULL)
              == CX_OK && b->copy_async(back, CX_DEVICE_CPU, big + big_rounded - 128,
                                        CX_DEVICE_CPU, 128, NULL) == CX_OK &&
              memcmp(back, host, 128) == 0, "the end of a large region does not round-trip");
    CHECK(b->copy_async(big, CX_DEVICE_CPU, host, CX_DEVICE_CPU, big_rounded + 1, NULL) ==
              CX_ERR_ARG, "an overrun of a large region was not refused");
    b->free(big);
  }
  b->free(q);
  CHECK(cx_guard_live_regions() == live + 1, "free did not forget its region");
  b->free(NULL);
  b->free(host);
  CHECK(b->sync(NULL) == CX_ERR_ARG && strstr(cx_last_error(), "not a live region"),
        "free of a pointer the guard never gave was not reported");
  b->free(p);
  CHECK(cx_guard_live_regions() == live, "regions left after freeing all");
}

/* ResNet-20 with labels and a cross-entropy loss, compiled for training on b. */
static cx_program *resnet20(const cx_backend *b, int64_t batch) {
  cx_graph *g = NULL;
  if (cx_model_build("resnet20", &g, NULL) != CX_OK) {
    CHECK(0, "build: %s", cx_last_error());
    return NULL;
  }
  int labels = cx_graph_input(g, "labels", CX_S64, &S(-1));
  cx_graph_mark_output(g, cx_graph_op(g, "SoftmaxCrossEntropyLoss", "loss",
                                      (int[]){cx_graph_find_value(g, "logits"), labels}, 2));
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = batch, .training = true, .loss = "loss", .backend = b, .seed = 3};
  cx_status s = cx_program_compile(g, &o, &p);
  cx_graph_free(g);
  CHECK(s == CX_OK, "compile on %s: %s", b->name, cx_last_error());
  return s == CX_OK ? p : NULL;
}

/* Fills input and labels through cx_program_write; one step. */
static cx_status feed_and_step(cx_program *p, const char *input, int64_t batch) {
  const cx_tensor *x = cx_program_tensor(p, input), *y = cx_program_tensor(p, "labels");
  float *xs = malloc(cx_tensor_nbytes(x));
  int64_t *ys = malloc(cx_tensor_nbytes(y));
  for (int64_t i = 0; i < cx_tensor_numel(x); i++) xs[i] = cx_rng_normal(21, (uint64_t)i);
  for (int64_t i = 0; i < batch; i++) ys[i] = i % 10;
  cx_status s = cx_program_write(p, x, xs);
  if (s == CX_OK) s = cx_program_write(p, y, ys);
  if (s == CX_OK) s = cx_program_forward(p);
  if (s == CX_OK) s = cx_program_backward(p);
  free(xs);
  free(ys);
  return s;
}

/* Both tensors downloaded and compared byte for byte. */
static bool same_bytes(const cx_program *a, const cx_tensor *ta, const cx_program *b,
                       const cx_tensor *tb) {
  size_t n = cx_tensor_nbytes(ta);
  if (n != cx_tensor_nbytes(tb)) return false;
  void *x = malloc(n), *y = malloc(n);
  bool same = cx_program_read(a, ta, x) == CX_OK && cx_program_read(b, tb, y) == CX_OK &&
              memcmp(x, y, n) == 0;
  free(x);
  free(y);
  return same;
}

/* Runs f(p) in a child and returns how it ended: the signal that killed it, or 0 for a normal
 * exit. The child puts SIGSEGV back to its default (a sanitizer's handler would exit instead). */
static int child_dies_of(void (*f)(cx_program *), cx_program *p) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL);
    f(p);
    _exit(0);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
  return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

static volatile float sink;

static void read_input(cx_program *p) { sink = ((const float *)cx_program_tensor(p, "input")->data)[0]; }

static void write_grad(cx_program *p) { ((float *)cx_program_param_grad(p, 0)->data)[0] = 1; }

static void test_guards(cx_program *guarded, cx_program *cpu) {
  int sig = child_dies_of(read_input, guarded);
  CHECK(sig == SIGSEGV, "reading a guard program's input from the host: %s %d, want SIGSEGV",
        sig > 0 ? "signal" : "exit", sig);
  sig = child_dies_of(write_grad, guarded);
  CHECK(sig == SIGSEGV, "writing a guard program's gradient from the host: %s %d, want SIGSEGV",
        sig > 0 ? "signal" : "exit", sig);
  sig = child_dies_of(read_input, cpu);
  CHECK(sig == 0, "reading a CPU program's input from the host: signal %d, want a normal exit",
        sig);
}

static void test_resnet20(void) {
  int live = cx_guard_live_regions();
  const int64_t batch = 4;
  cx_program *g = resnet20(cx_backend_guard(), batch), *c = resnet20(cx_backend_cpu(), batch);
  if (!g || !c) {
    cx_program_free(g);
    cx_program_free(c);
    return;
  }
  CHECK(cx_guard_live_regions() == live + 3, "a program holds %d regions, want 3 (arena, "
        "persistent block, scratch)", cx_guard_live_regions() - live);
  CHECK(cx_program_channels_last_count(g) == cx_program_channels_last_count(c),
        "channels-last values: guard %d, cpu %d (the wrappers must keep the layouts flags)",
        cx_program_channels_last_count(g), cx_program_channels_last_count(c));
  cx_status sg = feed_and_step(g, "input", batch), sc = feed_and_step(c, "input", batch);
  CHECK(sg == CX_OK && sc == CX_OK, "step: %s", cx_last_error());
  CHECK(same_bytes(g, cx_program_tensor(g, "loss"), c, cx_program_tensor(c, "loss")),
        "losses differ");
  CHECK(same_bytes(g, cx_program_tensor(g, "logits"), c, cx_program_tensor(c, "logits")),
        "logits differ");
  int differ = 0;
  for (int k = 0; k < cx_program_param_count(c); k++)
    if (!same_bytes(g, cx_program_param_grad(g, k), c, cx_program_param_grad(c, k))) {
      if (!differ++) printf("first gradient that differs: %s\n", cx_program_param_name(c, k));
    }
  CHECK(differ == 0, "%d of %d parameter gradients differ from the CPU's", differ,
        cx_program_param_count(c));
  float loss = 0;
  cx_program_read(g, cx_program_tensor(g, "loss"), &loss);
  printf("resnet20 batch %lld: guard loss %.6f, %d gradients bit-identical to the CPU's\n",
         (long long)batch, loss, cx_program_param_count(c) - differ);
  test_guards(g, c);
  cx_program_free(g);
  cx_program_free(c);
  CHECK(cx_guard_live_regions() == live, "a freed program left %d regions",
        cx_guard_live_regions() - live);
}

/* ---- two threads at once -------------------------------------------------------------------- */

enum { STEPS = 20 };

typedef struct worker {
  cx_program *p;
  float loss[STEPS];
  cx_status s;
  char msg[512]; /* the thread's message: cx_last_error is per thread */
} worker;

/* Steps and reads, so copies of one thread fall inside the other's kernels. The weights do not
 * change (no optimizer), so every step's loss is the same. */
static void *work(void *arg) {
  worker *w = arg;
  for (int i = 0; i < STEPS && w->s == CX_OK; i++) {
    w->s = feed_and_step(w->p, "images", 4);
    if (w->s == CX_OK) w->s = cx_program_read(w->p, cx_program_tensor(w->p, "loss"), &w->loss[i]);
  }
  if (w->s != CX_OK) snprintf(w->msg, sizeof w->msg, "%s", cx_last_error());
  return NULL;
}

static void test_threads(void) {
  cx_graph *net = cx_tiny_cnn(3, 16, 10, 5);
  worker w[2] = {{0}};
  cx_compile_opts o = {.batch = 4, .training = true, .loss = "loss",
                       .backend = cx_backend_guard(), .seed = 3};
  for (int k = 0; k < 2; k++)
    CHECK(cx_program_compile(net, &o, &w[k].p) == CX_OK, "compile: %s", cx_last_error());
  cx_graph_free(net);
  if (!w[0].p || !w[1].p) {
    cx_program_free(w[0].p);
    cx_program_free(w[1].p);
    return;
  }
  pthread_t t[2];
  for (int k = 0; k < 2; k++) pthread_create(&t[k], NULL, work, &w[k]);
  for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
  for (int k = 0; k < 2; k++) CHECK(w[k].s == CX_OK, "thread %d: %s", k, w[k].msg);
  int differ = 0;
  for (int i = 0; i < STEPS; i++)
    differ += memcmp(&w[0].loss[i], &w[0].loss[0], sizeof(float)) != 0 ||
              memcmp(&w[1].loss[i], &w[0].loss[0], sizeof(float)) != 0;
  CHECK(differ == 0, "%d of %d steps on two threads gave another loss than the first", differ,
        STEPS);
  printf("two threads, %d steps each: every loss %.6f\n", STEPS, w[0].loss[0]);
  for (int k = 0; k < 2; k++) cx_program_free(w[k].p);
}

int main(void) {
  test_memory();
  test_resnet20();
  test_threads();
  printf("%s\n", fails ? "FAILED" : "all guard checks passed");
  return fails != 0;
}
