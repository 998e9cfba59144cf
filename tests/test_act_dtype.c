/* bf16 activations between ops (core/act_dtype.c) and the kernels' bf16 loads and stores
 * (kernels/cpu/stage.c).
 *
 * 1. Conversions: cx_cpu_bf16_round rounds to nearest even exactly as cx_f32_to_bf16 does (ties,
 *    carries into the exponent, infinities, NaN) and cx_cpu_bf16_widen is exact, over vector
 *    bodies and tails.
 * 2. Kernels: each kernel that declares bf16 activations, run on channels-last bf16 arguments
 *    (all of them, and mixed with f32 ones), must give bit for bit the bf16 rounding of what it
 *    gives in f32 on the same (widened) values: the staging must not change a sum's order or
 *    skip a piece. BatchNormTrain (plain, with a fused ReLU, with a fused Clip), BatchNormGrad
 *    (each), Relu, ActivationGrad, Add, Sub, Mul, Div, Sum; channel counts whose tiles do not
 *    divide the staged pieces; where every argument is bf16, the loops that read it in place
 *    (kernels/cpu/bf16_vec.h) instead of staging it.
 * 3. ResNet-20 and MobileNetV2-0.5 in a bf16 training program: the pass stores activations in bf16
 *    (fewer arena bytes than with CX_ACT_DTYPE=f32), the step's loss and gradients agree with the
 *    f32-activation program within bf16's rounding of the values in between and are not
 *    identical to it; graph outputs and gradients stay f32; f32 programs store nothing in bf16.
 * Without AVX512-BF16 only part 1 runs (the portable loops) and the test exits 77: ctest's
 * skip. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "../core/ops/norm.h"
#include "../core/program.h"
#include "../kernels/cpu/cpu.h"
#include "../kernels/cpu/stage.h"
#include "check.h"
#include "model_compare.h"

static uint64_t rng = 0x9E3779B97F4A7C15u;
static float uniform(void) { /* xorshift64*, in [-1, 1) */
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return (float)((rng * 0x2545F4914F6CDD1Du) >> 40) / (float)(1 << 23) - 1.0f;
}

/* ---- 1. conversions ------------------------------------------------------------------------- */

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static void check_conversions(void) {
  enum { N = 77 }; /* four vectors and a tail */
  float x[N], back[N];
  uint16_t h[N];
  const uint32_t special[] = {0x3F808000u, /* a tie, even below: rounds down */
                              0x3F818000u, /* a tie, odd below: rounds up */
                              0x3F80FFFFu, 0x7F7FFFFFu /* rounds to inf */, 0x7F800000u,
                              0xFF800000u, 0x7FC00001u /* NaN */, 0x80000000u, 0x3FFFFFFFu};
  for (int i = 0; i < N; i++)
    x[i] = i < 9 ? from_bits(special[i]) : uniform() * powf(2.0f, (float)(i % 40 - 20));
  cx_cpu_bf16_round(h, x, N);
  int bad = 0;
  for (int i = 0; i < N; i++) {
    uint16_t want = cx_f32_to_bf16(x[i]);
    bool nan = isnan(x[i]);
    if (nan ? !isnan(cx_bf16_to_f32(h[i])) : h[i] != want) bad++;
  }
  CHECK(bad == 0, "cx_cpu_bf16_round: %d of %d differ from cx_f32_to_bf16", bad, N);
  cx_cpu_bf16_widen(back, h, N);
  bad = 0;
  for (int i = 0; i < N; i++) {
    float want = cx_bf16_to_f32(h[i]);
    if (isnan(want) ? !isnan(back[i]) : memcmp(&back[i], &want, sizeof want) != 0) bad++;
  }
  CHECK(bad == 0, "cx_cpu_bf16_widen: %d of %d differ from cx_bf16_to_f32", bad, N);
  printf("conversions: %d values round and widen as the scalar functions do\n", N);
}

/* ---- 2. kernels on bf16 arguments ----------------------------------------------------------- */

enum { MAX_ARGS = 10 };

/* One kernel argument in both forms: f32 (the values as f32 holds them) and, where `half`, bf16
 * (the same values rounded, the f32 form then holds them widened). */
