/* Optimizers, gradient clipping, EMA, loss scaling and gradient accumulation.
 *
 * Each optimizer takes ten steps on a fixed problem (gradients a * (w - c) plus noise, a varying
 * learning rate) while a reference written in double, from PyTorch's and timm's formulas, takes
 * the same steps with the same gradients; AdamW and SGD-Nesterov are also run in PyTorch itself.
 * Accumulation is checked on a real training program: k micro-batches give the gradient of the
 * whole batch. */
#include <float.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/program.h"
#include "../core/rng.h"
#include "../kernels/cpu/eltwise_engine.h"
#include "../kernels/cpu/cpu.h"
#include "../models/tiny_cnn.h"
#include "../train/ema.h"
#include "../train/grad_clip.h"
#include "../train/loss_scale.h"
#include "../train/optim.h"
#include "op_check.h"
#include "python_ref.h"
#include "check.h"

/* ---- the problem: a few tensors of different ranks and sizes ---- */

enum { NP = 5, STEPS = 10 };
static const char *const names[NP] = {"fc.weight", "fc.bias", "big.weight", "bn.weight",
                                      "zero.weight"};
static const cx_shape shapes[NP] = {{2, {6, 5}}, {1, {5}}, {2, {200, 201}}, {1, {7}}, {2, {3, 3}}};

typedef struct problem {
  cx_tensor w[NP], g[NP];
  cx_tensor *wp[NP], *gp[NP];
  float *a[NP], *c[NP];
} problem;

static float *floats(int64_t n) { return calloc((size_t)n + 1, sizeof(float)); }

/* The CPU backend: tensors in host memory are its tensors, so the test reads them directly. */
static const cx_backend *cpu;

/* The gradient operations on a list, made for the call (train_steps makes its own once). */
static cx_grad_ops *grad_ops(cx_tensor *const *g, int n) {
  cx_grad_ops *o = NULL;
  CHECK(cx_grad_ops_create(cpu, NULL, n, g, false, &o) == CX_OK, "grad ops: %s", cx_last_error());
  return o;
}

static float global_norm(cx_tensor *const *g, int n) {
  cx_grad_ops *o = grad_ops(g, n);
  float norm = NAN;
  CHECK(o && cx_grad_global_norm(o, g, &norm) == CX_OK, "global norm: %s", cx_last_error());
  cx_grad_ops_free(o);
  return norm;
}

static float clip_global_norm(cx_tensor *const *g, int n, float max_norm) {
  cx_grad_ops *o = grad_ops(g, n);
  float norm = NAN;
  CHECK(o && cx_grad_clip_global_norm(o, g, max_norm, &norm) == CX_OK, "clip: %s",
        cx_last_error());
  cx_grad_ops_free(o);
  return norm;
}

static bool grads_finite(cx_tensor *const *g, int n) {
  cx_grad_ops *o = grad_ops(g, n);
  bool finite = false;
  CHECK(o && cx_grads_finite(o, g, &finite) == CX_OK, "finite: %s", cx_last_error());
  cx_grad_ops_free(o);
  return finite;
}

static void grad_scale(cx_tensor *const *g, int n, float factor) {
  cx_grad_ops *o = grad_ops(g, n);
  CHECK(o && cx_grad_scale(o, g, factor) == CX_OK, "scale: %s", cx_last_error());
  cx_grad_ops_free(o);
}

static bool unscale(const cx_loss_scaler *s, cx_tensor *const *g, int n) {
  cx_grad_ops *o = grad_ops(g, n);
  bool finite = false;
  CHECK(o && cx_loss_scaler_unscale(s, o, g, &finite) == CX_OK, "unscale: %s", cx_last_error());
  cx_grad_ops_free(o);
  return finite;
}

static void problem_init(problem *p) {
  for (int k = 0; k < NP; k++) {
    int64_t n = cx_shape_numel(&shapes[k]);
    p->w[k] = cx_tensor_view(CX_F32, &shapes[k], floats(n));
    p->g[k] = cx_tensor_view(CX_F32, &shapes[k], floats(n));
    p->wp[k] = &p->w[k];
    p->gp[k] = &p->g[k];
    p->a[k] = floats(n);
    p->c[k] = floats(n);
    float *w = p->w[k].data;
    for (int64_t i = 0; i < n; i++) {
      w[i] = k == 4 ? 0.0f : cx_rng_normal(cx_rng_key(1, (uint64_t)k, 0), (uint64_t)i);
      p->a[k][i] = 0.5f + 1.5f * cx_rng_uniform(cx_rng_key(2, (uint64_t)k, 0), (uint64_t)i);
      p->c[k][i] = cx_rng_normal(cx_rng_key(3, (uint64_t)k, 0), (uint64_t)i);
    }
  }
}

static void problem_free(problem *p) {
  for (int k = 0; k < NP; k++) {
    free(p->w[k].data);
    free(p->g[k].data);
    free(p->a[k]);
    free(p->c[k]);
  }
}

/* g = a * (w - c) + noise(step), in float. */
static void problem_grads(problem *p, int step, float noise) {
  for (int k = 0; k < NP; k++) {
    const float *w = p->w[k].data;
    float *g = p->g[k].data;
    for (int64_t i = 0; i < cx_tensor_numel(&p->w[k]); i++)
      g[i] = p->a[k][i] * (w[i] - p->c[k][i]) +
             noise * cx_rng_normal(cx_rng_key(4, (uint64_t)step, (uint64_t)k), (uint64_t)i);
  }
}

static float lr_at(float base, int step) { return base * (1.0f - 0.05f * (float)step); }

/* ---- the reference optimizers, in double ---- */

typedef struct ref_opt {
  cx_optim_config c;
  double *w[NP], *s0[NP], *s1[NP];
  int64_t n[NP];
  bool decay[NP];
  int t;
} ref_opt;

static void ref_init(ref_opt *r, const cx_optim_config *c, const problem *p) {
  *r = (ref_opt){.c = *c};
  for (int k = 0; k < NP; k++) {
    r->n[k] = cx_tensor_numel(&p->w[k]);
    r->w[k] = calloc((size_t)r->n[k], sizeof(double));
    r->s0[k] = calloc((size_t)r->n[k], sizeof(double));
    r->s1[k] = calloc((size_t)r->n[k], sizeof(double));
    for (int64_t i = 0; i < r->n[k]; i++) r->w[k][i] = ((const float *)p->w[k].data)[i];
    r->decay[k] = c->decay_norm_and_bias || shapes[k].ndim >= 2;
  }
}

static void ref_free(ref_opt *r) {
  for (int k = 0; k < NP; k++) {
    free(r->w[k]);
    free(r->s0[k]);
    free(r->s1[k]);
  }
}

