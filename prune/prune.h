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
  float bn_l1;  /* network slimming: L1 penalty on BatchNorm gamma while training; 0: none */
} cx_prune_config;

/* Defaults: magnitude, sparsity 0.5, global, L1, 2:4, one-shot at step 0. */
cx_prune_config cx_prune_defaults(void);
/* Ranges and combinations; the message names the key as the pipeline file spells it. */
cx_status cx_prune_config_check(const cx_prune_config *c);

/* Zhu-Gupta: s_t = s_f + (s_i - s_f)(1 - (t - t0)/(n dt))^3 for t in [start, end], held at
 * initial_sparsity before start and at sparsity after end, changing only at multiples of
 * `every` from start. */
double cx_prune_schedule_sparsity(const cx_prune_config *c, int64_t step);

#endif
