/* The one shape inference (core/graph_shapes.h) and the one input writer (core/program_input.h):
 * a compiled program's shapes are those the inference gives without compiling; the batch rule,
 * symbolic dimensions, errors naming the node; a short batch padded with zeros, and inputs that
 * are not there or do not fit refused. */
#include <stdlib.h>
#include <string.h>

#include "../core/graph_shapes.h"
#include "../core/program_input.h"
#include "../kernels/cpu/cpu.h"
#include "../models/zoo.h"
#include "check.h"
#include "op_check.h"

/* Every value of a compiled inference program has the shape the inference gives (values matched
 * by name: the inference fusions, core/infer_fuse.h, remove some and renumber the rest). */
static void test_program_agrees(void) {
  cx_graph *m = NULL;
  CHECK(cx_model_build("mobilenet_v2:width=0.5,classes=10,input=3x32x32", &m, NULL) == CX_OK,
        "model: %s", cx_last_error());
  if (!m) return;
  cx_shape *shape = malloc(sizeof(cx_shape) * (size_t)m->n_values);
  cx_dtype *dtype = malloc(sizeof(cx_dtype) * (size_t)m->n_values);
  CHECK(cx_graph_infer_shapes(m, 3, shape, dtype) == CX_OK, "infer: %s", cx_last_error());
  cx_program *p = NULL;
  cx_compile_opts co = {.batch = 3, .backend = cx_backend_cpu()};
  CHECK(cx_program_compile(m, &co, &p) == CX_OK, "compile: %s", cx_last_error());
  int differ = 0, matched = 0;
  const cx_graph *pg = p ? cx_program_graph(p) : NULL;
  for (int pv = 0; pg && pv < pg->n_values; pv++) {
    int v = cx_graph_find_value(m, pg->values[pv].name);
    if (v < 0) continue;
    const cx_tensor *t = cx_program_value_tensor(p, pv);
    matched++;
    if (!cx_shape_equal(&t->shape, &shape[v]) || t->dtype != dtype[v]) differ++;
  }
  CHECK(p && differ == 0 && matched > 0,
        "%d of %d values matched by name differ between the program and the inference", differ,
        matched);
  int logits = m->outputs[0];
  cx_shape one;
  CHECK(cx_graph_value_shape(m, logits, 1, &one) == CX_OK && one.ndim == 2 && one.d[0] == 1 &&
            one.d[1] == 10,
        "logits for one image: %s", cx_last_error());
  cx_shape *sym = malloc(sizeof(cx_shape) * (size_t)m->n_values);
  CHECK(cx_graph_symbolic_shapes(m, sym, dtype) == CX_OK && sym[logits].d[0] == -1 &&
            sym[logits].d[1] == 10,
        "symbolic logits");
  free(sym);
  cx_program_free(p);
  free(shape);
  free(dtype);
  cx_graph_free(m);
}

static void test_errors(void) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "x", CX_F32, &S(-1, 4));
  int w = oc_param(g, "w", &S(5, 3), -1, 1, 1);
  int y = cx_graph_op(g, "MatMul", "bad_matmul", (int[]){x, w}, 2);
  cx_graph_mark_output(g, y);
  cx_shape shape[8];
  cx_dtype dtype[8];
  CHECK(cx_graph_infer_shapes(g, 0, shape, dtype) == CX_ERR_ARG &&
            strstr(cx_last_error(), "'x'") && strstr(cx_last_error(), "batch"),
        "a symbolic input without a batch size: %s", cx_last_error());
  cx_status s = cx_graph_infer_shapes(g, 2, shape, dtype);
  printf("mismatched MatMul: %s\n", cx_last_error());
  CHECK(s != CX_OK && strstr(cx_last_error(), "bad_matmul"), "the error must name the node");
  CHECK(cx_graph_value_shape(g, 99, 2, shape) == CX_ERR_ARG, "value 99 accepted");
  cx_graph_free(g);
}

/* A short batch: the first rows as given, the rest zero, whatever the input held before. */
static void test_write_input(void) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "x", CX_F32, &S(-1, 3));
  int w = oc_param(g, "w", &S(3, 2), -1, 1, 2);
  cx_graph_mark_output(g, cx_graph_op(g, "MatMul", "mm", (int[]){x, w}, 2));
  cx_program *p = NULL;
  cx_compile_opts co = {.batch = 4, .backend = cx_backend_cpu()};
  CHECK(cx_program_compile(g, &co, &p) == CX_OK, "compile: %s", cx_last_error());
  if (p) {
    float full[12], part[6] = {1, 2, 3, 4, 5, 6};
    for (int i = 0; i < 12; i++) full[i] = 9;
    CHECK(cx_program_write_input(p, "x", full, sizeof full) == CX_OK, "%s", cx_last_error());
    const float *in = cx_program_tensor(p, "x")->data;
    CHECK(in[0] == 9 && in[11] == 9, "a whole batch is copied");
    CHECK(cx_program_write_input(p, "x", part, sizeof part) == CX_OK, "%s", cx_last_error());
    bool ok = true;
    for (int i = 0; i < 12; i++) ok = ok && in[i] == (i < 6 ? part[i] : 0.0f);
    CHECK(ok, "two of four rows: the rest must be zero");
    CHECK(cx_program_write_input(p, "x", full, sizeof full + 4) == CX_ERR_SHAPE,
          "more bytes than the input holds were accepted");
    CHECK(cx_program_write_input(p, "w", part, sizeof part) == CX_ERR_ARG &&
              strstr(cx_last_error(), "'w'"),
          "a parameter is not an input");
    CHECK(cx_program_write_input(p, "nothing", part, sizeof part) == CX_ERR_ARG,
          "a missing input was accepted");
  }
  cx_program_free(p);
  cx_graph_free(g);
}

int main(void) {
  test_program_agrees();
  test_errors();
  test_write_input();
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
