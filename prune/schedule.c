/* Zhu and Gupta's gradual sparsity schedule ("To prune, or not to prune", 2017, eq. 1). */
#include "prune.h"

double cx_prune_schedule_sparsity(const cx_prune_config *c, int64_t step) {
  double si = c->initial_sparsity, sf = c->sparsity;
  if (step < c->start) return si;
  if (step >= c->end) return sf; /* also the one-shot case, start == end */
  int64_t every = c->every > 0 ? c->every : 1;
  int64_t t = c->start + (step - c->start) / every * every; /* the last pruning step */
  double x = 1 - (double)(t - c->start) / (double)(c->end - c->start);
  return sf + (si - sf) * x * x * x;
}

bool cx_prune_schedule_is_step(const cx_prune_config *c, int64_t step) {
  int64_t every = c->every > 0 ? c->every : 1;
  return step >= c->start && step <= c->end && ((step - c->start) % every == 0 || step == c->end);
}

bool cx_prune_channel_gradual(const cx_prune_config *c) {
  return c->method == CX_PRUNE_CHANNEL && (c->start > 0 || c->end > 0);
}

bool cx_prune_channel_once(const cx_prune_config *c) {
  return c->method == CX_PRUNE_CHANNEL && !cx_prune_channel_gradual(c);
}
