#include "schedule.h"

#include <math.h>
#include <string.h>

static const double pi = 3.14159265358979323846;

static const char *const kind_names[] = {"constant", "step", "multistep", "cosine", "onecycle"};
#define N_KINDS ((int)(sizeof kind_names / sizeof kind_names[0]))

const char *cx_schedule_kind_name(cx_schedule_kind kind) {
  return (int)kind >= 0 && (int)kind < N_KINDS ? kind_names[kind] : "?";
}

cx_status cx_schedule_kind_parse(const char *name, cx_schedule_kind *out) {
  for (int k = 0; k < N_KINDS; k++)
    if (name && strcmp(name, kind_names[k]) == 0) {
      *out = (cx_schedule_kind)k;
      return CX_OK;
    }
  return cx_fail(CX_ERR_ARG,
                 "unknown schedule '%s'; expected constant, step, multistep, cosine or onecycle",
                 name ? name : "(null)");
}

cx_schedule cx_schedule_defaults(cx_schedule_kind kind, float lr) {
  return (cx_schedule){.kind = kind, .lr = lr, .warmup_start_factor = 0.1f, .gamma = 0.1f,
                       .pct_start = 0.3f, .div_factor = 25.0f, .final_div_factor = 1e4f};
}

static cx_status check_kind(const cx_schedule *s, const char *k) {
  switch (s->kind) {
  case CX_SCHEDULE_CONSTANT: return CX_OK;
  case CX_SCHEDULE_STEP:
    if (s->step_size <= 0)
      return cx_fail(CX_ERR_ARG, "step schedule: step_size %lld must be > 0",
                     (long long)s->step_size);
    return CX_OK;
  case CX_SCHEDULE_MULTISTEP:
    if (s->n_milestones < 0 || s->n_milestones > CX_SCHEDULE_MAX_MILESTONES)
      return cx_fail(CX_ERR_ARG, "multistep schedule: %d milestones; at most %d", s->n_milestones,
                     CX_SCHEDULE_MAX_MILESTONES);
    for (int i = 0; i < s->n_milestones; i++)
      if (s->milestones[i] < 0 || (i > 0 && s->milestones[i] <= s->milestones[i - 1]))
        return cx_fail(CX_ERR_ARG, "multistep schedule: milestones must be >= 0 and increasing "
                       "(milestone %d is %lld)", i, (long long)s->milestones[i]);
    return CX_OK;
  case CX_SCHEDULE_COSINE:
    if (s->total_steps <= s->warmup_steps)
      return cx_fail(CX_ERR_ARG, "cosine schedule: total_steps %lld must exceed warmup_steps %lld",
                     (long long)s->total_steps, (long long)s->warmup_steps);
    if (!(s->min_lr >= 0 && s->min_lr <= s->lr))
      return cx_fail(CX_ERR_ARG, "cosine schedule: min_lr %g must be in [0, lr = %g]", s->min_lr,
                     s->lr);
    return CX_OK;
  case CX_SCHEDULE_ONECYCLE:
    if (!(s->pct_start > 0 && s->pct_start < 1) || !((double)s->pct_start * s->total_steps > 1))
      return cx_fail(CX_ERR_ARG, "onecycle schedule: pct_start %g must be in (0, 1) and leave "
                     "more than one step of %lld to the rise", s->pct_start,
                     (long long)s->total_steps);
    if (!(s->div_factor > 0) || !(s->final_div_factor > 0))
      return cx_fail(CX_ERR_ARG, "onecycle schedule: div_factor %g and final_div_factor %g must "
                     "be > 0", s->div_factor, s->final_div_factor);
    return CX_OK;
  }
  return cx_fail(CX_ERR_ARG, "%s: unknown schedule kind %d", k, (int)s->kind);
}

cx_status cx_schedule_check(const cx_schedule *s) {
  const char *k = cx_schedule_kind_name(s->kind);
  if (!(s->lr >= 0) || isinf(s->lr))
    return cx_fail(CX_ERR_ARG, "%s schedule: lr %g must be finite and >= 0", k, s->lr);
  if (s->warmup_steps < 0)
    return cx_fail(CX_ERR_ARG, "%s schedule: warmup_steps %lld must be >= 0", k,
                   (long long)s->warmup_steps);
  if (s->warmup_steps > 0 && !(s->warmup_start_factor >= 0 && s->warmup_start_factor <= 1))
    return cx_fail(CX_ERR_ARG, "%s schedule: warmup_start_factor %g must be in [0, 1]", k,
                   s->warmup_start_factor);
  if ((s->kind == CX_SCHEDULE_STEP || s->kind == CX_SCHEDULE_MULTISTEP) && !(s->gamma > 0))
    return cx_fail(CX_ERR_ARG, "%s schedule: gamma %g must be > 0", k, s->gamma);
  return check_kind(s, k);
}

/* PyTorch's _annealing_cos: from a at pct 0 to b at pct 1. */
static double anneal_cos(double a, double b, double pct) {
  return b + (a - b) / 2.0 * (cos(pi * pct) + 1.0);
}

static double onecycle(const cx_schedule *s, int64_t t) {
  double max_lr = s->lr, initial = max_lr / s->div_factor;
  double final = initial / s->final_div_factor;
  double rise_end = (double)s->pct_start * (double)s->total_steps - 1.0;
  double fall_end = (double)s->total_steps - 1.0, x = (double)t;
  if (x > fall_end) x = fall_end;
  if (x <= rise_end) return anneal_cos(initial, max_lr, x / rise_end);
  return anneal_cos(max_lr, final, (x - rise_end) / (fall_end - rise_end));
}

static double multistep(const cx_schedule *s, int64_t t) {
  int passed = 0;
  for (int i = 0; i < s->n_milestones && i < CX_SCHEDULE_MAX_MILESTONES; i++)
    passed += s->milestones[i] <= t;
  return s->lr * pow(s->gamma, passed);
}

/* The schedule without warmup. */
static double main_lr(const cx_schedule *s, int64_t t) {
  switch (s->kind) {
  case CX_SCHEDULE_CONSTANT: return s->lr;
  case CX_SCHEDULE_STEP:
    return s->step_size > 0 ? s->lr * pow(s->gamma, (double)(t / s->step_size)) : s->lr;
  case CX_SCHEDULE_MULTISTEP: return multistep(s, t);
  case CX_SCHEDULE_COSINE: {
    int64_t span = s->total_steps - s->warmup_steps;
    double pct = span > 0 ? (double)(t - s->warmup_steps) / (double)span : 1.0;
    pct = pct < 0 ? 0 : pct > 1 ? 1 : pct;
    return anneal_cos(s->lr, s->min_lr, pct);
  }
  case CX_SCHEDULE_ONECYCLE: return onecycle(s, t);
  }
  return s->lr;
}

float cx_schedule_lr(const cx_schedule *s, int64_t t) {
  if (t < 0) t = 0;
  if (t >= s->warmup_steps) return (float)main_lr(s, t);
  double f = s->warmup_start_factor;
  double ramp = f + (1.0 - f) * (double)t / (double)s->warmup_steps;
  return (float)(main_lr(s, s->warmup_steps) * ramp);
}
