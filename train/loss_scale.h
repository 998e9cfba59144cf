#ifndef CX_LOSS_SCALE_H
#define CX_LOSS_SCALE_H

#include <stdbool.h>
#include <stdint.h>

#include "grad_clip.h"

/* Dynamic loss scaling for fp16 training, as torch.cuda.amp.GradScaler does it. Each step:
 *
 *   seed the loss gradient with s.scale (not 1), run backward
 *   cx_loss_scaler_unscale(&s, ops, grads, &ok);     grads *= 1/scale; ok false on inf/NaN
 *   if (ok) { clip; cx_optimizer_step(...); }         an overflowed step is skipped
 *   cx_loss_scaler_update(&s, ok);                    x0.5 on overflow; x2 after 2000 good steps
 *
 * The scaling and the scan are ops on the backend that holds the gradients (train/grad_clip.h);
 * the scale's bookkeeping is plain C on the host. */

/* How a trainer scales the loss: not at all, by a fixed factor (an overflow is an error), or
 * dynamically (an overflow skips the step and backs the scale off). */
typedef enum cx_loss_scale_mode {
  CX_LOSS_SCALE_NONE,
  CX_LOSS_SCALE_STATIC,
  CX_LOSS_SCALE_DYNAMIC,
} cx_loss_scale_mode;

typedef struct cx_loss_scaler {
  float scale;          /* default 2^16 */
  float growth_factor;  /* default 2 */
  float backoff_factor; /* default 0.5 */
  int growth_interval;  /* default 2000 */
  int good_steps;       /* finite steps since the scale last changed (GradScaler's tracker) */
  int64_t skipped;      /* steps skipped for overflow so far */
} cx_loss_scaler;

cx_loss_scaler cx_loss_scaler_defaults(void);
/* scale > 0 and finite, growth_factor > 1, 0 < backoff_factor < 1, growth_interval >= 1. */
cx_status cx_loss_scaler_check(const cx_loss_scaler *s);

/* Multiplies the gradients (a list of ops) by 1 / scale, then scans them: *finite says whether
 * all are finite afterwards. Call before clipping, so that max_norm means the true gradient's
 * norm. */
cx_status cx_loss_scaler_unscale(const cx_loss_scaler *s, cx_grad_ops *ops,
                                 cx_tensor *const *grads, bool *finite);

/* After the step was taken (finite) or skipped (not): an overflow multiplies the scale by
 * backoff_factor and restarts the count; growth_interval finite steps in a row multiply it by
 * growth_factor. */
void cx_loss_scaler_update(cx_loss_scaler *s, bool finite);

#endif
