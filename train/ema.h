#ifndef CX_EMA_H
#define CX_EMA_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/backend.h"

/* An exponential moving average of weights, as timm's ModelEmaV2 keeps it:
 *   ema = d * ema + (1 - d) * w        after each optimizer step
 * with d = decay, or with warmup (timm ModelEmaV3's use_warmup), for the update that has k
 * updates before it: d_k = min(decay, 1 - (1 + k / warmup_gamma)^-warmup_power), which is 0 (a
 * copy) for the first. timm averages the whole state dict: pass the parameters and the
 * BatchNorm running statistics. The average starts as a copy of the tensors given to create.
 *
 * The average lives on the backend of the tensors it follows: each update is an EMAUpdate op
 * per tensor (core/ops/optim.c) with d written to the backend first, and swapping or copying
 * the average goes through the backend's copies; the host touches no tensor. */

typedef struct cx_ema_config {
  float decay;        /* default 0.9999 */
  bool warmup;        /* default false */
  float warmup_gamma; /* default 1 */
  float warmup_power; /* default 2/3 */
} cx_ema_config;

typedef struct cx_ema cx_ema;

cx_ema_config cx_ema_defaults(void);

/* tensors: n contiguous f32 tensors of backend b (the ops and copies queued on stream s); names
 * may be NULL ("param<i>"). */
cx_status cx_ema_create(const cx_ema_config *c, const cx_backend *b, cx_stream *s, int n,
                        cx_tensor *const *tensors, const char *const *names, cx_ema **out);
void cx_ema_free(cx_ema *e);

/* Folds the current values of tensors (the same list, in the same order, as at create) into the
 * average. Fails while the average is swapped in. */
cx_status cx_ema_update(cx_ema *e, cx_tensor *const *tensors);
/* The d the next update will use. */
float cx_ema_decay(const cx_ema *e);

/* Exchanges the average and the live values: call once to evaluate with the averaged weights,
 * again to restore the trained ones. */
cx_status cx_ema_swap(cx_ema *e, cx_tensor *const *tensors);
bool cx_ema_swapped(const cx_ema *e);
/* Writes the average into tensors (to keep it as the final model). */
cx_status cx_ema_copy_to(const cx_ema *e, cx_tensor *const *tensors);

/* State for checkpoints: "ema/<name>" tensors and the number of updates so far. The tensors are
 * the backend's: read and write them with its copies (cx_backend_download / upload). */
int cx_ema_count(const cx_ema *e);
const char *cx_ema_name(const cx_ema *e, int i);
cx_tensor *cx_ema_tensor(cx_ema *e, int i);
int64_t cx_ema_updates(const cx_ema *e);
void cx_ema_set_updates(cx_ema *e, int64_t updates);

#endif
