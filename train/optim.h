#ifndef CX_OPTIM_H
#define CX_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/backend.h"

/* Optimizers over a list of f32 parameter tensors that live on a backend. The update rules are
 * PyTorch's (torch.optim.SGD, torch.optim.AdamW) and timm/apex's LAMB; docs/training.md gives
 * each formula. Each parameter's update is one op (SGDUpdate, AdamWUpdate, LAMBUpdate:
 * core/ops/optim.c) run by the backend's kernel where the parameter lives (core/op_call.h);
 * the host only uploads the learning rate and the step count, and never touches a tensor.
 *
 * The optimizer owns its state (one allocation of the backend; each state tensor is a slice of
 * it) but not the parameters or gradients: the gradients are passed to every step, so the
 * trainer may accumulate, clip or unscale them in its own buffers first. The learning rate is
 * passed to every step too, as a schedule computes it (train/schedule.h). */

typedef enum cx_optim_kind { CX_OPTIM_SGD, CX_OPTIM_ADAMW, CX_OPTIM_LAMB } cx_optim_kind;

typedef struct cx_optim_config {
  cx_optim_kind kind;
  float lr;           /* the base rate a schedule starts from; step() takes the rate to use */
  float momentum;     /* SGD; 0 keeps no state */
  bool nesterov;      /* SGD; needs momentum > 0 */
  float weight_decay; /* SGD: L2 added to the gradient; AdamW, LAMB: decoupled */
  float beta1, beta2, eps; /* AdamW, LAMB */
  /* false (the default): parameters of rank 0 or 1 (biases, BatchNorm scale and shift) get no
   * weight decay; true: every parameter does. */
  bool decay_norm_and_bias;
  /* LAMB: apply the trust ratio to parameters without weight decay too (timm's always_adapt,
   * apex's use_nvlamb); by default they take a plain Adam step. */
  bool always_adapt;
} cx_optim_config;

/* PyTorch's defaults for each kind: SGD lr 0.1, momentum 0.9 (torch has no default lr and
 * momentum 0; these are the usual CNN recipe), weight decay 0; AdamW lr 1e-3, betas (0.9, 0.999),
 * eps 1e-8, weight decay 1e-2; LAMB (timm) lr 1e-3, betas (0.9, 0.999), eps 1e-6, weight decay
 * 1e-2. */
cx_optim_config cx_optim_defaults(cx_optim_kind kind);
const char *cx_optim_kind_name(cx_optim_kind kind); /* "sgd", "adamw", "lamb" */
/* Parses a kind name as written in configs; CX_ERR_ARG naming the choices otherwise. */
cx_status cx_optim_kind_parse(const char *name, cx_optim_kind *out);

typedef struct cx_optimizer cx_optimizer;

/* params: n f32, contiguous tensors of backend b, which the optimizer updates in place (its ops
 * queued on stream s, the training program's) and which must outlive it; names (may be NULL:
 * "param<i>") name them in state and messages. State starts at zero and the step counter at
 * 0. */
cx_status cx_optimizer_create(const cx_optim_config *c, const cx_backend *b, cx_stream *s, int n,
                              cx_tensor *const *params, const char *const *names,
                              cx_optimizer **out);
void cx_optimizer_free(cx_optimizer *o);

/* One update of every parameter from grads[i] (params[i]'s shape, f32, contiguous, on the
 * backend), with learning rate lr. Advances the step counter. */
cx_status cx_optimizer_step(cx_optimizer *o, cx_tensor *const *grads, float lr);

const cx_optim_config *cx_optimizer_config(const cx_optimizer *o);
int cx_optimizer_param_count(const cx_optimizer *o);
const char *cx_optimizer_param_name(const cx_optimizer *o, int i);
bool cx_optimizer_decays(const cx_optimizer *o, int i); /* whether parameter i gets weight decay */

/* State for checkpoints, in a fixed order: for each parameter, its state tensors, named as
 * PyTorch keys them: "momentum_buffer/<param>" (SGD with momentum), "exp_avg/<param>" and
 * "exp_avg_sq/<param>" (AdamW, LAMB). They are tensors of the backend: read and write them
 * with its copies (cx_backend_download / cx_backend_upload), as a checkpoint does. */
int cx_optimizer_state_count(const cx_optimizer *o);
const char *cx_optimizer_state_name(const cx_optimizer *o, int i);
cx_tensor *cx_optimizer_state(cx_optimizer *o, int i);
/* Steps taken so far; AdamW and LAMB correct their moments' bias with it. */
int64_t cx_optimizer_step_count(const cx_optimizer *o);
void cx_optimizer_set_step_count(cx_optimizer *o, int64_t steps);

#endif
