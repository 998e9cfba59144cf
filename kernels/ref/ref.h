#ifndef CX_REF_H
#define CX_REF_H

#include "../../core/backend.h"

/* Plain-C references, in double, one per op (gradient ops included). Tests compare the CPU
 * kernels against them and take finite differences of them; nothing in the product calls them.
 * Written for clarity over speed: loops that read like the ONNX spec. */

typedef struct cx_ref_tensor {
  cx_shape shape;
  double *data; /* contiguous, row-major; allocated by the caller for outputs */
  cx_dtype dtype; /* the value's type, which data holds as doubles (QuantizeLinear's output) */
} cx_ref_tensor;

typedef struct cx_ref_args {
  const cx_node *node;
  const cx_ref_tensor *in; /* omitted optional inputs have data == NULL */
  int n_in;
  cx_ref_tensor *out;      /* shapes from shape inference, data zeroed */
  int n_out;
  bool training;
  uint64_t seed, step;     /* same meaning as in cx_kernel_args */
  int node_index;
  cx_batch_rows rows;
} cx_ref_args;

typedef cx_status (*cx_ref_fn)(const cx_ref_args *a);

typedef struct cx_ref_entry {
  const char *op;
  cx_ref_fn fn;
} cx_ref_entry;

cx_ref_fn cx_ref_find(const char *op);

/* NULL-terminated tables, one per file in kernels/ref/. */
extern const cx_ref_entry cx_ref_eltwise[], cx_ref_activation[], cx_ref_conv[], cx_ref_norm[], cx_ref_layer_norm[], cx_ref_gather[], cx_ref_select[], cx_ref_compare[], cx_ref_pool[], cx_ref_linear[], cx_ref_shape[], cx_ref_reduce[], cx_ref_loss[], cx_ref_optim[], cx_ref_quant[],
    cx_ref_qlinear[], cx_ref_fused[];

#endif
