#ifndef CX_PRUNE_H
#define CX_PRUNE_H

/* The prune stage (docs/prune.md): which weights may be pruned, unstructured magnitude and N:M
 * masks kept by a trainer extension, and structured channel pruning that rewrites the graph with
 * smaller tensors. prune/ depends on core/ and train/ only; the CLI and the pipeline drive it. */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../core/graph.h"
#include "../train/extension.h"

typedef enum cx_prune_method {
  CX_PRUNE_MAGNITUDE, /* unstructured: the smallest |w| are zeroed */
  CX_PRUNE_NM,        /* N:M semi-structured: n kept of every m consecutive input channels */
  CX_PRUNE_CHANNEL,   /* structured: whole output channels removed, the graph rewritten */
} cx_prune_method;

typedef enum cx_prune_scope {
  CX_PRUNE_GLOBAL, /* one threshold (or one channel ranking) over all prunable weights */
  CX_PRUNE_LAYER,  /* each layer to the same sparsity */
} cx_prune_scope;

typedef enum cx_prune_importance {
  CX_IMPORTANCE_L1,     /* |w| summed over the filter (magnitude: |w| itself) */
  CX_IMPORTANCE_L2,     /* the filter's L2 norm */
  CX_IMPORTANCE_BN,     /* |gamma| of the BatchNorm after it (network slimming) */
  CX_IMPORTANCE_TAYLOR, /* |w * dL/dw| accumulated over training steps (first order) */
} cx_prune_importance;

typedef struct cx_prune_config {
  cx_prune_method method;
  /* magnitude: the fraction of the prunable weights zeroed; N:M: fixed by n and m (1 - n/m);
   * channel: the fraction of the model's MACs removed. In [0, 1). */
  double sparsity;
  cx_prune_scope scope;
  cx_prune_importance importance;
  int n, m; /* N:M: 2 and 4 */
  /* Zhu-Gupta's gradual schedule over optimizer steps: from initial_sparsity at `start` to
   * `sparsity` at `end`, pruning every `every` steps; start == end: one-shot at start. */
  double initial_sparsity;
  int64_t start, end, every;
  /* Node-name globs (fnmatch, as `compress inspect` names nodes). No include: every Conv, Gemm
   * and MatMul with an initializer weight except the first conv and the classifier (the last
   * Gemm/MatMul). exclude applies after include. */
  const char *const *include;
  int n_include;
  const char *const *exclude;
  int n_exclude;
  int round_to; /* channel: kept channel counts rounded up to a multiple of it; 0 or 1: any */
  /* channel: fixed fractions instead of the MAC target (n_ratios > 0): the channel group whose
   * producer (the Conv/Gemm/MatMul that names it in logs and in `compress prune scan --method
   * channel`) is node ratio_nodes[i] loses floor(ratios[i] * n) of its n channels, the least
   * important (kept counts rounded as under `layer` scope); groups not named keep theirs. */
  const char *const *ratio_nodes;
  const double *ratios;
  int n_ratios;
} cx_prune_config;

/* Defaults: magnitude, sparsity 0.5, global, L1, 2:4, one-shot at step 0. */
cx_prune_config cx_prune_defaults(void);
/* Ranges and combinations; the message names the key as the pipeline file spells it. */
cx_status cx_prune_config_check(const cx_prune_config *c);

/* Zhu-Gupta: s_t = s_f + (s_i - s_f)(1 - (t - t0)/(n dt))^3 for t in [start, end], held at
 * initial_sparsity before start and at sparsity after end, changing only at multiples of
 * `every` from start (and at end, where it reaches sparsity). `step` counts optimizer steps
 * done: 0 is before the first update. */
double cx_prune_schedule_sparsity(const cx_prune_config *c, int64_t step);
/* Channel pruning with a schedule (end > start, or start > 0): the channels are masked while
 * the model trains and the graph rewritten after (prune/channel.h); without one they are cut
 * before training. */
bool cx_prune_channel_gradual(const cx_prune_config *c);
/* Channel pruning without a schedule: the graph is cut before training and no masks are kept
 * (every other configuration trains with the masking extension, prune/mask.h). */
bool cx_prune_channel_once(const cx_prune_config *c);
/* Whether masks are (re)computed at `step`: start, start + every, ... up to end, and end. */
bool cx_prune_schedule_is_step(const cx_prune_config *c, int64_t step);

/* ---- which weights are prunable (prune/select.c) ---- */

/* One prunable weight: the node that reads it and the weight's value. The weight is seen as
 * [outer, channels, inner] with its input channels along the middle axis, which N:M groups run
 * along: Conv [O, I/g, k...]: O, I/g, prod(k); Gemm with transB=1 [N, K]: N, K, 1; Gemm with
 * transB=0 and MatMul [K, N]: 1, K, N. Names are copies: they outlive the graph. */
typedef struct cx_prune_target {
  int node, weight;  /* node index, value id of the weight (in the graph selected from) */
  char *node_name;   /* as `compress inspect` shows it */
  char *weight_name; /* the initializer's name: the trainer's parameter of the same name */
  int64_t outer, channels, inner;
} cx_prune_target;

typedef struct cx_prune_targets {
  int n;
  cx_prune_target *t; /* in graph node order */
} cx_prune_targets;

/* The prunable weights of g: the weight input (the second) of every Conv, Gemm and MatMul whose
 * weight is a PARAM or CONST initializer, once per weight (a shared weight goes with its first
 * reader). Without include globs: all of them except the first Conv (topologically: the one
 * the input reaches first) and the classifier (the topologically last Gemm/MatMul on the way to
 * the first output); with include: those whose node name matches one; then those matching an
 * exclude glob are dropped. `model` names the model in messages. Errors: a glob that matches no
 * such node (naming it), nothing left to prune (naming the model); *out is then empty. Free it
 * with cx_prune_targets_free. */
cx_status cx_prune_select(const cx_graph *g, const cx_prune_config *c, const char *model,
                          cx_prune_targets *out);
void cx_prune_targets_free(cx_prune_targets *t);

#endif
