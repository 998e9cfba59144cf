/* BatchNorm folding for quantization: the one call quantize/ folds through, core's transform
 * (the exporter's fold_bn uses the same one). */
#include "../core/graph_fold_bn.h"
#include "quantize.h"

cx_status cx_quant_fold_bn(const cx_graph *g, cx_graph **out, int *folded) {
  return cx_graph_fold_bn(g, out, folded);
}
