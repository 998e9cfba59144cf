#ifndef CX_PRUNE_CHANNEL_H
#define CX_PRUNE_CHANNEL_H

/* Structured channel pruning (docs/prune.md, "Channel pruning"): which channels of a graph must
 * be removed together (found on the graph, not per architecture), how important each is, which
 * to remove for a MAC target, and the rewritten graph with smaller tensors.
 *
 * The analysis works on channel *elements*: every activation with a channel axis (axis 1) has one
 * element per channel. Ops tie elements that must go together (union-find); a connected set of
 * elements is a *unit*, removed or kept as one. Units that occupy the same activations form a
 * *group* (a convolution's output channels with its BatchNorm and activation; a residual chain);
 * groups are what importance is normalised over and kept counts are rounded in. */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../core/graph.h"
#include "prune.h"

typedef enum cx_channel_edit_kind {
  CX_CHANNEL_SLICE,   /* keep the entries of `value` along `axis` whose channel of `by` is kept */
  CX_CHANNEL_GROUPS,  /* Conv `node`: `group` becomes the number of groups of output `by` left */
  CX_CHANNEL_RESHAPE, /* Reshape target `value`: entry 1 becomes the kept channels of `by` */
} cx_channel_edit_kind;

/* One change the rewrite makes to an initializer or attribute, recorded by the analysis. */
typedef struct cx_channel_edit {
  cx_channel_edit_kind kind;
  int node;  /* the node that reads it */
  int value; /* initializer (SLICE, RESHAPE); -1 for GROUPS */
  int axis;  /* SLICE */
  int by;    /* the activation whose kept channels select */
} cx_channel_edit;

typedef struct cx_channel_group {
  int first, n; /* its units: unit_order[first .. first + n) */
  bool frozen;  /* an element of it is frozen: nothing of it is removed */
  int producer; /* a Conv/Gemm/MatMul node writing it (its name in logs), or -1 */
} cx_channel_group;

typedef struct cx_channel_groups {
  const cx_graph *g;
  int64_t *channels;   /* per value: channels tracked (axis 1 of an activation), 0 for none */
  int64_t *elem_start; /* per value: its first element */
  int64_t n_elems;
  int *elem_unit; /* per element: its unit */
  int n_units;
  int *unit_group; /* per unit */
  int *unit_order; /* units ordered by group */
  int n_groups;
  cx_channel_group *groups;
  cx_channel_edit *edits;
  int n_edits, cap_edits;
  int n_frozen_nodes; /* nodes the analysis did not understand */
  int64_t *node_macs; /* per node: dense MACs per sample (core/graph_cost.h) */
  int64_t macs;       /* their sum */
} cx_channel_groups;

/* The analysis (channel_groups.c). Every node the analysis does not understand freezes the
 * channels it touches and writes one line to log (may be NULL) naming it; graph inputs and
 * outputs are frozen. */
cx_status cx_channel_groups_build(const cx_graph *g, FILE *log, cx_channel_groups **out);
void cx_channel_groups_free(cx_channel_groups *cg);
/* The unit of channel c of value v, or -1 when v has no tracked channels. */
int cx_channel_unit(const cx_channel_groups *cg, int value, int64_t c);
/* Freezes group k, writing why to log. */
void cx_channel_group_freeze(cx_channel_groups *cg, int k, FILE *log, const char *why);

/* Freezes the groups that a Conv, Gemm or MatMul outside the selection writes (cx_prune_select:
 * c's include and exclude globs, by default all but the first conv and the classifier), with a
 * line in log for each; the selection's errors (a glob matching nothing, nothing to prune). */
cx_status cx_channel_select(cx_channel_groups *cg, const cx_prune_config *c, FILE *log);

/* Element-wise first-order Taylor scores |w * dL/dw| accumulated over training, one array per
 * parameter (named as in the graph, as many floats as the parameter has elements). */
typedef struct cx_prune_scores {
  int n;
  const char *const *names;
  const float *const *values;
} cx_prune_scores;

/* A trainer extension accumulating Taylor scores (channel_taylor.c): as each parameter's
 * gradient is final (grad_ready, every micro-batch), |w * dL/dw| is added element by element,
 * read through the backend's copies. The sums are its checkpoint state, so a resumed run goes
 * on from them. cx_channel_taylor_scores is valid while t lives and names the parameters as the
 * training program does (the model's names). */
typedef struct cx_channel_taylor cx_channel_taylor;
cx_status cx_channel_taylor_new(cx_channel_taylor **out);
cx_train_ext cx_channel_taylor_ext(cx_channel_taylor *t);
const cx_prune_scores *cx_channel_taylor_scores(const cx_channel_taylor *t);
void cx_channel_taylor_free(cx_channel_taylor *t);

/* Network slimming's sparsity penalty (Liu et al. 2017; bn_l1.c): a trainer extension whose
 * wrap_graph adds lambda * sum |gamma| over every BatchNormalization's trained scale to the
 * training loss (the value "loss", output 0), so gamma's gradient gains exactly
 * lambda * sign(gamma) and the scales of unneeded channels shrink towards zero before "bn"
 * importance ranks them. The logged training loss includes the penalty. A model without such a
 * BatchNorm is an error. b is the caller's and must outlive the run; scales is set to the number
 * of scales penalised. */
typedef struct cx_prune_bn_l1 {
  float lambda;
  int scales;
} cx_prune_bn_l1;
cx_train_ext cx_prune_bn_l1_extension(cx_prune_bn_l1 *b);

