#ifndef CX_GRAD_CLIP_H
#define CX_GRAD_CLIP_H

#include <stdbool.h>

#include "../core/tensor.h"

/* Operations on a set of gradient tensors (f32, contiguous, host memory; NULL entries, for
 * parameters without a gradient, are skipped): the global norm, clipping by it, a finiteness scan,
 * scaling, and accumulation over micro-batches. */

/* sqrt of the sum of squares of every element of every tensor, accumulated in double. */
float cx_grad_global_norm(cx_tensor *const *grads, int n);

/* torch.nn.utils.clip_grad_norm_: when max_norm / (norm + 1e-6) < 1, multiplies every gradient
 * by it. Returns the norm before clipping. A norm that is not finite leaves the gradients as
 * they are (PyTorch would fill them with NaN; the loss scaler or the NaN check acts on it). */
float cx_grad_clip_global_norm(cx_tensor *const *grads, int n, float max_norm);

/* Whether every element is finite (no inf, no NaN). */
bool cx_grads_finite(cx_tensor *const *grads, int n);

/* grads *= factor. */
void cx_grad_scale(cx_tensor *const *grads, int n, float factor);

/* acc = grads when first, acc += grads otherwise: summing k micro-batches' gradients. With a
 * mean-reduced loss, scaling the sum by 1/k gives the gradient of the whole batch (exactly, for
 * graphs without batch statistics). acc[i] and grads[i] need the same element count. */
cx_status cx_grad_accumulate(cx_tensor *const *acc, cx_tensor *const *grads, int n, bool first);

#endif
