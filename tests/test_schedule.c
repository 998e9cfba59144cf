/* Learning-rate schedules: each kind, with and without warmup, at every step (warmup boundaries
 * included) against a reference in double that computes the rate the way PyTorch's schedulers do
 * (running products, recursive cosine, OneCycleLR's phase loop); then against PyTorch itself. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../train/schedule.h"
#include "python_ref.h"
#include "check.h"

static const double pi = 3.14159265358979323846;

/* StepLR and MultiStepLR: a running rate, multiplied by gamma at each boundary. */
static double ref_step(const cx_schedule *s, int64_t t) {
  double lr = s->lr;
  for (int64_t i = 1; i <= t; i++)
    if (i % s->step_size == 0) lr *= s->gamma;
  return lr;
}

static double ref_multistep(const cx_schedule *s, int64_t t) {
  double lr = s->lr;
  for (int64_t i = 0; i <= t; i++)
    for (int k = 0; k < s->n_milestones; k++)
      if (s->milestones[k] == i) lr *= s->gamma;
  return lr;
}

/* CosineAnnealingLR's recursive form, restarted where warmup ends; min_lr after total_steps. */
static double ref_cosine(const cx_schedule *s, int64_t t) {
  int64_t w = s->warmup_steps, tmax = s->total_steps - w;
  if (t >= s->total_steps) return s->min_lr;
  double lr = s->lr, eta = s->min_lr;
  for (int64_t e = 1; e <= t - w; e++)
    lr = (1 + cos(pi * e / tmax)) / (1 + cos(pi * (e - 1) / tmax)) * (lr - eta) + eta;
  return lr;
}

/* OneCycleLR.get_lr, as written in PyTorch; steps past the end hold the last rate. */
static double ref_onecycle(const cx_schedule *s, int64_t t) {
  double initial = (double)s->lr / s->div_factor, min_lr = initial / s->final_div_factor;
  double ends[2] = {(double)s->pct_start * s->total_steps - 1, (double)s->total_steps - 1};
  double from[2] = {initial, s->lr}, to[2] = {s->lr, min_lr};
  double step = t > s->total_steps - 1 ? (double)s->total_steps - 1 : (double)t, start = 0;
  for (int i = 0; i < 2; i++) {
    if (step <= ends[i] || i == 1) {
      double pct = (step - start) / (ends[i] - start);
      return to[i] + (from[i] - to[i]) / 2.0 * (cos(pi * pct) + 1);
    }
    start = ends[i];
  }
  return 0;
}

static double ref_main(const cx_schedule *s, int64_t t) {
  switch (s->kind) {
  case CX_SCHEDULE_CONSTANT: return s->lr;
  case CX_SCHEDULE_STEP: return ref_step(s, t);
  case CX_SCHEDULE_MULTISTEP: return ref_multistep(s, t);
  case CX_SCHEDULE_COSINE: return ref_cosine(s, t);
  case CX_SCHEDULE_ONECYCLE: return ref_onecycle(s, t);
  }
  return NAN;
}

static double ref_lr(const cx_schedule *s, int64_t t) {
  int64_t w = s->warmup_steps;
  if (t >= w) return ref_main(s, t);
  double f = s->warmup_start_factor;
  return ref_main(s, w) * (f + (1 - f) * (double)t / (double)w);
}

/* Every step below `steps`, or every stride-th and those around warmup's end. */
static void check_sampled(const char *label, const cx_schedule *s, int64_t steps, int64_t stride) {
  CHECK(cx_schedule_check(s) == CX_OK, "%s: check: %s", label, cx_last_error());
  double worst = 0;
  int64_t at = 0;
  for (int64_t t = 0; t < steps; t++) {
    int64_t w = s->warmup_steps;
    if (stride > 1 && t % stride != 0 && (t < w - 2 || t > w + 2) && t != steps - 1) continue;
    double ref = ref_lr(s, t), got = cx_schedule_lr(s, t);
    double err = fabs(got - ref) / (fabs(ref) + 1e-12);
    if (err > worst) worst = err, at = t;
  }
  printf("%-34s %5lld steps: max relative error %.2e (step %lld)\n", label, (long long)steps,
         worst, (long long)at);
  CHECK(worst <= 1e-6, "%s: relative error %.3e at step %lld: %.9g, reference %.9g", label, worst,
        (long long)at, cx_schedule_lr(s, at), ref_lr(s, at));
}

