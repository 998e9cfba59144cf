/* Ops the importer writes as others that already have kernels and gradients:
 * - Einsum in the batched matrix-product forms exporters write for attention ("bhid,bhjd->bhij",
 *   "bhij,bhjd->bhid", with "..." for leading axes): one MatMul, its operands transposed on their
 *   last two axes where the equation asks; any other equation is refused, naming the node;
 * - Tile with constant repeats: Reshape (a unit axis before each repeated one), Expand (the
 *   repeats there), Reshape (each pair merged), which is Tile's definition. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

enum { MAX_TERM = 2 * CX_MAX_DIMS };

static const Onnx__AttributeProto *attr(const Onnx__NodeProto *n, const char *name) {
  for (size_t k = 0; k < n->n_attribute; k++)
    if (n->attribute[k]->name && !strcmp(n->attribute[k]->name, name)) return n->attribute[k];
  return NULL;
}

/* Adds op(in) with output `out` (NULL: a fresh name "<name>/<tag>") and infers its shapes;
 * returns the output value id or -1. */
static int add(cx_onnx_importer *im, const char *op, const char *name, const char *tag,
               const int *in, int n_in, const char *out) {
  char base[700];
  snprintf(base, sizeof base, "%s/%s", name, tag);
  char *fresh = cx_graph_unique_name(im->g, base);
  const char *o = out ? out : fresh;
  int node = cx_graph_node_named(im->g, op, out ? name : fresh, in, n_in, &o, 1);
  free(fresh);
  if (node < 0 || cx_onnx_infer(im, node) != CX_OK) return -1;
  return cx_node_output(im->g, node, 0);
}

static int transpose_last2(cx_onnx_importer *im, const char *name, const char *tag, int x) {
  int rank = cx_onnx_var_shape(im, x, 0).ndim;
  int64_t perm[CX_MAX_DIMS];
  for (int d = 0; d < rank; d++) perm[d] = d;
  perm[rank - 2] = rank - 1;
  perm[rank - 1] = rank - 2;
  char base[700];
  snprintf(base, sizeof base, "%s/%s", name, tag);
  char *out = cx_graph_unique_name(im->g, base);
  int node = cx_graph_node_named(im->g, "Transpose", out, &x, 1, (const char *const *)&out, 1);
  free(out);
  if (node < 0) return -1;
  cx_node_set_ints(im->g, node, "perm", perm, rank);
  if (cx_onnx_infer(im, node) != CX_OK) return -1;
  return cx_node_output(im->g, node, 0);
}

/* One term of an equation with "..." replaced by `ell` placeholder axes ('0', '1', ...: not
 * letters, so they cannot clash with the equation's own). False when malformed. */
static bool expand_term(const char *t, size_t len, int rank, char *out) {
  const char *dots = NULL;
  for (size_t k = 0; k < len; k++)
    if (t[k] == '.') {
      if (dots || k + 2 >= len || t[k + 1] != '.' || t[k + 2] != '.') return false;
      dots = t + k;
      k += 2;
    }
  int letters = (int)len - (dots ? 3 : 0), ell = rank < 0 ? 0 : rank - letters;
  if (ell < 0 || letters + ell > MAX_TERM || (!dots && rank >= 0 && ell != 0)) return false;
  int w = 0;
  for (size_t k = 0; k < len; k++) {
    if (dots && t + k == dots) {
      for (int e = 0; e < ell; e++) out[w++] = (char)('0' + e);
      k += 2;
    } else if ((t[k] >= 'a' && t[k] <= 'z') || (t[k] >= 'A' && t[k] <= 'Z')) out[w++] = t[k];
    else return false;
  }
  out[w] = '\0';
  return true;
}

/* The equation's terms: a, b (inputs of rank ra, rb) and the output o, "..." expanded (the
 * output's takes the inputs' count). */
