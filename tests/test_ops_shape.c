/* Shape ops against their double references, and their gradients against finite differences:
 * Flatten, Reshape, Transpose, Concat, Split, Slice, Pad, Expand, ExpandBatch, Identity, Dropout (and through
 * them SliceGrad, PadGrad, SplitGrad, DropoutTrain, DropoutGrad). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/program.h"
#include "../kernels/cpu/cpu.h"
#include "op_check.h"
#include "check.h"

/* A node named after its op whose outputs are all graph outputs. */
static int op_node(cx_graph *g, const char *op, const int *in, int n_in, int n_out) {
  int n = cx_graph_node(g, op, op, in, n_in, n_out);
  for (int k = 0; k < n_out; k++) cx_graph_mark_output(g, cx_node_output(g, n, k));
  return n;
}

static int s64(cx_graph *g, const char *name, int n, const int64_t *v) {
  return cx_graph_const_s64(g, name, n, v);
}

/* Checks forward and gradient (training program), then forward alone (inference program). */
static void check(const char *label, cx_graph *g) {
  char l[160];
  snprintf(l, sizeof l, "%s [train]", label);
  fails += oc_check(l, g, &(oc_opts){.grad = true, .seed = 11, .max_fd = 400});
  snprintf(l, sizeof l, "%s [infer]", label);
  fails += oc_check(l, g, &(oc_opts){.grad = false, .seed = 11});
  cx_graph_free(g);
}

/* Compiling must fail with a message that mentions `want`. */
static void check_rejected(const char *label, cx_graph *g, const char *want) {
  cx_compile_opts co = {.batch = 1, .backend = cx_backend_cpu()};
  cx_program *p = NULL;
  cx_status s = cx_program_compile(g, &co, &p);
  CHECK(s != CX_OK && strstr(cx_last_error(), want), "%s: expected a compile error mentioning "
        "\"%s\", got status %d: %s", label, want, s, s ? cx_last_error() : "(compiled)");
  if (s != CX_OK) printf("ok   %s: rejected: %s\n", label, cx_last_error());
  cx_program_free(p);
  cx_graph_free(g);
}

/* ---- Flatten, Reshape, Identity ---- */

static void test_flatten(void) {
  const int64_t axes[] = {1, 0, -1, 4, -4};
  for (size_t i = 0; i < sizeof axes / sizeof *axes; i++) {
    cx_graph *g = cx_graph_new();
    int x = oc_param(g, "x", &S(2, 3, 1, 5), -1, 1, 1);
    int n = op_node(g, "Flatten", &x, 1, 1);
    if (axes[i] != 1) cx_node_set_int(g, n, "axis", axes[i]);
    char l[64];
    snprintf(l, sizeof l, "Flatten [2,3,1,5] axis %lld", (long long)axes[i]);
    check(l, g);
  }
}

