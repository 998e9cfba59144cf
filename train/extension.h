#ifndef CX_TRAIN_EXTENSION_H
#define CX_TRAIN_EXTENSION_H

/* Trainer extensions (docs/ARCHITECTURE.md, "Training"): what a stage adds to the training loop
 * — distillation's loss and teacher inputs, pruning's masks, quantization's fake-quant and
 * observers, data parallelism's gradient reductions — each with its own state, any number in
 * one run, called in list order at every point they fill. A NULL member is a point the extension
 * does not use. None of them touches another's state: they meet only in the training graph and
 * the training program. */

#include <stdbool.h>
#include <stdint.h>

#include "../core/graph.h"
#include "../core/tensor.h"
#include "../data/data.h"

struct cx_program;
struct cx_optimizer;
struct cx_ema;
struct cx_train_step_info;
struct cx_eval_result;

/* The extension's checkpoint state: host tensors it owns, saved with the trainer's state as
 * "<extension name>/<name>" and written back into the same tensors on resume (before `resumed`
 * is called). Names and tensors must stay valid while the run lasts. */
typedef struct cx_train_ext_state {
  int n;
  const char *const *names;
  cx_tensor *const *tensors;
} cx_train_ext_state;

typedef struct cx_train_ext {
  const char *name; /* for messages and checkpoint names: "distill", "prune", ... */
  void *self;       /* the extension's own state, given to each call */
  /* Builds the training graph from the model: a scalar output "loss" first and the logits
   * second, input "input". At most one extension of a run may build (distillation: its loss);
   * without one the trainer's softmax cross-entropy is used. */
  cx_status (*build_graph)(void *self, const cx_graph *model, cx_graph **out);
  /* Rewrites the training graph in place after it is built, in list order (pruning multiplies
   * weights by masks, quantization inserts fake-quant nodes). */
  cx_status (*wrap_graph)(void *self, cx_graph *train);
  /* The training program is compiled (find your tensors in it); called once per run. */
  cx_status (*opened)(void *self, struct cx_program *train);
  /* Once per run, after every extension's `opened` and before any step (and before a resume
   * restores the checkpoint into them): the optimizer whose state follows the parameters, and
   * the weight average (NULL: none kept), whose tensors an extension may change with the
   * backend's ops and copies (pruning zeroes the state and average of pruned weights). Both live
   * until the run ends. */
  cx_status (*optimizer_ready)(void *self, struct cx_optimizer *o, struct cx_ema *ema);
  /* Before each micro-batch's forward pass: extra inputs, written with cx_program_write. */
  cx_status (*feed)(void *self, struct cx_program *train, const cx_batch *b);
  /* During backward, as soon as parameter `param`'s gradient of this micro-batch is final (the
   * order backward finishes them). `last_micro` is false for the micro-batches of an accumulated
   * step before its last one. */
  void (*grad_ready)(void *self, int param, const cx_tensor *value, const cx_tensor *grad,
                     bool last_micro);
  /* Right after grad_ready on the step's last micro-batch: `grad` is the tensor the update will
   * read (with accumulation, the buffer holding the sum of the step's micro-batches, already
   * complete); an extension may rewrite it until before_update returns. A data-parallel
   * reduction of its bucket starts here, so only the last micro-batch reduces. */
  void (*grad_final)(void *self, int param, const cx_tensor *grad);
  /* After the step's last backward pass, before the gradients are read (finite check, clipping,
   * the update): everything started in grad_ready must be complete when it returns. */
  cx_status (*before_update)(void *self, struct cx_program *train);
  /* After the optimizer update of optimizer step `step` (1 for the first), also after a step
   * skipped by dynamic loss scaling (then `updated` is false): re-apply masks, freeze observers. */
  cx_status (*after_update)(void *self, struct cx_program *train, int64_t step, bool updated);
  /* After each optimizer step, sums[0..n) are this process's step totals that the trainer logs
   * and acts on (loss, correct predictions, images, stop requests): a data-parallel run replaces
   * them with their sums over all ranks, so that every rank logs the whole batch and all stop
   * at the same step. At most one extension of a run may fill it. */
  cx_status (*reduce_metrics)(void *self, double *sums, int n);
  /* Before every checkpoint the trainer would write at optimizer step `step`, also in a
   * process that writes none (data parallelism: only rank 0 writes): compare the replicas. */
  cx_status (*checkpoint)(void *self, struct cx_program *train, int64_t step);
  /* At every logged step, and after each evaluation. */
  void (*on_step)(void *self, const struct cx_train_step_info *s);
  void (*on_epoch)(void *self, int64_t epoch, int64_t step, const struct cx_eval_result *val);
  /* Checkpoint state (see cx_train_ext_state), asked once after `opened`; and the call after a
   * checkpoint's state was loaded into it. */
  cx_status (*state)(void *self, cx_train_ext_state *out);
  cx_status (*resumed)(void *self, struct cx_program *train);
} cx_train_ext;

#endif