/* The rates around the end of warmup, spelled out. */
static void check_against_ref(const char *label, const cx_schedule *s, int64_t steps) {
  check_sampled(label, s, steps, 1);
}

static void check_warmup_boundary(const char *label, const cx_schedule *s) {
  int64_t w = s->warmup_steps;
  double l = ref_main(s, w), f = s->warmup_start_factor;
  CHECK(fabs(cx_schedule_lr(s, 0) - f * l) <= 1e-7 * l, "%s: step 0 is %g, want %g", label,
        cx_schedule_lr(s, 0), f * l);
  double before = l * (f + (1 - f) * (double)(w - 1) / (double)w);
  CHECK(fabs(cx_schedule_lr(s, w - 1) - before) <= 1e-7 * l, "%s: step %lld is %g, want %g",
        label, (long long)(w - 1), cx_schedule_lr(s, w - 1), before);
  CHECK(fabs(cx_schedule_lr(s, w) - l) <= 1e-7 * l, "%s: step %lld (end of warmup) is %g, want %g",
        label, (long long)w, cx_schedule_lr(s, w), l);
  CHECK(cx_schedule_lr(s, w - 1) < cx_schedule_lr(s, w), "%s: warmup does not rise into step %lld",
        label, (long long)w);
}

static void test_kinds(void) {
  cx_schedule s = cx_schedule_defaults(CX_SCHEDULE_CONSTANT, 0.1f);
  check_against_ref("constant", &s, 30);
  s.warmup_steps = 10;
  check_against_ref("constant, warmup 10", &s, 30);
  check_warmup_boundary("constant, warmup 10", &s);
  s.warmup_start_factor = 0;
  check_against_ref("constant, warmup from 0", &s, 30);
  CHECK(cx_schedule_lr(&s, 0) == 0, "warmup from factor 0 starts at %g", cx_schedule_lr(&s, 0));

  s = cx_schedule_defaults(CX_SCHEDULE_STEP, 0.2f);
  s.step_size = 7, s.gamma = 0.5f;
  check_against_ref("step 7 x0.5", &s, 60);
  s.warmup_steps = 3, s.warmup_start_factor = 0.2f;
  check_against_ref("step 7 x0.5, warmup 3", &s, 60);
  check_warmup_boundary("step 7 x0.5, warmup 3", &s);
  s.warmup_steps = 10; /* a boundary inside warmup: the ramp rises to the rate at step 10 */
  check_against_ref("step 7 x0.5, warmup 10", &s, 60);
  check_warmup_boundary("step 7 x0.5, warmup 10", &s);

  s = cx_schedule_defaults(CX_SCHEDULE_MULTISTEP, 0.1f);
  s.n_milestones = 3, s.milestones[0] = 10, s.milestones[1] = 20, s.milestones[2] = 25;
  check_against_ref("multistep 10,20,25", &s, 40);
  CHECK(fabs(cx_schedule_lr(&s, 9) - 0.1) < 1e-8 && fabs(cx_schedule_lr(&s, 10) - 0.01) < 1e-9,
        "multistep: steps 9, 10 are %g, %g", cx_schedule_lr(&s, 9), cx_schedule_lr(&s, 10));
  s.warmup_steps = 4, s.warmup_start_factor = 0.25f;
  check_against_ref("multistep 10,20,25, warmup 4", &s, 40);
  check_warmup_boundary("multistep 10,20,25, warmup 4", &s);
  s.milestones[0] = 0;
  check_against_ref("multistep 0,20,25", &s, 40);

  s = cx_schedule_defaults(CX_SCHEDULE_COSINE, 0.1f);
  s.total_steps = 50;
  check_against_ref("cosine 50 to 0", &s, 60);
  CHECK(cx_schedule_lr(&s, 50) == 0 && cx_schedule_lr(&s, 1000) == 0,
        "cosine past the end: %g, %g", cx_schedule_lr(&s, 50), cx_schedule_lr(&s, 1000));
  s.warmup_steps = 5, s.min_lr = 0.001f;
  check_against_ref("cosine 50 to 1e-3, warmup 5", &s, 60);
  check_warmup_boundary("cosine 50 to 1e-3, warmup 5", &s);
  s.total_steps = 100000, s.warmup_steps = 500;
  check_sampled("cosine 100000, warmup 500", &s, 100010, 997);

  s = cx_schedule_defaults(CX_SCHEDULE_ONECYCLE, 0.1f);
  s.total_steps = 50;
  check_against_ref("onecycle 50", &s, 55);
  CHECK(fabs(cx_schedule_lr(&s, 0) - 0.004) < 1e-9, "onecycle starts at %g, not max_lr/25",
        cx_schedule_lr(&s, 0));
  CHECK(fabs(cx_schedule_lr(&s, 49) - 4e-7) < 1e-12, "onecycle ends at %g, not 4e-7",
        cx_schedule_lr(&s, 49));
  s.total_steps = 1000, s.pct_start = 0.25f, s.div_factor = 10, s.final_div_factor = 100;
  check_against_ref("onecycle 1000, 0.25, 10, 100", &s, 1005);
  s.warmup_steps = 20;
  check_against_ref("onecycle 1000, warmup 20", &s, 1005);
  check_warmup_boundary("onecycle 1000, warmup 20", &s);
}