static void test_reshape(void) {
  static const struct {
    cx_shape x;
    int n;
    int64_t shape[4];
    const char *label;
  } cases[] = {
      {{3, {2, 3, 5}}, 2, {0, -1}, "Reshape [2,3,5] to [0,-1]"},
      {{3, {2, 3, 5}}, 3, {-1, 5, 1}, "Reshape [2,3,5] to [-1,5,1]"},
      {{3, {3, 5, 2}}, 4, {0, 1, -1, 1}, "Reshape [3,5,2] to [0,1,-1,1]"},
      {{2, {7, 1}}, 1, {7}, "Reshape [7,1] to [7]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    cx_graph *g = cx_graph_new();
    int in[2] = {oc_param(g, "x", &cases[i].x, -1, 1, 2), s64(g, "shape", cases[i].n, cases[i].shape)};
    op_node(g, "Reshape", in, 2, 1);
    check(cases[i].label, g);
  }
}

static void test_identity(void) {
  cx_graph *g = cx_graph_new();
  int x = oc_param(g, "x", &S(3, 1, 7), -1, 1, 3);
  op_node(g, "Identity", &x, 1, 1);
  check("Identity [3,1,7]", g);
}

/* ---- Transpose ---- */

static void test_transpose(void) {
  cx_graph *g = cx_graph_new();
  int x = oc_param(g, "x", &S(2, 3, 4, 5), -1, 1, 4);
  int n = op_node(g, "Transpose", &x, 1, 1);
  cx_node_set_ints(g, n, "perm", (int64_t[]){0, 2, 3, 1}, 4);
  check("Transpose [2,3,4,5] perm 0,2,3,1", g);

  g = cx_graph_new();
  x = oc_param(g, "x", &S(3, 1, 5, 2), -1, 1, 5);
  n = op_node(g, "Transpose", &x, 1, 1);
  cx_node_set_ints(g, n, "perm", (int64_t[]){3, 1, 0, 2}, 4);
  check("Transpose [3,1,5,2] perm 3,1,0,2", g);

  g = cx_graph_new();
  x = oc_param(g, "x", &S(3, 4, 5), -1, 1, 6);
  op_node(g, "Transpose", &x, 1, 1);
  check("Transpose [3,4,5] default (reversed)", g);
}

/* ---- Concat ---- */

static void test_concat(void) {
  cx_graph *g = cx_graph_new();
  int in[3] = {oc_param(g, "a", &S(2, 3, 4), -1, 1, 7), oc_param(g, "b", &S(2, 1, 4), -1, 1, 8),
               oc_param(g, "c", &S(2, 5, 4), -1, 1, 9)};
  int n = op_node(g, "Concat", in, 3, 1);
  cx_node_set_int(g, n, "axis", 1);
  check("Concat 3 inputs axis 1", g);

  g = cx_graph_new();
  in[0] = oc_param(g, "a", &S(2, 3, 1), -1, 1, 10);
  in[1] = oc_const(g, "b", &S(2, 3, 2), -1, 1, 11); /* no gradient wanted for a constant */
  in[2] = oc_param(g, "c", &S(2, 3, 3), -1, 1, 12);
  n = op_node(g, "Concat", in, 3, 1);
  cx_node_set_int(g, n, "axis", -1);
  check("Concat 3 inputs axis -1 (middle one constant)", g);

  g = cx_graph_new();
  in[0] = oc_param(g, "a", &S(1, 5), -1, 1, 13);
  in[1] = oc_param(g, "b", &S(2, 5), -1, 1, 14);
  n = op_node(g, "Concat", in, 2, 1);
  cx_node_set_int(g, n, "axis", 0);
  check("Concat 2 inputs axis 0", g);
}

/* ---- Split ---- */

static void test_split(void) {
  cx_graph *g = cx_graph_new();
  int x = oc_param(g, "x", &S(3, 7), -1, 1, 15);
  int n = op_node(g, "Split", &x, 1, 3);
  cx_node_set_int(g, n, "axis", 1);
  cx_node_set_ints(g, n, "split", (int64_t[]){2, 4, 1}, 3);
  check("Split [3,7] axis 1 split attribute 2,4,1", g);

  g = cx_graph_new();
  int in[2] = {oc_param(g, "x", &S(2, 3, 7), -1, 1, 16), s64(g, "split", 3, (int64_t[]){3, 1, 3})};
  n = op_node(g, "Split", in, 2, 3);
  cx_node_set_int(g, n, "axis", -1);
  check("Split [2,3,7] axis -1 split input 3,1,3", g);

  g = cx_graph_new();
  x = oc_param(g, "x", &S(2, 9, 3), -1, 1, 17);
  n = op_node(g, "Split", &x, 1, 3);
  cx_node_set_int(g, n, "axis", 1);
  check("Split [2,9,3] axis 1 equal parts", g);

  g = cx_graph_new();
  x = oc_param(g, "x", &S(7, 2), -1, 1, 18);
  op_node(g, "Split", &x, 1, 3);
  check("Split [7,2] axis 0 into 3 (3,3,1)", g);

  /* only outputs 0 and 2 are used: the gradient of output 1 is zeros (SplitGrad) */
  g = cx_graph_new();
  x = oc_param(g, "x", &S(2, 8), -1, 1, 19);
  n = cx_graph_node(g, "Split", "Split", &x, 1, 3);
  cx_node_set_int(g, n, "axis", 1);
  cx_node_set_ints(g, n, "split", (int64_t[]){3, 2, 3}, 3);
  cx_graph_mark_output(g, cx_node_output(g, n, 0));
  cx_graph_mark_output(g, cx_node_output(g, n, 2));
  check("Split [2,8] with output 1 unused", g);
}

/* ---- Slice ---- */

static void slice_case(const char *label, const cx_shape *xs, int n, const int64_t *starts,
                       const int64_t *ends, const int64_t *axes, const int64_t *steps) {
  cx_graph *g = cx_graph_new();
  int in[5] = {oc_param(g, "x", xs, -1, 1, 20), s64(g, "starts", n, starts), s64(g, "ends", n, ends),
               axes ? s64(g, "axes", n, axes) : -1, steps ? s64(g, "steps", n, steps) : -1};
  op_node(g, "Slice", in, steps ? 5 : axes ? 4 : 3, 1);
  check(label, g);
}

static void test_slice(void) {
  slice_case("Slice [5,7,6] axes 0,2 steps 2,1 end past the axis", &S(5, 7, 6), 2,
             (int64_t[]){1, 0}, (int64_t[]){4, 100}, (int64_t[]){0, 2}, (int64_t[]){2, 1});
  slice_case("Slice [5,7] reversed axis -1 (step -1, end INT64_MIN)", &S(5, 7), 1, (int64_t[]){-1},
             (int64_t[]){INT64_MIN}, (int64_t[]){-1}, (int64_t[]){-1});
  slice_case("Slice [5,7] step -2 from an out-of-range start", &S(5, 7), 2, (int64_t[]){100, 5},
             (int64_t[]){0, -100}, (int64_t[]){1, 0}, (int64_t[]){-2, -1});
  slice_case("Slice [4,9] starts/ends only, negative start", &S(4, 9), 2, (int64_t[]){-3, 2},
             (int64_t[]){INT64_MAX, 9}, NULL, NULL);
  slice_case("Slice [3,5,7] step 3 on axis 2, axes given", &S(3, 5, 7), 1, (int64_t[]){1},
             (int64_t[]){7}, (int64_t[]){2}, (int64_t[]){3});
  /* the option-A ResNet shortcut x[:, :, ::2, ::2] as one Slice over two axes (PyTorch 2's form;
   * 1.13 writes two) on an activation, odd sizes so the last row and column are kept */
  slice_case("Slice [2,3,7,5] axes 2,3 steps 2,2 (x[:, :, ::2, ::2])", &S(2, 3, 7, 5), 2,
             (int64_t[]){0, 0}, (int64_t[]){INT64_MAX, INT64_MAX}, (int64_t[]){2, 3},
             (int64_t[]){2, 2});

  cx_graph *g = cx_graph_new(); /* opset 1-9: attributes */
  int x = oc_param(g, "x", &S(4, 6), -1, 1, 21);
  int n = op_node(g, "Slice", &x, 1, 1);
  cx_node_set_ints(g, n, "starts", (int64_t[]){1, -4}, 2);
  cx_node_set_ints(g, n, "ends", (int64_t[]){1000, -1}, 2);
  cx_node_set_ints(g, n, "axes", (int64_t[]){0, 1}, 2);
  check("Slice [4,6] attribute form (opset < 10)", g);
}

/* ---- Pad ---- */

static void pad_case(const char *label, const char *mode, const cx_shape *xs, int n_pads,
                     const int64_t *pads, float value, int n_axes, const int64_t *axes) {
  cx_graph *g = cx_graph_new();
  int in[4] = {oc_param(g, "x", xs, -1, 1, 22), s64(g, "pads", n_pads, pads), -1, -1};
  int n_in = 2;
  if (value != 0) {
    in[2] = cx_graph_const_f32(g, "value", &(cx_shape){0}, &value);
    n_in = 3;
  }
  if (n_axes) {
    in[3] = s64(g, "axes", n_axes, axes);
    n_in = 4;
  }
  int n = op_node(g, "Pad", in, n_in, 1);
  if (mode) cx_node_set_string(g, n, "mode", mode);
  check(label, g);
}

static void test_pad(void) {
  const int64_t p4[8] = {0, 1, 2, 0, 1, 0, 1, 2};
  pad_case("Pad constant 0.5 [2,3,4,5]", "constant", &S(2, 3, 4, 5), 8, p4, 0.5f, 0, NULL);
  pad_case("Pad constant default [3,5]", NULL, &S(3, 5), 4, (int64_t[]){1, 2, 0, 3}, 0, 0, NULL);
  pad_case("Pad reflect [2,3,4,5]", "reflect", &S(2, 3, 4, 5), 8, p4, 0, 0, NULL);
  pad_case("Pad reflect [4,5] pads 3,4 (one below the axis)", "reflect", &S(4, 5), 4,
           (int64_t[]){3, 4, 3, 4}, 0, 0, NULL);
  pad_case("Pad edge [2,3,4,5]", "edge", &S(2, 3, 4, 5), 8, p4, 0, 0, NULL);
  pad_case("Pad edge [1,3] wide", "edge", &S(1, 3), 4, (int64_t[]){2, 4, 1, 5}, 0, 0, NULL);
  pad_case("Pad reflect with axes -1,1 [2,5,4]", "reflect", &S(2, 5, 4), 4,
           (int64_t[]){2, 1, 3, 2}, 0, 2, (int64_t[]){-1, 1});

  cx_graph *g = cx_graph_new(); /* opset 2-10: attributes */
  int x = oc_param(g, "x", &S(3, 4), -1, 1, 23);
  int n = op_node(g, "Pad", &x, 1, 1);
  cx_node_set_ints(g, n, "pads", (int64_t[]){1, 0, 2, 1}, 4);
  cx_node_set_float(g, n, "value", -2.0f);
  check("Pad attribute form constant -2 (opset < 11)", g);
}

/* ---- Expand ---- */

static void test_expand(void) {
  cx_graph *g = cx_graph_new();
  int in[2] = {oc_param(g, "x", &S(3, 1), -1, 1, 24), s64(g, "shape", 3, (int64_t[]){2, 3, 4})};
  op_node(g, "Expand", in, 2, 1);
  check("Expand [3,1] to [2,3,4]", g);

  g = cx_graph_new();
  in[0] = oc_param(g, "x", &S(1, 4), -1, 1, 25);
  in[1] = s64(g, "shape", 3, (int64_t[]){3, 1, 1});
  op_node(g, "Expand", in, 2, 1);
  check("Expand [1,4] by [3,1,1] (numpy broadcast)", g);

  g = cx_graph_new();
  in[0] = oc_param(g, "x", &S(2, 3), -1, 1, 26);
  in[1] = s64(g, "shape", 2, (int64_t[]){2, 3});
  op_node(g, "Expand", in, 2, 1);
  check("Expand [2,3] to itself", g);

  /* ExpandBatch: ViT's class token [1,1,4] to [N,1,4], N from Ref's first dimension (3) */
  g = cx_graph_new();
  int eb[3] = {oc_param(g, "x", &S(1, 1, 4), -1, 1, 27), s64(g, "shape", 3, (int64_t[]){1, 1, 4}),
               oc_const(g, "ref", &S(3, 2), -1, 1, 28)};
  int n = op_node(g, "ExpandBatch", eb, 3, 1);
  cx_node_set_ints(g, n, "batch_axes", (int64_t[]){0}, 1);
  check("ExpandBatch [1,1,4] to [Ref's 3,1,4]", g);
}

/* ---- Dropout ---- */

static void test_dropout(void) {
  float ratio = 0.3f;
  /* inference: a copy, and the optional mask is all true */
  cx_graph *g = cx_graph_new();
  int in[2] = {oc_param(g, "x", &S(4, 33), -1, 1, 27),
               cx_graph_const_f32(g, "ratio", &(cx_shape){0}, &ratio)};
  op_node(g, "Dropout", in, 2, 2);
  fails += oc_check("Dropout [4,33] inference copies, mask true", g, &(oc_opts){.seed = 3});
  cx_graph_free(g);

  /* training: Y = X * mask / (1 - ratio), the gradient through the same mask */
  g = cx_graph_new();
  in[0] = oc_param(g, "x", &S(4, 33), -1, 1, 28);
  in[1] = cx_graph_const_f32(g, "ratio", &(cx_shape){0}, &ratio);
  op_node(g, "Dropout", in, 2, 1);
  fails += oc_check("Dropout [4,33] ratio 0.3 training", g, &(oc_opts){.grad = true, .seed = 3});
  cx_graph_free(g);

  g = cx_graph_new(); /* opset < 12: ratio attribute */
  int x = oc_param(g, "x", &S(3, 5, 7), -1, 1, 29);
  int n = op_node(g, "Dropout", &x, 1, 1);
  cx_node_set_float(g, n, "ratio", 0.5f);
  fails += oc_check("Dropout [3,5,7] ratio attribute 0.5 training", g,
                    &(oc_opts){.grad = true, .seed = 4});
  fails += oc_check("Dropout [3,5,7] training, rows of samples 2, 5, 8", g,
                    &(oc_opts){.grad = true, .seed = 4, .rows = {2, 3}});
  cx_graph_free(g);
}

/* Dropout's mask over `rows` rows of 40 placed at `at` (the same graph and seed each time). */
static cx_status dropout_mask(int64_t rows, cx_batch_rows at, float *mask) {
  float ratio = 0.5f;
  cx_graph *g = cx_graph_new();
  int in[2] = {oc_param(g, "x", &S(rows, 40), 0.5f, 1, 31),
               cx_graph_const_f32(g, "ratio", &(cx_shape){0}, &ratio)};
  int y = cx_node_output(g, cx_graph_node(g, "Dropout", "drop", in, 2, 1), 0);
  cx_graph_mark_output(g, cx_graph_op(g, "Identity", "id", &y, 1));
  cx_program *p = NULL;
  cx_compile_opts co = {.batch = 1, .training = true, .backend = cx_backend_cpu(), .seed = 9};
  cx_status s = cx_program_compile(g, &co, &p);
  if (s == CX_OK) cx_program_set_step(p, 17), cx_program_set_rows(p, at);
  if (s == CX_OK) s = cx_program_forward(p);
  cx_tensor *m = s == CX_OK ? cx_program_tensor(p, "drop:saved1") : NULL;
  if (s == CX_OK) s = m ? cx_program_read(p, m, mask) : cx_fail(CX_ERR_ARG, "no drop:saved1");
  cx_program_free(p);
  cx_graph_free(g);
  return s;
}

/* A sample draws its mask by its place in the step's samples, not its row in this process's
 * batch: two ranks (every second sample each) draw what one process with all four draws. */
static void test_dropout_rows(void) {
  float all[4 * 40], rank[2][2 * 40];
  cx_status s = dropout_mask(4, (cx_batch_rows){0, 1}, all);
  for (int r = 0; s == CX_OK && r < 2; r++) s = dropout_mask(2, (cx_batch_rows){r, 2}, rank[r]);
  CHECK(s == CX_OK, "dropout masks: %s", cx_last_error());
  if (s != CX_OK) return;
  int differ = 0;
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 2; i++)
      differ += memcmp(rank[r] + i * 40, all + (r + 2 * i) * 40, 40 * sizeof(float)) != 0;
  CHECK(differ == 0, "%d of 4 rows drew another mask on 2 ranks than in one batch", differ);
  CHECK(memcmp(rank[0], rank[1], sizeof rank[0]) != 0, "%s", "both ranks drew the same mask");
  if (!differ) printf("ok   Dropout masks by sample: 2 ranks x 2 rows = 1 x 4 rows\n");
}

