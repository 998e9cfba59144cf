/* Network slimming's sparsity penalty (prune/channel.h): lambda * sum |gamma| over the trained
 * scales of every BatchNormalization, added to the training loss in the training graph.
 *
 * In the graph rather than added to the gradients after backward (as the paper's code adds
 * lambda * sign(gamma) to gamma's gradient): the penalty's gradient then goes through loss
 * scaling, gradient accumulation and clipping exactly as the loss's does, on whatever backend the
 * program runs, with no host code. |gamma| is Relu(gamma) + Relu(-gamma), whose gradient is
 * exactly sign(gamma), 0 at gamma = 0 (Relu's gradient is 0 at 0). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "channel.h"

/* |gamma| summed, a scalar: ReduceSum(Relu(gamma) + Relu(-gamma)). `bn` names the nodes (a copy:
 * adding nodes moves g->nodes). */
static int abs_sum(cx_graph *g, const char *bn, int gamma) {
  char name[300];
  snprintf(name, sizeof name, "bn_l1/%s/pos", bn);
  int pos = cx_graph_op(g, "Relu", name, &gamma, 1);
  snprintf(name, sizeof name, "bn_l1/%s/neg", bn);
  int neg = cx_graph_op(g, "Neg", name, &gamma, 1);
  snprintf(name, sizeof name, "bn_l1/%s/negpos", bn);
  neg = cx_graph_op(g, "Relu", name, &neg, 1);
  snprintf(name, sizeof name, "bn_l1/%s/abs", bn);
  int a = cx_graph_op(g, "Add", name, (int[]){pos, neg}, 2);
  snprintf(name, sizeof name, "bn_l1/%s/sum", bn);
  int node = cx_graph_node(g, "ReduceSum", name, &a, 1, 1);
  cx_node_set_int(g, node, "keepdims", 0);
  return cx_node_output(g, node, 0);
}

/* Every BatchNormalization's scale that is a trained f32 parameter, once each. */
static int gather_scales(cx_graph *g, int *terms) {
  int n = 0, n_nodes = g->n_nodes; /* the nodes added here are not visited */
  for (int i = 0; i < n_nodes; i++) {
    const cx_node *bn = &g->nodes[i]; /* valid until the first node is added */
    if (strcmp(bn->op->name, "BatchNormalization") || bn->n_in < 2 || bn->in[1] < 0) continue;
    int gamma = bn->in[1];
    if (g->values[gamma].kind != CX_VALUE_PARAM || g->values[gamma].dtype != CX_F32) continue;
    bool seen = false;
    for (int k = 0; k < i && !seen; k++)
      seen = !strcmp(g->nodes[k].op->name, "BatchNormalization") && g->nodes[k].n_in > 1 &&
             g->nodes[k].in[1] == gamma;
    if (seen) continue;
    char bn_name[256];
    snprintf(bn_name, sizeof bn_name, "%s", g->nodes[i].name);
    terms[n++] = abs_sum(g, bn_name, gamma);
  }
  return n;
}

static cx_status wrap_graph(void *self, cx_graph *g) {
  cx_prune_bn_l1 *b = self;
  int loss = g->n_outputs > 0 ? g->outputs[0] : -1;
  if (loss < 0 || strcmp(g->values[loss].name, "loss"))
    return cx_fail(CX_ERR_ARG, "bn_l1: the training graph's first output is not its loss");
  int *terms = malloc(((size_t)g->n_nodes + 1) * sizeof *terms);
  if (!terms) return cx_fail(CX_ERR_NOMEM, "out of memory");
  b->scales = gather_scales(g, terms);
  if (b->scales == 0) {
    free(terms);
    return cx_fail(CX_ERR_ARG, "bn_l1: the model has no BatchNormalization with a trained scale "
                   "(an exporter that folds BatchNorm into the convolutions leaves none)");
  }
  /* a chain of Adds: a training graph's Sum takes at most 16 inputs */
  int sum = terms[0];
  for (int k = 1; k < b->scales; k++) {
    char name[64];
    snprintf(name, sizeof name, "bn_l1/total/%d", k);
    sum = cx_graph_op(g, "Add", name, (int[]){sum, terms[k]}, 2);
  }
  free(terms);
  cx_shape scalar = {0};
  int lambda = cx_graph_const_f32(g, "bn_l1/lambda", &scalar, &b->lambda);
  int penalty = cx_graph_op(g, "Mul", "bn_l1/penalty", (int[]){sum, lambda}, 2);
  /* the task's loss keeps its node, under another name; the sum is "loss" */
  char *task = strdup("loss/task");
  if (!task) return cx_fail(CX_ERR_NOMEM, "out of memory");
  free(g->values[loss].name);
  g->values[loss].name = task;
  int node = cx_graph_node_named(g, "Add", "bn_l1/loss", (int[]){loss, penalty}, 2,
                                 (const char *const[]){"loss"}, 1);
  CX_TRY(cx_graph_status(g));
  g->outputs[0] = cx_node_output(g, node, 0);
  return CX_OK;
}

cx_train_ext cx_prune_bn_l1_extension(cx_prune_bn_l1 *b) {
  return (cx_train_ext){.name = "bn_l1", .self = b, .wrap_graph = wrap_graph};
}
