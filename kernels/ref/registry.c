#include <string.h>

#include "ref.h"

static const cx_ref_entry *const families[] = {
    cx_ref_eltwise, cx_ref_activation, cx_ref_conv, cx_ref_norm, cx_ref_layer_norm, cx_ref_gather, cx_ref_select, cx_ref_compare, cx_ref_pool, cx_ref_linear, cx_ref_shape, cx_ref_reduce, cx_ref_loss, cx_ref_optim, cx_ref_quant,
    cx_ref_qlinear, cx_ref_fused,
};

cx_ref_fn cx_ref_find(const char *op) {
  for (size_t f = 0; f < sizeof families / sizeof *families; f++)
    for (const cx_ref_entry *e = families[f]; e->op; e++)
      if (strcmp(e->op, op) == 0) return e->fn;
  return NULL;
}