/* The mask really drops about `ratio` of the elements, and Y is X scaled where it keeps them. */
static void test_dropout_mask(void) {
  float ratio = 0.25f;
  cx_graph *g = cx_graph_new();
  int in[2] = {oc_param(g, "x", &S(100, 100), 0.5f, 1, 30),
               cx_graph_const_f32(g, "ratio", &(cx_shape){0}, &ratio)};
  int n = cx_graph_node(g, "Dropout", "drop", in, 2, 1);
  int y = cx_node_output(g, n, 0);
  int loss = cx_graph_op(g, "Identity", "id", &y, 1);
  cx_graph_mark_output(g, loss);
  cx_program *p = NULL;
  cx_compile_opts co = {.batch = 1, .training = true, .backend = cx_backend_cpu(), .seed = 9};
  cx_status s = cx_program_compile(g, &co, &p);
  CHECK(s == CX_OK, "compile: %s", cx_last_error());
  if (s == CX_OK) s = cx_program_forward(p);
  CHECK(s == CX_OK, "forward: %s", cx_last_error());
  cx_tensor *xt = cx_program_tensor(p, "x"), *yt = cx_program_tensor(p, "drop"),
            *mt = cx_program_tensor(p, "drop:saved1");
  CHECK(xt && yt && mt, "the training program lacks x, drop or its saved mask drop:saved1");
  if (s == CX_OK && xt && yt && mt) {
    const float *xv = xt->data, *yv = yt->data, *mv = mt->data;
    int kept = 0, bad = 0;
    for (int i = 0; i < 10000; i++) {
      kept += mv[i] == 1.0f;
      bad += (mv[i] != 0.0f && mv[i] != 1.0f) || fabsf(yv[i] - xv[i] * mv[i] / 0.75f) > 1e-6f;
    }
    CHECK(abs(kept - 7500) < 300, "dropout kept %d of 10000 at ratio 0.25", kept);
    CHECK(bad == 0, "%d elements are not X * mask / (1 - ratio) with a 0/1 mask", bad);
    printf("ok   Dropout mask: kept %d of 10000 at ratio 0.25\n", kept);
  }
  cx_program_free(p);
  cx_graph_free(g);
}