/* torch.optim.SGD: L2 decay into the gradient; the buffer starts as the first gradient. */
static void ref_sgd(ref_opt *r, int k, const float *g, double lr, double wd) {
  double mu = r->c.momentum;
  for (int64_t i = 0; i < r->n[k]; i++) {
    double d = g[i] + wd * r->w[k][i];
    if (mu != 0) {
      r->s0[k][i] = r->t == 1 ? d : mu * r->s0[k][i] + d;
      d = r->c.nesterov ? d + mu * r->s0[k][i] : r->s0[k][i];
    }
    r->w[k][i] -= lr * d;
  }
}

/* The Adam direction with bias correction, for AdamW and LAMB; updates the moments. */
static double ref_adam_dir(ref_opt *r, int k, int64_t i, double g) {
  double b1 = r->c.beta1, b2 = r->c.beta2;
  r->s0[k][i] = b1 * r->s0[k][i] + (1 - b1) * g;
  r->s1[k][i] = b2 * r->s1[k][i] + (1 - b2) * g * g;
  double mhat = r->s0[k][i] / (1 - pow(b1, r->t)), vhat = r->s1[k][i] / (1 - pow(b2, r->t));
  return mhat / (sqrt(vhat) + r->c.eps);
}

static void ref_adamw(ref_opt *r, int k, const float *g, double lr, double wd) {
  for (int64_t i = 0; i < r->n[k]; i++) {
    double u = ref_adam_dir(r, k, i, g[i]);
    r->w[k][i] = r->w[k][i] * (1 - lr * wd) - lr * u;
  }
}

static void ref_lamb(ref_opt *r, int k, const float *g, double lr, double wd) {
  double *u = calloc((size_t)r->n[k], sizeof(double)), wn = 0, un = 0;
  for (int64_t i = 0; i < r->n[k]; i++) {
    u[i] = ref_adam_dir(r, k, i, g[i]) + wd * r->w[k][i];
    wn += r->w[k][i] * r->w[k][i];
    un += u[i] * u[i];
  }
  bool adapt = wd != 0 || r->c.always_adapt;
  double trust = adapt && wn > 0 && un > 0 ? sqrt(wn) / sqrt(un) : 1.0;
  for (int64_t i = 0; i < r->n[k]; i++) r->w[k][i] -= lr * trust * u[i];
  free(u);
}

static void ref_step(ref_opt *r, const problem *p, double lr) {
  r->t++;
  for (int k = 0; k < NP; k++) {
    double wd = r->decay[k] ? r->c.weight_decay : 0;
    const float *g = p->g[k].data;
    switch (r->c.kind) {
    case CX_OPTIM_SGD: ref_sgd(r, k, g, lr, wd); break;
    case CX_OPTIM_ADAMW: ref_adamw(r, k, g, lr, wd); break;
    case CX_OPTIM_LAMB: ref_lamb(r, k, g, lr, wd); break;
    }
  }
}

/* max |ours - ref| / max(max |ref|, 1e-2) over parameter k. */
static double ref_error(const ref_opt *r, const problem *p, int k) {
  double diff = 0, scale = 1e-2;
  const float *w = p->w[k].data;
  for (int64_t i = 0; i < r->n[k]; i++) {
    diff = fmax(diff, fabs(w[i] - r->w[k][i]));
    scale = fmax(scale, fabs(r->w[k][i]));
  }
  return diff / scale;
}

/* ---- optimizers against the reference ---- */

static void check_optimizer(const char *label, const cx_optim_config *c) {
  problem p;
  problem_init(&p);
  ref_opt r;
  ref_init(&r, c, &p);
  cx_optimizer *o = NULL;
  CHECK(cx_optimizer_create(c, cpu, NULL, NP, p.wp, names, &o) == CX_OK, "%s: create: %s", label,
        cx_last_error());
  double worst = 0;
  for (int step = 0; o && step < STEPS; step++) {
    problem_grads(&p, step, 0.1f);
    float lr = lr_at(c->lr, step);
    CHECK(cx_optimizer_step(o, p.gp, lr) == CX_OK, "%s: step: %s", label, cx_last_error());
    ref_step(&r, &p, lr);
    for (int k = 0; k < NP; k++) {
      double e = ref_error(&r, &p, k);
      worst = fmax(worst, e);
      CHECK(e <= 2e-6, "%s: step %d, %s: error %.3e", label, step, names[k], e);
    }
  }
  printf("%-44s %d steps: max error %.2e\n", label, STEPS, worst);
  if (o) CHECK(cx_optimizer_step_count(o) == STEPS, "%s: step count %lld", label,
               (long long)cx_optimizer_step_count(o));
  cx_optimizer_free(o);
  ref_free(&r);
  problem_free(&p);
}

static void test_optimizers(void) {
  cx_optim_config c = cx_optim_defaults(CX_OPTIM_SGD);
  c.momentum = 0;
  check_optimizer("sgd", &c);
  c.weight_decay = 1e-2f;
  check_optimizer("sgd, wd 1e-2", &c);
  c.momentum = 0.9f;
  check_optimizer("sgd momentum 0.9, wd 1e-2", &c);
  c.nesterov = true, c.weight_decay = 5e-3f;
  check_optimizer("sgd nesterov 0.9, wd 5e-3", &c);
  c.decay_norm_and_bias = true;
  check_optimizer("sgd nesterov 0.9, wd 5e-3 on 1-D too", &c);

  c = cx_optim_defaults(CX_OPTIM_ADAMW);
  c.lr = 0.01f, c.weight_decay = 0;
  check_optimizer("adamw, wd 0", &c);
  c.weight_decay = 0.05f;
  check_optimizer("adamw, wd 0.05", &c);
  c.decay_norm_and_bias = true;
  check_optimizer("adamw, wd 0.05 on 1-D too", &c);
  c.beta1 = 0.8f, c.beta2 = 0.99f, c.eps = 1e-6f, c.decay_norm_and_bias = false;
  check_optimizer("adamw betas 0.8 0.99, eps 1e-6", &c);

  c = cx_optim_defaults(CX_OPTIM_LAMB);
  c.lr = 0.01f;
  check_optimizer("lamb, wd 1e-2", &c);
  c.weight_decay = 0;
  check_optimizer("lamb, wd 0", &c);
  c.weight_decay = 0.05f, c.always_adapt = true;
  check_optimizer("lamb, wd 0.05, always adapt", &c);
  c.always_adapt = false, c.decay_norm_and_bias = true;
  check_optimizer("lamb, wd 0.05 on 1-D too", &c);
}

/* The AVX-512 path against the portable one: the same bits for SGD and AdamW; for LAMB, whose
 * norms are summed in another order, the same numbers to rounding. */
