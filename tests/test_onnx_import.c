/* Real exporter output: torchvision models exported by PyTorch (tests/fixtures/torch, made by
 * tests/fixtures/make_torch_fixtures.py) import and match PyTorch's outputs within 1e-4 relative
 * (max |ours - torch| / max |torch|). BN-kept exports must keep their BatchNormalization nodes
 * (and running statistics as state); BN-folded ones have none. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/npy.h"
#include "../core/op.h"
#include "../core/program.h"
#include "../import/onnx.h"
#include "../kernels/cpu/cpu.h"

#define DIR "fixtures/torch"

static int count_op(const cx_graph *g, const char *op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += !strcmp(g->nodes[i].op->name, op);
  return n;
}

static cx_status run(const char *model, const char *arch, const char *bn, double *err) {
  char path[512];
  cx_graph *g = NULL;
  CX_TRY(cx_onnx_import(model, &g, NULL));
  int n_bn = count_op(g, "BatchNormalization");
  if ((strcmp(bn, "kept") == 0) != (n_bn > 0)) {
    cx_graph_free(g);
    return cx_fail(CX_ERR_FORMAT, "%s: %d BatchNormalization nodes, BN %s", model, n_bn, bn);
  }
  cx_dtype dt;
  cx_shape xs, ys;
  void *x = NULL, *y = NULL;
  snprintf(path, sizeof path, DIR "/%s_input.npy", arch);
  cx_status s = cx_npy_read(path, &dt, &xs, &x);
  snprintf(path, sizeof path, DIR "/%s_output.npy", arch);
  if (s == CX_OK) s = cx_npy_read(path, &dt, &ys, &y);
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = xs.d[0], .backend = cx_backend_cpu()};
  if (s == CX_OK) s = cx_program_compile(g, &o, &p);
  if (s == CX_OK) {
    cx_tensor *in = cx_program_tensor(p, "input");
    memcpy(in->data, x, cx_tensor_nbytes(in));
    s = cx_program_forward(p);
  }
  if (s == CX_OK) {
    const cx_tensor *out = cx_program_value_tensor(p, cx_program_graph(p)->outputs[0]);
    double md = 0, mr = 0;
    for (int64_t i = 0; i < cx_shape_numel(&ys); i++) {
      md = fmax(md, fabs(((float *)out->data)[i] - ((float *)y)[i]));
      mr = fmax(mr, fabs(((float *)y)[i]));
    }
    *err = md / mr;
  }
  cx_program_free(p);
  cx_graph_free(g);
  free(x);
  free(y);
  return s;
}

int main(void) {
  const char *archs[] = {"resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0"};
  const int opsets[] = {11, 13, 17};
  const char *bns[] = {"folded", "kept"};
  int fails = 0, runs = 0;
  double worst = 0;
  for (int a = 0; a < 4; a++)
    for (int o = 0; o < 3; o++)
      for (int b = 0; b < 2; b++) {
        char model[256];
        snprintf(model, sizeof model, DIR "/%s_op%d_bn%s.onnx", archs[a], opsets[o], bns[b]);
        double err = INFINITY;
        cx_status s = run(model, archs[a], bns[b], &err);
        bool ok = s == CX_OK && err <= 1e-4;
        runs++;
        fails += !ok;
        if (s == CX_OK && err > worst) worst = err;
        if (s == CX_OK) printf("%s %-44s relative error %.2e\n", ok ? "ok  " : "FAIL", model, err);
        else printf("FAIL %s: %s\n", model, cx_last_error());
      }
  printf("%d PyTorch fixtures, %d failed, largest relative error %.2e (tolerance 1e-4)\n", runs,
         fails, worst);
  return fails != 0;
}