/* Importance of every unit (channel_importance.c), score[n_units]: L1 or L2 norms of the
 * producing filters summed over every producer of the unit, BN |gamma| summed over its
 * BatchNorms (a group without one is ranked by L1, with a line in the log), or Taylor summed
 * over the producing filters' elements (taylor required). Frozen units score 0. */
cx_status cx_channel_importance(const cx_channel_groups *cg, cx_prune_importance importance,
                                const cx_prune_scores *taylor, FILE *log, double *score);

/* MACs per sample of the graph with only the units keep[] marks (channel_choose.c): the MAC
 * count of core/graph_cost.h, scaled node by node by the fraction of input and output channels
 * kept, which is exact for Conv, Gemm and MatMul. */
int64_t cx_channel_macs(const cx_channel_groups *cg, const bool *keep);

/* Chooses keep[n_units] so that the MACs fall to at most (1 - sparsity) of the dense count
 * (channel_choose.c): global scope ranks all units by score normalised by their group's mean
 * score and removes the lowest first; layer scope removes the same fraction of every group.
 * At least max(1, round_to) units of each pruned group stay, and a pruned group keeps a multiple
 * of round_to. Fails naming the reachable sparsity when the target cannot be met. With
 * c->n_ratios > 0 the fractions are the ratios' instead, per named group, and the MAC target is
 * not used (an unknown or frozen producer name is an error). */
cx_status cx_channel_choose(const cx_channel_groups *cg, const cx_prune_config *c,
                            const double *score, bool *keep);

/* Sensitivity allocation (channel_allocate.c): per-group fractions for c's MAC target from
 * measured sensitivity. Group i, named by its producer names[i], loses top-1 drop[i * n_levels
 * + k] when pruned alone to fraction levels[k] (increasing). For a tolerance t each group takes
 * the largest level whose drop, and every smaller level's, is at most t (0 when none is); the
 * smallest t among the drops whose choice (cx_channel_choose with those ratios) meets the target
 * is taken, so layers that lose less give more. fraction[n] out. Fails, naming how far the
 * largest levels go, when even t = the largest drop misses the target. */
cx_status cx_channel_allocate(const cx_channel_groups *cg, const cx_prune_config *c,
                              const double *score, int n, const char *const *names,
                              int n_levels, const double *levels, const double *drop,
                              double *fraction);

/* The rewritten graph (channel_rewrite.c): a clone with every edit applied for keep[]; it is
 * validated and its shapes inferred before it is returned. */
cx_status cx_channel_rewrite(const cx_channel_groups *cg, const bool *keep, cx_graph **out);

typedef struct cx_prune_channel_stats {
  int64_t macs_before, macs_after; /* core/graph_cost.h, per sample */
  int64_t params_before, params_after;
  int64_t channels_before, channels_after; /* units */
  int groups, groups_pruned, groups_frozen;
  int nodes_frozen; /* nodes the analysis did not understand */
} cx_prune_channel_stats;

/* The whole of channel pruning: analysis, the include/exclude selection (a group is pruned only
 * when every Conv/Gemm/MatMul writing it is selected), importance, choice and rewrite. taylor:
 * NULL unless c->importance is CX_IMPORTANCE_TAYLOR. log may be NULL; st may be NULL. */
cx_status cx_prune_channels(const cx_graph *g, const cx_prune_config *c,
                            const cx_prune_scores *taylor, FILE *log, cx_graph **out,
                            cx_prune_channel_stats *st);


/* The rewrite of g for keep[n_units], the units of g's analysis (cx_channel_groups_build on g
 * numbers them the same on every build), with its numbers and a line in log (may be NULL); an
 * error when g's analysis has another number of units. */
cx_status cx_channel_rewrite_kept(const cx_graph *g, int n_units, const bool *keep, FILE *log,
                                  cx_graph **out, cx_prune_channel_stats *st);

/* Gradual channel pruning (mask_channel.c; docs/prune.md, "Gradual channel pruning"): while
 * the model trains, removed channels are masked rather than cut — their filters, biases,
 * BatchNorm scales and shifts and every consumer's weight columns are zero — and the graph is
 * rewritten once, after training, for the channels kept then. The masking extension
 * (prune/mask.h) drives it for method "channel" with a schedule. */
typedef struct cx_channel_masks cx_channel_masks;
/* The analysis and selection of model (as cx_prune_channels makes them, lines in log) and the
 * tensors to mask, as targets of [numel, 1, 1] (*t, freed by the caller). Per-layer ratios
 * are refused (Taylor importance is, by cx_prune_config_check): both are one-shot. */
cx_status cx_channel_masks_open(const cx_graph *model, const cx_prune_config *c, FILE *log,
                                cx_channel_masks **out, cx_prune_targets *t);
/* A pruning step: importance from the live weights w[i] of each target, the choice for
 * `sparsity` (the fraction of MACs removed), kept channels only ever fewer, masks[i] out. */
cx_status cx_channel_masks_update(cx_channel_masks *cm, const cx_prune_targets *t,
                                  const float *const *w, double sparsity, uint8_t *const *masks);
/* The kept channels (u8 per unit, 1 kept): the checkpoint state, a view of cm's memory. */
cx_tensor cx_channel_masks_state(cx_channel_masks *cm);
/* The fraction of the dense MACs that the kept channels cost. */
double cx_channel_masks_macs_kept(cx_channel_masks *cm);
/* The trained model (the graph the masks were opened on, with its trained weights) rewritten
 * for the kept channels. */
cx_status cx_channel_masks_rewrite(cx_channel_masks *cm, const cx_graph *trained, FILE *log,
                                   cx_graph **out, cx_prune_channel_stats *st);
void cx_channel_masks_free(cx_channel_masks *cm);

#endif
