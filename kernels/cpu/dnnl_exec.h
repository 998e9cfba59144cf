#ifndef CX_DNNL_EXEC_H
#define CX_DNNL_EXEC_H

#include <stdbool.h>
#include <stddef.h>

#include "../../core/backend.h"
#include "dnnl_util.h"

/* One oneDNN primitive with its tensor arguments, built once in a kernel's prepare and run many
 * times (Conv, ConvGrad, the INT8 runtime's QLinearConvFused / QLinearGemmFused). Each argument
 * wraps a kernel input or output; where the primitive wants another layout or type than the
 * program's buffer, the argument goes through a buffer of the primitive's layout in scratch and a
 * reorder (before the primitive for inputs, after it for outputs). Those buffers and oneDNN's own
 * scratchpad are the kernel's scratch. */

enum { CX_DNNL_MAX_ARGS = 5 };

typedef struct cx_dnnl_arg {
  int arg;       /* DNNL_ARG_* */
  bool output;   /* kernel output `index`, else kernel input `index` */
  int index;
  dnnl_memory_t user, inner;
  dnnl_primitive_t reorder;
  size_t offset; /* of inner in scratch */
  /* a frozen input (cx_dnnl_exec_freeze): inner lives in kept, filled at the first run */
  void *kept;
  bool filled;
  /* an input another primitive reorders (cx_dnnl_exec_reuse): inner is at `offset` from the
   * kernel's scratch itself, not from this primitive's part of it, and is not reordered here */
  bool reused;
} cx_dnnl_arg;

/* A primitive with a sum post-op adds into its destination: before it runs, the destination
 * (the output's buffer, or its inner buffer in scratch) is filled from kernel input `input`. */
typedef struct cx_dnnl_acc {
  int input;                 /* -1: none */
  dnnl_memory_t user;        /* that input, in its own layout */
  dnnl_primitive_t reorder;  /* into the destination's layout; NULL: the same layout */
  size_t bytes;
} cx_dnnl_acc;

typedef struct cx_dnnl_exec {
  dnnl_primitive_t prim;
  dnnl_memory_t scratchpad; /* oneDNN's, at scratch offset 0 */
  int n;
  cx_dnnl_arg a[CX_DNNL_MAX_ARGS];
  size_t scratch;           /* bytes: the scratchpad, then the inner buffers */
  size_t base;              /* where they start in the kernel's scratch (cx_dnnl_exec_reuse) */
  cx_dnnl_acc acc;
} cx_dnnl_exec;

/* Makes the primitive descriptor of op descriptor `desc` with attributes `attr` (NULL: none;
 * copied, with the scratchpad made ours) and the primitive; the caller adds the tensor
 * arguments, then destroys *pd. */
cx_status cx_dnnl_exec_create(cx_dnnl_exec *e, const cx_node *node, const_dnnl_op_desc_t desc,
                              const_dnnl_primitive_attr_t attr, const_dnnl_primitive_desc_t hint,
                              dnnl_primitive_desc_t *pd);
/* Adds argument `arg` of the primitive, backed by kernel input or output `index` of layout
 * user_md. */
cx_status cx_dnnl_exec_arg(cx_dnnl_exec *e, const cx_node *node, const_dnnl_primitive_desc_t pd,
                           int arg, const dnnl_memory_desc_t *user_md, bool output, int index);
/* The primitive (with a sum post-op) adds into DST, which must have been added, output 0:
 * kernel input `input`, of layout user_md, is copied (or reordered) into it before each run.
 * Where that input and the output are one buffer of one layout (the memory planner gave the
 * output the input's buffer, core/infer_fuse.h) nothing is copied. */
cx_status cx_dnnl_exec_accumulate(cx_dnnl_exec *e, const cx_node *node,
                                  const dnnl_memory_desc_t *user_md, int input);
/* Input argument `arg` (added already) never changes after the first run (an inference
 * program's weights, core/infer_fuse.h): where it needs a reorder, its buffer in the primitive's
 * layout moves out of scratch into memory of its own, reordered at the first run only. */
cx_status cx_dnnl_exec_freeze(cx_dnnl_exec *e, const cx_node *node, int arg);
/* Input argument `arg` of e is the same kernel input, in the same layout and type, as argument
 * from_arg of `from`, which runs just before e on the same scratch (ConvGrad's dX and dW
 * primitives both read dY): e reads from's reordered copy instead of reordering its own, and its
 * own part of the scratch moves past all of from's (e->base). Nothing changes where the two
 * differ or either reads the input in place. The kernel's scratch is then e->base + e->scratch
 * bytes at least. */
cx_status cx_dnnl_exec_reuse(cx_dnnl_exec *e, const cx_node *node, int arg,
                             const cx_dnnl_exec *from, int from_arg);
/* Points every memory at this run's buffers, reorders the inputs in (a frozen one at the first
 * run only), runs, reorders the outputs out. */
cx_status cx_dnnl_exec_run(cx_dnnl_exec *e, const cx_kernel_args *a);
void cx_dnnl_exec_release(cx_dnnl_exec *e);

#endif