static bool parse_equation(const char *eq, int ra, int rb, char *a, char *b, char *o) {
  char s[256];
  size_t n = 0;
  for (const char *p = eq; *p && n < sizeof s - 1; p++)
    if (*p != ' ') s[n++] = *p;
  s[n] = '\0';
  char *arrow = strstr(s, "->"), *comma = strchr(s, ',');
  if (!arrow || !comma || comma > arrow || strchr(comma + 1, ',')) return false;
  if (!expand_term(s, (size_t)(comma - s), ra, a) ||
      !expand_term(comma + 1, (size_t)(arrow - comma - 1), rb, b))
    return false;
  int ell_a = 0;
  for (const char *p = a; *p; p++) ell_a += *p >= '0' && *p <= '9';
  return expand_term(arrow + 2, strlen(arrow + 2), strchr(arrow + 2, '.') ? ell_a +
                     (int)strlen(arrow + 2) - 3 : -1, o);
}

/* a, b, o of one rank r >= 2 with the same leading r - 2 axes, and on the last two a matrix
 * product: a = {i, c}, b = {c, j}, o = {i, j} in either order each. Sets which operands are
 * transposed, and whether the product is taken as b' a' (o = (j, i)). */
static bool matmul_form(const char *a, const char *b, const char *o, bool *ta, bool *tb,
                        bool *swap) {
  size_t r = strlen(a);
  if (r < 2 || strlen(b) != r || strlen(o) != r || strncmp(a, b, r - 2) || strncmp(a, o, r - 2))
    return false;
  for (size_t k = 0; k < r; k++) /* no letter twice within a term */
    for (size_t j = k + 1; j < r; j++)
      if (a[k] == a[j] || b[k] == b[j] || o[k] == o[j]) return false;
  const char *x = a + r - 2, *y = b + r - 2, *z = o + r - 2;
  char c = x[0] == y[0] || x[0] == y[1] ? x[0] : x[1]; /* the contracted letter */
  char i = x[0] == c ? x[1] : x[0], j = y[0] == c ? y[1] : y[0];
  if ((y[0] != c && y[1] != c) || i == j || i == c || j == c) return false;
  if (!((z[0] == i && z[1] == j) || (z[0] == j && z[1] == i))) return false;
  for (size_t k = 0; k < r - 2; k++)
    if (a[k] == i || a[k] == j || a[k] == c) return false;
  *swap = z[0] == j; /* o = (j, i) = b'' a'' with b'' = (j, c), a'' = (c, i) */
  *ta = *swap ? x[0] == i : x[0] == c;
  *tb = *swap ? y[0] == c : y[0] == j;
  return true;
}

cx_status cx_onnx_add_einsum(cx_onnx_importer *im, const Onnx__NodeProto *n, const char *name) {
  const Onnx__AttributeProto *eq = attr(n, "equation");
  char equation[256] = "";
  if (eq && eq->s.len < sizeof equation) {
    if (eq->s.len) memcpy(equation, eq->s.data, eq->s.len);
    equation[eq->s.len] = '\0';
  }
  if (n->n_input != 2 || !*n->input[0] || !*n->input[1])
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (Einsum): equation '%s' has %d operand(s); "
                   "only two-operand ones are taken", name, cx_printable(equation),
                   (int)n->n_input);
  char where[600];
  snprintf(where, sizeof where, "node '%s' (Einsum)", name);
  int in[2];
  for (int k = 0; k < 2; k++)
    if ((in[k] = cx_onnx_value(im, n->input[k], CX_VALUE_PARAM, where)) < 0)
      return cx_graph_status(im->g) ? cx_graph_status(im->g) : CX_ERR_FORMAT;
  char a[MAX_TERM + 1], b[MAX_TERM + 1], o[MAX_TERM + 1];
  bool ta = false, tb = false, swap = false;
  int ra = cx_onnx_var_shape(im, in[0], 0).ndim, rb = cx_onnx_var_shape(im, in[1], 0).ndim;
  if (!parse_equation(equation, ra, rb, a, b, o) || !matmul_form(a, b, o, &ta, &tb, &swap))
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (Einsum): equation '%s' is not a batched "
                   "matrix product the importer takes (two operands of one rank with the same "
                   "leading axes, one axis contracted among the last two, e.g. "
                   "\"bhid,bhjd->bhij\" or \"bhij,bhjd->bhid\")", name, cx_printable(equation));
  int x = in[swap ? 1 : 0], y = in[swap ? 0 : 1];
  bool tx = swap ? tb : ta, ty = swap ? ta : tb;
  if (tx && (x = transpose_last2(im, name, "transpose_a", x)) < 0) return cx_graph_status(im->g);
  if (ty && (y = transpose_last2(im, name, "transpose_b", y)) < 0) return cx_graph_status(im->g);
  if (add(im, "MatMul", name, "matmul", (int[]){x, y}, 2, n->output[0]) < 0)
    return cx_graph_status(im->g) ? cx_graph_status(im->g) : CX_ERR_SHAPE;
  return CX_OK;
}

