#include "backend.h"

#include <string.h>

#include "op.h"
#include "tensor.h"

cx_status cx_backend_download(const cx_backend *b, void *host, const cx_tensor *t, cx_stream *s) {
  CX_TRY(b->copy_async(host, CX_DEVICE_CPU, t->data, b->device, cx_tensor_nbytes(t), s));
  return b->sync(s);
}

cx_status cx_backend_upload(const cx_backend *b, const cx_tensor *t, const void *host,
                            cx_stream *s) {
  CX_TRY(b->copy_async(t->data, b->device, host, CX_DEVICE_CPU, cx_tensor_nbytes(t), s));
  return b->sync(s);
}

cx_status cx_backend_copy(const cx_backend *b, const cx_tensor *dst, const cx_tensor *src,
                          cx_stream *s) {
  if (cx_tensor_nbytes(src) != cx_tensor_nbytes(dst))
    return cx_fail(CX_ERR_ARG, "backend copy: %zu bytes into a tensor of %zu",
                   cx_tensor_nbytes(src), cx_tensor_nbytes(dst));
  CX_TRY(b->copy_async(dst->data, b->device, src->data, b->device, cx_tensor_nbytes(dst), s));
  return b->sync(s);
}

const cx_kernel *cx_kernel_lookup(const cx_kernel *const *tables, size_t n_tables,
                                  const cx_node *n) {
  for (size_t f = 0; f < n_tables; f++)
    for (const cx_kernel *k = tables[f]; k->op; k++)
      if (strcmp(k->op, n->op->name) == 0) return !k->supports || k->supports(n) ? k : NULL;
  return NULL;
}