typedef struct karg {
  cx_shape shape;
  bool act;  /* a 4-D activation: channels-last, and bf16 where `half` */
  bool half; /* stored in bf16 in the bf16 run */
  float *f;
  uint16_t *h;
} karg;

static karg arg_new(const cx_shape *s, bool act, bool half, float lo, float hi) {
  karg a = {*s, act, half, NULL, NULL};
  int64_t n = cx_shape_numel(s);
  a.f = malloc(sizeof(float) * (size_t)n);
  a.h = malloc(sizeof(uint16_t) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    float v = lo + (hi - lo) * (uniform() + 1) / 2;
    a.h[i] = cx_f32_to_bf16(v);
    a.f[i] = half ? cx_bf16_to_f32(a.h[i]) : v;
  }
  return a;
}

static void arg_free(karg *a) {
  free(a->f);
  free(a->h);
}

/* The tensor of argument a in the f32 run (bf16 false) or the bf16 run. */
static cx_tensor tensor_of(karg *a, bool bf16) {
  bool h = bf16 && a->half;
  cx_tensor t = cx_tensor_view(h ? CX_BF16 : CX_F32, &a->shape, h ? (void *)a->h : (void *)a->f);
  return a->act ? cx_tensor_channels_last_view(&t) : t;
}

/* Runs node n's CPU kernel on the arguments (inputs first), in bf16 or f32. */
static void run_kernel(const cx_graph *g, const cx_node *n, karg *args, bool bf16) {
  cx_tensor t[MAX_ARGS];
  for (int k = 0; k < n->n_in + n->n_out; k++) t[k] = tensor_of(&args[k], bf16);
  const cx_backend *cpu = cx_backend_cpu();
  const cx_kernel *k = cpu->find_kernel(cpu, n, t, n->n_in);
  CHECK(k && k->act_dtypes, "%s: no kernel taking bf16 activations", n->op->name);
  if (!k || !k->act_dtypes) return;
  cx_kernel_args a = {.node = n, .in = t, .n_in = n->n_in, .out = t + n->n_in, .n_out = n->n_out,
                      .training = true, .precision = CX_PRECISION_BF16, .graph = g};
  void *state = NULL;
  size_t scratch = 0;
  cx_status s = k->prepare ? k->prepare(&a, &state, &scratch) : CX_OK;
  void *mem = NULL;
  if (s == CX_OK && posix_memalign(&mem, 64, scratch + 64) != 0) s = CX_ERR_NOMEM;
  a.state = state, a.scratch = mem;
  if (s == CX_OK) s = k->run(&a);
  CHECK(s == CX_OK, "%s: %s", n->op->name, cx_last_error());
  if (k->release && state) k->release(state);
  free(mem);
}

/* Runs the node in f32, keeps its outputs, runs it on the bf16 arguments (fresh copies of the
 * inputs it updates in place), and compares: a bf16 output must be the f32 one rounded, an f32
 * output equal to it. */
static void check_node(const char *label, const cx_graph *g, int node, karg *args) {
  const cx_node *n = &g->nodes[node];
  int n_args = n->n_in + n->n_out;
  float *saved[MAX_ARGS] = {0};
  for (int k = 0; k < n_args; k++) { /* inputs BatchNormTrain updates (running statistics) too */
    saved[k] = malloc(sizeof(float) * (size_t)cx_shape_numel(&args[k].shape));
    memcpy(saved[k], args[k].f, sizeof(float) * (size_t)cx_shape_numel(&args[k].shape));
  }
  run_kernel(g, n, args, false);
  float *want[MAX_ARGS] = {0};
  for (int k = n->n_in; k < n_args; k++) {
    want[k] = malloc(sizeof(float) * (size_t)cx_shape_numel(&args[k].shape));
    memcpy(want[k], args[k].f, sizeof(float) * (size_t)cx_shape_numel(&args[k].shape));
  }
  for (int k = 0; k < n->n_in; k++)
    memcpy(args[k].f, saved[k], sizeof(float) * (size_t)cx_shape_numel(&args[k].shape));
  run_kernel(g, n, args, true);
  int bad = 0;
  int64_t total = 0;
  for (int k = n->n_in; k < n_args; k++) {
    int64_t m = cx_shape_numel(&args[k].shape);
    total += m;
    for (int64_t i = 0; i < m; i++) {
      bool ok = args[k].half ? args[k].h[i] == cx_f32_to_bf16(want[k][i])
                             : memcmp(&args[k].f[i], &want[k][i], sizeof(float)) == 0;
      if (!ok && bad++ < 3)
        printf("  %s output %d [%lld]: bf16 run %.8g, f32 run %.8g\n", label, k - n->n_in,
               (long long)i, args[k].half ? cx_bf16_to_f32(args[k].h[i]) : args[k].f[i],
               want[k][i]);
    }
  }
  CHECK(bad == 0, "%s: %d of %lld outputs differ from the f32 kernel's, rounded", label, bad,
        (long long)total);
  printf("%-44s %lld outputs, bf16 = f32 rounded\n", label, (long long)total);
  for (int k = 0; k < n_args; k++) free(saved[k]), free(want[k]);
}