static void run_steps(const cx_optim_config *c, problem *p, bool portable) {
  cx_cpu_force_portable(portable);
  cx_optimizer *o = NULL;
  CHECK(cx_optimizer_create(c, cpu, NULL, NP, p->wp, names, &o) == CX_OK,
        "create: %s", cx_last_error());
  for (int step = 0; o && step < 5; step++) {
    problem_grads(p, step, 0.1f);
    cx_optimizer_step(o, p->gp, lr_at(c->lr, step));
  }
  cx_optimizer_free(o);
  cx_cpu_force_portable(false);
}

static void test_paths(void) {
  if (!cx_cpu_avx512()) {
    printf("no AVX-512 here: the portable path ran above, and there is no other to compare\n");
    return;
  }
  for (int kind = CX_OPTIM_SGD; kind <= CX_OPTIM_LAMB; kind++) {
    cx_optim_config c = cx_optim_defaults((cx_optim_kind)kind);
    c.lr = 0.01f;
    problem a, b;
    problem_init(&a);
    problem_init(&b);
    run_steps(&c, &a, false);
    run_steps(&c, &b, true);
    double worst = 0;
    for (int k = 0; k < NP; k++) {
      const float *x = a.w[k].data, *y = b.w[k].data;
      for (int64_t i = 0; i < cx_tensor_numel(&a.w[k]); i++)
        worst = fmax(worst, fabs(x[i] - y[i]) / fmax(fabs(y[i]), 1e-2));
    }
    printf("%-5s AVX-512 vs portable, 5 steps: max difference %.2e\n",
           cx_optim_kind_name(c.kind), worst);
    CHECK(kind == CX_OPTIM_LAMB ? worst <= 1e-6 : worst == 0,
          "%s: the AVX-512 and portable paths differ by %.3e", cx_optim_kind_name(c.kind), worst);
    problem_free(&a);
    problem_free(&b);
  }
}

/* The 1-D rule by itself: with decay and a zero gradient, only rank >= 2 tensors shrink. */
static void test_no_decay_rule(void) {
  problem p;
  problem_init(&p);
  cx_optim_config c = cx_optim_defaults(CX_OPTIM_SGD);
  c.momentum = 0, c.weight_decay = 0.5f;
  cx_optimizer *o = NULL;
  CHECK(cx_optimizer_create(&c, cpu, NULL, NP, p.wp, names, &o) == CX_OK,
        "create: %s", cx_last_error());
  if (!o) return;
  for (int k = 0; k < NP; k++) memset(p.g[k].data, 0, cx_tensor_nbytes(&p.g[k]));
  float before[NP];
  for (int k = 0; k < NP; k++) before[k] = ((float *)p.w[k].data)[0];
  CHECK(cx_optimizer_step(o, p.gp, 1.0f) == CX_OK, "step: %s", cx_last_error());
  for (int k = 0; k < NP; k++) {
    float after = ((float *)p.w[k].data)[0];
    bool decays = shapes[k].ndim >= 2;
    CHECK(cx_optimizer_decays(o, k) == decays, "%s: decays() says %d", names[k], !decays);
    CHECK(after == (decays ? before[k] * 0.5f : before[k]), "%s: %g -> %g with wd 0.5, lr 1",
          names[k], before[k], after);
  }
  cx_optimizer_free(o);
  problem_free(&p);
}

/* Saving the state and step count into a fresh optimizer continues the run bit for bit. */
static void test_state_roundtrip(void) {
  problem p, q;
  problem_init(&p);
  problem_init(&q);
  cx_optim_config c = cx_optim_defaults(CX_OPTIM_ADAMW);
  cx_optimizer *a = NULL, *b = NULL;
  CHECK(cx_optimizer_create(&c, cpu, NULL, NP, p.wp, names, &a) == CX_OK,
        "create: %s", cx_last_error());
  for (int step = 0; a && step < 4; step++) {
    problem_grads(&p, step, 0.1f);
    cx_optimizer_step(a, p.gp, 1e-2f);
  }
  CHECK(cx_optimizer_create(&c, cpu, NULL, NP, q.wp, names, &b) == CX_OK,
        "create: %s", cx_last_error());
  if (!a || !b) return;
  CHECK(cx_optimizer_state_count(a) == 2 * NP, "adamw state count %d", cx_optimizer_state_count(a));
  CHECK(strcmp(cx_optimizer_state_name(a, 0), "exp_avg/fc.weight") == 0 &&
            strcmp(cx_optimizer_state_name(a, 3), "exp_avg_sq/fc.bias") == 0,
        "state names %s, %s", cx_optimizer_state_name(a, 0), cx_optimizer_state_name(a, 3));
  for (int k = 0; k < NP; k++) memcpy(q.w[k].data, p.w[k].data, cx_tensor_nbytes(&p.w[k]));
  for (int i = 0; i < cx_optimizer_state_count(a); i++) {
    cx_tensor *s = cx_optimizer_state(a, i), *d = cx_optimizer_state(b, i);
    CHECK(cx_shape_equal(&s->shape, &d->shape), "state %d shapes differ", i);
    memcpy(d->data, s->data, cx_tensor_nbytes(s));
  }
  cx_optimizer_set_step_count(b, cx_optimizer_step_count(a));
  for (int step = 4; step < 7; step++) {
    problem_grads(&p, step, 0.1f);
    problem_grads(&q, step, 0.1f);
    cx_optimizer_step(a, p.gp, 1e-2f);
    cx_optimizer_step(b, q.gp, 1e-2f);
  }
  for (int k = 0; k < NP; k++)
    CHECK(memcmp(p.w[k].data, q.w[k].data, cx_tensor_nbytes(&p.w[k])) == 0,
          "%s differs after restoring the state", names[k]);
  c = cx_optim_defaults(CX_OPTIM_SGD);
  cx_optimizer *s = NULL;
  CHECK(cx_optimizer_create(&c, cpu, NULL, NP, p.wp, names, &s) == CX_OK &&
            cx_optimizer_state_count(s) == NP &&
            strcmp(cx_optimizer_state_name(s, 2), "momentum_buffer/big.weight") == 0,
        "sgd state: %s", s ? cx_optimizer_state_name(s, 2) : cx_last_error());
  cx_optimizer_free(s);
  c.momentum = 0;
  CHECK(cx_optimizer_create(&c, cpu, NULL, NP, p.wp, names, &s) == CX_OK &&
            cx_optimizer_state_count(s) == 0,
        "sgd without momentum keeps state");
  cx_optimizer_free(s);
  cx_optimizer_free(a);
  cx_optimizer_free(b);
  problem_free(&p);
  problem_free(&q);
}

static void expect_error(const char *label, cx_status got, cx_status want, const char *word) {
  CHECK(got == want && strstr(cx_last_error(), word), "%s: want %s naming '%s', got %s: %s",
        label, cx_status_name(want), word, cx_status_name(got), cx_last_error());
}

