/* The ops the importer writes as others (import/onnx_rewrite.c): Einsum's batched matrix-product
 * forms as MatMul and Transpose, Tile as Reshape, Expand, Reshape; and masks computed from
 * activations (comparisons, Not, Cast, Where), which run as ops. Models made by
 * tests/rewrite_models.py import with no Einsum or Tile left, match ONNX Runtime within 1e-5
 * relative at batch 1 and 2, and their parameters' gradients match finite differences (the op
 * harness, tests/op_check.h); an equation outside those forms is refused naming the node.
 * Exit 77 (skip) without onnx and onnxruntime. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/npy.h"
#include "../core/op.h"
#include "../core/program.h"
#include "../import/onnx.h"
#include "../kernels/cpu/cpu.h"
#include "op_check.h"

static const char *dir(void) {
  const char *d = getenv("CX_REWRITE_DIR");
  return d && *d ? d : "onnx_rewrite";
}

static cx_status read_f32(const char *name, const char *what, cx_shape *s, float **data) {
  char path[1024];
  cx_dtype dt;
  snprintf(path, sizeof path, "%s/%s_%s.npy", dir(), name, what);
  CX_TRY(cx_npy_read(path, &dt, s, (void **)data));
  if (dt != CX_F32) return cx_fail(CX_ERR_FORMAT, "%s: f32 expected", path);
  return CX_OK;
}

/* max |ours - ort| / max |ort| over the outputs of one batch size. */
static cx_status compare(const cx_graph *g, const char *name, int n_out, int64_t batch,
                         const float *x, double *err) {
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = batch, .backend = cx_backend_cpu()};
  CX_TRY(cx_program_compile(g, &o, &p));
  cx_status s = cx_program_write(p, cx_program_tensor(p, "input"), x);
  if (s == CX_OK) s = cx_program_forward(p);
  *err = 0;
  for (int k = 0; k < n_out && s == CX_OK; k++) {
    char what[64];
    snprintf(what, sizeof what, "b%lld_%d", (long long)batch, k);
    cx_shape ys;
    float *y = NULL, *got = NULL;
    s = read_f32(name, what, &ys, &y);
    const cx_tensor *t = s == CX_OK ? cx_program_value_tensor(p, cx_program_graph(p)->outputs[k])
                                    : NULL;
    if (s == CX_OK && !cx_shape_equal(&t->shape, &ys))
      s = cx_fail(CX_ERR_SHAPE, "%s: output %d's shape differs from ONNX Runtime's", name, k);
    if (s == CX_OK) got = malloc(cx_tensor_nbytes(t));
    if (s == CX_OK) s = cx_program_read(p, t, got);
    double md = 0, mr = 0;
    for (int64_t i = 0; s == CX_OK && i < cx_shape_numel(&ys); i++) {
      md = fmax(md, fabs((double)got[i] - y[i]));
      mr = fmax(mr, fabs((double)y[i]));
    }
    if (s == CX_OK) *err = fmax(*err, md == 0 ? 0 : md / mr);
    free(got);
    free(y);
  }
  cx_program_free(p);
  return s;
}

static int check_model(const char *name, int n_out) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.onnx", dir(), name);
  cx_graph *g = NULL;
  cx_shape xs;
  float *x = NULL;
  cx_status s = cx_onnx_import(path, &g, NULL);
  if (s == CX_OK) s = read_f32(name, "x", &xs, &x);
  for (int i = 0; s == CX_OK && i < g->n_nodes; i++)
    if (!strcmp(g->nodes[i].op->name, "Einsum") || !strcmp(g->nodes[i].op->name, "Tile"))
      s = cx_fail(CX_ERR_FORMAT, "%s: node '%s' is still %s", name, g->nodes[i].name,
                  g->nodes[i].op->name);
  int fails = 0;
  for (int64_t batch = 1; batch <= 2 && s == CX_OK; batch++) {
    double err = INFINITY;
    s = compare(g, name, n_out, batch, x, &err);
    bool ok = s == CX_OK && err <= 1e-5;
    fails += s == CX_OK && !ok;
    if (s == CX_OK)
      printf("%s %s batch %lld: %d outputs within %.2e of ONNX Runtime (tolerance 1e-5)\n",
             ok ? "ok  " : "FAIL", name, (long long)batch, n_out, err);
  }
  if (s == CX_OK) { /* the initializers are parameters: their gradients through the rewrite */
    oc_opts o = {.grad = true, .seed = 5};
    fails += oc_check(name, g, &o);
  }
  if (s != CX_OK) {
    printf("FAIL %s: %s\n", name, cx_last_error());
    fails++;
  }
  free(x);
  cx_graph_free(g);
  return fails;
}

static int check_refused(void) {
  char path[1024];
  snprintf(path, sizeof path, "%s/refused.onnx", dir());
  cx_graph *g = NULL;
  cx_status s = cx_onnx_import(path, &g, NULL);
  cx_graph_free(g);
  bool ok = s != CX_OK && strstr(cx_last_error(), "Einsum_0") &&
            strstr(cx_last_error(), "bii,bij->bj");
  printf("%s refused.onnx: %s\n", ok ? "ok  " : "FAIL", s == CX_OK ? "imported" : cx_last_error());
  return !ok;
}

int main(void) {
  if (system("'" CX_PYTHON "' -c 'import onnx, onnxruntime, numpy' 2>/dev/null") != 0) {
    printf("skip: %s has no onnx, onnxruntime or numpy\n", CX_PYTHON);
    return 77;
  }
  char cmd[2048], path[1024], line[256];
  snprintf(cmd, sizeof cmd, "'%s' '%s' '%s'", CX_PYTHON, CX_REWRITE_PY, dir());
  if (system(cmd) != 0) {
    printf("FAIL: making the models failed: %s\n", cmd);
    return 1;
  }
  snprintf(path, sizeof path, "%s/names.txt", dir());
  FILE *f = fopen(path, "r");
  if (!f) {
    printf("FAIL: %s is missing\n", path);
    return 1;
  }
  int fails = 0, runs = 0;
  while (fgets(line, sizeof line, f)) {
    char name[128];
    int n_out = 0;
    if (sscanf(line, "%127s %d", name, &n_out) != 2) continue;
    fails += check_model(name, n_out);
    runs++;
  }
  fclose(f);
  fails += check_refused();
  printf("%d model(s), %d check(s) failed\n", runs, fails);
  return fails != 0 || runs == 0;
}