static void expect_invalid(const char *label, const cx_schedule *s, const char *word) {
  cx_error_clear();
  CHECK(cx_schedule_check(s) == CX_ERR_ARG && strstr(cx_last_error(), word),
        "%s: want CX_ERR_ARG naming '%s', got: %s", label, word, cx_last_error());
}

static void test_invalid(void) {
  cx_schedule s = cx_schedule_defaults(CX_SCHEDULE_STEP, 0.1f);
  expect_invalid("step_size 0", &s, "step_size");
  s = cx_schedule_defaults(CX_SCHEDULE_COSINE, 0.1f);
  s.total_steps = 10, s.warmup_steps = 10;
  expect_invalid("cosine all warmup", &s, "total_steps");
  s.total_steps = 20, s.min_lr = 0.5f;
  expect_invalid("cosine min above lr", &s, "min_lr");
  s = cx_schedule_defaults(CX_SCHEDULE_MULTISTEP, 0.1f);
  s.n_milestones = 2, s.milestones[0] = 30, s.milestones[1] = 20;
  expect_invalid("milestones out of order", &s, "milestones");
  s.gamma = 0, s.milestones[1] = 40;
  expect_invalid("gamma 0", &s, "gamma");
  s = cx_schedule_defaults(CX_SCHEDULE_ONECYCLE, 0.1f);
  s.total_steps = 3;
  expect_invalid("onecycle too short", &s, "pct_start");
  s = cx_schedule_defaults(CX_SCHEDULE_CONSTANT, 0.1f);
  s.warmup_steps = -1;
  expect_invalid("negative warmup", &s, "warmup_steps");
  s.warmup_steps = 5, s.warmup_start_factor = 2;
  expect_invalid("warmup factor 2", &s, "warmup_start_factor");
  cx_schedule_kind k;
  CHECK(cx_schedule_kind_parse("cosine", &k) == CX_OK && k == CX_SCHEDULE_COSINE, "parse cosine");
  CHECK(cx_schedule_kind_parse("linear", &k) == CX_ERR_ARG && strstr(cx_last_error(), "onecycle"),
        "parse 'linear' should fail listing the kinds: %s", cx_last_error());
}