static void test_optimizer_errors(void) {
  problem p;
  problem_init(&p);
  cx_optimizer *o = NULL;
  cx_optim_config c = cx_optim_defaults(CX_OPTIM_SGD);
  c.momentum = 0, c.nesterov = true;
  expect_error("nesterov without momentum", cx_optimizer_create(&c, cpu, NULL, NP, p.wp, names, &o),
               CX_ERR_ARG, "nesterov");
  c = cx_optim_defaults(CX_OPTIM_ADAMW);
  c.beta2 = 1;
  expect_error("beta2 1", cx_optimizer_create(&c, cpu, NULL, NP, p.wp, names, &o), CX_ERR_ARG,
               "betas");
  c.beta2 = 0.999f;
  p.w[1].dtype = CX_F16;
  expect_error("f16 parameter", cx_optimizer_create(&c, cpu, NULL, NP, p.wp, names, &o), CX_ERR_ARG,
               "fc.bias");
  p.w[1].dtype = CX_F32;
  CHECK(cx_optimizer_create(&c, cpu, NULL, NP, p.wp, names, &o) == CX_OK,
        "create: %s", cx_last_error());
  cx_tensor *swapped[NP] = {p.gp[1], p.gp[0], p.gp[2], p.gp[3], p.gp[4]};
  expect_error("gradient of the wrong size", cx_optimizer_step(o, swapped, 0.1f), CX_ERR_SHAPE,
               "fc.weight");
  expect_error("negative learning rate", cx_optimizer_step(o, p.gp, -1), CX_ERR_ARG,
               "learning rate");
  CHECK(cx_optimizer_step_count(o) == 0, "a failed step counted");
  cx_optim_kind k;
  CHECK(cx_optim_kind_parse("lamb", &k) == CX_OK && k == CX_OPTIM_LAMB, "parse lamb");
  expect_error("parse adam", cx_optim_kind_parse("adam", &k), CX_ERR_ARG, "adamw");
  cx_optimizer_free(o);
  problem_free(&p);
}

/* ---- PyTorch's own optimizers ---- */

enum { TORCH_STEPS = 5, TORCH_NP = 2 };

static void torch_problem(py_script *py, const problem *p) {
  py_printf(py, "import torch\n");
  for (int k = 0; k < TORCH_NP; k++) {
    char n[16];
    int64_t m = cx_tensor_numel(&p->w[k]);
    snprintf(n, sizeof n, "w%d", k);
    py_floats(py, n, p->w[k].data, m);
    snprintf(n, sizeof n, "a%d", k);
    py_floats(py, n, p->a[k], m);
    snprintf(n, sizeof n, "c%d", k);
    py_floats(py, n, p->c[k], m);
  }
  py_printf(py,
            "def run(make, lrs):\n"
            "    f = lambda x: torch.tensor(x, dtype=torch.float32)\n"
            "    ws = [f(w0).requires_grad_(), f(w1).requires_grad_()]\n"
            "    a, c = [f(a0), f(a1)], [f(c0), f(c1)]\n"
            "    o = make([{'params': [ws[0]]}, {'params': [ws[1]], 'weight_decay': 0.0}])\n"
            "    for lr in lrs:\n"
            "        for k in range(2):\n"
            "            ws[k].grad = a[k] * (ws[k].detach() - c[k])\n"
            "        for g in o.param_groups:\n"
            "            g['lr'] = lr\n"
            "        o.step()\n"
            "        print(' '.join('%%.9g' %% x for w in ws for x in w.detach().tolist()))\n");
}

static void torch_run(py_script *py, const char *make, float base) {
  py_printf(py, "run(lambda g: %s, [", make);
  for (int t = 0; t < TORCH_STEPS; t++) py_printf(py, "%s%.9g", t ? ", " : "", lr_at(base, t));
  py_printf(py, "])\n");
}

static void compare_torch(const char *label, const cx_optim_config *c, const double *ref) {
  problem p;
  problem_init(&p);
  cx_optimizer *o = NULL;
  CHECK(cx_optimizer_create(c, cpu, NULL, TORCH_NP, p.wp, names, &o) == CX_OK,
        "create: %s", cx_last_error());
  double worst = 0;
  for (int t = 0; o && t < TORCH_STEPS; t++) {
    for (int k = 0; k < TORCH_NP; k++) {
      float *w = p.w[k].data, *g = p.g[k].data;
      for (int64_t i = 0; i < cx_tensor_numel(&p.w[k]); i++) g[i] = p.a[k][i] * (w[i] - p.c[k][i]);
    }
    cx_optimizer_step(o, p.gp, lr_at(c->lr, t));
    const double *r = ref + t * 35;
    for (int k = 0, j = 0; k < TORCH_NP; k++) {
      double diff = 0, scale = 1e-2;
      for (int64_t i = 0; i < cx_tensor_numel(&p.w[k]); i++, j++) {
        diff = fmax(diff, fabs(((float *)p.w[k].data)[i] - r[j]));
        scale = fmax(scale, fabs(r[j]));
      }
      worst = fmax(worst, diff / scale);
    }
  }
  printf("torch %-38s %d steps: max error %.2e\n", label, TORCH_STEPS, worst);
  CHECK(worst <= 1e-6, "%s: PyTorch's trajectory differs by %.3e", label, worst);
  cx_optimizer_free(o);
  problem_free(&p);
}

static void test_torch(void) {
  problem p;
  problem_init(&p);
  py_script py = {0};
  torch_problem(&py, &p);
  torch_run(&py, "torch.optim.AdamW(g, lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05)",
            0.01f);
  torch_run(&py, "torch.optim.SGD(g, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)",
            0.1f);
  problem_free(&p);
  enum { N = 2 * TORCH_STEPS * 35 };
  static double ref[N];
  int got = py_run(&py, ref, N);
  CHECK(got == N, "PyTorch gave %d of %d numbers", got, N);
  if (got != N) return;
  cx_optim_config c = cx_optim_defaults(CX_OPTIM_ADAMW);
  c.lr = 0.01f, c.weight_decay = 0.05f;
  compare_torch("AdamW, wd 0.05 (not on the bias)", &c, ref);
  c = cx_optim_defaults(CX_OPTIM_SGD);
  c.lr = 0.1f, c.nesterov = true, c.weight_decay = 1e-3f;
  compare_torch("SGD nesterov, wd 1e-3 (not on the bias)", &c, ref + N / 2);
}

/* ---- gradient clipping and the finiteness scan ---- */

static double ref_norm(const problem *p) {
  double s = 0;
  for (int k = 0; k < NP; k++)
    for (int64_t i = 0; i < cx_tensor_numel(&p->g[k]); i++) {
      double x = ((const float *)p->g[k].data)[i];
      s += x * x;
    }
  return sqrt(s);
}

