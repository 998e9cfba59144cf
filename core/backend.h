#ifndef CX_BACKEND_H
#define CX_BACKEND_H

#include <stddef.h>

#include "graph.h"

/* A backend is a table of function pointers plus a kernel table. The CPU backend is the reference;
 * a CUDA backend fills the same table (alloc on the device, copies on a stream) and core does not
 * change. */

typedef struct cx_stream cx_stream; /* opaque per backend; NULL on the CPU */
typedef struct cx_event cx_event;   /* a marker queued on a stream (profiling); per backend */

/* What a device holds and does now (monitoring: the trainer's progress line and metrics). */
typedef struct cx_device_stats {
  int util_percent;           /* share of the last sample period a kernel ran; -1: unknown */
  size_t mem_used, mem_total; /* bytes of device memory, every process's */
} cx_device_stats;

/* The arithmetic a kernel may use. Tensors between ops stay f32 (master weights, BN statistics
 * and losses in f32 too); under BF16 (or F16) the kernels that profit (convolution, matmul) round
 * their operands to bf16 (fp16) and accumulate in f32, as autocast does. A backend says in
 * check_precision which of these it can do. */
typedef enum cx_precision { CX_PRECISION_F32, CX_PRECISION_BF16, CX_PRECISION_F16 } cx_precision;

/* The replicas of a data-parallel run as a program sees them (installed by the run's
 * data-parallel extension, dist/ddp.c; core knows no transport). reduce combines n doubles over
 * every replica in place, with the same result on each; it is collective, so every replica calls
 * it at the same points of the same program. It is called from the thread that runs the program,
 * outside OpenMP worker threads. */
typedef enum cx_reduce_op { CX_REDUCE_SUM, CX_REDUCE_MIN, CX_REDUCE_MAX } cx_reduce_op;
typedef struct cx_replicas {
  int count;
  cx_status (*reduce)(void *user, double *buf, int64_t n, cx_reduce_op op);
  void *user;
  /* BatchNormTrain and BatchNormGrad pool their per-channel sums over the replicas (sync_bn) */
  bool sync_batch_stats;
} cx_replicas;

/* Where a program's batch rows sit among the samples its step trains on, for the random ops that
 * draw per sample (Dropout): local row i is sample first + stride·i. A data-parallel rank holds
 * every world-th sample (data/loader.c), so rank r's rows are {r + world·k, world}; draws keyed
 * by the sample rather than the local row make N ranks draw what one process draws. */
typedef struct cx_batch_rows {
  int64_t first, stride;
} cx_batch_rows;

/* The stream position of element i of a tensor with rows of row_elems elements. */
static inline uint64_t cx_batch_rows_index(cx_batch_rows r, int64_t row_elems, int64_t i) {
  return (uint64_t)((r.first + r.stride * (i / row_elems)) * row_elems + i % row_elems);
}

typedef struct cx_kernel_args {
  const cx_node *node;
  const cx_tensor *in; /* omitted optional inputs have data == NULL */
  int n_in;
  const cx_tensor *out;
  int n_out;
  void *state;   /* from prepare: cached primitives, precomputed indices */
  void *scratch; /* scratch_bytes from prepare, owned by the program */
  bool training;
  cx_precision precision;
  uint64_t seed;  /* program seed; with step and node index, the key of CX_OP_RANDOM streams */
  uint64_t step;
  int node_index;
  cx_batch_rows rows;
  /* A forward node run again in the backward pass (gradient checkpointing, core/recompute.h):
   * it must compute what the forward pass computed and leave state alone (BatchNormTrain does
   * not update the running statistics twice); node_index is already the original node's. */
  bool recompute;
  cx_stream *stream;
  /* The replicas whose batch statistics a BatchNorm pools (synchronised BatchNorm); NULL: this
   * process's batch alone. Set only in training programs, never during prepare. */
  const cx_replicas *sync_stats;
  /* The compiled graph, for cx_kernel_const_input. */
  const cx_graph *graph;
} cx_kernel_args;

/* The host copy of input k when it is a constant of the program (axes, starts, pads: the
 * initializer the program uploaded), else NULL (absent, or computed at run time). Valid in
 * prepare and run: a device kernel reads such small inputs here instead of copying them back. */
static inline const void *cx_kernel_const_input(const cx_kernel_args *a, int k) {
  if (!a->graph || k >= a->n_in || a->node->in[k] < 0) return NULL;
  const cx_value *v = &a->graph->values[a->node->in[k]];
  return v->kind == CX_VALUE_CONST ? v->init : NULL;
}

/* Memory layouts a kernel accepts besides plain row-major (cx_kernel.layouts). Only 4-D
 * activations are ever made channels-last (core/layout.c), so these speak of 4-D arguments. */
