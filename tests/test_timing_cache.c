/* The timing cache (kernels/cpu/tune.h): choices kept in memory and in the file, the first line
 * written winning over a later one for the same key (two processes measuring at once), keys of
 * another machine ignored, a file that cannot be written costing nothing but persistence; the
 * timing of a kernel on zeroed stand-ins; and a Winograd-eligible convolution recording its
 * choice there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/program.h"
#include "../kernels/cpu/cpu.h"
#include "../kernels/cpu/tune.h"
#include "../models/zoo.h"
#include "../train/train_graph.h"
#include "check.h"

static char path[256];

static int count_lines(const char *needle) {
  FILE *f = fopen(path, "r");
  char line[1024];
  int n = 0;
  while (f && fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
  if (f) fclose(f);
  return n;
}

/* The machine prefix this process writes: the text before "/" + key on the line it recorded. */
static void machine_prefix(char *out, size_t n) {
  FILE *f = fopen(path, "r");
  char line[1024];
  out[0] = 0;
  while (f && fgets(line, sizeof line, f)) {
    char *k = strstr(line, "/probe-key ");
    if (k) snprintf(out, n, "%.*s", (int)(k - line), line);
  }
  if (f) fclose(f);
}

static void append(const char *line) {
  FILE *f = fopen(path, "a");
  fputs(line, f);
  fclose(f);
}

static void check_cache(void) {
  int c = -1;
  CHECK(!cx_tune_lookup("probe-key", &c), "a key nobody recorded was found");
  CHECK(cx_tune_record("probe-key", 1) == 1, "recording a new key returns another choice");
  CHECK(cx_tune_lookup("probe-key", &c) && c == 1, "a recorded key reads back %d", c);
  CHECK(cx_tune_record("probe-key", 0) == 1, "a second record of a key replaced the first");
  CHECK(count_lines("/probe-key ") == 1, "the key is in the file %d times, not once",
        count_lines("/probe-key "));
  char prefix[256], line[512];
  machine_prefix(prefix, sizeof prefix);
  CHECK(prefix[0] != 0, "no machine prefix in the file");

  /* another process recorded this key first: its choice is read, and adopted on a record */
  snprintf(line, sizeof line, "%s/from-file 1\n", prefix);
  append(line);
  CHECK(cx_tune_lookup("from-file", &c) && c == 1, "a key written by another process reads %d", c);
  snprintf(line, sizeof line, "%s/raced 1\n", prefix);
  append(line);
  CHECK(cx_tune_record("raced", 0) == 1, "a record lost to an earlier line keeps its own choice");

  /* a line of another machine does not count */
  append("GenuineIntel-6-85-4/dnnl2.6.3/foreign 1\n");
  CHECK(!cx_tune_lookup("foreign", &c), "another machine's line was taken");
}

static int runs;
static cx_status count_run(const cx_kernel_args *a) {
  runs++;
  const float *x = a->in[0].data;
  float *y = a->out[0].data;
  for (int i = 0; i < 6; i++) {
    if (x[i] != 0) return cx_fail(CX_ERR_ARG, "stand-in not zeroed");
    y[i] = 1;
  }
  return CX_OK;
}

static void check_time(void) {
  float xd[6] = {1, 2, 3, 4, 5, 6}, yd[6] = {0};
  cx_shape s = cx_shape_make(2, (int64_t[]){2, 3});
  cx_tensor x = cx_tensor_view(CX_F32, &s, xd), y = cx_tensor_view(CX_F32, &s, yd);
  cx_node node = {.name = "probe"};
  cx_kernel_args a = {.node = &node, .in = &x, .n_in = 1, .out = &y, .n_out = 1};
  double ms = -1;
  cx_status st = cx_tune_time(&a, count_run, NULL, 16, &ms);
  CHECK(st == CX_OK, "timing failed: %s", cx_last_error());
  CHECK(runs == 4, "a fast kernel ran %d times, not a warm-up and 3 timed", runs);
  CHECK(ms >= 0 && ms < 1e3, "its time is %g ms", ms);
  CHECK(yd[0] == 0 && xd[0] == 1, "the real tensors were touched");
}

/* A ResNet-20 training program at batch 2: its 3x3 16-channel layers fit Winograd, so compiling
 * it measures them and records one line per Conv and ConvGrad shape, and compiling again adds
 * none. */
static void check_conv(void) {
  unsetenv("CX_CONV_WINOGRAD");
  int before = count_lines("conv-algorithm-v3:"), after[2] = {0, 0};
  for (int round = 0; round < 2; round++) {
    cx_graph *m = NULL, *g = NULL;
    cx_program *p = NULL;
    const char *spec = "resnet20:classes=10,input=3x16x16";
    CHECK(cx_model_build(spec, &m, NULL) == CX_OK, "%s: %s", spec, cx_last_error());
    CHECK(m && cx_train_graph(m, 0, 0, &g) == CX_OK, "%s: %s", spec, cx_last_error());
    cx_compile_opts co = {.batch = 2, .training = true, .loss = "loss",
                          .backend = cx_backend_cpu()};
    CHECK(g && cx_program_compile(g, &co, &p) == CX_OK, "%s: %s", spec, cx_last_error());
    cx_program_free(p);
    cx_graph_free(g);
    cx_graph_free(m);
    after[round] = count_lines("conv-algorithm-v3:");
  }
  CHECK(after[0] - before >= 6, "%d timing lines after the first compile, not >= 6",
        after[0] - before);
  CHECK(after[1] == after[0], "the second compile measured again (%d lines more)",
        after[1] - after[0]);
}

int main(void) {
  snprintf(path, sizeof path, "/tmp/cx-timing-cache-%d.txt", (int)getpid());
  unlink(path);
  setenv("CX_TIMING_CACHE", path, 1);
  check_cache();
  check_time();
  check_conv();
  unlink(path);
  if (fails) fprintf(stderr, "%d checks failed\n", fails);
  else printf("timing cache: ok\n");
  return fails ? 1 : 0;
}
