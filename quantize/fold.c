/* BatchNorm folding for quantization: the one call quantize/ folds through, core's transform
 * (the exporter's fold_bn uses the same one), with constant channels. Measured on a student of
 * the quick example (seed 2): three depthwise channels behind dead inputs had running variance
 * 0, so the exact fold scaled their weights by 280-900; their INT8 scales became 21 times the
 * layer's output step, the rounded bias moved one channel by 10 steps, and PTQ lost 10.6 points
 * (ONNX Runtime's quantize_static, which keeps such BatchNorms, 1.2). */
#include "../core/graph_fold_bn.h"
#include "quantize.h"

cx_status cx_quant_fold_bn(const cx_graph *g, cx_graph **out, int *folded) {
  return cx_graph_fold_bn(g, true, out, folded);
}
