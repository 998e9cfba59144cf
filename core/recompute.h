#ifndef CX_RECOMPUTE_H
#define CX_RECOMPUTE_H

#include "graph.h"

/* Gradient checkpointing: the forward activations of marked segments that the backward pass
 * reads are computed a second time in the backward pass, from the segment's inputs, instead of
 * being kept alive from forward to backward. Internal to core/program.c.
 *
 * A segment is the set of forward nodes whose names share a key:
 *   - a prefix given in `segments`: a node belongs to the longest prefix P that its name starts
 *     with, or that follows a '/' in it, when P is followed by '.', '/', ':' or the end
 *     ("layer1" takes "layer1.0.conv1" and "/layer1/layer1.0/conv1/Conv", not "layer10.x");
 *   - with the single entry "blocks": each residual block or top-level module, the name up to
 *     its first numeric component ("layer1.0.conv1" -> "layer1.0", "features.3.conv.0.0" ->
 *     "features.3"); names without one (stem, classifier head, loss) are not marked.
 * A value produced in a segment is kept when a forward node outside the segment reads it (the
 * segment's outputs, the next segment's inputs) or it is a graph output; every other value of
 * the segment that a backward node reads is recomputed: its producer, and what that needs
 * inside the segment, is cloned into the backward schedule just before the first backward node
 * that reads any recomputed value of the segment, and the backward nodes read the clones. The
 * originals then die at their last forward reader.
 *
 * A clone is named "<forward node>/grad/recompute" and carries the string attribute
 * CX_RECOMPUTE_OF with its forward node's name: the program runs it with the original's
 * random-stream key and tells kernels not to update state again (BatchNormTrain's running
 * statistics), so clones produce exactly the values of the forward pass. */

#define CX_RECOMPUTE_OF "recompute_of"

/* g holds n_fwd forward nodes, then the backward nodes, in schedule order, with every shape
 * inferred. Fails naming a prefix that matches no forward node. *n_clones (may be NULL) gets the
 * number of nodes added. */
cx_status cx_recompute(cx_graph *g, int n_fwd, const char *const *segments, int n_segments,
                       int *n_clones);

#endif
