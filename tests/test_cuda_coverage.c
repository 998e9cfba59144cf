/* Every op that the built-in models train with has a CUDA kernel (docs/cuda.md). Asked of the
 * CUDA backend's kernel table, which answers without a GPU: the training programs of each
 * model family (compiled on the CPU: forward, backward, label smoothing and mixup losses), the
 * same with FakeQuantize inserted as quantization-aware training does (LSQ scales), and the ops
 * the trainer adds beside them (optimizers, EMA, clipping, the finite check, distillation's
 * loss) and the INT8 runtime's unfused form (QuantizeLinear, DequantizeLinear: what a QDQ model
 * runs as where the backend has no fused INT8 kernels). Prints every op it is missing and fails
 * if one is. */
#include <stdio.h>
#include <string.h>

#include "../core/op.h"
#include "../core/program.h"
#include "../kernels/cpu/cpu.h"
#include "../kernels/cuda/cuda_backend.h"
#include "../models/zoo.h"
#include "../quantize/quantize.h"
#include "../train/train_graph.h"

#ifdef CX_HAVE_CUDA
#include "check.h"

static const char *const models[] = {
    "resnet20:classes=10,input=1x28x28",
    "resnet50:classes=10,input=3x32x32",
    "mobilenet_v2:width=0.5,classes=10,input=1x28x28,dropout=0.2",
    "mobilenet_v3_small:classes=10,input=3x32x32",
    "efficientnet_b0:classes=10,input=3x32x32",
};

/* The trainer's own ops (train/optim.c, ema.c, grad_clip.c) and distillation's loss. */
static const char *const trainer_ops[] = {
    "SGDUpdate", "AdamWUpdate", "LAMBUpdate", "EMAUpdate", "SquaredNorm", "AllFinite",
    "KLDivTemperature", "KLDivTemperatureGrad", "Mul", "Sum", "QuantizeLinear",
    "DequantizeLinear",
};

static int missing;
static const char *reported[256];
static int n_reported;

/* Each missing op is named once, with the first node met. */
static void need(const cx_node *n, const char *where) {
  const cx_backend *cuda = cx_backend_cuda();
  if (cuda->find_kernel(cuda, n, NULL, n->n_in)) return;
  missing++;
  for (int k = 0; k < n_reported; k++)
    if (!strcmp(reported[k], n->op->name)) return;
  if (n_reported < 256) reported[n_reported++] = n->op->name;
  printf("  no CUDA kernel: %s (%s, node '%s')\n", n->op->name, where, n->name ? n->name : "");
}

/* The model with BatchNorm folded and FakeQuantize inserted, scales trained (LSQ). */
static cx_status qat_model(const char *spec, cx_graph **out) {
  cx_graph *m = NULL;
  cx_quant_plan plan = {0};
  cx_quant_config c = cx_quant_defaults();
  cx_status s = cx_model_build(spec, &m, NULL);
  if (s == CX_OK) s = cx_quant_fold_bn(m, out, NULL);
  if (s == CX_OK) s = cx_quant_plan_make(*out, &c, spec, &plan);
  if (s == CX_OK) s = cx_quant_insert(*out, &plan, CX_VALUE_PARAM);
  cx_quant_plan_free(&plan);
  cx_graph_free(m);
  return s;
}

static void check_model(const char *spec, float smoothing, int64_t soft, bool qat) {
  cx_graph *m = NULL, *g = NULL;
  cx_program *p = NULL;
  CHECK((qat ? qat_model(spec, &m) : cx_model_build(spec, &m, NULL)) == CX_OK, "%s: %s", spec,
        cx_last_error());
  CHECK(m && cx_train_graph(m, smoothing, soft, &g) == CX_OK, "%s: %s", spec, cx_last_error());
  cx_compile_opts co = {.batch = 2, .training = true, .loss = "loss",
                        .backend = cx_backend_cpu()};
  CHECK(g && cx_program_compile(g, &co, &p) == CX_OK, "%s: %s", spec, cx_last_error());
  if (p) {
    const cx_graph *c = cx_program_graph(p);
    int before = missing;
    for (int i = 0; i < c->n_nodes; i++) need(&c->nodes[i], spec);
    printf("%s %s%s (%d nodes)\n", missing == before ? "ok  " : "FAIL", spec,
           qat ? ", quantization-aware" : "", c->n_nodes);
  }
  cx_program_free(p);
  cx_graph_free(g);
  cx_graph_free(m);
}

int main(void) {
  for (size_t k = 0; k < sizeof models / sizeof *models; k++) check_model(models[k], 0, 0, false);
  check_model(models[0], 0.1f, 0, false);
  check_model(models[0], 0, 10, false);
  check_model(models[0], 0, 0, true);
  check_model(models[2], 0, 0, true);
  for (size_t k = 0; k < sizeof trainer_ops / sizeof *trainer_ops; k++) {
    const cx_op_def *d = cx_op_find(trainer_ops[k]);
    CHECK(d != NULL, "no op %s", trainer_ops[k]);
    if (d) need(&(cx_node){.op = d, .name = (char *)"(trainer)"}, "the trainer");
  }
  CHECK(missing == 0, "%d op(s) the built-in models train with have no CUDA kernel (%d nodes)",
        n_reported, missing);
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
#else
int main(void) {
  printf("skipped: this build has no CUDA backend\n");
  return 77;
}
#endif
