/* Training-program fusions (core/fuse.c): BatchNormTrain followed by Relu or by Clip with
 * constant bounds runs as one BatchNormTrain that clamps, with a BatchNormGrad that masks.
 *
 * 1. Where it applies and where it must not: the compiled program's nodes are counted (no
 *    activation node left; the activation's value, and its name, kept), and a BN output read
 *    twice, a BN output that is a graph output, a Clip whose bounds are not constants, an
 *    inference program and CX_FUSE=off all keep the activation.
 * 2. The fused kernels in plain layout through the op harness (forward against the double
 *    reference, gradients of X, scale and B against finite differences), in the AVX-512 and the
 *    portable loops. The channels-last kernels are checked by test_layout.
 * 3. ResNet-20 and MobileNetV2 (width 0.5): a training step with the fusion and without it
 *    (CX_FUSE=off) gives the same loss and gradients. MobileNetV2 without its dropout: a random
 *    op's stream is keyed by its node's index, which the fusion shifts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "../core/program.h"
#include "../kernels/cpu/cpu.h"
#include "../kernels/cpu/eltwise_engine.h"
#include "check.h"
#include "model_compare.h"
#include "op_check.h"

/* X -> BatchNormalization -> act (Relu, or Clip [lo, hi] with bounds of `bound_kind`) -> output */
static cx_graph *bn_act_graph(const char *act, float lo, float hi, cx_value_kind bound_kind) {
  cx_graph *g = cx_graph_new();
  int in[5] = {oc_param(g, "X", &S(2, 3, 5, 7), -2, 2, 1),
               oc_param(g, "scale", &S(3), 0.5f, 1.5f, 2),
               oc_param(g, "B", &S(3), -0.5f, 0.5f, 3), -1, -1};
  in[3] = cx_graph_init(g, CX_VALUE_STATE, "mean", CX_F32, &S(3), NULL);
  in[4] = cx_graph_init(g, CX_VALUE_STATE, "var", CX_F32, &S(3), (float[]){1, 1, 1});
  int y = cx_graph_op(g, "BatchNormalization", "bn", in, 5);
  if (!strcmp(act, "Clip")) {
    int l = cx_graph_init(g, bound_kind, "lo", CX_F32, &(cx_shape){0}, &lo);
    int h = cx_graph_init(g, bound_kind, "hi", CX_F32, &(cx_shape){0}, &hi);
    cx_graph_mark_output(g, cx_graph_op(g, "Clip", "act", (int[]){y, l, h}, 3));
  } else {
    cx_graph_mark_output(g, cx_graph_op(g, act, "act", &y, 1));
  }
  return g;
}

/* Compiles g (training or not) and counts its nodes of op `op`; -1 when it does not compile. */
static int count_op(const cx_graph *g, bool train, const char *op, bool *has_act_value) {
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = 1, .training = train, .backend = cx_backend_cpu()};
  if (cx_program_compile(g, &o, &p) != CX_OK) {
    printf("FAIL compile: %s\n", cx_last_error());
    return -1;
  }
  const cx_graph *pg = cx_program_graph(p);
  int n = 0;
  for (int i = 0; i < pg->n_nodes; i++) n += !strcmp(pg->nodes[i].op->name, op);
  if (has_act_value) *has_act_value = cx_program_tensor(p, "act") != NULL;
  cx_program_free(p);
  return n;
}

static void where_cases(void) {
  bool kept = false;
  cx_graph *g = bn_act_graph("Relu", 0, 0, CX_VALUE_CONST);
  CHECK(count_op(g, true, "Relu", &kept) == 0 && kept, "BN + Relu: not fused, or 'act' lost");
  CHECK(count_op(g, true, "ActivationGrad", NULL) == 0, "BN + Relu: ActivationGrad remains");
  CHECK(count_op(g, false, "Relu", NULL) == 1, "inference must keep Relu");
  setenv("CX_FUSE", "off", 1);
  CHECK(count_op(g, true, "Relu", NULL) == 1, "CX_FUSE=off must keep Relu");
  unsetenv("CX_FUSE");
  /* the BN output is also a graph output: it must stay stored */
  cx_graph_mark_output(g, cx_graph_find_value(g, "bn"));
  CHECK(count_op(g, true, "Relu", NULL) == 1, "a BN output that is a graph output was fused");
  cx_graph_free(g);
  g = bn_act_graph("Relu", 0, 0, CX_VALUE_CONST);
  int bn = cx_graph_find_value(g, "bn");
  cx_graph_mark_output(g, cx_graph_op(g, "Neg", "other", &bn, 1));
  CHECK(count_op(g, true, "Relu", NULL) == 1, "a BN output read twice was fused");
  cx_graph_free(g);
  g = bn_act_graph("Clip", 0, 6, CX_VALUE_CONST);
  CHECK(count_op(g, true, "Clip", &kept) == 0 && kept, "BN + Clip(0, 6): not fused");
  cx_graph_free(g);
  g = bn_act_graph("Clip", 0, 6, CX_VALUE_STATE);
  CHECK(count_op(g, true, "Clip", NULL) == 1, "a Clip with bounds that may change was fused");
  cx_graph_free(g);
  g = bn_act_graph("Sigmoid", 0, 0, CX_VALUE_CONST);
  CHECK(count_op(g, true, "Sigmoid", NULL) == 1, "Sigmoid is not a clamp");
  cx_graph_free(g);
}

static void kernel_cases(const char *how) {
  struct {
    const char *act;
    float lo, hi;
  } cases[] = {{"Relu", 0, 0}, {"Clip", 0, 6}, {"Clip", -0.3f, 0.4f}};
  for (int k = 0; k < 3; k++) {
    char label[96];
    snprintf(label, sizeof label, "bn + %s [%g, %g] fused, plain, %s", cases[k].act, cases[k].lo,
             cases[k].hi, how);
    cx_graph *g = bn_act_graph(cases[k].act, cases[k].lo, cases[k].hi, CX_VALUE_CONST);
    fails += oc_check(label, g, &(oc_opts){.grad = true, .seed = 7});
    cx_graph_free(g);
  }
}

static void model_case(const char *spec) {
  cx_program *on = mc_run(spec, true, NULL, NULL, 4);
  cx_program *off = mc_run(spec, true, "CX_FUSE", "off", 4);
  CHECK(on && off, "%s: training programs", spec);
  if (on && off) {
    printf("%s: %d nodes with the fusion, %d without\n", spec, cx_program_graph(on)->n_nodes,
           cx_program_graph(off)->n_nodes);
    CHECK(cx_program_graph(on)->n_nodes < cx_program_graph(off)->n_nodes, "%s: nothing fused",
          spec);
    fails += mc_compare_training(spec, on, off, 1e-5);
  }
  cx_program_free(on);
  cx_program_free(off);
}

int main(void) {
  where_cases();
  kernel_cases("AVX-512 where present");
  cx_cpu_force_portable(true);
  kernel_cases("portable");
  cx_cpu_force_portable(false);
  model_case("resnet20:classes=10,input=1x28x28");
  model_case("mobilenet_v2:width=0.5,classes=10,input=1x28x28,dropout=0");
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
