/* Today's teachers, exported by PyTorch while the test runs (tests/torch_teachers.py: a CIFAR
 * ResNet with option-A shortcuts, torchvision's convnext_tiny, ...), import and match PyTorch's
 * eval-mode outputs within 1e-4 relative (max |ours - torch| / max |torch|) at batch 1 and 2.
 * Models with a training check also run one training step (batch statistics, the fed output
 * gradient R) and match PyTorch's gradient of one parameter (MODEL_dw.txt names it: the option-A
 * ResNet's first convolution, ViT's class token) within 1e-3.
 *
 *     test_torch_teachers [MODEL ...]   (default resnet_option_a; CX_TEACHER_DIR: where the
 *                                        exports go) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/npy.h"
#include "../core/program.h"
#include "../import/onnx.h"
#include "../kernels/cpu/cpu.h"

static const char *dir(void) {
  const char *d = getenv("CX_TEACHER_DIR");
  return d && *d ? d : "torch_teachers";
}

static cx_status read_npy(const char *model, const char *what, cx_shape *s, float **data) {
  char path[1024];
  cx_dtype dt;
  snprintf(path, sizeof path, "%s/%s_%s.npy", dir(), model, what);
  CX_TRY(cx_npy_read(path, &dt, s, (void **)data));
  if (dt != CX_F32) return cx_fail(CX_ERR_FORMAT, "%s: f32 expected", path);
  return CX_OK;
}

/* max |a - b| / max |b| over n numbers. */
static double rel_err(const float *a, const float *b, int64_t n) {
  double md = 0, mr = 0;
  for (int64_t i = 0; i < n; i++) {
    md = fmax(md, fabs((double)a[i] - b[i]));
    mr = fmax(mr, fabs((double)b[i]));
  }
  return md == 0 ? 0 : md / mr;
}

/* The first `batch` rows of x through an inference program; the error against y's rows. */
static cx_status infer(const cx_graph *g, int64_t batch, const float *x, const float *y,
                       int64_t y_row, double *err) {
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = batch, .backend = cx_backend_cpu()};
  CX_TRY(cx_program_compile(g, &o, &p));
  const cx_tensor *in = cx_program_tensor(p, "input");
  const cx_tensor *out = cx_program_value_tensor(p, cx_program_graph(p)->outputs[0]);
  float *got = malloc(sizeof(float) * (size_t)(y_row * batch));
  cx_status s = cx_program_write(p, in, x);
  if (s == CX_OK) s = cx_program_forward(p);
  if (s == CX_OK && cx_shape_numel(&out->shape) != y_row * batch)
    s = cx_fail(CX_ERR_SHAPE, "the output has %lld numbers, PyTorch's %lld",
                (long long)cx_shape_numel(&out->shape), (long long)(y_row * batch));
  if (s == CX_OK) s = cx_program_read(p, out, got);
  if (s == CX_OK) *err = rel_err(got, y, y_row * batch);
  free(got);
  cx_program_free(p);
  return s;
}

/* One training step at batch 2 with R fed as the output's gradient; the error of parameter
 * w's gradient against PyTorch's. */
static cx_status train_step(const cx_graph *g, const char *model, const char *w, const float *x,
                            double *err) {
  cx_shape rs, ws;
  float *r = NULL, *dw = NULL;
  CX_TRY(read_npy(model, "r", &rs, &r));
  cx_status s = read_npy(model, "dw", &ws, &dw);
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = 2, .training = true, .backend = cx_backend_cpu()};
  if (s == CX_OK) s = cx_program_compile(g, &o, &p);
  char name[300];
  snprintf(name, sizeof name, "%s@grad", w);
  const cx_tensor *dy = s == CX_OK ? cx_program_tensor(p, "output@grad") : NULL;
  const cx_tensor *gw = s == CX_OK ? cx_program_tensor(p, name) : NULL;
  if (s == CX_OK && (!dy || !gw))
    s = cx_fail(CX_ERR_FORMAT, "%s: no output@grad or %s in the program", model, name);
  if (s == CX_OK && cx_shape_numel(&gw->shape) != cx_shape_numel(&ws))
    s = cx_fail(CX_ERR_SHAPE, "%s: %s differs in size from PyTorch's", model, name);
  float *got = s == CX_OK ? malloc(cx_tensor_nbytes(gw)) : NULL;
  if (s == CX_OK) s = cx_program_write(p, cx_program_tensor(p, "input"), x);
  if (s == CX_OK) s = cx_program_write(p, dy, r);
  if (s == CX_OK) s = cx_program_forward(p);
  if (s == CX_OK) s = cx_program_backward(p);
  if (s == CX_OK) s = cx_program_read(p, gw, got);
  if (s == CX_OK) *err = rel_err(got, dw, cx_shape_numel(&ws));
  free(got);
  free(r);
  free(dw);
  cx_program_free(p);
  return s;
}

static int check_model(const char *model) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.onnx", dir(), model);
  cx_graph *g = NULL;
  cx_shape xs, ys;
  float *x = NULL, *y = NULL;
  cx_status s = cx_onnx_import(path, &g, NULL);
  if (s == CX_OK) s = read_npy(model, "x", &xs, &x);
  if (s == CX_OK) s = read_npy(model, "y", &ys, &y);
  int fails = 0;
  for (int64_t batch = 1; batch <= 2 && s == CX_OK; batch++) {
    double err = INFINITY;
    s = infer(g, batch, x, y, cx_shape_numel(&ys) / ys.d[0], &err);
    if (s != CX_OK) break;
    bool ok = err <= 1e-4;
    fails += !ok;
    printf("%s %s batch %lld: relative error %.2e (tolerance 1e-4)\n", ok ? "ok  " : "FAIL", model,
           (long long)batch, err);
  }
  snprintf(path, sizeof path, "%s/%s_dw.txt", dir(), model);
  FILE *f = s == CX_OK ? fopen(path, "r") : NULL;
  char w[256] = "";
  if (f) {
    if (!fgets(w, sizeof w, f)) w[0] = 0;
    fclose(f);
  }
  if (*w) {
    double err = INFINITY;
    s = train_step(g, model, w, x, &err);
    bool ok = s == CX_OK && err <= 1e-3;
    fails += s == CX_OK && !ok;
    if (s == CX_OK)
      printf("%s %s training step: gradient of %s, relative error %.2e (tolerance 1e-3)\n",
             ok ? "ok  " : "FAIL", model, w, err);
  }
  if (s != CX_OK) {
    printf("FAIL %s: %s\n", model, cx_last_error());
    fails++;
  }
  free(x);
  free(y);
  cx_graph_free(g);
  return fails;
}

int main(int argc, char **argv) {
  static char *fallback[] = {NULL, "resnet_option_a"};
  if (argc < 2) argc = 2, argv = fallback;
  /* Export everything first, in one Python (importing torch takes seconds). */
  char cmd[4096];
  int at = snprintf(cmd, sizeof cmd, "'%s' -W ignore '%s' '%s'", CX_PYTHON, CX_TEACHERS_PY, dir());
  for (int k = 1; k < argc && at < (int)sizeof cmd - 256; k++)
    at += snprintf(cmd + at, sizeof cmd - (size_t)at, " '%s'", argv[k]);
  if (system(cmd) != 0) {
    printf("FAIL: exporting the models with PyTorch failed: %s\n", cmd);
    return 1;
  }
  int fails = 0;
  for (int k = 1; k < argc; k++) fails += check_model(argv[k]);
  printf("%d model(s), %d check(s) failed\n", argc - 1, fails);
  return fails != 0;
}