/* A node of op on fresh inputs of the given shapes (their values do not matter: the kernel is
 * called directly). */
static int node_of(cx_graph *g, const char *op, const cx_shape *in, int n_in, int n_out) {
  int ids[MAX_ARGS];
  for (int k = 0; k < n_in; k++) {
    char name[16];
    snprintf(name, sizeof name, "in%d", k);
    ids[k] = cx_graph_input(g, name, CX_F32, &in[k]);
  }
  return cx_graph_node(g, op, "node", ids, n_in, n_out);
}

/* The attributes core/fuse.c gives a BatchNorm whose activation it fused: a ReLU's [0, inf), or
 * a Clip to [0, 1], whose upper bound the normalised values here cross. */
static void fuse_act(cx_graph *g, int node, int act) {
  cx_node_set_float(g, node, CX_BN_ACT_MIN, 0);
  cx_node_set_float(g, node, CX_BN_ACT_MAX, act == 1 ? INFINITY : 1);
}

static const char *const act_name[] = {"", "+ReLU", "+Clip[0,1]"};

/* BatchNormTrain (X, scale, B, mean, var) -> (Y, saved mean, saved invstd), then BatchNormGrad
 * (dY, X, scale, saved mean, saved invstd[, B]) -> (dX, dScale, dB) on its outputs; act: none,
 * ReLU or Clip fused (fuse_act); x_half and y_half say which activations are bf16. */
static void check_bn(int64_t c, int act, bool x_half, bool y_half) {
  bool relu = act != 0;
  char label[96];
  snprintf(label, sizeof label, "BatchNormTrain%s C=%lld X %s Y %s", act_name[act],
           (long long)c, x_half ? "bf16" : "f32", y_half ? "bf16" : "f32");
  cx_shape x = {4, {5, c, 9, 11}}, v = {1, {c}};
  cx_graph *g = cx_graph_new();
  int node = node_of(g, "BatchNormTrain", (cx_shape[]){x, v, v, v, v}, 5, 3);
  if (relu) fuse_act(g, node, act);
  karg a[8] = {arg_new(&x, true, x_half, -2, 3), arg_new(&v, false, false, 0.5f, 1.5f),
               arg_new(&v, false, false, -0.5f, 0.5f), arg_new(&v, false, false, 0, 0),
               arg_new(&v, false, false, 1, 1), arg_new(&x, true, y_half, 0, 0),
               arg_new(&v, false, false, 0, 0), arg_new(&v, false, false, 0, 0)};
  check_node(label, g, node, a);

  snprintf(label, sizeof label, "BatchNormGrad%s C=%lld dY %s X %s dX %s", act_name[act],
           (long long)c, y_half ? "bf16" : "f32", x_half ? "bf16" : "f32", x_half ? "bf16" : "f32");
  cx_graph *gg = cx_graph_new();
  int gn = node_of(gg, "BatchNormGrad", (cx_shape[]){x, x, v, v, v, v}, relu ? 6 : 5, 3);
  if (relu) fuse_act(gg, gn, act);
  karg b[9] = {arg_new(&x, true, y_half, -1, 1), a[0], a[1], a[6], a[7], a[2],
               arg_new(&x, true, x_half, 0, 0), arg_new(&v, false, false, 0, 0),
               arg_new(&v, false, false, 0, 0)};
  if (!relu) memmove(&b[5], &b[6], 3 * sizeof *b); /* no B input */
  check_node(label, gg, gn, b);
  arg_free(&b[0]);
  for (int k = relu ? 6 : 5; k < (relu ? 9 : 8); k++) arg_free(&b[k]);
  for (int k = 0; k < 8; k++) arg_free(&a[k]);
  cx_graph_free(gg);
  cx_graph_free(g);
}

