/* Convolution speed as training sees it: each layer is a one-Conv graph compiled as a training
 * program (X and W are parameters, so backward computes dX and dW), timed over
 * cx_program_forward + cx_program_backward. Prints one tab-separated line per layer; depthwise
 * layers are also timed through oneDNN (CX_CONV_DEPTHWISE=dnnl) to show what the hand-written path
 * gains. bench/conv_torch.py runs it layer by layer beside PyTorch and prints the joint table
 * (bench/run_conv.sh).
 *
 *   bench_conv [--threads N] [--batch N] [--seconds S] [--layer I] [--list] [--cpu-time]
 *   (defaults: 2 threads, batch 128, 0.4 s per measurement, every layer; --list only names them)
 *
 * --cpu-time times with the process's CPU time (all threads) instead of the wall clock: on a
 * machine shared with other jobs that stays fair to both sides, at the price of not seeing idle
 * threads (run it with OMP_WAIT_POLICY=passive so that waiting threads do not spin). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/program.h"
#include "../kernels/cpu/cpu.h"

typedef struct layer {
  const char *name;
  int c, h, w, m, k, stride, group;
} layer;

/* ResNet-20 and CIFAR-size MobileNetV2 layers (3x3 convs pad 1, 1x1 pad 0). */
static const layer layers[] = {
    {"r20 3x3 16x32x32", 16, 32, 32, 16, 3, 1, 1},
    {"r20 3x3 16x32x32 s2 ->32", 16, 32, 32, 32, 3, 2, 1},
    {"r20 3x3 32x16x16", 32, 16, 16, 32, 3, 1, 1},
    {"r20 3x3 64x8x8", 64, 8, 8, 64, 3, 1, 1},
    {"mv2 stem 3x3 3x32x32 ->32", 3, 32, 32, 32, 3, 1, 1},
    {"mv2 1x1 32x32x32 ->16", 32, 32, 32, 16, 1, 1, 1},
    {"mv2 1x1 16x32x32 ->96", 16, 32, 32, 96, 1, 1, 1},
    {"mv2 1x1 144x16x16 ->32", 144, 16, 16, 32, 1, 1, 1},
    {"mv2 1x1 96x8x8 ->576", 96, 8, 8, 576, 1, 1, 1},
    {"mv2 dw 32x32x32", 32, 32, 32, 32, 3, 1, 32},
    {"mv2 dw 96x16x16 s2", 96, 16, 16, 96, 3, 2, 96},
    {"mv2 dw 144x16x16", 144, 16, 16, 144, 3, 1, 144},
    {"mv2 dw 144x8x8", 144, 8, 8, 144, 3, 1, 144},
    {"mv2 dw 576x8x8", 576, 8, 8, 576, 3, 1, 576},
};

static clockid_t clock_id = CLOCK_MONOTONIC;