static void test_clip(void) {
  problem p;
  problem_init(&p);
  problem_grads(&p, 0, 0.1f);
  double norm = ref_norm(&p);
  float got = global_norm(p.gp, NP);
  CHECK(fabs(got - norm) <= 1e-6 * norm, "global norm %.9g, reference %.9g", got, norm);

  float max_norm = (float)(norm / 3), before = ((float *)p.g[2].data)[7];
  got = clip_global_norm(p.gp, NP, max_norm);
  float coef = (float)(max_norm / (norm + 1e-6));
  CHECK(fabs(got - norm) <= 1e-6 * norm, "clip returned %.9g, not the norm before, %.9g", got,
        norm);
  CHECK(((float *)p.g[2].data)[7] == before * coef, "element scaled to %.9g, want %.9g",
        ((float *)p.g[2].data)[7], before * coef);
  CHECK(fabs(ref_norm(&p) - max_norm) <= 1e-5 * max_norm, "norm after clipping %.9g, want %.9g",
        ref_norm(&p), max_norm);

  before = ((float *)p.g[0].data)[3];
  clip_global_norm(p.gp, NP, 10 * max_norm);
  CHECK(((float *)p.g[0].data)[3] == before, "clipping below max_norm changed a gradient");

  cx_tensor *with_null[3] = {p.gp[0], NULL, p.gp[1]};
  double s = 0;
  for (int k = 0; k < 2; k++)
    for (int64_t i = 0; i < cx_tensor_numel(&p.g[k]); i++)
      s += (double)((float *)p.g[k].data)[i] * ((float *)p.g[k].data)[i];
  CHECK(fabs(global_norm(with_null, 3) - sqrt(s)) <= 1e-6 * sqrt(s), "NULL not skipped");

  CHECK(grads_finite(p.gp, NP), "finite gradients reported as not finite");
  float *big = p.g[2].data;
  int64_t last = cx_tensor_numel(&p.g[2]) - 1;
  big[last] = INFINITY;
  CHECK(!grads_finite(p.gp, NP), "inf in the last element not found");
  float keep = ((float *)p.g[0].data)[0];
  CHECK(isinf(clip_global_norm(p.gp, NP, 1.0f)) && ((float *)p.g[0].data)[0] == keep,
        "a non-finite norm should be returned and leave the gradients");
  big[last] = -INFINITY;
  CHECK(!grads_finite(p.gp, NP), "-inf not found");
  big[last] = 0;
  ((float *)p.g[1].data)[2] = NAN;
  CHECK(!grads_finite(p.gp, NP), "NaN not found");
  problem_free(&p);
}

/* ---- EMA ---- */

static void check_ema(const char *label, const cx_ema_config *c) {
  problem p;
  problem_init(&p);
  double *avg[NP];
  for (int k = 0; k < NP; k++) {
    avg[k] = calloc((size_t)cx_tensor_numel(&p.w[k]), sizeof(double));
    for (int64_t i = 0; i < cx_tensor_numel(&p.w[k]); i++) avg[k][i] = ((float *)p.w[k].data)[i];
  }
  cx_ema *e = NULL;
  CHECK(cx_ema_create(c, cpu, NULL, NP, p.wp, names, &e) == CX_OK,
        "%s: create: %s", label, cx_last_error());
  double worst = 0;
  for (int step = 0; e && step < 6; step++) {
    problem_grads(&p, step, 0.5f); /* move the weights somewhere */
    for (int k = 0; k < NP; k++)
      for (int64_t i = 0; i < cx_tensor_numel(&p.w[k]); i++)
        ((float *)p.w[k].data)[i] -= 0.3f * ((float *)p.g[k].data)[i];
    double d = c->decay;
    if (c->warmup)
      d = fmin(d, 1 - pow(1 + step / (double)c->warmup_gamma, -(double)c->warmup_power));
    CHECK(fabs(cx_ema_decay(e) - d) <= 1e-7, "%s: update %d decay %.9g, want %.9g", label, step,
          cx_ema_decay(e), d);
    CHECK(cx_ema_update(e, p.wp) == CX_OK, "%s: update: %s", label, cx_last_error());
    for (int k = 0; k < NP; k++) {
      double diff = 0, scale = 1e-2;
      for (int64_t i = 0; i < cx_tensor_numel(&p.w[k]); i++) {
        avg[k][i] = d * avg[k][i] + (1 - d) * ((float *)p.w[k].data)[i];
        diff = fmax(diff, fabs(((float *)cx_ema_tensor(e, k)->data)[i] - avg[k][i]));
        scale = fmax(scale, fabs(avg[k][i]));
      }
      worst = fmax(worst, diff / scale);
    }
  }
  printf("%-44s 6 updates: max error %.2e\n", label, worst);
  CHECK(worst <= 1e-6, "%s: EMA differs from the reference by %.3e", label, worst);
  cx_ema_free(e);
  for (int k = 0; k < NP; k++) free(avg[k]);
  problem_free(&p);
}

static void test_ema_swap(void) {
  problem p;
  problem_init(&p);
  cx_ema_config c = cx_ema_defaults();
  c.decay = 0.5f;
  cx_ema *e = NULL;
  CHECK(cx_ema_create(&c, cpu, NULL, NP, p.wp, names, &e) == CX_OK, "create: %s", cx_last_error());
  if (!e) return;
  CHECK(cx_ema_count(e) == NP && strcmp(cx_ema_name(e, 2), "ema/big.weight") == 0, "EMA name %s",
        cx_ema_name(e, 2));
  for (int k = 0; k < NP; k++)
    for (int64_t i = 0; i < cx_tensor_numel(&p.w[k]); i++) ((float *)p.w[k].data)[i] += 1.0f;
  cx_ema_update(e, p.wp);
  float live = ((float *)p.w[0].data)[4], avg = ((float *)cx_ema_tensor(e, 0)->data)[4];
  CHECK(cx_ema_swap(e, p.wp) == CX_OK && cx_ema_swapped(e), "swap in: %s", cx_last_error());
  CHECK(((float *)p.w[0].data)[4] == avg, "swapped-in weight %g, average %g",
        ((float *)p.w[0].data)[4], avg);
  expect_error("update while swapped", cx_ema_update(e, p.wp), CX_ERR_ARG, "swap");
  CHECK(cx_ema_swap(e, p.wp) == CX_OK && !cx_ema_swapped(e), "swap out: %s", cx_last_error());
  CHECK(((float *)p.w[0].data)[4] == live && ((float *)cx_ema_tensor(e, 0)->data)[4] == avg,
        "swapping twice did not restore the weights");
  CHECK(cx_ema_copy_to(e, p.wp) == CX_OK && ((float *)p.w[0].data)[4] == avg, "copy_to");
  cx_tensor *wrong[NP] = {p.wp[1], p.wp[0], p.wp[2], p.wp[3], p.wp[4]};
  expect_error("update with the wrong tensors", cx_ema_update(e, wrong), CX_ERR_SHAPE, "fc.");
  CHECK(cx_ema_updates(e) == 1, "update count %lld", (long long)cx_ema_updates(e));
  cx_ema_free(e);
  problem_free(&p);
}

