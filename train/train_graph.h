#ifndef CX_TRAIN_GRAPH_H
#define CX_TRAIN_GRAPH_H

#include "../core/graph.h"

/* The model's logits: its first graph output. */
int cx_model_logits(const cx_graph *model);

/* A copy of the model with a loss: input "labels" s64 [N] (softmax cross-entropy with label
 * smoothing) or, when soft_classes > 0, "targets" f32 [N, soft_classes] (mixup/cutmix: the batch
 * mean of -sum(targets * log_softmax(logits)), built from ordinary ops). Outputs "loss" and the
 * logits. */
cx_status cx_train_graph(const cx_graph *model, float label_smoothing, int64_t soft_classes,
                         cx_graph **out);

#endif
