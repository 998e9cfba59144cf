#include <stddef.h>
#include <string.h>

#include "../op.h"
#include "families.h"

/* Each family file lists its ops; adding an op touches only its family. */
static const cx_op_def *const *const families[] = {
    cx_ops_eltwise, cx_ops_activation, cx_ops_conv, cx_ops_norm, cx_ops_layer_norm, cx_ops_gather, cx_ops_select, cx_ops_compare, cx_ops_pool, cx_ops_linear, cx_ops_shape, cx_ops_reduce, cx_ops_loss, cx_ops_optim,
    cx_ops_quant, cx_ops_qlinear, cx_ops_fused,
};

enum { MAX_OPS = 256 };

static const cx_op_def *all[MAX_OPS + 1];

const cx_op_def *const *cx_op_all(void) {
  if (!all[0]) {
    int n = 0;
    for (size_t f = 0; f < sizeof families / sizeof *families; f++)
      for (const cx_op_def *const *d = families[f]; *d && n < MAX_OPS; d++) all[n++] = *d;
  }
  return all;
}

const cx_op_def *cx_op_find(const char *name) {
  for (const cx_op_def *const *d = cx_op_all(); *d; d++)
    if (strcmp((*d)->name, name) == 0) return *d;
  return NULL;
}
