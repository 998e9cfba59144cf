#include "loss_scale.h"

#include <math.h>

cx_loss_scaler cx_loss_scaler_defaults(void) {
  return (cx_loss_scaler){.scale = 65536.0f, .growth_factor = 2.0f, .backoff_factor = 0.5f,
                          .growth_interval = 2000};
}

cx_status cx_loss_scaler_check(const cx_loss_scaler *s) {
  if (!(s->scale > 0) || isinf(s->scale))
    return cx_fail(CX_ERR_ARG, "loss scale %g must be finite and > 0", s->scale);
  if (!(s->growth_factor > 1) || isinf(s->growth_factor))
    return cx_fail(CX_ERR_ARG, "loss scale growth_factor %g must be > 1", s->growth_factor);
  if (!(s->backoff_factor > 0 && s->backoff_factor < 1))
    return cx_fail(CX_ERR_ARG, "loss scale backoff_factor %g must be in (0, 1)",
                   s->backoff_factor);
  if (s->growth_interval < 1)
    return cx_fail(CX_ERR_ARG, "loss scale growth_interval %d must be >= 1", s->growth_interval);
  return CX_OK;
}

/* Two passes where there was one (scale, then scan): the same numbers, and a pass over the
 * gradients is small beside a training step. */
cx_status cx_loss_scaler_unscale(const cx_loss_scaler *s, cx_grad_ops *ops,
                                 cx_tensor *const *grads, bool *finite) {
  CX_TRY(cx_grad_scale(ops, grads, (float)(1.0 / (double)s->scale)));
  return cx_grads_finite(ops, grads, finite);
}

void cx_loss_scaler_update(cx_loss_scaler *s, bool finite) {
  if (!finite) {
    s->scale *= s->backoff_factor;
    s->good_steps = 0;
    s->skipped++;
    return;
  }
  if (++s->good_steps >= s->growth_interval) {
    float grown = s->scale * s->growth_factor;
    if (isfinite(grown)) s->scale = grown; /* GradScaler keeps the scale rather than reach inf */
    s->good_steps = 0;
  }
}
