#ifndef CX_PROGRAM_H
#define CX_PROGRAM_H

#include <stdio.h>

#include "backend.h"
#include "graph.h"
#include "node_timer.h"

/* A graph compiled for one batch size: shapes inferred, backward nodes added (training), a
 * topological schedule, and a liveness-based memory plan that places every activation and
 * gradient in one arena. Steps then run with no allocation. */

typedef struct cx_program cx_program;

typedef struct cx_compile_opts {
  int64_t batch;             /* replaces -1 dimensions of the inputs */
  bool training;             /* add backward nodes and keep what they need */
  const char *loss;          /* training: name of the scalar loss value; NULL: each graph output
                                gets a fed gradient input named "<output>@grad" */
  const cx_backend *backend;
  uint64_t seed;             /* Dropout and other random ops */
  cx_precision precision;    /* F32 (default) or BF16 autocast in the kernels that support it */
  /* Training: gradient checkpointing (core/recompute.h). Forward activations that backward
   * reads inside these segments (node-name prefixes such as "layer1" or "layer2.0", or the one
   * entry "blocks": every residual block / numbered module) are recomputed in the backward pass
   * instead of kept: a smaller arena for about one more forward pass of those segments. */
  const char *const *checkpoint_segments;
  int n_checkpoint_segments;
  /* Inference: parameters and statistics will be copied in after compile (cx_program_copy_params:
   * the trainer's evaluation program), so BatchNormalization is not folded into the weights
   * (core/infer_fuse.h); the other inference fusions still apply. */
  bool params_copied_in;
} cx_compile_opts;

/* Called when a parameter's gradient is final within a backward pass, in the order they finish. */
typedef void (*cx_grad_ready_fn)(void *user, int param, const cx_tensor *value,
                                 const cx_tensor *grad);

cx_status cx_program_compile(const cx_graph *g, const cx_compile_opts *o, cx_program **out);
void cx_program_free(cx_program *p);

cx_status cx_program_forward(cx_program *p);
cx_status cx_program_backward(cx_program *p);
void cx_program_set_grad_hook(cx_program *p, cx_grad_ready_fn fn, void *user);
/* The replicas this training program is one of (backend.h; a copy is kept; NULL: one again).
 * Extensions find them with cx_program_replicas to reduce what they observe (quantization's
 * ranges); with sync_batch_stats, BatchNorm's kernels pool their statistics through them. */
void cx_program_set_replicas(cx_program *p, const cx_replicas *r);
const cx_replicas *cx_program_replicas(const cx_program *p); /* NULL: one replica */
/* The counter random ops (Dropout) key their draws with: backward passes run so far (training
 * programs) or forward passes (inference), unless set; the trainer sets its optimizer step
 * before each micro-batch. */
uint64_t cx_program_step(const cx_program *p);
void cx_program_set_step(cx_program *p, uint64_t step);
/* Where the next passes' batch rows sit among the step's samples (backend.h; {0, 1} after
 * compile): the trainer sets them from the loader's batch, so that a sample draws the same
 * numbers whichever rank and micro-batch it lands in. */
void cx_program_set_rows(cx_program *p, cx_batch_rows rows);

/* Any value by name: inputs to fill, outputs to read, parameters, "<name>@grad" gradients. */
cx_tensor *cx_program_tensor(cx_program *p, const char *name);
int cx_program_param_count(const cx_program *p);
const char *cx_program_param_name(const cx_program *p, int i);
cx_tensor *cx_program_param(cx_program *p, int i);
cx_tensor *cx_program_param_grad(cx_program *p, int i); /* NULL in inference programs */
/* The backend the program runs on and its stream (NULL on the CPU). */
const cx_backend *cx_program_backend(const cx_program *p);
cx_stream *cx_program_stream(const cx_program *p);
/* Host access to one of the program's tensors (cx_program_tensor, cx_program_param, ...): the
 * whole tensor from or to cx_tensor_nbytes(t) bytes of host memory, done when they return. Host
 * code never dereferences a program tensor's data: on a GPU it is device memory. */
