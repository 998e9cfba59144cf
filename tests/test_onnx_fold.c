/* Constant folding at import of the shape arithmetic today's exporters write (N-D Slice with
 * steps, Transpose of a computed table, Mod, Pow, Not, Where, Expand, ScatterND): models made by
 * tests/fold_models.py compute input + T for a table T built with those ops; each must import
 * as a single Add (everything else folded) and match ONNX Runtime's output exactly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/npy.h"
#include "../core/op.h"
#include "../core/program.h"
#include "../import/onnx.h"
#include "../kernels/cpu/cpu.h"

static const char *dir(void) {
  const char *d = getenv("CX_FOLD_DIR");
  return d && *d ? d : "onnx_fold";
}

static cx_status run(const char *name, double *err) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.onnx", dir(), name);
  cx_graph *g = NULL;
  CX_TRY(cx_onnx_import(path, &g, NULL));
  cx_status s = CX_OK;
  if (g->n_nodes != 1 || strcmp(g->nodes[0].op->name, "Add"))
    s = cx_fail(CX_ERR_FORMAT, "%s: %d node(s), the first %s; one Add expected (the table "
                "folded)", name, g->n_nodes, g->n_nodes ? g->nodes[0].op->name : "-");
  cx_dtype dt;
  cx_shape xs, ys;
  void *x = NULL, *y = NULL;
  snprintf(path, sizeof path, "%s/%s_x.npy", dir(), name);
  if (s == CX_OK) s = cx_npy_read(path, &dt, &xs, &x);
  snprintf(path, sizeof path, "%s/%s_y.npy", dir(), name);
  if (s == CX_OK) s = cx_npy_read(path, &dt, &ys, &y);
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = 1, .backend = cx_backend_cpu()};
  if (s == CX_OK) s = cx_program_compile(g, &o, &p);
  const cx_tensor *out = s == CX_OK ? cx_program_value_tensor(p, cx_program_graph(p)->outputs[0])
                                    : NULL;
  float *got = s == CX_OK ? malloc(cx_tensor_nbytes(out)) : NULL;
  if (s == CX_OK && cx_shape_numel(&out->shape) != cx_shape_numel(&ys))
    s = cx_fail(CX_ERR_SHAPE, "%s: %lld outputs, ONNX Runtime has %lld", name,
                (long long)cx_shape_numel(&out->shape), (long long)cx_shape_numel(&ys));
  if (s == CX_OK) s = cx_program_write(p, cx_program_tensor(p, "input"), x);
  if (s == CX_OK) s = cx_program_forward(p);
  if (s == CX_OK) s = cx_program_read(p, out, got);
  if (s == CX_OK) {
    *err = 0;
    for (int64_t i = 0; i < cx_shape_numel(&ys); i++)
      *err = fmax(*err, fabs((double)got[i] - ((float *)y)[i]));
  }
  free(got);
  free(x);
  free(y);
  cx_program_free(p);
  cx_graph_free(g);
  return s;
}

int main(void) {
  char cmd[2048], path[1024], name[128];
  snprintf(cmd, sizeof cmd, "'%s' '%s' '%s'", CX_PYTHON, CX_FOLD_PY, dir());
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
  while (fgets(name, sizeof name, f)) {
    name[strcspn(name, "\n")] = 0;
    if (!*name) continue;
    double err = INFINITY;
    cx_status s = run(name, &err);
    bool ok = s == CX_OK && err == 0;
    runs++;
    fails += !ok;
    if (s == CX_OK) printf("%s %-18s folded to one Add, largest difference %.3g\n",
                           ok ? "ok  " : "FAIL", name, err);
    else printf("FAIL %s: %s\n", name, cx_last_error());
  }
  fclose(f);
  printf("%d folding model(s), %d failed\n", runs, fails);
  return fails != 0 || runs == 0;
}
