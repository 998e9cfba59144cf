#ifndef CX_GRAPH_SHAPES_H
#define CX_GRAPH_SHAPES_H

#include "graph.h"

/* The one shape inference: each op's own `infer` (core/op.h), run over a graph in topological
 * order. shape[] and dtype[] are indexed by value id (g->n_values entries). cx_program_compile
 * runs it (and cx_graph_infer_node for the backward nodes it adds); the ONNX exporter, `compress
 * inspect` and the stages that need a value's shape before they build a training graph (the
 * model's class count, a distillation hint's feature map) call it without compiling anything. */

/* Stable: nodes keep their index order where it is already valid (always, for graphs made with
 * the builder); otherwise the lowest-numbered ready node goes next. order has g->n_nodes
 * entries. Fails on a cycle. */
cx_status cx_graph_topo_order(const cx_graph *g, int *order);

/* For one batch size: the -1 dimensions of the graph inputs become `batch` (an input with one
 * and batch <= 0 is an error), then every node's outputs are inferred. Errors name the node. */
cx_status cx_graph_infer_shapes(const cx_graph *g, int64_t batch, cx_shape *shape,
                                cx_dtype *dtype);

/* The shape of one value for one batch size (a whole inference, for callers that need one). */
cx_status cx_graph_value_shape(const cx_graph *g, int value, int64_t batch, cx_shape *out);

/* One node: its outputs' shapes and dtypes from those of its inputs, already in shape[] and
 * dtype[] (constant inputs' values are read from g). For nodes added to a graph whose other
 * values are inferred already (the backward pass). */
cx_status cx_graph_infer_node(const cx_graph *g, int node, cx_shape *shape, cx_dtype *dtype);

/* Symbolic: a dimension that equals the batch is -1; one that depends on the batch in another way
 * (2·N after a Concat along it, N·C after a Reshape) is -2. Found by inferring for batch 1 and
 * batch 2; cx_shape_symbolic merges the two shapes of one value. */
cx_status cx_graph_symbolic_shapes(const cx_graph *g, cx_shape *shape, cx_dtype *dtype);
void cx_shape_symbolic(const cx_shape *one, const cx_shape *two, cx_shape *out);

#endif