cx_status cx_program_read(const cx_program *p, const cx_tensor *t, void *host);
cx_status cx_program_write(cx_program *p, const cx_tensor *t, const void *host);
/* Copies every parameter and statistic of src into the same-named one of dst (an evaluation
 * program following a training one); fails naming a value missing or of another size, and for
 * a program that folded BatchNormalization (compile it with params_copied_in). */
cx_status cx_program_copy_params(cx_program *dst, const cx_program *src);
/* Writes the trained parameters and statistics back into g's initializers (not from a program
 * that folded BatchNormalization). */
cx_status cx_program_store(const cx_program *p, cx_graph *g);

typedef struct cx_memory_plan {
  size_t arena_bytes;      /* activations and intermediate gradients, after reuse */
  size_t unplanned_bytes;  /* the same buffers laid end to end, without reuse */
  size_t persistent_bytes; /* parameters, their gradients, statistics, inputs, constants */
  size_t scratch_bytes;    /* kernel workspace, shared by all nodes */
  int n_buffers;
  /* Gradient checkpointing: the arena the same program would plan without it (arena_bytes when
   * it is off), and the forward nodes cloned into the backward pass. */
  size_t arena_no_recompute_bytes;
  int recomputed_nodes;
} cx_memory_plan;

cx_memory_plan cx_program_memory(const cx_program *p);
/* What the plan allocated on the program's backend at compile time, in bytes: the arena, the
 * persistent values and the scratch (device memory on a GPU: the progress line's "plan"). */
size_t cx_program_device_bytes(const cx_program *p);
/* Every arena buffer with its offset and live range, for checks and `--verbose` output. */
typedef struct cx_buffer_info {
  int value;
  size_t offset, bytes;
  int first, last; /* schedule steps */
} cx_buffer_info;
int cx_program_buffers(const cx_program *p, const cx_buffer_info **out);
/* The compiled graph (forward and backward nodes, in schedule order). */
const cx_graph *cx_program_graph(const cx_program *p);
int cx_program_forward_nodes(const cx_program *p);
/* The tensor of value id `value` of the compiled graph. Intermediate activations may be
 * channels-last (cx_tensor_is_channels_last) and, in a bf16 program, bf16
 * (cx_program_bf16_act_count); inputs, outputs and parameters are always plain f32. */
const cx_tensor *cx_program_value_tensor(const cx_program *p, int value);
/* How many values the layout pass made channels-last (0 under CX_LAYOUT=plain). */
int cx_program_channels_last_count(const cx_program *p);
/* how many activations the dtype pass stores in bf16 (core/act_dtype.h) */
int cx_program_bf16_act_count(const cx_program *p);
void cx_program_print(const cx_program *p, FILE *f);

/* Per-node timing (seconds, core/node_timer.h), kept while profiling is on; indexed like
 * cx_program_graph's nodes. Switching it on or off starts the table afresh; on a stream backend
 * it makes two events per node (and can fail). On a stream the table is complete after each
 * step: an inference program's forward pass, a training program's backward pass. */
cx_status cx_program_set_profiling(cx_program *p, bool on);
const cx_node_timing *cx_program_timings(const cx_program *p); /* NULL when off */
/* Waits until the work queued on the program's stream is done (at once on the CPU). */
cx_status cx_program_wait(cx_program *p);
/* While profiling on a stream backend: waits for the program's stream, so that work queued there
 * and timed on the host (the optimizer's update) counts its own time rather than the time to
 * queue it. CX_OK at once otherwise. */
cx_status cx_program_profile_wait(cx_program *p);

/* After a step produced NaN or Inf: re-runs it node by node and writes into msg which node first
 * produced a non-finite value from finite inputs (or which parameter is not finite). */
cx_status cx_program_locate_nonfinite(cx_program *p, char *msg, size_t len);

#endif