cx_status cx_onnx_add_tile(cx_onnx_importer *im, const Onnx__NodeProto *n, const char *name,
                           int x) {
  if (x < 0) return cx_fail(CX_ERR_FORMAT, "node '%s' (Tile): no input", name);
  cx_onnx_const rep[2] = {{0}};
  bool known = n->n_input == 2 && *n->input[1] &&
               cx_onnx_input_const(im, n->input[1], 0, &rep[0]) &&
               cx_onnx_input_const(im, n->input[1], 1, &rep[1]);
  cx_shape in[2] = {cx_onnx_var_shape(im, x, 0), cx_onnx_var_shape(im, x, 1)}, mid[2], out[2];
  int rank = in[0].ndim;
  bool ok = known && rep[0].i && rep[1].i && cx_shape_numel(&rep[0].shape) == rank &&
            2 * rank <= CX_MAX_DIMS;
  double target[CX_MAX_DIMS];
  int nt = 0;
  for (int d = 0; ok && d < rank; d++) {
    int64_t r = rep[0].i[d];
    ok = r >= 1 && r == rep[1].i[d] && r <= CX_ONNX_MAX_ELEMENTS;
    for (int v = 0; v < 2 && ok; v++) {
      if (d == 0) mid[v] = (cx_shape){0}, out[v] = (cx_shape){.ndim = rank};
      if (r != 1) mid[v].d[mid[v].ndim++] = 1;
      mid[v].d[mid[v].ndim++] = in[v].d[d];
      out[v].d[d] = in[v].d[d] * r;
    }
    if (r != 1) target[nt++] = (double)r;
    target[nt++] = 1;
  }
  cx_onnx_const_free(&rep[0]);
  cx_onnx_const_free(&rep[1]);
  if (!ok || rank == 0)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (Tile): repeats must be a constant int64 "
                   "tensor with one count of at least 1 per axis of the %d-D input, the same for "
                   "every batch size", name, rank);
  int t1 = cx_onnx_reshape_target(im, name, in, mid);
  int y = t1 < 0 ? -1 : add(im, "Reshape", name, "unit_axes", (int[]){x, t1}, 2, NULL);
  int te = y < 0 ? -1 : cx_onnx_const_input(im, name, "repeats", CX_S64, nt, target);
  y = te < 0 ? -1 : add(im, "Expand", name, "repeated", (int[]){y, te}, 2, NULL);
  int t2 = y < 0 ? -1 : cx_onnx_reshape_target(im, name, mid, out);
  if (t2 < 0 || add(im, "Reshape", name, "merged", (int[]){y, t2}, 2, n->output[0]) < 0)
    return cx_graph_status(im->g) ? cx_graph_status(im->g) : CX_ERR_UNSUPPORTED;
  return CX_OK;
}
