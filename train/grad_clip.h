#ifndef CX_GRAD_CLIP_H
#define CX_GRAD_CLIP_H

#include <stdbool.h>

#include "../core/backend.h"

/* Operations on a list of gradient tensors (f32, contiguous, on a backend): the global norm,
 * clipping by it, a finiteness scan, scaling, and accumulation over micro-batches. Each is an op
 * per tensor run on the backend (SquaredNorm, AllFinite, Mul and Add writing over their first
 * input: core/ops/optim.c, core/op_call.h); the host reads back only the per-tensor norms and
 * finite flags, in one download each, and writes only the scale factor.
 *
 * A cx_grad_ops is made for one list of shapes, the parameters' (NULL entries, for parameters
 * without a gradient, are skipped by every call); every call takes a list of tensors of those
 * shapes, in the same order: the program's gradients, the accumulation buffers, or the
 * parameters themselves (their norms, for the diagnostics). */

typedef struct cx_grad_ops cx_grad_ops;

/* like: n tensors of backend b, whose shapes fix the list; the ops are queued on stream s.
 * accumulate: also keep accumulation buffers (cx_grad_accumulate). */
cx_status cx_grad_ops_create(const cx_backend *b, cx_stream *s, int n, cx_tensor *const *like,
                             bool accumulate, cx_grad_ops **out);
void cx_grad_ops_free(cx_grad_ops *g);

/* sq[k] = the sum of squares of t[k]'s elements, accumulated in double (0 for NULL entries). */
cx_status cx_grad_sq_norms(cx_grad_ops *g, cx_tensor *const *t, double *sq);

/* sqrt of the sum of squares of every element of every tensor, accumulated in double. */
cx_status cx_grad_global_norm(cx_grad_ops *g, cx_tensor *const *grads, float *norm);

/* torch.nn.utils.clip_grad_norm_: when max_norm / (norm + 1e-6) < 1, multiplies every gradient
 * by it. *norm is the norm before clipping. A norm that is not finite leaves the gradients as
 * they are (PyTorch would fill them with NaN; the loss scaler or the NaN check acts on it). */
cx_status cx_grad_clip_global_norm(cx_grad_ops *g, cx_tensor *const *grads, float max_norm,
                                   float *norm);

/* Whether every element is finite (no inf, no NaN). */
cx_status cx_grads_finite(cx_grad_ops *g, cx_tensor *const *grads, bool *finite);

/* grads *= factor. */
cx_status cx_grad_scale(cx_grad_ops *g, cx_tensor *const *grads, float factor);

/* acc = grads when first, acc += grads otherwise, into the buffers of cx_grad_accumulated:
 * summing k micro-batches' gradients. With a mean-reduced loss, scaling the sum by 1/k gives
 * the gradient of the whole batch (exactly, for graphs without batch statistics). */
cx_status cx_grad_accumulate(cx_grad_ops *g, cx_tensor *const *grads, bool first);
/* The same for tensor k alone (the trainer accumulates each gradient as backward finishes it,
 * so that the sum is complete when the extensions' grad_final sees it). */
cx_status cx_grad_accumulate_one(cx_grad_ops *g, int k, const cx_tensor *grad, bool first);
/* The accumulation buffers (tensors of the backend, shaped like the list); NULL when g was made
 * without accumulate. */
cx_tensor *const *cx_grad_accumulated(const cx_grad_ops *g);

#endif