/* Argument a as a ReLU's output: its negative values 0 (the exact zeros a ReLU gradient's mask
 * must leave out). */
static void relu_arg(karg *a) {
  for (int64_t i = 0; i < cx_shape_numel(&a->shape); i++)
    if (a->f[i] < 0) a->f[i] = 0, a->h[i] = 0;
}

/* An element-wise node with n_in inputs of one shape; half[k] for each argument (inputs first);
 * an ActivationGrad of Relu gets a Y that is a ReLU's output. */
static void check_eltwise(const char *label, const char *op, int n_in, const bool *half,
                          const char *act) {
  cx_shape x = {4, {3, 40, 7, 9}};
  cx_shape in[4] = {x, x, x, x};
  cx_graph *g = cx_graph_new();
  int node = node_of(g, op, in, n_in, 1);
  if (act) cx_node_set_string(g, node, "op", act);
  karg a[5];
  for (int k = 0; k <= n_in; k++) a[k] = arg_new(&x, true, half[k], -2, 2);
  if (act && !strcmp(act, "Relu")) relu_arg(&a[2]);
  check_node(label, g, node, a);
  for (int k = 0; k <= n_in; k++) arg_free(&a[k]);
  cx_graph_free(g);
}

static void check_kernels(void) {
  for (int act = 0; act < 3; act++) {
    check_bn(24, act, true, true);
    check_bn(16, act, true, true); /* tiles of 128: the gradient's sums read in place */
    check_bn(64, act, true, true);
    check_bn(20, act, true, false);
    check_bn(20, act, true, true); /* tiles of 160 floats: a short last tile, lanes masked */
    check_bn(1000, act, false, true); /* a tile (2000 floats) near a staged piece */
  }
  check_eltwise("Relu bf16 -> bf16", "Relu", 1, (bool[]){true, true}, NULL);
  check_eltwise("Relu f32 -> bf16", "Relu", 1, (bool[]){false, true}, NULL);
  check_eltwise("ActivationGrad(Relu) dY bf16, X f32, Y bf16", "ActivationGrad", 3,
                (bool[]){true, false, true, true}, "Relu");
  check_eltwise("Add bf16 + f32 -> bf16", "Add", 2, (bool[]){true, false, true}, NULL);
  check_eltwise("Add bf16 + bf16 -> f32", "Add", 2, (bool[]){true, true, false}, NULL);
  check_eltwise("Sub bf16 - bf16 -> bf16", "Sub", 2, (bool[]){true, true, true}, NULL);
  check_eltwise("Mul f32 * bf16 -> bf16", "Mul", 2, (bool[]){false, true, true}, NULL);
  check_eltwise("Div bf16 / f32 -> bf16", "Div", 2, (bool[]){true, false, true}, NULL);
  check_eltwise("Sum of 3, mixed", "Sum", 3, (bool[]){true, false, true, true}, NULL);
  /* all bf16: the loops that read and write it in place (kernels/cpu/bf16_vec.h) */
  check_eltwise("Add bf16 + bf16 -> bf16", "Add", 2, (bool[]){true, true, true}, NULL);
  check_eltwise("Sum of 3 bf16", "Sum", 3, (bool[]){true, true, true, true}, NULL);
  check_eltwise("ActivationGrad(Relu) all bf16", "ActivationGrad", 3,
                (bool[]){true, true, true, true}, "Relu");
}

/* ---- 3. whole models ------------------------------------------------------------------------- */

/* Every graph output and parameter gradient of p is f32; returns how many activations are bf16. */
static int check_f32_boundary(const char *label, cx_program *p) {
  const cx_graph *g = cx_program_graph(p);
  for (int k = 0; k < g->n_outputs; k++)
    CHECK(cx_program_value_tensor(p, g->outputs[k])->dtype == CX_F32, "%s: output '%s' is not f32",
          label, g->values[g->outputs[k]].name);
  for (int i = 0; i < cx_program_param_count(p); i++)
    CHECK(cx_program_param_grad(p, i)->dtype == CX_F32, "%s: gradient of '%s' is not f32", label,
          cx_program_param_name(p, i));
  return cx_program_bf16_act_count(p);
}