/* PyTorch's schedulers on an SGD optimizer: the rate each step uses. */
static const char *const torch_schedules[] = {
    "lambda o: SequentialLR(o, [LinearLR(o, start_factor=0.1, total_iters=5), "
    "CosineAnnealingLR(o, T_max=45, eta_min=0.001)], milestones=[5])",
    "lambda o: OneCycleLR(o, max_lr=0.1, total_steps=50)",
    "lambda o: StepLR(o, step_size=7, gamma=0.5)",
    "lambda o: ChainedScheduler([LinearLR(o, start_factor=0.25, total_iters=4), "
    "MultiStepLR(o, milestones=[10, 20, 25], gamma=0.1)])",
    "lambda o: LinearLR(o, start_factor=0.1, total_iters=3)",
};

static cx_schedule ours(int i) {
  cx_schedule s;
  switch (i) {
  case 0:
    s = cx_schedule_defaults(CX_SCHEDULE_COSINE, 0.1f);
    s.total_steps = 50, s.warmup_steps = 5, s.min_lr = 0.001f;
    return s;
  case 1:
    s = cx_schedule_defaults(CX_SCHEDULE_ONECYCLE, 0.1f);
    s.total_steps = 50;
    return s;
  case 2:
    s = cx_schedule_defaults(CX_SCHEDULE_STEP, 0.1f);
    s.step_size = 7, s.gamma = 0.5f;
    return s;
  case 3:
    s = cx_schedule_defaults(CX_SCHEDULE_MULTISTEP, 0.1f);
    s.n_milestones = 3, s.milestones[0] = 10, s.milestones[1] = 20, s.milestones[2] = 25;
    s.warmup_steps = 4, s.warmup_start_factor = 0.25f;
    return s;
  default:
    s = cx_schedule_defaults(CX_SCHEDULE_CONSTANT, 0.1f);
    s.warmup_steps = 3;
    return s;
  }
}

enum { TORCH_STEPS = 50, N_TORCH = (int)(sizeof torch_schedules / sizeof *torch_schedules) };

static void test_torch(void) {
  py_script py = {0};
  py_printf(&py, "import torch\nfrom torch.optim.lr_scheduler import *\n"
                 "def rates(make):\n"
                 "    p = torch.zeros(1, requires_grad=True)\n"
                 "    o = torch.optim.SGD([p], lr=0.1)\n"
                 "    s, out = make(o), []\n"
                 "    for t in range(%d):\n"
                 "        out.append(o.param_groups[0]['lr'])\n"
                 "        o.step()\n"
                 "        s.step()\n"
                 "    print(' '.join('%%.17g' %% x for x in out))\n", TORCH_STEPS);
  for (int i = 0; i < N_TORCH; i++) py_printf(&py, "rates(%s)\n", torch_schedules[i]);
  static double ref[N_TORCH * TORCH_STEPS];
  int got = py_run(&py, ref, N_TORCH * TORCH_STEPS);
  CHECK(got == N_TORCH * TORCH_STEPS, "PyTorch gave %d of %d rates", got, N_TORCH * TORCH_STEPS);
  if (got != N_TORCH * TORCH_STEPS) return;
  for (int i = 0; i < N_TORCH; i++) {
    cx_schedule s = ours(i);
    double worst = 0;
    int at = 0;
    for (int t = 0; t < TORCH_STEPS; t++) {
      double r = ref[i * TORCH_STEPS + t];
      double err = fabs(cx_schedule_lr(&s, t) - r) / (fabs(r) + 1e-12);
      if (err > worst) worst = err, at = t;
    }
    printf("torch %-9s: max relative error %.2e (step %d)\n", cx_schedule_kind_name(s.kind), worst,
           at);
    CHECK(worst <= 1e-5, "%s: step %d is %.9g, PyTorch %.9g", torch_schedules[i], at,
          cx_schedule_lr(&s, at), ref[i * TORCH_STEPS + at]);
  }
}

int main(void) {
  test_kinds();
  test_invalid();
  test_torch();
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
