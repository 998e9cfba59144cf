/* BatchNorm folding for quantization: the one call quantize/ folds through. */
#include <string.h>

#include "../core/op.h"
#include "quantize.h"

cx_status cx_quant_fold_bn(const cx_graph *g, cx_graph **out, int *folded) {
  /* Interim until core's cx_graph_fold_bn (branch qexport) lands: graphs without
   * BatchNormalization pass through; others are refused rather than folded twice over. */
  *out = NULL;
  if (folded) *folded = 0;
  for (int k = 0; k < g->n_nodes; k++)
    if (!strcmp(g->nodes[k].op->name, "BatchNormalization"))
      return cx_fail(CX_ERR_UNSUPPORTED, "quantize: node '%s': BatchNormalization folding is "
                     "not built in yet", g->nodes[k].name);
  *out = cx_graph_clone(g);
  return *out ? CX_OK : cx_fail(CX_ERR_NOMEM, "out of memory");
}
