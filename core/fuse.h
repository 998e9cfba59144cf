#ifndef CX_FUSE_H
#define CX_FUSE_H

#include "graph.h"

/* Training-program fusions, made on the forward graph before the backward pass is built, so that
 * the gradients follow from the fused ops' own rules.
 *   - BatchNormTrain followed by Relu, or by Clip with constant bounds (ReLU6), becomes one
 *     BatchNormTrain that clamps its output (core/ops/norm.h): the activation's pass over memory
 *     forward, and its gradient's pass backward, disappear. The activation's output value, and
 *     so its name, stays; the normalised value before it is no longer stored. Done only where
 *     the BatchNormTrain output feeds that activation alone and is not a graph output.
 * CX_FUSE=off in the environment turns every fusion off (to compare), these and the inference
 * program's (core/infer_fuse.h). */
cx_status cx_fuse_training(cx_graph *g);

/* false when the environment says CX_FUSE=off */
bool cx_fuse_enabled(void);

/* The clamp [lo, hi] that activation node a applies when it is a Relu, or a Clip whose bounds
 * are constant (inputs that are scalar f32 constants, or opset-6 attributes); false otherwise. */
bool cx_fuse_clamp_of(const cx_graph *g, const cx_node *a, float *lo, float *hi);

/* readers[v] (zeroed by the caller): how many node inputs read value v, graph outputs counted as
 * readers; reader[v] (may be NULL): the last node found reading it. */
void cx_fuse_count_readers(const cx_graph *g, int *readers, int *reader);

/* The value of value v when it is a scalar (one element) f32 constant; false otherwise. */
bool cx_fuse_const_scalar(const cx_graph *g, int v, float *out);

#endif