static void test_ema(void) {
  cx_ema_config c = cx_ema_defaults();
  c.decay = 0.9f;
  check_ema("ema decay 0.9", &c);
  c.decay = 0.999f, c.warmup = true;
  check_ema("ema decay 0.999, warmup (gamma 1, power 2/3)", &c);
  c.warmup_gamma = 2, c.warmup_power = 0.75f, c.decay = 0.6f;
  check_ema("ema decay 0.6, warmup (gamma 2, power 3/4)", &c);
  test_ema_swap();
}

/* ---- loss scaling ---- */

/* A loss scaled by s.scale gives gradients scaled by it; fp16 gradients round through f16,
 * where anything above 65504 becomes inf. */
static void scaled_fp16_grads(problem *p, float scale) {
  for (int k = 0; k < NP; k++) {
    float *g = p->g[k].data;
    for (int64_t i = 0; i < cx_tensor_numel(&p->g[k]); i++)
      g[i] = cx_f16_to_f32(cx_f32_to_f16(g[i] * scale));
  }
}

static float max_abs_grad(const problem *p) {
  float m = 0;
  for (int k = 0; k < NP; k++)
    for (int64_t i = 0; i < cx_tensor_numel(&p->g[k]); i++)
      m = fmaxf(m, fabsf(((const float *)p->g[k].data)[i]));
  return m;
}

/* Steps with fp16 gradients: overflowing steps leave the weights alone and halve the scale
 * until the largest scaled gradient fits in f16. */
static void test_fp16_overflow(void) {
  problem p;
  problem_init(&p);
  cx_loss_scaler s = cx_loss_scaler_defaults();
  CHECK(s.scale == 65536 && s.growth_factor == 2 && s.backoff_factor == 0.5f &&
            s.growth_interval == 2000 && cx_loss_scaler_check(&s) == CX_OK, "defaults");
  cx_optim_config c = cx_optim_defaults(CX_OPTIM_SGD);
  cx_optimizer *o = NULL;
  CHECK(cx_optimizer_create(&c, cpu, NULL, NP, p.wp, names, &o) == CX_OK,
        "create: %s", cx_last_error());
  if (!o) return;
  problem_grads(&p, 0, 0.1f);
  float gmax = max_abs_grad(&p);
  int expect_skips = 0;
  for (float sc = 65536; gmax * sc >= 65520; sc /= 2) expect_skips++; /* f16 inf from 65520 */
  float *w_keep = floats(cx_tensor_numel(&p.w[2]));
  memcpy(w_keep, p.w[2].data, cx_tensor_nbytes(&p.w[2]));
  int taken = 0;
  for (int attempt = 0; attempt < 40 && !taken; attempt++) {
    problem_grads(&p, 0, 0.1f);
    float scale = s.scale;
    scaled_fp16_grads(&p, scale);
    bool ok = unscale(&s, p.gp, NP);
    if (ok) taken = cx_optimizer_step(o, p.gp, 0.1f) == CX_OK;
    else CHECK(memcmp(w_keep, p.w[2].data, cx_tensor_nbytes(&p.w[2])) == 0, "weights moved");
    cx_loss_scaler_update(&s, ok);
    CHECK(s.scale == (ok ? scale : scale / 2), "scale %g after a %s step at %g", s.scale,
          ok ? "good" : "skipped", scale);
  }
  printf("fp16 gradients up to %.3g: %lld step(s) skipped, scale settled at %g\n", gmax,
         (long long)s.skipped, s.scale);
  CHECK(taken && s.skipped == expect_skips && cx_optimizer_step_count(o) == 1,
        "%lld skipped steps, want %d; %lld taken", (long long)s.skipped, expect_skips,
        (long long)cx_optimizer_step_count(o));
  free(w_keep);
  cx_optimizer_free(o);
  problem_free(&p);
}

static void test_loss_scaler(void) {
  test_fp16_overflow();
  problem p;
  problem_init(&p);
  problem_grads(&p, 0, 0.1f);
  float g = ((float *)p.g[2].data)[11];
  cx_loss_scaler s = cx_loss_scaler_defaults();
  grad_scale(p.gp, NP, s.scale);
  CHECK(unscale(&s, p.gp, NP) && ((float *)p.g[2].data)[11] == g,
        "unscaling by a power of two is exact: %.9g vs %.9g", ((float *)p.g[2].data)[11], g);
  ((float *)p.g[2].data)[11] = INFINITY;
  CHECK(!unscale(&s, p.gp, NP), "a forced inf is found");

  s = cx_loss_scaler_defaults();
  for (int i = 0; i < 1999; i++) cx_loss_scaler_update(&s, true);
  CHECK(s.scale == 65536 && s.good_steps == 1999, "grew early: %g after 1999", s.scale);
  cx_loss_scaler_update(&s, true);
  CHECK(s.scale == 131072 && s.good_steps == 0, "scale %g after 2000 good steps", s.scale);
  for (int i = 0; i < 1000; i++) cx_loss_scaler_update(&s, true);
  cx_loss_scaler_update(&s, false);
  CHECK(s.scale == 65536 && s.good_steps == 0 && s.skipped == 1, "overflow: scale %g", s.scale);
  for (int i = 0; i < 1999; i++) cx_loss_scaler_update(&s, true);
  CHECK(s.scale == 65536, "an overflow should restart the count: %g", s.scale);
  cx_loss_scaler_update(&s, true);
  CHECK(s.scale == 131072, "scale %g 2000 steps after the overflow", s.scale);
  s.scale = 0x1p127f, s.good_steps = 1999;
  cx_loss_scaler_update(&s, true);
  CHECK(s.scale == 0x1p127f, "the scale grew to %g", s.scale);
  s.backoff_factor = 1;
  expect_error("backoff 1", cx_loss_scaler_check(&s), CX_ERR_ARG, "backoff_factor");
  problem_free(&p);
}

/* ---- gradient accumulation on a training program ---- */

enum { ACC_BATCH = 12, ACC_CLASSES = 5 };

static int conv(cx_graph *g, const char *name, int x, int cin, int cout, uint64_t seed) {
  char wn[64], bn[64];
  snprintf(wn, sizeof wn, "%s.weight", name);
  snprintf(bn, sizeof bn, "%s.bias", name);
  int w = oc_param(g, wn, &S(cout, cin, 3, 3), -0.3f, 0.3f, seed);
  int b = oc_param(g, bn, &S(cout), -0.1f, 0.1f, seed + 1);
  int n = cx_graph_node(g, "Conv", name, (int[]){x, w, b}, 3, 1);
  cx_node_set_ints(g, n, "pads", (int64_t[]){1, 1, 1, 1}, 4);
  return cx_node_output(g, n, 0);
}

