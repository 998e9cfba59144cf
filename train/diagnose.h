#ifndef CX_DIAGNOSE_H
#define CX_DIAGNOSE_H

/* Training diagnostics, fed on logged steps only so that they cost one pass over the gradients
 * every log_every steps (docs/training.md, "Diagnostics"):
 *
 *   depth ratio          relative to their weights (|g| / |w|), what the first quarter of the
 *                        layers gets over what the last quarter gets (geometric means); 0.3 to
 *                        3 in a healthy ResNet
 *   exploding gradients  the global gradient norm exceeds 100x the smallest one logged so far,
 *                        or the depth ratio exceeds 1e3
 *   vanishing gradients  the depth ratio is below 1e-3, or the global norm below 1e-8
 *   stalled loss         the logged loss has not gone below 99% of its best for `stall_logs`
 *                        logged steps in a row
 *
 * Each kind warns once per run, with the numbers that triggered it and its likely causes. */

#include <stdbool.h>
#include <stdint.h>

typedef enum cx_diag_kind { CX_DIAG_EXPLODING, CX_DIAG_VANISHING, CX_DIAG_STALLED } cx_diag_kind;

typedef struct cx_diag {
  int stall_logs;        /* logged steps without improvement before a warning; 0: 10 */
  int64_t classes;       /* for the uniform-prediction hint (ln classes); 0: no hint */
  /* state */
  double min_norm;       /* smallest global gradient norm logged */
  int64_t min_norm_step;
  double best_loss;
  int64_t best_step;
  int since_best, n_logged;
  bool warned[3];
  char msg[1024];
} cx_diag;

/* The norms of one layer's weights and gradient (a conv or linear weight: rank >= 2). */
typedef struct cx_layer_norm {
  const char *name;
  double grad, weight;
} cx_layer_norm;

/* Layers in order from the input to the output. Returns a warning (in d->msg, without a trailing
 * newline) the first time a condition holds, else NULL. */
const char *cx_diag_gradients(cx_diag *d, int64_t step, double global_norm,
                              const cx_layer_norm *layers, int n);
const char *cx_diag_loss(cx_diag *d, int64_t step, double loss);

#endif