/* ||a's gradients - b's|| / ||b's|| over all parameters */
static double grads_error(cx_program *a, cx_program *b) {
  double d = 0, n = 0;
  for (int i = 0; i < cx_program_param_count(b); i++) {
    const float *x = cx_f32(cx_program_param_grad(a, i)), *y = cx_f32(cx_program_param_grad(b, i));
    for (int64_t j = 0; j < cx_tensor_numel(cx_program_param_grad(b, i)); j++) {
      d += ((double)x[j] - y[j]) * ((double)x[j] - y[j]);
      n += (double)y[j] * y[j];
    }
  }
  return n > 0 ? sqrt(d / n) : -1;
}

static double loss_error(cx_program *a, cx_program *b) {
  float la = *cx_f32(cx_program_tensor(a, "loss")), lb = *cx_f32(cx_program_tensor(b, "loss"));
  return fabs((double)la - lb) / fabs((double)lb);
}

/* h: bf16 activations, f: bf16 with f32 activations, o: f32. Storing activations in bf16 rounds
 * each once more, as PyTorch's autocast does: the step moves from f32's about as far as bf16's
 * arithmetic alone moves it (at initialisation, through training-mode BatchNorm, gradients differ
 * by tens of percent: test_bf16), never by much more. */
static void check_model(const char *spec) {
  cx_program *h = mc_run_as(spec, true, NULL, NULL, 16, CX_PRECISION_BF16);
  cx_program *f = mc_run_as(spec, true, "CX_ACT_DTYPE", "f32", 16, CX_PRECISION_BF16);
  cx_program *o = mc_run_as(spec, true, NULL, NULL, 16, CX_PRECISION_F32);
  if (h && f && o) {
    int n = check_f32_boundary(spec, h);
    size_t ah = cx_program_memory(h).arena_bytes, af = cx_program_memory(f).arena_bytes;
    printf("%s: %d activations bf16; arena %.2f MiB (f32 activations: %.2f MiB)\n", spec, n,
           ah / 1048576.0, af / 1048576.0);
    CHECK(n >= 20, "%s: only %d activations stored in bf16", spec, n);
    CHECK(cx_program_bf16_act_count(f) == 0 && cx_program_bf16_act_count(o) == 0,
          "%s: bf16 activations under CX_ACT_DTYPE=f32 or in an f32 program", spec);
    CHECK(ah < af, "%s: the arena did not shrink (%zu vs %zu bytes)", spec, ah, af);
    double lh = loss_error(h, o), lf = loss_error(f, o), gh = grads_error(h, o),
           gf = grads_error(f, o), hf = grads_error(h, f);
    printf("%s: against f32, loss %.2e (f32 activations %.2e), gradients %.2e (%.2e); bf16 "
           "against f32 activations: gradients %.2e\n", spec, lh, lf, gh, gf, hf);
    CHECK(lh <= 1e-2, "%s: loss %.2e off f32's", spec, lh);
    CHECK(hf > 0 && loss_error(h, f) > 0, "%s: identical with and without bf16 activations", spec);
    CHECK(gh <= 1.5 * gf + 0.05, "%s: gradients %.2e off f32's, bf16 arithmetic alone %.2e", spec,
          gh, gf);
  }
  cx_program_free(h);
  cx_program_free(f);
  cx_program_free(o);
}

int main(void) {
  check_conversions();
  const cx_backend *cpu = cx_backend_cpu();
  if (cpu->check_precision(cpu, CX_PRECISION_BF16) != CX_OK) {
    printf("skipped the bf16 kernels and models: %s\n", cx_last_error());
    return fails != 0 ? 1 : 77;
  }
  setenv("CX_CONV_WINOGRAD", "off", 1); /* bf16 primitives, nothing measured */
  check_kernels();
  check_model("resnet20:classes=10,input=1x28x28");
  check_model("mobilenet_v2:classes=10,input=3x32x32,width=0.5");
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
