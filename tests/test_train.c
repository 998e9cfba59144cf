/* The trainer on real data: Fashion-MNIST (Debian's dataset-fashion-mnist) imported to HDF5, a
 * ResNet-20 trained with the recipe of examples/fashion_mnist/train.toml (2 epochs, SGD momentum,
 * cosine to zero) must reach 88% test top-1 (PyTorch with the same recipe, bench/train_torch.py:
 * see bench/README.md), and the same run in bf16 must end within a point of it; plus the
 * trainer's guards (a NaN is caught and named, a wrong input shape is refused). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../data/data.h"
#include "../kernels/cpu/cpu.h"
#include "../models/zoo.h"
#include "../train/trainer.h"
#include "check.h"
#include "fmnist.h"

static cx_train_opts recipe(const char *train, const char *test) {
  cx_train_opts o = cx_train_defaults();
  o.train_path = train;
  o.val_path = test;
  o.batch_size = 128;
  o.epochs = 2;
  o.optim.lr = 0.1f;
  o.optim.momentum = 0.9f;
  o.optim.weight_decay = 5e-4f;
  o.schedule = cx_schedule_defaults(CX_SCHEDULE_COSINE, 0.1f);
  o.log_every = 100;
  o.backend = cx_backend_cpu();
  float mean = 0.286f, std = 0.353f; /* Fashion-MNIST pixel statistics */
  o.loader.aug.mean[0] = o.val_aug.mean[0] = mean;
  o.loader.aug.std[0] = o.val_aug.std[0] = std;
  o.loader.aug.crop = CX_CROP_PAD;
  o.loader.aug.pad = 2;
  o.loader.aug.flip = true;
  return o;
}

/* Returns the fp32 run's top-1 (-1 when it failed). */
static double test_fashion_mnist(const char *train, const char *test) {
  cx_graph *g = NULL;
  CHECK(cx_model_build("resnet20:classes=10,input=1x28x28", &g, NULL) == CX_OK, "%s", cx_last_error());
  if (!g) return -1;
  cx_train_opts o = recipe(train, test);
  cx_train_result r;
  cx_status s = cx_train(g, &o, &r);
  CHECK(s == CX_OK, "train: %s", cx_last_error());
  printf("resnet20, 2 epochs: top-1 %.2f%%, %.0f img/s, %.1f s\n", r.val.top1, r.images_per_s, r.seconds);
  CHECK(s != CX_OK || r.val.top1 >= 88.0, "top-1 %.2f%% below 88%%", r.val.top1);
  /* the trained weights are in the graph: evaluating it again gives the same numbers */
  cx_eval_result e;
  CHECK(cx_evaluate(g, cx_backend_cpu(), test, NULL, &o.val_aug, 100, &e) == CX_OK, "%s", cx_last_error());
  CHECK(fabs(e.top1 - r.val.top1) < 1e-9 && e.n == 10000, "re-evaluation %.2f vs %.2f", e.top1, r.val.top1);
  cx_graph_free(g);
  return s == CX_OK ? r.val.top1 : -1;
}

/* The same recipe and seed with bf16 autocast (docs/training.md) must reach the fp32 run's floor
 * and land within a point of it: rounding changes the trajectory, not where it ends. A point,
 * not less: one seed's two-epoch top-1 moves by up to 0.7 with the arithmetic alone (fp32 with
 * Winograd forced against the measured algorithms: 90.05 / 89.37; bf16 against fp32 over seeds
 * 1, 2, 3: -0.65, -0.20, +0.65, mean -0.06), so a tighter bound on one pair tests the seed; a
 * broken bf16 path loses several points. */
static void test_fashion_mnist_bf16(const char *train, const char *test, double fp32_top1) {
  const cx_backend *cpu = cx_backend_cpu();
  if (cpu->check_precision(cpu, CX_PRECISION_BF16) != CX_OK) {
    printf("bf16 run skipped: %s\n", cx_last_error()); /* test_bf16 checks the refusal */
    return;
  }
  cx_graph *g = NULL;
  CHECK(cx_model_build("resnet20:classes=10,input=1x28x28", &g, NULL) == CX_OK, "%s", cx_last_error());
  if (!g) return;
  cx_train_opts o = recipe(train, test);
  o.precision = CX_PRECISION_BF16;
  cx_train_result r;
  cx_status s = cx_train(g, &o, &r);
  CHECK(s == CX_OK, "bf16 train: %s", cx_last_error());
  printf("resnet20, bf16: top-1 %.2f%% (fp32 %.2f%%), %.0f img/s, %.1f s\n", r.val.top1,
         fp32_top1, r.images_per_s, r.seconds);
  CHECK(s != CX_OK || r.val.top1 >= 88.0, "bf16 top-1 %.2f%% below 88%%", r.val.top1);
  CHECK(s != CX_OK || fp32_top1 < 0 || fabs(r.val.top1 - fp32_top1) <= 1.0,
        "bf16 top-1 %.2f%% more than a point from fp32's %.2f%%", r.val.top1, fp32_top1);
  cx_graph_free(g);
}

static void test_nan_named(const char *train) {
  cx_graph *g = NULL;
  CHECK(cx_model_build("resnet20:classes=10,input=1x28x28", &g, NULL) == CX_OK, "%s", cx_last_error());
  cx_train_opts o = recipe(train, NULL);
  o.schedule.lr = 1e30f; /* diverges at once */
  o.quiet = true;
  cx_train_result r;
  cx_status s = cx_train(g, &o, &r);
  printf("diverging run: %s\n", cx_last_error());
  CHECK(s == CX_ERR_NUMERIC && strstr(cx_last_error(), "node '"), "NaN not caught or not named");
  cx_graph_free(g);
}

static void test_wrong_input(const char *train) {
  cx_graph *g = NULL;
  CHECK(cx_model_build("resnet20:classes=10,input=3x32x32", &g, NULL) == CX_OK, "%s", cx_last_error());
  cx_train_opts o = recipe(train, NULL);
  o.quiet = true;
  cx_train_result r;
  cx_status s = cx_train(g, &o, &r);
  printf("wrong input: %s\n", cx_last_error());
  CHECK(s == CX_ERR_SHAPE && strstr(cx_last_error(), "train.h5"), "shape mismatch not named");
  cx_graph_free(g);
}

int main(void) {
  char dir[] = "/tmp/cx_train_XXXXXX", train[64], test[64];
  if (!mkdtemp(dir)) return 1;
  if (fmnist_import(dir, train, test) != CX_OK) {
    printf("FAIL import: %s\n", cx_last_error());
    return 1;
  }
  test_wrong_input(train);
  test_nan_named(train);
  double fp32_top1 = test_fashion_mnist(train, test);
  test_fashion_mnist_bf16(train, test, fp32_top1);
  unlink(train);
  unlink(test);
  rmdir(dir);
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
