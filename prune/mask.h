#ifndef CX_PRUNE_MASK_H
#define CX_PRUNE_MASK_H

/* Unstructured magnitude and N:M masks (docs/prune.md): computed on the host from weights,
 * kept through training by a trainer extension that re-applies them after every optimizer update
 * (to the weights, the optimizer's state of those weights and the EMA's copy), and a one-shot
 * form that prunes a graph's weights in place. A mask holds one byte per weight: 1 kept, 0
 * pruned. */

#include "prune.h"

/* ---- masks from weights (prune/mask.c) ---- */

/* Magnitude: the k = round(sparsity * count) weights of smallest |w| are pruned, counted over
 * all targets together (CX_PRUNE_GLOBAL: one threshold) or in each target alone (LAYER). Ties
 * at the threshold go in order (target, then element index: the lower pruned first), so the
 * result is the same on every run. w[i] and masks[i] hold targets->t[i]'s weights. A NaN weight
 * is refused, naming the layer. */
cx_status cx_prune_masks_magnitude(const cx_prune_targets *t, const float *const *w,
                                   cx_prune_scope scope, double sparsity, uint8_t *const *masks);
/* N:M: in every group of m consecutive input channels at one (output, spatial) position (the
 * [outer, channels, inner] view of cx_prune_target), the n of largest |w| are kept (ties: the
 * lower channel). Refused, naming the layer, where channels is not a multiple of m. */
cx_status cx_prune_masks_nm(const cx_prune_targets *t, const float *const *w, int n, int m,
                            uint8_t *const *masks);
/* The method's masks (magnitude at `sparsity`, N:M at n:m); channel pruning is refused. */
cx_status cx_prune_masks(const cx_prune_config *c, const cx_prune_targets *t,
                         const float *const *w, double sparsity, uint8_t *const *masks);
/* Every target's input channels are a multiple of m; the message names the first that is not,
 * and `model`. */
cx_status cx_prune_nm_check_shapes(const cx_prune_targets *t, int m, const char *model);
/* N:M's targets: with include globs, every one must fit the pattern (else the refusal above);
 * without, the default selection drops those that cannot (depthwise convolutions, a first
 * layer on few channels), each with a line in log (may be NULL). Nothing left: an error naming
 * the model. */
cx_status cx_prune_nm_fit(cx_prune_targets *t, const cx_prune_config *c, const char *model,
                          FILE *log);
/* Whether weights w of target t keep at most n non-zeros in every group of m input channels
 * (false when its channels are not a multiple of m). */
bool cx_prune_nm_holds(const cx_prune_target *t, const float *w, int n, int m);

/* Zeros (w == 0) and weights, per target (per may be NULL) and over all of them. */
typedef struct cx_prune_count {
  int64_t zeros, total;
} cx_prune_count;
void cx_prune_count_zeros(const cx_graph *g, const cx_prune_targets *t, cx_prune_count *per,
                          cx_prune_count *all);

/* One-shot, no training: selects g's targets (`model` names it in messages), computes the
 * method's masks at c->sparsity and zeroes the pruned weights of g in place. Nothing changes on
 * an error. */
cx_status cx_prune_mask_graph(cx_graph *g, const cx_prune_config *c, const char *model);

/* ---- the trainer extension (prune/mask_ext.c) ---- */

typedef struct cx_prune_masker cx_prune_masker;

/* Selects the targets of `model` (the graph the trainer will train; `name` names it in
 * messages) and checks the configuration; log (NULL: silent) gets a line at each mask update.
 * c's globs are read here only. */
cx_status cx_prune_mask_open(const cx_graph *model, const char *name, const cx_prune_config *c,
                             FILE *log, cx_prune_masker **out);
/* The extension ("prune"): at every schedule step (cx_prune_schedule_is_step; step 0 when the
 * optimizer is ready) it computes the masks from the live weights at the schedule's sparsity,
 * and after every optimizer update it multiplies the weights, their optimizer state and the
 * EMA's copy by them on the program's backend. Checkpoint state: the masks ("prune/mask/
 * <weight>", u8) and whether they are on ("prune/schedule"). The masker must outlive the run. */
cx_train_ext cx_prune_mask_extension(cx_prune_masker *m);
const cx_prune_targets *cx_prune_mask_targets(const cx_prune_masker *m);
/* Target i's mask now in force (numel bytes, 1 kept; all ones before the first update). */
const uint8_t *cx_prune_mask_of(const cx_prune_masker *m, int i);
/* The sparsity of the masks now in force (0 before the first mask update). */
double cx_prune_mask_sparsity(const cx_prune_masker *m);
/* Gradual channel pruning (method "channel" with a schedule): the trained model (the graph
 * the masker was opened on, with its trained weights) rewritten for the channels kept, with its
 * numbers and a line in log (prune/channel.h, cx_channel_rewrite_kept). */
struct cx_prune_channel_stats;
cx_status cx_prune_mask_rewrite(cx_prune_masker *m, const cx_graph *trained, FILE *log,
                                cx_graph **out, struct cx_prune_channel_stats *st);
/* cx_prune_mask_rewrite of *g in place of it, for a caller that needs no numbers. */
cx_status cx_prune_mask_cut(cx_prune_masker *m, FILE *log, cx_graph **g);
void cx_prune_mask_close(cx_prune_masker *m);

#endif
