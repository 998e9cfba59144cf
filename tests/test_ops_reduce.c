/* ReduceSum, ReduceMean, ReduceMax, Softmax, LogSoftmax, SoftmaxGrad, LogSoftmaxGrad: forward against the
 * reference, gradients against finite differences; axes as attribute and as input, keepdims on
 * and off, noop_with_empty_axes, softmax over inner and outer axes; every case once with AVX-512
 * (where present) and once portable. */

#include <stdio.h>

#include "../kernels/cpu/eltwise_engine.h"
#include "op_check.h"

static const oc_opts grad_opts = {.grad = true, .seed = 17};

typedef struct red_case {
  cx_shape x;
  int n_axes;
  int64_t axes[4];
  int keepdims;      /* -1: attribute absent (default 1) */
  bool axes_input;   /* axes as a constant second input (ReduceSum 13+, ReduceMean 18+) */
  bool noop;         /* noop_with_empty_axes = 1 */
} red_case;

static int reduce(const char *op, const red_case *c) {
  cx_graph *g = cx_graph_new();
  int in[2] = {oc_param(g, "x", &c->x, -2, 2, 40), -1};
  if (c->axes_input) in[1] = cx_graph_const_s64(g, "axes", c->n_axes, c->axes);
  int node = cx_graph_node(g, op, "y", in, c->axes_input ? 2 : 1, 1);
  if (!c->axes_input && c->n_axes) cx_node_set_ints(g, node, "axes", c->axes, c->n_axes);
  if (c->keepdims >= 0) cx_node_set_int(g, node, "keepdims", c->keepdims);
  if (c->noop) cx_node_set_int(g, node, "noop_with_empty_axes", 1);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  char label[256], sh[CX_SHAPE_STR], ax[64] = "";
  for (int i = 0, at = 0; i < c->n_axes; i++)
    at += snprintf(ax + at, sizeof ax - (size_t)at, "%s%lld", i ? "," : "", (long long)c->axes[i]);
  snprintf(label, sizeof label, "%s %s axes [%s]%s keepdims %d%s", op, cx_shape_str(&c->x, sh), ax,
           c->axes_input ? " (input)" : "", c->keepdims, c->noop ? " noop_with_empty_axes" : "");
  int fails = oc_check(label, g, &grad_opts);
  cx_graph_free(g);
  return fails;
}

static const red_case red_cases[] = {
    {S(3, 4, 5), 1, {1}, -1, false, false},
    {S(3, 4, 5), 1, {1}, 0, false, false},
    {S(3, 4, 5), 2, {0, 2}, 1, false, false},
    {S(3, 4, 5), 2, {0, 2}, 0, false, false},
    {S(3, 4, 5), 1, {-1}, 0, false, false},
    {S(3, 4, 5), 0, {0}, 0, false, false},   /* all axes: a scalar */
    {S(3, 4, 5), 0, {0}, 1, false, true},    /* noop: identity */
    {S(3, 4, 5), 2, {2, 0}, 0, true, false}, /* axes input, unsorted */
    {S(3, 4, 5), 1, {-2}, 1, true, false},
    {S(2, 3, 5, 7), 3, {0, 2, 3}, 1, false, false}, /* per channel, as batch norm reduces */
    {S(1, 3, 5, 7), 3, {0, 2, 3}, 0, false, false}, /* batch 1 */
    {S(3, 1, 5), 1, {1}, 0, false, false},          /* a size-1 axis dropped */
    {S(3, 37, 301), 2, {0, 2}, 0, false, false},    /* threaded */
    {S(3, 37, 301), 1, {1}, 1, false, false},
    {S(64, 1031), 1, {0}, 0, false, false},
    {S(3, 37, 301), 0, {0}, 0, false, false},          /* threaded, one output */
    {S(8, 3, 41, 41), 3, {0, 2, 3}, 1, false, false},  /* threaded, few outputs */
};

static int reductions(void) {
  int f = 0;
  for (size_t i = 0; i < sizeof red_cases / sizeof *red_cases; i++)
    f += reduce("ReduceSum", &red_cases[i]) + reduce("ReduceMean", &red_cases[i]);
  /* ReduceMax on the cases with small groups: finite differences need the largest element of a
   * group to lead the next by more than the step, which random groups of hundreds do not */
  for (size_t i = 0; i < 12; i++) f += reduce("ReduceMax", &red_cases[i]);
  return f;
}

static int softmax(const char *op, cx_shape s, int64_t axis, bool set_axis) {
  cx_graph *g = cx_graph_new();
  int x = oc_param(g, "x", &s, -3, 3, 41);
  int node = cx_graph_node(g, op, "y", &x, 1, 1);
  if (set_axis) cx_node_set_int(g, node, "axis", axis);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  char label[256], sh[CX_SHAPE_STR];
  snprintf(label, sizeof label, "%s %s axis %lld%s", op, cx_shape_str(&s, sh), (long long)axis,
           set_axis ? "" : " (default)");
  int fails = oc_check(label, g, &grad_opts);
  cx_graph_free(g);
  return fails;
}

/* SoftmaxGrad / LogSoftmaxGrad on their own, from constant dY and Y. */
static int softmax_grad(const char *op, cx_shape s, int64_t axis) {
  cx_graph *g = cx_graph_new();
  bool log = op[0] == 'L';
  int in[2] = {oc_const(g, "dy", &s, -1, 1, 42),
               oc_const(g, "yv", &s, log ? -4 : 0, log ? 0 : 1, 43)};
  int node = cx_graph_node(g, op, "dx", in, 2, 1);
  cx_node_set_int(g, node, "axis", axis);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  char label[256], sh[CX_SHAPE_STR];
  snprintf(label, sizeof label, "%s %s axis %lld", op, cx_shape_str(&s, sh), (long long)axis);
  int fails = oc_check(label, g, &(oc_opts){.seed = 7});
  cx_graph_free(g);
  return fails;
}

static int softmaxes(void) {
  static const char *const ops[] = {"Softmax", "LogSoftmax"};
  int f = 0;
  for (int k = 0; k < 2; k++) {
    f += softmax(ops[k], S(4, 7), -1, false);
    f += softmax(ops[k], S(1, 10), -1, true);
    f += softmax(ops[k], S(2, 5, 3), 1, true);     /* inner positions */
    f += softmax(ops[k], S(2, 5, 3, 3), 1, true);
    f += softmax(ops[k], S(3, 5, 7), 0, true);
    f += softmax(ops[k], S(2, 3, 301), 1, true);   /* more than one block of inner positions */
    f += softmax(ops[k], S(64, 1003), -1, true);   /* threaded rows */
    f += softmax(ops[k], S(5, 37), 1, true);
    char grad_op[32];
    snprintf(grad_op, sizeof grad_op, "%sGrad", ops[k]);
    f += softmax_grad(grad_op, S(6, 19), -1) + softmax_grad(grad_op, S(2, 7, 5), 1);
  }
  return f;
}

static int all_cases(void) { return reductions() + softmaxes(); }

int main(void) {
  int fails = all_cases();
  cx_cpu_force_portable(true);
  printf("-- portable paths --\n");
  fails += all_cases();
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "PASS", fails);
  return fails != 0;
}