/* ---- other dtypes: the data-movement ops copy elements of any size ---- */

static void test_dtypes(void) {
  int64_t v[12];
  for (int i = 0; i < 12; i++) v[i] = (int64_t)i * 1000000007 - 5;
  cx_graph *g = cx_graph_new();
  int x = cx_graph_init(g, CX_VALUE_CONST, "x", CX_S64, &S(3, 4), v);
  int t = cx_graph_node(g, "Transpose", "t", &x, 1, 1);
  int ty = cx_node_output(g, t, 0);
  int sl[5] = {ty, s64(g, "st", 1, (int64_t[]){-1}), s64(g, "en", 1, (int64_t[]){INT64_MIN}),
               s64(g, "ax", 1, (int64_t[]){0}), s64(g, "sp", 1, (int64_t[]){-1})};
  sl[0] = cx_graph_op(g, "Slice", "sl", sl, 5);
  int cat[2] = {cx_graph_op(g, "Identity", "id", sl, 1), ty};
  int c = cx_graph_op(g, "Concat", "cat", cat, 2);
  cx_node_set_int(g, g->values[c].producer, "axis", 1);
  int r[2] = {c, s64(g, "shape", 1, (int64_t[]){-1})};
  cx_graph_mark_output(g, cx_graph_op(g, "Reshape", "flat", r, 2));
  fails += oc_check("s64 Transpose, Slice, Identity, Concat, Reshape", g, &(oc_opts){.seed = 1});
  cx_graph_free(g);

  uint16_t h[30];
  for (int i = 0; i < 30; i++) h[i] = cx_f32_to_f16((float)i * 0.25f - 3);
  g = cx_graph_new();
  x = cx_graph_init(g, CX_VALUE_CONST, "x", CX_F16, &S(5, 6), h);
  int e[2] = {x, s64(g, "shape", 3, (int64_t[]){2, 5, 6})};
  cx_graph_mark_output(g, cx_graph_op(g, "Expand", "ex", e, 2));
  int f = cx_graph_op(g, "Flatten", "fl", &x, 1);
  int sp = cx_graph_node(g, "Split", "sp", &f, 1, 2);
  cx_node_set_int(g, sp, "axis", 1);
  cx_graph_mark_output(g, cx_node_output(g, sp, 1));
  fails += oc_check("f16 Expand, Flatten, Split", g, &(oc_opts){.seed = 1});
  cx_graph_free(g);
}

