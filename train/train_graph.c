#include "train_graph.h"

#include "../core/op.h"

int cx_model_logits(const cx_graph *model) {
  return model->n_outputs > 0 ? model->outputs[0] : -1;
}

static int soft_target_loss(cx_graph *g, int logits, int64_t classes) {
  cx_shape ts = {2, {-1, classes}};
  int targets = cx_graph_input(g, "targets", CX_F32, &ts);
  int node = cx_graph_node(g, "LogSoftmax", "loss/log_softmax", &logits, 1, 1);
  cx_node_set_int(g, node, "axis", 1);
  int lp = cx_graph_op(g, "Mul", "loss/weighted", (int[]){cx_node_output(g, node, 0), targets}, 2);
  node = cx_graph_node(g, "ReduceSum", "loss/per_sample", &lp, 1, 1);
  cx_node_set_ints(g, node, "axes", (int64_t[]){1}, 1);
  cx_node_set_int(g, node, "keepdims", 0);
  int neg = cx_graph_op(g, "Neg", "loss/negated", (int[]){cx_node_output(g, node, 0)}, 1);
  node = cx_graph_node(g, "ReduceMean", "loss", &neg, 1, 1);
  cx_node_set_ints(g, node, "axes", (int64_t[]){0}, 1);
  cx_node_set_int(g, node, "keepdims", 0);
  return cx_node_output(g, node, 0);
}

cx_status cx_train_graph(const cx_graph *model, float label_smoothing, int64_t soft_classes,
                         cx_graph **out) {
  *out = NULL;
  int logits = cx_model_logits(model);
  if (logits < 0) return cx_fail(CX_ERR_ARG, "the model has no output to train");
  if (cx_graph_find_value(model, "input") < 0)
    return cx_fail(CX_ERR_ARG, "the model has no input named 'input'");
  cx_graph *g = cx_graph_clone(model);
  if (!g) return cx_fail(CX_ERR_NOMEM, "out of memory");
  int loss;
  if (soft_classes > 0) {
    loss = soft_target_loss(g, logits, soft_classes);
  } else {
    cx_shape s = {1, {-1}};
    int labels = cx_graph_input(g, "labels", CX_S64, &s);
    int node = cx_graph_node(g, "SoftmaxCrossEntropyLoss", "loss", (int[]){logits, labels}, 2, 1);
    if (label_smoothing > 0) cx_node_set_float(g, node, "label_smoothing", label_smoothing);
    loss = cx_node_output(g, node, 0);
  }
  g->n_outputs = 0;
  cx_graph_mark_output(g, loss);
  cx_graph_mark_output(g, logits);
  cx_status s = cx_graph_status(g);
  if (s != CX_OK) {
    cx_graph_free(g);
    return s;
  }
  *out = g;
  return CX_OK;
}
