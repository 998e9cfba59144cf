/* Equal, Less, Greater, LessOrEqual, GreaterOrEqual, Not and Cast on activations, as masks that
 * select and scale f32 values (the forms dynamo-style exports compute at run time): forward
 * against the double reference, and the gradients that flow past them (through Where and Mul,
 * the masks themselves having none) against finite differences; broadcasting on either side;
 * Cast to every type the engine holds and back; a Cast to a type it does not hold is refused
 * naming the node. */

#include <stdio.h>
#include <string.h>

#include "../core/graph_shapes.h"
#include "op_check.h"

static int check(const char *label, cx_graph *g) {
  char l[160];
  snprintf(l, sizeof l, "%s [train]", label);
  int f = oc_check(l, g, &(oc_opts){.grad = true, .seed = 71, .max_fd = 64});
  snprintf(l, sizeof l, "%s [infer]", label);
  f += oc_check(l, g, &(oc_opts){.seed = 71});
  cx_graph_free(g);
  return f;
}

/* base_N: every node and value of a graph needs its own name */
static const char *unique(const char *base) {
  static char buf[4][64];
  static int count;
  char *s = buf[count % 4];
  snprintf(s, sizeof buf[0], "%s_%d", base, count);
  count++;
  return s;
}

static int op(cx_graph *g, const char *type, const char *name, int a, int b) {
  return cx_graph_op(g, type, unique(name), (int[]){a, b}, b < 0 ? 1 : 2);
}

static int cast(cx_graph *g, const char *name, int x, int64_t to) {
  int n = cx_graph_node(g, "Cast", unique(name), &x, 1, 1);
  cx_node_set_int(g, n, "to", to);
  return cx_node_output(g, n, 0);
}

/* Where(Less(a, b), a, b) = min(a, b), broadcasting b over a's rows */
static int min_case(cx_shape as, cx_shape bs) {
  cx_graph *g = cx_graph_new();
  int a = oc_param(g, "a", &as, -2, 2, 72), b = oc_param(g, "b", &bs, -2, 2, 73);
  int lt = op(g, "Less", "less", a, b);
  cx_graph_mark_output(g, cx_graph_op(g, "Where", "min", (int[]){lt, a, b}, 3));
  return check("Where(Less(a, b), a, b)", g);
}

/* Each comparison as a 0/1 float mask times a: Cast(cmp(a, b), FLOAT) * a, summed */
static int masks_case(void) {
  cx_graph *g = cx_graph_new();
  int a = oc_param(g, "a", &S(3, 5), -2, 2, 74), b = oc_const(g, "b", &S(5), -2, 2, 75);
  static const char *const ops[] = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"};
  int sum = -1;
  for (int k = 0; k < 5; k++) {
    int m = op(g, ops[k], ops[k], a, k == 0 ? a : b); /* Equal(a, a): all true */
    if (k == 4) m = op(g, "Not", "not", m, -1);      /* Not(a >= b) = a < b */
    int f = cast(g, ops[k], m, 1);
    int y = op(g, "Mul", "masked", f, a);
    sum = sum < 0 ? y : op(g, "Add", "sum", sum, y);
  }
  cx_graph_mark_output(g, sum);
  return check("comparisons as masks", g);
}

/* a -> s64, s32, s8, u8 (of |a|), bool -> f32 again, each times a: truncation and nonzero */
static int cast_case(void) {
  cx_graph *g = cx_graph_new();
  int a = oc_param(g, "a", &S(4, 6), -5, 5, 76);
  static const int64_t types[] = {7, 6, 3, 9};
  int sum = -1;
  for (int k = 0; k < 4; k++) {
    int back = cast(g, "back", cast(g, "to", a, types[k]), 1);
    int y = op(g, "Mul", "scaled", back, a);
    sum = sum < 0 ? y : op(g, "Add", "sum", sum, y);
  }
  int pos = op(g, "Mul", "square", a, a); /* u8 of a non-negative value */
  sum = op(g, "Add", "sum", sum, cast(g, "from_u8", cast(g, "to_u8", pos, 2), 1));
  int eq = op(g, "Equal", "int_equal", cast(g, "i1", a, 7), cast(g, "i2", pos, 7));
  sum = op(g, "Add", "sum", sum, cast(g, "eq_f", eq, 1));
  cx_graph_mark_output(g, sum);
  return check("Cast round trips", g);
}

static int refused(void) {
  cx_graph *g = cx_graph_new();
  int a = oc_param(g, "a", &S(2, 3), -1, 1, 77);
  int n = cx_graph_node(g, "Cast", "to_f16", &a, 1, 1);
  cx_node_set_int(g, n, "to", 10);
  cx_graph_mark_output(g, cx_node_output(g, n, 0));
  cx_shape s[8];
  cx_dtype t[8];
  cx_status st = cx_graph_infer_shapes(g, 1, s, t);
  bool ok = st != CX_OK && strstr(cx_last_error(), "to_f16") && strstr(cx_last_error(), "10");
  printf("%s Cast to FLOAT16 refused: %s\n", ok ? "ok  " : "FAIL",
         st == CX_OK ? "accepted" : cx_last_error());
  cx_graph_free(g);
  return !ok;
}

int main(void) {
  int f = min_case(S(3, 4), S(4)) + min_case(S(4), S(2, 4)) + masks_case() + cast_case();
  f += refused();
  printf("%s: %d failure(s)\n", f ? "FAIL" : "PASS", f);
  return f != 0;
}
