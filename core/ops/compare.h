#ifndef CX_OPS_COMPARE_H
#define CX_OPS_COMPARE_H

#include "../graph.h"
#include "../status.h"

/* Cast's `to` attribute (an ONNX type number) as the engine's type; fails naming the node for a
 * type no tensor here holds. Shared by shape inference and the kernels. */
cx_status cx_cast_target(const cx_node *n, cx_dtype *to);

#endif
