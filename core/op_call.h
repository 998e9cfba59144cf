#ifndef CX_OP_CALL_H
#define CX_OP_CALL_H

#include "backend.h"

/* One op run outside a program, on tensors that already live on a backend: the optimizer
 * updates, the weight average and the gradient scans of train/ are such calls, so that they run
 * on whatever backend holds the parameters. A call is made once (the op record found, the
 * attributes checked against its schema, shape inference run and the outputs checked against
 * it, the backend's kernel found and prepared, scratch allocated with the backend's alloc) and
 * run many times without allocating.
 *
 * Tensors are plain (contiguous) and live on the backend (device.kind == b->device). Update ops
 * (SGDUpdate, EMAUpdate, ...) write their state inputs in place, as BatchNormTrain writes the
 * running statistics; an output may alias an input where the kernel reads each element before
 * writing it (element-wise ops: Mul and Add scale and accumulate in place this way). */

typedef struct cx_op_call cx_op_call;

typedef struct cx_op_call_desc {
  const char *op;   /* name in the op table */
  const char *name; /* the node's name in messages ("AdamWUpdate(conv1.weight)"); NULL: op */
  const cx_attr *attrs;
  int n_attrs;
  const cx_tensor *in; /* an omitted optional input has data == NULL */
  int n_in;
  const cx_tensor *out;
  int n_out;
} cx_op_call_desc;

/* The tensors in d fix the shapes and dtypes the call is prepared for; their data may be
 * anywhere on the backend (they are not kept). Kernels run on stream s. */
cx_status cx_op_call_create(const cx_backend *b, cx_stream *s, const cx_op_call_desc *d,
                            cx_op_call **out);
/* Runs the kernel on in[n_in] and out[n_out] (the counts, shapes and dtypes of create; an
 * input omitted there stays omitted). */
cx_status cx_op_call_run(cx_op_call *c, const cx_tensor *in, const cx_tensor *out);
void cx_op_call_free(cx_op_call *c);

#endif