/* conv-ReLU-maxpool, conv-ReLU, global pool, linear, mean cross-entropy: no batch statistics. */
static cx_graph *small_cnn(void) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "images", CX_F32, &S(-1, 3, 8, 8));
  int labels = cx_graph_input(g, "labels", CX_S64, &S(-1));
  x = conv(g, "conv1", x, 3, 6, 10);
  x = cx_graph_op(g, "Relu", "relu1", &x, 1);
  int pool = cx_graph_node(g, "MaxPool", "pool1", &x, 1, 1);
  cx_node_set_ints(g, pool, "kernel_shape", (int64_t[]){2, 2}, 2);
  cx_node_set_ints(g, pool, "strides", (int64_t[]){2, 2}, 2);
  x = conv(g, "conv2", cx_node_output(g, pool, 0), 6, 8, 20);
  x = cx_graph_op(g, "Relu", "relu2", &x, 1);
  x = cx_graph_op(g, "GlobalAveragePool", "gap", &x, 1);
  x = cx_graph_op(g, "Flatten", "flatten", &x, 1);
  int w = oc_param(g, "fc.weight", &S(ACC_CLASSES, 8), -0.3f, 0.3f, 30);
  int b = oc_param(g, "fc.bias", &S(ACC_CLASSES), -0.1f, 0.1f, 31);
  int fc = cx_graph_node(g, "Gemm", "fc", (int[]){x, w, b}, 3, 1);
  cx_node_set_int(g, fc, "transB", 1);
  int logits = cx_node_output(g, fc, 0);
  int loss = cx_graph_op(g, "SoftmaxCrossEntropyLoss", "loss", (int[]){logits, labels}, 2);
  cx_graph_mark_output(g, loss);
  return g;
}

/* Rows [from, from + batch) of the whole batch into p's inputs. */
static void feed(cx_program *p, int from, int batch) {
  float *x = cx_program_tensor(p, "images")->data;
  int64_t *y = cx_program_tensor(p, "labels")->data, per = 3 * 8 * 8;
  for (int i = 0; i < batch; i++) {
    y[i] = (from + i) % ACC_CLASSES;
    for (int64_t j = 0; j < per; j++)
      x[i * per + j] = cx_rng_normal(cx_rng_key(50, (uint64_t)(from + i), 0), (uint64_t)j);
  }
}

static void check_accumulation(cx_graph *g, int k) {
  int micro = ACC_BATCH / k;
  cx_program *whole = NULL, *part = NULL;
  cx_compile_opts o = {.batch = ACC_BATCH, .training = true, .loss = "loss",
                       .backend = cx_backend_cpu()};
  CHECK(cx_program_compile(g, &o, &whole) == CX_OK, "compile: %s", cx_last_error());
  o.batch = micro;
  CHECK(cx_program_compile(g, &o, &part) == CX_OK, "compile: %s", cx_last_error());
  if (!whole || !part) return;
  int n = cx_program_param_count(whole);
  cx_tensor *grads[16];
  for (int i = 0; i < n && i < 16; i++) grads[i] = cx_program_param_grad(part, i);
  cx_grad_ops *ops = NULL;
  CHECK(n <= 16 && cx_grad_ops_create(cpu, NULL, n, grads, true, &ops) == CX_OK, "ops: %s",
        cx_last_error());
  if (!ops) {
    cx_program_free(whole);
    cx_program_free(part);
    return;
  }
  cx_tensor *const *acc = cx_grad_accumulated(ops);
  double loss = 0;
  for (int j = 0; j < k; j++) {
    feed(part, j * micro, micro);
    CHECK(cx_program_forward(part) == CX_OK && cx_program_backward(part) == CX_OK, "micro: %s",
          cx_last_error());
    CHECK(cx_grad_accumulate(ops, grads, j == 0) == CX_OK, "accumulate: %s", cx_last_error());
    loss += *(float *)cx_program_tensor(part, "loss")->data / k;
  }
  CHECK(cx_grad_scale(ops, acc, 1.0f / (float)k) == CX_OK, "scale: %s", cx_last_error());
  feed(whole, 0, ACC_BATCH);
  CHECK(cx_program_forward(whole) == CX_OK && cx_program_backward(whole) == CX_OK, "whole: %s",
        cx_last_error());
  double worst = 0;
  for (int i = 0; i < n; i++) {
    const float *a = acc[i]->data, *b = cx_program_param_grad(whole, i)->data;
    double diff = 0, scale = 0;
    for (int64_t e = 0; e < cx_tensor_numel(acc[i]); e++) {
      diff = fmax(diff, fabs(a[e] - b[e]));
      scale = fmax(scale, fabs(b[e]));
    }
    worst = fmax(worst, diff / scale);
    CHECK(diff <= 1e-5 * scale, "k=%d: gradient of %s differs by %.3e of its largest element", k,
          cx_program_param_name(whole, i), diff / scale);
  }
  cx_grad_ops_free(ops);
  float full = *(float *)cx_program_tensor(whole, "loss")->data;
  printf("%d micro-batches of %d vs one batch of %d: gradients within %.2e, loss %.7f vs %.7f\n", k,
         micro, ACC_BATCH, worst, loss, full);
  CHECK(fabs(loss - full) <= 1e-6 * fabs(full), "mean of micro-batch losses %.9g, whole %.9g", loss,
        full);
  cx_program_free(whole);
  cx_program_free(part);
}

/* Loss scaling on a program: writing the scale into the loss gradient's seed, "loss@seed",
 * scales every parameter gradient by it, and unscaling gives the unscaled gradients back. */
static void check_seeded_scale(cx_graph *g) {
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = 4, .training = true, .loss = "loss", .backend = cx_backend_cpu()};
  CHECK(cx_program_compile(g, &o, &p) == CX_OK, "compile: %s", cx_last_error());
  cx_tensor *seed = p ? cx_program_tensor(p, "loss@seed") : NULL;
  CHECK(seed && cx_tensor_numel(seed) == 1, "no scalar 'loss@seed' in the program");
  if (!seed) {
    cx_program_free(p);
    return;
  }
  int n = cx_program_param_count(p);
  cx_tensor copy[16], *grads[16];
  feed(p, 0, 4);
  CHECK(cx_program_forward(p) == CX_OK && cx_program_backward(p) == CX_OK, "%s", cx_last_error());
  for (int i = 0; i < n && i < 16; i++) {
    grads[i] = cx_program_param_grad(p, i);
    copy[i] = cx_tensor_view(CX_F32, &grads[i]->shape, floats(cx_tensor_numel(grads[i])));
    memcpy(copy[i].data, grads[i]->data, cx_tensor_nbytes(grads[i]));
  }
  cx_loss_scaler s = cx_loss_scaler_defaults();
  *(float *)seed->data = s.scale;
  CHECK(cx_program_forward(p) == CX_OK && cx_program_backward(p) == CX_OK, "%s", cx_last_error());
  CHECK(unscale(&s, grads, n), "scaled gradients overflowed");
  double worst = 0;
  for (int i = 0; i < n; i++) {
    const float *a = grads[i]->data, *b = copy[i].data;
    for (int64_t e = 0; e < cx_tensor_numel(grads[i]); e++)
      worst = fmax(worst, fabs(a[e] - b[e]) / fmax(fabs(b[e]), 1e-30));
    free(copy[i].data);
  }
  printf("loss seed %g, then unscaled: gradients within %.2e of the unscaled run\n", s.scale,
         worst);
  CHECK(worst <= 1e-6, "seeding the loss gradient with the scale: unscaled gradients differ by "
        "%.3e", worst);
  cx_program_free(p);
}