static double now(void) {
  struct timespec t;
  clock_gettime(clock_id, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void fill(cx_tensor *t, unsigned seed) {
  float *f = t->data;
  for (int64_t i = 0; i < cx_tensor_numel(t); i++) {
    seed = seed * 1664525u + 1013904223u;
    f[i] = (float)(seed >> 8) / (float)(1u << 24) - 0.5f;
  }
}

static cx_status build(const layer *l, int batch, cx_program **p) {
  cx_graph *g = cx_graph_new();
  cx_shape xs = {4, {batch, l->c, l->h, l->w}}, ws = {4, {l->m, l->c / l->group, l->k, l->k}};
  int in[2] = {cx_graph_param(g, "x", &xs, NULL), cx_graph_param(g, "w", &ws, NULL)};
  int node = cx_graph_node(g, "Conv", "conv", in, 2, 1);
  int64_t pad = l->k / 2;
  cx_node_set_ints(g, node, "pads", (int64_t[]){pad, pad, pad, pad}, 4);
  cx_node_set_ints(g, node, "strides", (int64_t[]){l->stride, l->stride}, 2);
  cx_node_set_int(g, node, "group", l->group);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  cx_compile_opts o = {.batch = batch, .training = true, .backend = cx_backend_cpu()};
  cx_status s = cx_graph_status(g);
  if (s == CX_OK) s = cx_program_compile(g, &o, p);
  cx_graph_free(g);
  if (s != CX_OK) return s;
  fill(cx_program_tensor(*p, "x"), 1);
  fill(cx_program_tensor(*p, "w"), 2);
  fill(cx_program_tensor(*p, "conv@grad"), 3);
  return CX_OK;
}

/* Best time of one forward + backward step, after a warm-up step. */
static cx_status time_step(cx_program *p, double seconds, double *best) {
  *best = 1e30;
  double start = now();
  for (int i = 0; i < 3 || now() - start < seconds; i++) {
    double t0 = now();
    CX_TRY(cx_program_forward(p));
    CX_TRY(cx_program_backward(p));
    double t = now() - t0;
    if (i > 0 && t < *best) *best = t;
  }
  return CX_OK;
}

/* GFLOP/s of forward + dX + dW (three convolutions' worth of multiply-adds). */
static cx_status measure(const layer *l, int batch, double seconds, double *gflops) {
  cx_program *p = NULL;
  double t;
  CX_TRY(build(l, batch, &p));
  cx_status s = time_step(p, seconds, &t);
  const cx_tensor *y = cx_program_tensor(p, "conv");
  double flops = 3.0 * 2.0 * (double)cx_tensor_numel(y) * (l->c / l->group) * l->k * l->k;
  cx_program_free(p);
  *gflops = flops / t * 1e-9;
  return s;
}

static void print_line(const layer *l, int batch, int threads, double ours, double dnnl) {
  printf("%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t", l->name, batch, l->c, l->h, l->w, l->m,
         l->k, l->stride, l->group, threads);
  printf(ours > 0 ? "%.2f\t" : "-\t", ours);
  printf(dnnl > 0 ? "%.2f\n" : "-\n", dnnl);
  fflush(stdout);
}

static cx_status run_layer(const layer *l, int batch, int threads, double seconds) {
  double ours, dnnl = 0;
  CX_TRY(measure(l, batch, seconds, &ours));
  if (l->group > 1) {
    setenv("CX_CONV_DEPTHWISE", "dnnl", 1);
    cx_status s = measure(l, batch, seconds, &dnnl);
    unsetenv("CX_CONV_DEPTHWISE");
    CX_TRY(s);
  }
  print_line(l, batch, threads, ours, dnnl);
  return CX_OK;
}

int main(int argc, char **argv) {
  int threads = 2, batch = 128, only = -1, n_layers = (int)(sizeof layers / sizeof *layers);
  double seconds = 0.4;
  bool list = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--list") == 0) list = true;
    else if (strcmp(a, "--cpu-time") == 0) clock_id = CLOCK_PROCESS_CPUTIME_ID;
    else if (v && strcmp(a, "--threads") == 0) threads = atoi(argv[++i]);
    else if (v && strcmp(a, "--batch") == 0) batch = atoi(argv[++i]);
    else if (v && strcmp(a, "--seconds") == 0) seconds = atof(argv[++i]);
    else if (v && strcmp(a, "--layer") == 0) only = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_conv [--threads N] [--batch N] [--seconds S] [--layer I] "
                      "[--list] [--cpu-time]\n");
      return 2;
    }
  }
  if (only >= n_layers) {
    fprintf(stderr, "bench_conv: --layer %d: there are %d layers\n", only, n_layers);
    return 2;
  }
  omp_set_num_threads(threads);
  printf("# name\tbatch\tc\th\tw\tm\tk\tstride\tgroup\tthreads\tcompress_gflops\tdnnl_gflops\n");
  for (int i = 0; i < n_layers; i++) {
    if (only >= 0 && i != only) continue;
    cx_status s = list ? (print_line(&layers[i], batch, threads, 0, 0), CX_OK)
                       : run_layer(&layers[i], batch, threads, seconds);
    if (s != CX_OK) {
      fprintf(stderr, "bench_conv: %s: %s\n", layers[i].name, cx_last_error());
      return 1;
    }
  }
  return 0;
}
