#ifndef CX_LOSS_SCALE_H
#define CX_LOSS_SCALE_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/tensor.h"
#include "grad_clip.h"

/* Dynamic loss scaling for fp16 training, as torch.cuda.amp.GradScaler does it. Each step:
 *
 *   seed the loss gradient with s.scale (not 1), run backward
 *   bool ok = cx_loss_scaler_unscale(&s, grads, n);   grads *= 1/scale; false on inf/NaN
 *   if (ok) { clip; cx_optimizer_step(...); }           an overflowed step is skipped
 *   cx_loss_scaler_update(&s, ok);                      x0.5 on overflow; x2 after 2000 good steps
 *
 * Plain C on host-memory gradients; the logic is the backend's to reuse as it is, with its own
 * scan-and-unscale of device memory. */

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

/* Multiplies the gradients by 1 / scale while scanning them; returns whether all are finite
 * afterwards. Call before clipping, so that max_norm means the true gradient's norm. */
bool cx_loss_scaler_unscale(const cx_loss_scaler *s, cx_tensor *const *grads, int n);

/* After the step was taken (finite) or skipped (not): an overflow multiplies the scale by
 * backoff_factor and restarts the count; growth_interval finite steps in a row multiply it by
 * growth_factor. */
void cx_loss_scaler_update(cx_loss_scaler *s, bool finite);

#endif