enum {
  /* each 4-D argument may independently be channels-last (Conv, ConvGrad through oneDNN) */
  CX_LAYOUT_ANY = 1 << 0,
  /* channels-last when all its 4-D arguments with more than one pixel share it (BN, pooling);
   * arguments of other ranks (per-channel vectors) are indexed by channel as usual */
  CX_LAYOUT_SHARED = 1 << 1,
  /* element-wise and broadcast/reduce-to: as SHARED, and only where the arguments whose layout
   * matters have one 4-D shape and the rest a moot one (one channel or one pixel: scalars,
   * [N,C,1,1], [W]); other broadcasting operands keep the node plain */
  CX_LAYOUT_ELTWISE = 1 << 2,
};

/* Activation dtypes a kernel reads and writes besides f32 (cx_kernel.act_dtypes). In a program
 * whose precision is BF16 the dtype pass (core/act_dtype.c) stores a channels-last activation in
 * bf16 where its producer and every consumer accept that, so the step moves half the bytes
 * between ops; the kernels compute in f32 as before, converting on load and store. */
enum {
  /* each channels-last argument may independently be bf16 (Conv, ConvGrad, BatchNorm) */
  CX_ACT_BF16_ANY = 1 << 0,
  /* element-wise over flat buffers: where every argument has the output's shape, each may
   * independently be bf16 */
  CX_ACT_BF16_FLAT = 1 << 1,
};

typedef struct cx_kernel {
  const char *op;
  /* Optional. Called once at compile time with the tensors' shapes (data pointers not yet valid):
   * builds what can be cached and says how much scratch memory one run needs. */
  cx_status (*prepare)(const cx_kernel_args *a, void **state, size_t *scratch_bytes);
  cx_status (*run)(const cx_kernel_args *a);
  void (*release)(void *state);
  unsigned layouts; /* CX_LAYOUT_* flags; 0: plain arguments only */
  /* Optional (NULL: every node of the op): whether this kernel, on this machine, computes node
   * n as its op says (an attribute the kernel does exactly only with some instruction sets) */
  bool (*supports)(const cx_node *n);
  unsigned act_dtypes; /* CX_ACT_* flags; 0: f32 activations only */
} cx_kernel;

typedef struct cx_backend {
  const char *name;
  cx_device_kind device;
  /* NULL when the op (with these input dtypes and attributes) has no kernel here */
  const cx_kernel *(*find_kernel)(const struct cx_backend *b, const cx_node *n,
                                  const cx_tensor *in, int n_in);
  void *(*alloc)(size_t bytes);
  void (*free)(void *p);
  void (*memset_zero)(void *p, size_t bytes, cx_stream *s);
  /* copies between host and device memory; may return before the copy is done */
  cx_status (*copy_async)(void *dst, cx_device_kind dst_kind, const void *src,
                          cx_device_kind src_kind, size_t bytes, cx_stream *s);
  cx_status (*sync)(cx_stream *s);
  /* CX_OK when this backend, on this machine, computes in precision p; else a message saying why
   * and what to use instead. Programs are compiled only for precisions that pass. */
  cx_status (*check_precision)(const struct cx_backend *b, cx_precision p);
  /* Optional (NULL on the CPU, whose work is done when a call returns): the stream a program's
   * kernels and copies are queued on, one per program. */
  cx_status (*stream_create)(cx_stream **out);
  void (*stream_free)(cx_stream *s);
  /* Optional (NULL on the CPU, whose nodes the host clock times): events for timing work on a
   * stream without waiting for it (core/node_timer.h). record queues e on s; elapsed gives the
   * seconds between two events recorded on one stream, waiting for `to` to be reached. */
  cx_status (*event_create)(cx_event **out);
  cx_status (*event_record)(cx_event *e, cx_stream *s);
  cx_status (*event_elapsed)(cx_event *from, cx_event *to, double *seconds);
  void (*event_free)(cx_event *e);
  /* Optional (NULL on the CPU): the device's utilization and memory now. */
  cx_status (*device_stats)(const struct cx_backend *b, cx_device_stats *out);
} cx_backend;

/* Host access to backend memory, finished when they return (copy_async, then sync): the only way
 * code above kernels/ reads or writes a tensor that lives on a backend. dst and src have the
 * same byte size (cx_tensor_nbytes); host is that many bytes of host memory. */
cx_status cx_backend_download(const cx_backend *b, void *host, const cx_tensor *t, cx_stream *s);
cx_status cx_backend_upload(const cx_backend *b, const cx_tensor *t, const void *host,
                            cx_stream *s);
/* A copy between two tensors of backend b (device to device), as large as dst. */
cx_status cx_backend_copy(const cx_backend *b, const cx_tensor *dst, const cx_tensor *src,
                          cx_stream *s);

/* A backend's find_kernel over its NULL-terminated kernel tables, in order (the first entry
 * naming the op wins): NULL when none does or its supports() refuses the node. A table lookup
 * only, so it answers on machines that cannot run the backend. */
const cx_kernel *cx_kernel_lookup(const cx_kernel *const *tables, size_t n_tables,
                                  const cx_node *n);

static inline bool cx_backend_supports_op(const cx_backend *b, const cx_node *n,
                                          const cx_tensor *in, int n_in) {
  return b->find_kernel(b, n, in, n_in) != NULL;
}

#endif
