/* SoftmaxCrossEntropyLoss (+Grad) and KLDivTemperature (+Grad): forward against the reference,
 * gradients against finite differences, over reductions, label smoothing, ignore_index, class
 * weights, extra spatial dimensions, the optional log_prob output, batch 1 and temperatures; plus
 * the run-time error for a label out of range; every case once with AVX-512 (where present) and
 * once portable. */

#include <stdio.h>
#include <string.h>

#include "../core/program.h"
#include "../kernels/cpu/cpu.h"
#include "../kernels/cpu/eltwise_engine.h"
#include "op_check.h"

static const oc_opts grad_opts = {.grad = true, .seed = 23};

typedef struct sce_case {
  cx_shape scores;
  const char *reduction; /* NULL: attribute absent (mean) */
  float smoothing;
  bool ignore;           /* ignore_index = 2, and some labels are 2 */
  bool weights;
  bool log_prob;         /* the second output too */
} sce_case;

/* labels [N, d...] for scores [N, C, d...] as an int64 constant */
static int labels(cx_graph *g, const cx_shape *scores, bool with_ignored) {
  cx_shape l = {.ndim = scores->ndim - 1};
  l.d[0] = scores->d[0];
  for (int i = 2; i < scores->ndim; i++) l.d[i - 1] = scores->d[i];
  int64_t n = cx_shape_numel(&l), data[4096];
  for (int64_t i = 0; i < n && i < 4096; i++) {
    data[i] = (i * 5 + 1) % scores->d[1];
    if (with_ignored && i % 3 == 0) data[i] = 2;
  }
  return cx_graph_init(g, CX_VALUE_CONST, "labels", CX_S64, &l, data);
}

static void sce_label(char *buf, size_t n, const char *op, const sce_case *c) {
  char sh[CX_SHAPE_STR];
  snprintf(buf, n, "%s %s reduction %s smoothing %g%s%s%s", op, cx_shape_str(&c->scores, sh),
           c->reduction ? c->reduction : "(default)", (double)c->smoothing,
           c->ignore ? " ignore_index" : "", c->weights ? " weights" : "",
           c->log_prob ? " +log_prob" : "");
}

static void sce_attrs(cx_graph *g, int node, const sce_case *c) {
  if (c->reduction) cx_node_set_string(g, node, "reduction", c->reduction);
  if (c->smoothing != 0) cx_node_set_float(g, node, "label_smoothing", c->smoothing);
  if (c->ignore) cx_node_set_int(g, node, "ignore_index", 2);
}

static int sce(const sce_case *c) {
  cx_graph *g = cx_graph_new();
  int in[3] = {oc_param(g, "scores", &c->scores, -3, 3, 50), labels(g, &c->scores, c->ignore), -1};
  if (c->weights) in[2] = oc_const(g, "weights", &S(c->scores.d[1]), 0.2f, 2, 51);
  int node = cx_graph_node(g, "SoftmaxCrossEntropyLoss", "loss", in, c->weights ? 3 : 2,
                           c->log_prob ? 2 : 1);
  sce_attrs(g, node, c);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  if (c->log_prob) cx_graph_mark_output(g, cx_node_output(g, node, 1));
  char label[256];
  sce_label(label, sizeof label, "SoftmaxCrossEntropyLoss", c);
  int fails = oc_check(label, g, &grad_opts);
  cx_graph_free(g);
  return fails;
}

/* The gradient op on its own, from a constant dLoss. */
static int sce_grad(const sce_case *c) {
  cx_graph *g = cx_graph_new();
  bool none = c->reduction && strcmp(c->reduction, "none") == 0;
  cx_shape ls = {.ndim = 0};
  if (none) {
    ls.ndim = c->scores.ndim - 1;
    ls.d[0] = c->scores.d[0];
    for (int i = 2; i < c->scores.ndim; i++) ls.d[i - 1] = c->scores.d[i];
  }
  int in[4] = {oc_const(g, "dloss", &ls, 0.5f, 2, 52), oc_const(g, "scores", &c->scores, -3, 3, 53),
               labels(g, &c->scores, c->ignore), -1};
  if (c->weights) in[3] = oc_const(g, "weights", &S(c->scores.d[1]), 0.2f, 2, 54);
  int node = cx_graph_node(g, "SoftmaxCrossEntropyLossGrad", "dscores", in, c->weights ? 4 : 3, 1);
  sce_attrs(g, node, c);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  char label[256];
  sce_label(label, sizeof label, "SoftmaxCrossEntropyLossGrad", c);
  int fails = oc_check(label, g, &(oc_opts){.seed = 8});
  cx_graph_free(g);
  return fails;
}

