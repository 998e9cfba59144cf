#ifndef CX_GRAPH_SHAPES_H
#define CX_GRAPH_SHAPES_H

#include "../core/graph.h"

/* Shapes of every value of a graph without compiling it: each op's own shape inference, run in
 * topological order. shape[] and dtype[] are indexed by value id (g->n_values entries). Used by
 * the ONNX exporter (output shapes, Split sizes) and by `compress inspect`. */

/* For one batch size: the inputs' -1 dimensions become `batch`. */
cx_status cx_graph_infer_shapes(const cx_graph *g, int64_t batch, cx_shape *shape,
                                cx_dtype *dtype);

/* Symbolic: a dimension that equals the batch is -1; one that depends on the batch in another way
 * (2·N after a Concat along it, N·C after a Reshape) is -2. Found by inferring for batch 1 and
 * batch 2. */
cx_status cx_graph_symbolic_shapes(const cx_graph *g, cx_shape *shape, cx_dtype *dtype);

#endif