/* ---- errors name the node and what was expected ---- */

static void test_errors(void) {
  cx_graph *g = cx_graph_new();
  int in[2] = {oc_param(g, "x", &S(2, 6), -1, 1, 1), cx_graph_input(g, "s", CX_S64, &S(2))};
  op_node(g, "Reshape", in, 2, 1);
  check_rejected("Reshape with a fed shape", g, "must be a constant");

  g = cx_graph_new();
  in[0] = oc_param(g, "x", &S(2, 6), -1, 1, 1);
  in[1] = s64(g, "shape", 2, (int64_t[]){-1, 5});
  op_node(g, "Reshape", in, 2, 1);
  check_rejected("Reshape 12 elements to [-1,5]", g, "cannot reshape [2,6]");

  g = cx_graph_new();
  int p[2] = {oc_param(g, "x", &S(2, 6), -1, 1, 1), s64(g, "pads", 4, (int64_t[]){0, -1, 0, 0})};
  op_node(g, "Pad", p, 2, 1);
  check_rejected("Pad with a negative pad", g, "negative pads");

  g = cx_graph_new();
  p[0] = oc_param(g, "x", &S(2, 3), -1, 1, 1);
  p[1] = s64(g, "pads", 4, (int64_t[]){0, 3, 0, 0});
  int n = op_node(g, "Pad", p, 2, 1);
  cx_node_set_string(g, n, "mode", "reflect");
  check_rejected("Pad reflect wider than the axis", g, "reflect pads");

  g = cx_graph_new();
  p[0] = oc_param(g, "x", &S(2, 3), -1, 1, 1);
  p[1] = s64(g, "pads", 4, (int64_t[]){0, 1, 0, 0});
  n = op_node(g, "Pad", p, 2, 1);
  cx_node_set_string(g, n, "mode", "wrap");
  check_rejected("Pad mode wrap", g, "mode 'wrap'");

  g = cx_graph_new();
  int sl[5] = {oc_param(g, "x", &S(4), -1, 1, 1), s64(g, "a", 1, (int64_t[]){0}),
               s64(g, "b", 1, (int64_t[]){4}), s64(g, "c", 1, (int64_t[]){0}),
               s64(g, "d", 1, (int64_t[]){0})};
  op_node(g, "Slice", sl, 5, 1);
  check_rejected("Slice step 0", g, "step is 0");

  g = cx_graph_new();
  int c[2] = {oc_param(g, "a", &S(2, 3), -1, 1, 1), oc_param(g, "b", &S(3, 3), -1, 1, 2)};
  n = op_node(g, "Concat", c, 2, 1);
  cx_node_set_int(g, n, "axis", 1);
  check_rejected("Concat shape mismatch", g, "every dimension but axis 1");

  g = cx_graph_new();
  int x = oc_param(g, "x", &S(2, 5), -1, 1, 1);
  n = op_node(g, "Split", &x, 1, 2);
  cx_node_set_ints(g, n, "split", (int64_t[]){1, 2}, 2);
  check_rejected("Split sizes not adding up", g, "do not add up");

  g = cx_graph_new();
  x = oc_param(g, "x", &S(2, 5), -1, 1, 1);
  n = op_node(g, "Transpose", &x, 1, 1);
  cx_node_set_ints(g, n, "perm", (int64_t[]){0, 0}, 2);
  check_rejected("Transpose perm not a permutation", g, "not a permutation");

  g = cx_graph_new();
  float r = 1.0f;
  int d[2] = {oc_param(g, "x", &S(2, 5), -1, 1, 1), cx_graph_const_f32(g, "r", &(cx_shape){0}, &r)};
  op_node(g, "Dropout", d, 2, 1);
  check_rejected("Dropout ratio 1", g, "outside [0, 1)");

  g = cx_graph_new();
  int e[2] = {oc_param(g, "x", &S(2, 5), -1, 1, 1), s64(g, "shape", 2, (int64_t[]){3, 5})};
  op_node(g, "Expand", e, 2, 1);
  check_rejected("Expand [2,5] to [3,5]", g, "do not broadcast");
}

int main(void) {
  test_flatten();
  test_reshape();
  test_identity();
  test_transpose();
  test_concat();
  test_split();
  test_slice();
  test_pad();
  test_expand();
  test_dropout();
  test_dropout_mask();
  test_dropout_rows();
  test_dtypes();
  test_errors();
  printf("%s: %d failure(s)\n", fails ? "FAILED" : "passed", fails);
  return fails != 0;
}