static const sce_case sce_cases[] = {
    {S(5, 7), NULL, 0, false, false, false},
    {S(5, 7), "sum", 0, false, false, false},
    {S(5, 7), "none", 0, false, false, false},
    {S(5, 7), "mean", 0.1f, false, false, false},
    {S(5, 7), "sum", 0.1f, false, false, false},
    {S(5, 7), "none", 0.2f, false, false, false},
    {S(6, 7), "mean", 0, true, false, false},
    {S(6, 7), "mean", 0.1f, true, false, false},
    {S(6, 7), "none", 0.1f, true, false, false},
    {S(5, 7), "mean", 0, false, true, false},
    {S(6, 7), "mean", 0.1f, true, true, false},
    {S(6, 7), "sum", 0.1f, false, true, false},
    {S(2, 4, 3), "mean", 0, false, false, false}, /* scores [N,C,d] */
    {S(2, 4, 3, 2), "none", 0.1f, true, false, false},
    {S(1, 10), "mean", 0, false, false, false},   /* batch 1 */
    {S(5, 7), "mean", 0, false, false, true},     /* log_prob output used too */
    {S(2, 4, 3), "sum", 0.1f, true, false, true},
    {S(64, 1003), "mean", 0.1f, false, false, false},
};

static int sces(void) {
  int f = 0;
  for (size_t i = 0; i < sizeof sce_cases / sizeof *sce_cases; i++)
    f += sce(&sce_cases[i]) + sce_grad(&sce_cases[i]);
  return f;
}

/* A label outside [0, C) fails the forward step with a message naming node, label and C. */
static int bad_label(void) {
  cx_graph *g = cx_graph_new();
  int64_t l[3] = {0, 9, 1};
  int in[2] = {oc_param(g, "scores", &S(3, 4), -1, 1, 55),
               cx_graph_init(g, CX_VALUE_CONST, "labels", CX_S64, &S(3), l)};
  cx_graph_mark_output(g, cx_graph_op(g, "SoftmaxCrossEntropyLoss", "xent", in, 2));
  cx_compile_opts co = {.batch = 1, .backend = cx_backend_cpu()};
  cx_program *p = NULL;
  cx_status s = cx_program_compile(g, &co, &p);
  if (s == CX_OK) s = cx_program_forward(p);
  const char *m = cx_last_error();
  bool ok = s == CX_ERR_ARG && strstr(m, "xent") && strstr(m, "label 9") && strstr(m, "4)");
  printf("%s label out of range: %s\n", ok ? "ok  " : "FAIL", m);
  cx_program_free(p);
  cx_graph_free(g);
  return !ok;
}

static int kd(cx_shape s, float T, bool grad_op) {
  cx_graph *g = cx_graph_new();
  int in[3];
  int n_in = 2;
  if (grad_op) {
    in[0] = oc_const(g, "dloss", &(cx_shape){0}, 0.5f, 2, 60), n_in = 3;
    in[1] = oc_const(g, "student", &s, -3, 3, 61);
  } else {
    in[0] = oc_param(g, "student", &s, -3, 3, 61);
  }
  in[n_in - 1] = oc_const(g, "teacher", &s, -4, 4, 62); /* the teacher is never trained */
  const char *op = grad_op ? "KLDivTemperatureGrad" : "KLDivTemperature";
  int node = cx_graph_node(g, op, "kd", in, n_in, 1);
  if (T != 1) cx_node_set_float(g, node, "temperature", T);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  char label[256], sh[CX_SHAPE_STR];
  snprintf(label, sizeof label, "%s %s T=%g", op, cx_shape_str(&s, sh), (double)T);
  int fails = oc_check(label, g, grad_op ? &(oc_opts){.seed = 9} : &grad_opts);
  cx_graph_free(g);
  return fails;
}

static int kds(void) {
  int f = 0;
  for (int grad_op = 0; grad_op < 2; grad_op++) {
    f += kd(S(5, 7), 1, grad_op) + kd(S(5, 7), 4, grad_op);
    f += kd(S(1, 10), 4, grad_op) + kd(S(2, 4, 3), 2, grad_op);
    f += kd(S(64, 1003), 4, grad_op);
  }
  return f;
}

/* KL of a distribution with itself is 0, and its gradient too. */
static int kd_identical(void) {
  cx_graph *g = cx_graph_new();
  int t = oc_const(g, "teacher", &S(4, 9), -3, 3, 63);
  int in[2] = {oc_param(g, "student", &S(4, 9), -3, 3, 63), t};
  cx_graph_mark_output(g, cx_graph_op(g, "KLDivTemperature", "kd", in, 2));
  int fails = oc_check("KLDivTemperature student == teacher", g, &grad_opts);
  cx_graph_free(g);
  return fails;
}

static int all_cases(void) { return sces() + kds() + kd_identical(); }

int main(void) {
  int fails = all_cases() + bad_label();
  cx_cpu_force_portable(true);
  printf("-- portable paths --\n");
  fails += all_cases();
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "PASS", fails);
  return fails != 0;
}
