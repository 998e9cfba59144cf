/* BatchNorm recalibration after a channel cut (cli/prune_config.h): every BatchNormalization's
 * momentum is set to 0 in a copy of the model, so after each forward pass of the training
 * program its running statistics are that batch's (core/ops/norm.c: running = running · m +
 * batch · (1 − m), the unbiased variance); they are summed here and their mean written back. */
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "../core/program.h"
#include "prune_config.h"

typedef struct bn_stat {
  int value;           /* a running mean or variance of the model */
  const cx_tensor *t;  /* the same in the program */
  double *sum;
  float *batch;
} bn_stat;

static bool is_bn(const cx_node *n) {
  return !strcmp(n->op->name, "BatchNormalization") && n->n_in == 5;
}

static cx_status find_stats(const cx_graph *model, cx_program *p, bn_stat *s, int *n) {
  for (int i = 0; i < model->n_nodes; i++) {
    const cx_node *nd = &model->nodes[i];
    for (int k = 3; is_bn(nd) && k < 5; k++) {
      bn_stat *x = &s[(*n)++];
      x->value = nd->in[k];
      x->t = cx_program_tensor(p, model->values[x->value].name);
      if (!x->t) return cx_fail(CX_ERR_ARG, "BatchNorm recalibration: node '%s': the training "
                                "program has no '%s'", nd->name, model->values[x->value].name);
      size_t c = (size_t)cx_shape_numel(&x->t->shape);
      x->sum = calloc(c, sizeof(double));
      x->batch = malloc(c * sizeof(float));
      if (!x->sum || !x->batch) return cx_fail(CX_ERR_NOMEM, "out of memory");
    }
  }
  return CX_OK;
}

static cx_status add_batch(cx_cli_prune_pass *pass, bn_stat *s, int n) {
  CX_TRY(cx_cli_prune_pass_forward(pass));
  for (int i = 0; i < n; i++) {
    CX_TRY(cx_program_read(pass->p, s[i].t, s[i].batch));
    for (int64_t c = 0; c < cx_shape_numel(&s[i].t->shape); c++) s[i].sum[c] += s[i].batch[c];
  }
  return CX_OK;
}

static void store(cx_graph *model, const bn_stat *s, int n, int batches) {
  for (int i = 0; i < n; i++) {
    float *init = model->values[s[i].value].init;
    for (int64_t c = 0; c < cx_shape_numel(&s[i].t->shape); c++)
      init[c] = (float)(s[i].sum[c] / batches);
  }
}

cx_status cx_cli_prune_recalibrate(cx_graph *model, const cx_train_opts *o, int batches,
                                   int *n_bn) {
  *n_bn = 0;
  for (int i = 0; i < model->n_nodes; i++) *n_bn += is_bn(&model->nodes[i]);
  if (*n_bn == 0 || batches <= 0) return CX_OK;
  if (!o || !o->train_path)
    return cx_fail(CX_ERR_ARG, "BatchNorm recalibration reads training data (compress prune: "
                   "--data TRAIN.h5, or recalibrate_bn = 0)");
  cx_graph *m = cx_graph_clone(model);
  bn_stat *s = calloc(2 * (size_t)*n_bn, sizeof *s);
  cx_cli_prune_pass pass = {0};
  int n = 0;
  cx_status st = m && s ? cx_graph_status(m) : cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int i = 0; st == CX_OK && i < m->n_nodes; i++)
    if (is_bn(&m->nodes[i])) cx_node_set_float(m, i, "momentum", 0);
  if (st == CX_OK) st = cx_cli_prune_pass_open(m, o, &pass);
  if (st == CX_OK) st = find_stats(model, pass.p, s, &n);
  for (int b = 0; st == CX_OK && b < batches; b++) st = add_batch(&pass, s, n);
  if (st == CX_OK) store(model, s, n, batches);
  cx_cli_prune_pass_close(&pass);
  for (int i = 0; s && i < n; i++) free(s[i].sum), free(s[i].batch);
  free(s);
  cx_graph_free(m);
  return st;
}
