/* The KD training graph: the student plus the teacher's logits as an input and a weighted sum of
 * loss terms, built from ops the engine differentiates (KLDivTemperature already carries T^2). */
#include <math.h>
#include <stdio.h>

#include "../train/train_graph.h"
#include "internal.h"

cx_kd_config cx_kd_config_defaults(void) {
  return (cx_kd_config){.temperature = 4.0f, .alpha = 0.9f};
}

static cx_status check_config(const cx_kd_config *c) {
  if (!(c->temperature > 0) || !isfinite(c->temperature))
    return cx_fail(CX_ERR_ARG, "distillation: temperature %g must be a positive number",
                   (double)c->temperature);
  if (!(c->alpha >= 0 && c->alpha <= 1))
    return cx_fail(CX_ERR_ARG, "distillation: alpha %g must lie in [0, 1]", (double)c->alpha);
  if (!(c->label_smoothing >= 0 && c->label_smoothing < 1))
    return cx_fail(CX_ERR_ARG, "distillation: label_smoothing %g must lie in [0, 1)",
                   (double)c->label_smoothing);
  if (c->classes <= 0)
    return cx_fail(CX_ERR_ARG, "distillation: the number of classes (%lld) must be positive",
                   (long long)c->classes);
  if (c->n_hints < 0 || (c->n_hints > 0 && !c->hints))
    return cx_fail(CX_ERR_ARG, "distillation: %d feature hints without a list", c->n_hints);
  return CX_OK;
}

/* mean over the batch of -sum_c targets * log_softmax(logits): mixup/cutmix targets */
static int soft_target_ce(cx_graph *g, int logits, int64_t classes) {
  cx_shape ts = {2, {-1, classes}};
  int targets = cx_graph_input(g, "targets", CX_F32, &ts);
  int node = cx_graph_node(g, "LogSoftmax", "distill/hard/log_softmax", &logits, 1, 1);
  cx_node_set_int(g, node, "axis", 1);
  int lp = cx_graph_op(g, "Mul", "distill/hard/weighted",
                       (int[]){cx_node_output(g, node, 0), targets}, 2);
  node = cx_graph_node(g, "ReduceSum", "distill/hard/per_sample", &lp, 1, 1);
  cx_node_set_ints(g, node, "axes", (int64_t[]){1}, 1);
  cx_node_set_int(g, node, "keepdims", 0);
  int neg = cx_graph_op(g, "Neg", "distill/hard/negated", (int[]){cx_node_output(g, node, 0)}, 1);
  node = cx_graph_node(g, "ReduceMean", "distill/hard", &neg, 1, 1);
  cx_node_set_int(g, node, "keepdims", 0);
  return cx_node_output(g, node, 0);
}

static int hard_label_ce(cx_graph *g, int logits, const cx_kd_config *c) {
  if (c->soft_targets) return soft_target_ce(g, logits, c->classes);
  cx_shape s = {1, {-1}};
  int labels = cx_graph_input(g, "labels", CX_S64, &s);
  int node = cx_graph_node(g, "SoftmaxCrossEntropyLoss", "distill/hard", (int[]){logits, labels},
                           2, 1);
  if (c->label_smoothing > 0) cx_node_set_float(g, node, "label_smoothing", c->label_smoothing);
  return cx_node_output(g, node, 0);
}

static int kd_term(cx_graph *g, int logits, const cx_kd_config *c) {
  cx_shape ts = {2, {-1, c->classes}};
  int teacher = cx_graph_input(g, "teacher_logits", CX_F32, &ts);
  int node = cx_graph_node(g, "KLDivTemperature", "distill/kd", (int[]){logits, teacher}, 2, 1);
  cx_node_set_float(g, node, "temperature", c->temperature);
  return cx_node_output(g, node, 0);
}

/* "loss" = Sum of weight * term; every term gets its Mul so the weights show in `inspect`. */
static int weighted_sum(cx_graph *g, const cx_kd_term *t, int n) {
  int in[16];
  for (int i = 0; i < n; i++) {
    char name[64];
    snprintf(name, sizeof name, "distill/weight%d", i);
    int w = cx_graph_const_f32(g, name, &(cx_shape){0}, &t[i].weight);
    snprintf(name, sizeof name, "distill/term%d", i);
    in[i] = cx_graph_op(g, "Mul", name, (int[]){t[i].value, w}, 2);
  }
  return cx_graph_op(g, "Sum", "loss", in, n);
}

cx_status cx_kd_graph(const cx_graph *student, const cx_kd_config *c, cx_graph **out) {
  *out = NULL;
  CX_TRY(check_config(c));
  if (c->n_hints > 14) return cx_fail(CX_ERR_ARG, "distillation: at most 14 feature hints");
  int logits = cx_model_logits(student);
  if (logits < 0) return cx_fail(CX_ERR_ARG, "distillation: the student has no output");
  if (cx_graph_find_value(student, "input") < 0)
    return cx_fail(CX_ERR_ARG, "distillation: the student has no input named 'input'");
  if (cx_graph_find_value(student, "loss") >= 0 || cx_graph_find_value(student, "teacher_logits") >= 0)
    return cx_fail(CX_ERR_ARG, "distillation: the student already has a value named 'loss' or "
                   "'teacher_logits'");
  cx_graph *g = cx_graph_clone(student);
  if (!g) return cx_fail(CX_ERR_NOMEM, "out of memory");
  cx_kd_term terms[16];
  int n = 0;
  if (c->alpha > 0) terms[n++] = (cx_kd_term){kd_term(g, logits, c), c->alpha};
  if (c->alpha < 1) terms[n++] = (cx_kd_term){hard_label_ce(g, logits, c), 1 - c->alpha};
  cx_status s = cx_kd_add_hints(g, student, c, terms, &n);
  if (s == CX_OK) {
    int loss = weighted_sum(g, terms, n);
    g->n_outputs = 0;
    cx_graph_mark_output(g, loss);
    cx_graph_mark_output(g, logits);
    s = cx_graph_status(g);
  }
  if (s != CX_OK) {
    cx_graph_free(g);
    return s;
  }
  *out = g;
  return CX_OK;
}
