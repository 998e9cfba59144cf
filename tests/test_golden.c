/* Golden training test: a small CNN (conv, BN, ReLU, max pool, global average pool, linear)
 * initialised in PyTorch and exported with BatchNormalization kept is trained here for the same 10
 * SGD-momentum steps (lr 0.1, momentum 0.9, weight decay 5e-4 on every parameter, as plain
 * torch.optim.SGD does) on the same fixed batches as PyTorch trained it in
 * tests/fixtures/make_golden.py. Every step's loss must match PyTorch's within 1e-4 relative, and
 * so must the parameters and BN running statistics after the last step (max |ours - torch| /
 * max |torch| per tensor, 1e-4). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/npy.h"
#include "../core/program.h"
#include "../import/onnx.h"
#include "../kernels/cpu/cpu.h"
#include "../train/optim_program.h"
#include "../train/train_graph.h"

#define DIR "fixtures/golden"
#define TOLERANCE 1e-4

typedef struct golden {
  cx_shape xs, ys, ls;
  float *images, *losses;
  int64_t *labels;
} golden;

static cx_status read_npy(const char *name, cx_dtype want, cx_shape *s, void **data) {
  char path[256];
  cx_dtype dt;
  snprintf(path, sizeof path, DIR "/%s", name);
  CX_TRY(cx_npy_read(path, &dt, s, data));
  if (dt != want) return cx_fail(CX_ERR_FORMAT, "%s: unexpected dtype", path);
  return CX_OK;
}

static cx_status golden_read(golden *g) {
  CX_TRY(read_npy("images.npy", CX_F32, &g->xs, (void **)&g->images));
  CX_TRY(read_npy("labels.npy", CX_S64, &g->ys, (void **)&g->labels));
  CX_TRY(read_npy("losses.npy", CX_F32, &g->ls, (void **)&g->losses));
  if (g->xs.ndim != 5 || g->ys.ndim != 2 || g->xs.d[0] != g->ys.d[0] || g->xs.d[1] != g->ys.d[1] ||
      g->ls.d[0] != g->xs.d[0])
    return cx_fail(CX_ERR_FORMAT, DIR ": images, labels and losses disagree in shape");
  return CX_OK;
}

static void golden_free(golden *g) {
  free(g->images);
  free(g->labels);
  free(g->losses);
}

static cx_status compile(const golden *gd, cx_program **p) {
  cx_graph *model = NULL, *tg = NULL;
  CX_TRY(cx_onnx_import(DIR "/cnn.onnx", &model, NULL));
  cx_status s = cx_train_graph(model, 0, 0, &tg);
  cx_graph_free(model);
  if (s != CX_OK) return s;
  cx_compile_opts o = {.batch = gd->xs.d[1], .training = true, .loss = "loss",
                       .backend = cx_backend_cpu()};
  s = cx_program_compile(tg, &o, p);
  cx_graph_free(tg);
  return s;
}

/* One step: feeds batch k, runs forward and backward, steps the optimizer; returns the loss. */
static cx_status step(cx_program *p, cx_optimizer *opt, const golden *gd, int64_t k, float lr,
                      double *loss) {
  cx_tensor *x = cx_program_tensor(p, "input"), *y = cx_program_tensor(p, "labels");
  size_t xb = cx_tensor_nbytes(x), yb = cx_tensor_nbytes(y);
  memcpy(x->data, (const char *)gd->images + (size_t)k * xb, xb);
  memcpy(y->data, (const char *)gd->labels + (size_t)k * yb, yb);
  CX_TRY(cx_program_forward(p));
  *loss = *(const float *)cx_program_tensor(p, "loss")->data;
  CX_TRY(cx_program_backward(p));
  return cx_optimizer_step_program(opt, p, lr);
}

/* The parameters and running statistics after the last step against PyTorch's state_dict. */
static int check_final(cx_program *p) {
  const char *names[] = {"conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean",
                         "bn1.running_var", "conv2.weight", "conv2.bias", "bn2.weight",
                         "bn2.bias", "bn2.running_mean", "bn2.running_var", "fc.weight",
                         "fc.bias"};
  int fails = 0;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    char file[128];
    snprintf(file, sizeof file, "final_%s.npy", names[i]);
    cx_shape s;
    float *want = NULL;
    const cx_tensor *t = cx_program_tensor(p, names[i]);
    if (!t || read_npy(file, CX_F32, &s, (void **)&want) != CX_OK ||
        cx_shape_numel(&s) != cx_tensor_numel(t)) {
      printf("FAIL %s: %s\n", names[i], t ? cx_last_error() : "not in the program");
      free(want);
      fails++;
      continue;
    }
    double md = 0, mr = 0;
    for (int64_t j = 0; j < cx_shape_numel(&s); j++) {
      md = fmax(md, fabs(((const float *)t->data)[j] - want[j]));
      mr = fmax(mr, fabs(want[j]));
    }
    bool ok = md <= TOLERANCE * mr;
    fails += !ok;
    printf("%s final %-17s relative error %.2e\n", ok ? "ok  " : "FAIL", names[i], md / mr);
    free(want);
  }
  return fails;
}

static int train(const golden *gd, cx_program *p) {
  cx_optim_config c = cx_optim_defaults(CX_OPTIM_SGD);
  c.lr = 0.1f;
  c.momentum = 0.9f;
  c.weight_decay = 5e-4f;
  c.decay_norm_and_bias = true; /* torch.optim.SGD decays every parameter it is given */
  cx_optimizer *opt = NULL;
  if (cx_optimizer_for_program(&c, p, &opt) != CX_OK) {
    printf("FAIL optimizer: %s\n", cx_last_error());
    return 1;
  }
  int fails = 0;
  double worst = 0;
  printf("step  loss (torch)  loss (compress)  relative difference\n");
  for (int64_t k = 0; k < gd->xs.d[0]; k++) {
    double loss = NAN, want = gd->losses[k];
    if (step(p, opt, gd, k, c.lr, &loss) != CX_OK) {
      printf("FAIL step %lld: %s\n", (long long)k, cx_last_error());
      fails++;
      break;
    }
    double rel = fabs(loss - want) / fabs(want);
    bool ok = rel <= TOLERANCE;
    fails += !ok;
    worst = fmax(worst, rel);
    printf("%4lld  %12.7f  %15.7f  %.2e%s\n", (long long)k, want, loss, rel, ok ? "" : "  FAIL");
  }
  printf("largest relative loss difference %.2e (tolerance %.0e)\n", worst, TOLERANCE);
  cx_optimizer_free(opt);
  return fails;
}

int main(void) {
  golden gd = {0};
  cx_program *p = NULL;
  int fails = 0;
  if (golden_read(&gd) != CX_OK || compile(&gd, &p) != CX_OK) {
    printf("FAIL: %s\n", cx_last_error());
    fails = 1;
  } else {
    fails += train(&gd, p);
    fails += check_final(p);
  }
  cx_program_free(p);
  golden_free(&gd);
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