static void test_accumulation(void) {
  cx_graph *g = small_cnn();
  check_accumulation(g, 3);
  check_accumulation(g, 4);
  check_seeded_scale(g);
  cx_graph_free(g);
  cx_tensor a = cx_tensor_view(CX_F32, &S(3), (float[3]){0});
  cx_tensor b = cx_tensor_view(CX_F32, &S(4), (float[4]){0});
  cx_tensor *ap = &a, *bp = &b;
  cx_grad_ops *ops = NULL;
  CHECK(cx_grad_ops_create(cpu, NULL, 1, &ap, true, &ops) == CX_OK, "ops: %s", cx_last_error());
  expect_error("accumulate mismatched", cx_grad_accumulate(ops, &bp, true), CX_ERR_SHAPE, "[4]");
  expect_error("accumulate mismatched", cx_grad_accumulate(ops, &bp, false), CX_ERR_SHAPE, "[4]");
  cx_grad_ops_free(ops);
}

/* ---- steps allocate nothing ---- */

static void train_steps(cx_optimizer *o, cx_ema *e, cx_grad_ops *g, cx_loss_scaler *s, problem *p,
                        int from) {
  for (int step = from; step < from + 3; step++) {
    problem_grads(p, step, 0.1f);
    bool ok, finite;
    float norm;
    cx_grad_scale(g, p->gp, s->scale);
    cx_loss_scaler_unscale(s, g, p->gp, &ok);
    cx_grads_finite(g, p->gp, &finite);
    cx_grad_clip_global_norm(g, p->gp, 1.0f, &norm);
    if (ok && finite) cx_optimizer_step(o, p->gp, 1e-3f);
    cx_ema_update(e, p->wp);
    cx_loss_scaler_update(s, ok);
  }
}

static void test_no_allocation(void) {
  for (int kind = CX_OPTIM_SGD; kind <= CX_OPTIM_LAMB; kind++) {
    problem p;
    problem_init(&p);
    cx_optim_config c = cx_optim_defaults((cx_optim_kind)kind);
    cx_ema_config ec = cx_ema_defaults();
    cx_loss_scaler s = cx_loss_scaler_defaults();
    cx_optimizer *o = NULL;
    cx_ema *e = NULL;
    cx_grad_ops *g = NULL;
    CHECK(cx_optimizer_create(&c, cpu, NULL, NP, p.wp, names, &o) == CX_OK &&
              cx_ema_create(&ec, cpu, NULL, NP, p.wp, names, &e) == CX_OK &&
              cx_grad_ops_create(cpu, NULL, NP, p.gp, false, &g) == CX_OK,
          "create: %s", cx_last_error());
    if (o && e && g) {
      train_steps(o, e, g, &s, &p, 0); /* the thread pool starts on the first parallel loop */
      struct mallinfo2 before = mallinfo2();
      train_steps(o, e, g, &s, &p, 3);
      struct mallinfo2 after = mallinfo2();
      CHECK(before.uordblks == after.uordblks, "%s steps allocated: heap in use %zu -> %zu bytes",
            cx_optim_kind_name(c.kind), before.uordblks, after.uordblks);
    }
    cx_optimizer_free(o);
    cx_ema_free(e);
    cx_grad_ops_free(g);
    problem_free(&p);
  }
}

/* ---- end to end: every optimizer fits the tiny CNN's batch ---- */

static void fit_tiny_cnn(cx_optim_kind kind, float lr) {
  cx_graph *g = cx_tiny_cnn(1, 12, 10, 5);
  cx_program *p = NULL;
  cx_compile_opts co = {.batch = 16, .training = true, .loss = "loss", .backend = cx_backend_cpu()};
  CHECK(cx_program_compile(g, &co, &p) == CX_OK, "compile: %s", cx_last_error());
  cx_graph_free(g);
  if (!p) return;
  cx_tensor *x = cx_program_tensor(p, "images"), *y = cx_program_tensor(p, "labels");
  for (int64_t i = 0; i < cx_tensor_numel(x); i++)
    ((float *)x->data)[i] = cx_rng_normal(7, (uint64_t)i);
  for (int64_t i = 0; i < 16; i++) ((int64_t *)y->data)[i] = i % 10;
  int n = cx_program_param_count(p);
  cx_tensor *params[16], *grads[16];
  for (int i = 0; i < n; i++) {
    params[i] = cx_program_param(p, i);
    grads[i] = cx_program_param_grad(p, i);
  }
  cx_optim_config c = cx_optim_defaults(kind);
  cx_optimizer *o = NULL;
  CHECK(cx_optimizer_create(&c, cpu, NULL, n, params, NULL, &o) == CX_OK,
        "create: %s", cx_last_error());
  float first = 0, last = 0;
  for (int step = 0; o && step < 100; step++) {
    if (cx_program_forward(p) != CX_OK || cx_program_backward(p) != CX_OK) break;
    clip_global_norm(grads, n, 5.0f);
    cx_optimizer_step(o, grads, lr);
    last = *(float *)cx_program_tensor(p, "loss")->data;
    if (step == 0) first = last;
  }
  printf("tiny CNN, %-5s: loss %.4f -> %.4f in 100 steps\n", cx_optim_kind_name(kind), first, last);
  CHECK(isfinite(last) && last * 5 <= first, "%s: loss fell only from %g to %g",
        cx_optim_kind_name(kind), first, last);
  cx_optimizer_free(o);
  cx_program_free(p);
}

int main(void) {
  cpu = cx_backend_cpu();
  test_optimizers();
  cx_cpu_force_portable(true);
  printf("-- portable paths --\n");
  test_optimizers();
  cx_cpu_force_portable(false);
  test_paths();
  test_no_decay_rule();
  test_state_roundtrip();
  test_optimizer_errors();
  test_torch();
  test_clip();
  test_ema();
  test_loss_scaler();
  test_accumulation();
  test_no_allocation();
  fit_tiny_cnn(CX_OPTIM_SGD, 0.05f);
  fit_tiny_cnn(CX_OPTIM_ADAMW, 0.01f);
  fit_tiny_cnn(CX_OPTIM_LAMB, 0.02f);
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
