#ifndef CX_TINY_CNN_H
#define CX_TINY_CNN_H

#include "../core/graph.h"

/* A small CNN (conv-BN-ReLU-maxpool, conv-ReLU, global pool, linear) with a cross-entropy loss:
 * the demo network and the engine's end-to-end test. Inputs "images" [-1, c, size, size] f32 and
 * "labels" [-1] s64; outputs "logits" and "loss". Weights: Kaiming-uniform from `seed`, as
 * PyTorch's default Conv2d/Linear initialisation. */
cx_graph *cx_tiny_cnn(int channels, int size, int classes, uint64_t seed);

#endif
