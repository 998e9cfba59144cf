/* The built-in architectures (models/zoo.h): parameter and MAC parity with torchvision, parameter
 * names and shapes equal to torchvision's state_dict, shapes agreeing with the compiler's shape
 * inference, initialisation, stochastic depth, a few training steps, and bad specs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/npy.h"
#include "../core/op.h"
#include "../core/program.h"
#include "../core/rng.h"
#include "../import/onnx.h"
#include "../kernels/cpu/cpu.h"
#include "../models/zoo.h"
#include "../train/optim_program.h"
#include "check.h"

/* At 1000 classes and 3x224x224.
 * params: torchvision's weights meta "num_params" (torchvision/models/resnet.py, mobilenetv2.py,
 *   mobilenetv3.py, efficientnet.py), which is sum(p.numel() for p in model.parameters()).
 * gmacs: the weights meta "_ops" shown as "GFLOPS" in torchvision's model docs (e.g.
 *   ResNet18_Weights.IMAGENET1K_V1: "_ops": 1.814, MobileNet_V3_Small_Weights: 0.057,
 *   EfficientNet_B0_Weights: 0.386); they are conv and linear multiply-accumulates.
 * macs: the exact count from forward hooks on torchvision 0.14.1 (Debian's python3-torchvision):
 *   each Conv2d adds out.numel() * in_channels / groups * kh * kw, each Linear in * out. */
static const struct {
  const char *spec;
  int64_t params;
  double gmacs;
  int64_t macs;
} parity[] = {
    {"resnet18", 11689512, 1.814, 1814073344},
    {"resnet50", 25557032, 4.089, 4089184256},
    {"mobilenet_v2", 3504872, 0.301, 300774272},
    {"mobilenet_v3_small", 2542856, 0.057, 56510400},
    {"mobilenet_v3_large", 5483032, 0.217, 216589760},
    {"efficientnet_b0", 5288548, 0.386, 385814752},
    /* the same hooks for the others at torchvision's crop size (_ops: 3.664, 7.801, 0.687 at
     * 240 px, 1.088 at 288 px, 1.827 at 300 px) */
    {"resnet34", 21797672, 3.664, 3663761408},
    {"resnet101", 44549160, 7.801, 7801405440},
    {"efficientnet_b1", 7794184, 0.687, 686802832},
    {"efficientnet_b2", 9109994, 1.088, 1087529456},
    {"efficientnet_b3", 12233232, 1.827, 1827141392},
};

static void test_parity(void) {
  for (size_t i = 0; i < sizeof parity / sizeof *parity; i++) {
    cx_model_info info;
    cx_status s = cx_model_describe(parity[i].spec, &info);
    CHECK(s == CX_OK, "%s: %s", parity[i].spec, cx_last_error());
    if (s != CX_OK) continue;
    double rel = fabs((double)info.macs / (parity[i].gmacs * 1e9) - 1);
    printf("%-20s params %10lld (torchvision %10lld)  MACs %11lld (torchvision %.3f G, %.2f%%)\n",
           parity[i].spec, (long long)info.params, (long long)parity[i].params,
           (long long)info.macs, parity[i].gmacs, 100 * rel);
    CHECK(info.params == parity[i].params, "%s: %lld parameters, torchvision has %lld",
          parity[i].spec, (long long)info.params, (long long)parity[i].params);
    CHECK(info.macs == parity[i].macs, "%s: %lld MACs, torchvision's hooks count %lld",
          parity[i].spec, (long long)info.macs, (long long)parity[i].macs);
    CHECK(rel < 0.01, "%s: MACs %lld are %.2f%% off the published %.3f G", parity[i].spec,
          (long long)info.macs, 100 * rel, parity[i].gmacs);
  }
}

/* A file beside this source: tests/<rel>. */
static const char *test_path(char *buf, size_t size, const char *rel) {
  const char *slash = strrchr(__FILE__, '/');
  snprintf(buf, size, "%.*s%s", slash ? (int)(slash - __FILE__ + 1) : 0, __FILE__, rel);
  return buf;
}

/* tests/models/<arch>.txt: torchvision's state_dict, "key param|state dims..." per line (written by
 * tests/models/torchvision_keys.py). Our PARAM and STATE values must be the same, in order. */
static void check_names(const char *arch) {
  char path[1024], rel[128];
  snprintf(rel, sizeof rel, "models/%s.txt", arch);
  FILE *f = fopen(test_path(path, sizeof path, rel), "r");
  CHECK(f, "cannot open %s", path);
  cx_graph *g = NULL;
  CHECK(cx_model_build_skeleton(arch, &g, NULL) == CX_OK, "%s: %s", arch, cx_last_error());
  if (!f || !g) goto done;
  char line[512];
  int v = 0, lines = 0;
  while (fgets(line, sizeof line, f)) {
    lines++;
    while (v < g->n_values && g->values[v].kind != CX_VALUE_PARAM &&
           g->values[v].kind != CX_VALUE_STATE)
      v++;
    char ours[512];
    int len = 0;
    if (v < g->n_values) {
      const cx_value *x = &g->values[v++];
      len = snprintf(ours, sizeof ours, "%s %s", x->name,
                     x->kind == CX_VALUE_PARAM ? "param" : "state");
      for (int d = 0; d < x->shape.ndim; d++)
        len += snprintf(ours + len, sizeof ours - (size_t)len, " %lld", (long long)x->shape.d[d]);
    }
    line[strcspn(line, "\n")] = 0;
    if (strcmp(line, len ? ours : "(none)") != 0) {
      CHECK(0, "%s: line %d: torchvision has '%s', we have '%s'", arch, lines, line,
            len ? ours : "(none)");
      goto done; /* one message, not one per later value */
    }
  }
  for (; v < g->n_values; v++)
    CHECK(g->values[v].kind != CX_VALUE_PARAM && g->values[v].kind != CX_VALUE_STATE,
          "%s: extra value '%s'", arch, g->values[v].name);
  printf("%s: %d state_dict entries match torchvision's\n", arch, lines);
done:
  if (f) fclose(f);
  cx_graph_free(g);
}

static void test_names(void) {
  const char *archs[] = {"resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small",
                         "mobilenet_v3_large", "efficientnet_b0"};
  for (size_t i = 0; i < sizeof archs / sizeof *archs; i++) check_names(archs[i]);
}

/* Conv and Gemm multiply-accumulates per image, from the compiled program's shapes. */
static int64_t program_macs(cx_program *p, int64_t batch) {
  const cx_graph *g = cx_program_graph(p);
  int64_t macs = 0;
  for (int i = 0; i < cx_program_forward_nodes(p); i++) {
    const cx_node *n = &g->nodes[i];
    /* the inference fusions' forms (core/ops/fused.c) count as the ops they extend */
    const char *op = n->op->name;
    bool conv = !strcmp(op, "Conv") || !strcmp(op, "ConvFused"),
         gemm = !strcmp(op, "Gemm") || !strcmp(op, "GemmFused");
    if (!conv && !gemm) continue;
    const cx_shape *y = &cx_program_value_tensor(p, n->out[0])->shape;
    const cx_shape *w = &cx_program_value_tensor(p, n->in[1])->shape; /* Gemm: transB [out, in] */
    macs += cx_shape_numel(y) * (conv ? w->d[1] * w->d[2] * w->d[3] : w->d[1]);
  }
  return macs / batch;
}

static void fill_normal(cx_tensor *t, uint64_t key) {
  float *x = t->data;
  for (int64_t i = 0; i < cx_tensor_numel(t); i++) x[i] = cx_rng_normal(key, (uint64_t)i);
}

/* Every architecture compiles; the builder's shape bookkeeping agrees with the compiler's shape
 * inference (same MACs); an inference forward (`run`: with initialised weights) gives finite
 * logits [batch, classes]. */
static void check_compiled(const char *spec, bool run) {
  cx_graph *g = NULL;
  cx_model_info info;
  cx_program *p = NULL;
  cx_status s = run ? cx_model_build(spec, &g, &info) : cx_model_build_skeleton(spec, &g, &info);
  CHECK(s == CX_OK, "%s: %s", spec, cx_last_error());
  if (!g) return;
  cx_compile_opts o = {.batch = 2, .backend = cx_backend_cpu()};
  CHECK(cx_program_compile(g, &o, &p) == CX_OK, "%s: compile: %s", spec, cx_last_error());
  if (p) {
    int64_t macs = program_macs(p, 2);
    CHECK(macs == info.macs, "%s: the builder counts %lld MACs, the compiled graph %lld", spec,
          (long long)info.macs, (long long)macs);
    cx_tensor *logits = cx_program_tensor(p, "logits");
    CHECK(logits && logits->shape.ndim == 2 && logits->shape.d[0] == 2 &&
              logits->shape.d[1] == info.classes, "%s: logits missing or misshapen", spec);
    if (run && logits) {
      fill_normal(cx_program_tensor(p, "input"), 11);
      CHECK(cx_program_forward(p) == CX_OK, "%s: forward: %s", spec, cx_last_error());
      bool finite = true;
      for (int64_t i = 0; i < cx_tensor_numel(logits); i++)
        finite = finite && isfinite(((float *)logits->data)[i]);
      CHECK(finite, "%s: logits not finite", spec);
    }
  }
  cx_program_free(p);
  cx_graph_free(g);
}

/* Every architecture at its smallest input (32 px) compiles; a few also run (the training test
 * runs the others). */
static void test_compiled(void) {
  for (const cx_model_arch *const *a = cx_model_archs(); *a; a++) {
    char spec[128];
    snprintf(spec, sizeof spec, "%s:classes=10,input=3x32x32", (*a)->name);
    check_compiled(spec, false);
  }
  check_compiled("mobilenet_v3_small", false); /* at 224 px */
  check_compiled("resnet18:classes=10,input=3x32x32", true);
  check_compiled("mobilenet_v3_large:classes=10,input=3x32x32", true);
}

static const float *init_of(const cx_graph *g, const char *name) {
  int v = cx_graph_find_value(g, name);
  return v >= 0 ? g->values[v].init : NULL;
}

/* Mean and standard deviation of a parameter, and its largest magnitude. */
static void stats(const cx_graph *g, const char *name, double *mean, double *sd, double *amax) {
  int v = cx_graph_find_value(g, name);
  const float *x = init_of(g, name);
  int64_t n = v >= 0 ? cx_shape_numel(&g->values[v].shape) : 0;
  double s = 0, s2 = 0;
  *amax = 0;
  for (int64_t i = 0; i < n; i++) {
    s += x[i];
    s2 += (double)x[i] * x[i];
    if (fabs(x[i]) > *amax) *amax = fabs(x[i]);
  }
  *mean = n ? s / (double)n : 0;
  *sd = n ? sqrt(s2 / (double)n - *mean * *mean) : 0;
}

static void check_std(const cx_graph *g, const char *name, double want) {
  double mean, sd, amax;
  stats(g, name, &mean, &sd, &amax);
  CHECK(fabs(sd / want - 1) < 0.05 && fabs(mean) < 0.05 * want,
        "%s: mean %g std %g, want N(0, %g)", name, mean, sd, want);
}

static void check_uniform(const cx_graph *g, const char *name, double bound) {
  double mean, sd, amax;
  stats(g, name, &mean, &sd, &amax);
  CHECK(amax <= bound && amax > 0.9 * bound && fabs(sd * sqrt(3.0) / bound - 1) < 0.1,
        "%s: max |x| %g std %g, want U(-%g, %g)", name, amax, sd, bound, bound);
}

static void check_bound(const cx_graph *g, const char *name, double bound) {
  double mean, sd, amax;
  stats(g, name, &mean, &sd, &amax);
  CHECK(amax <= bound && amax > 0, "%s: max |x| %g, want U(-%g, %g)", name, amax, bound, bound);
}

static void check_filled(const cx_graph *g, const char *name, float v) {
  int id = cx_graph_find_value(g, name);
  const float *x = init_of(g, name);
  bool ok = x != NULL;
  for (int64_t i = 0; ok && i < cx_shape_numel(&g->values[id].shape); i++) ok = x[i] == v;
  CHECK(ok, "%s: not all %g", name, (double)v);
}

static void check_bn_attrs(const cx_graph *g, const char *arch, float eps, float momentum) {
  int count = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const cx_node *n = &g->nodes[i];
    if (strcmp(n->op->name, "BatchNormalization") != 0) continue;
    count++;
    if (cx_node_float(n, "epsilon", 0) != eps || cx_node_float(n, "momentum", 0) != momentum) {
      CHECK(0, "%s: node %s has epsilon %g momentum %g, want %g %g", arch, n->name,
            (double)cx_node_float(n, "epsilon", 0), (double)cx_node_float(n, "momentum", 0),
            (double)eps, (double)momentum);
      return;
    }
  }
  CHECK(count > 0, "%s: no BatchNormalization", arch);
}

/* torchvision's initialisation: kaiming normal (fan_out) convs, BN ones and zeros, and the linear
 * layer of each family; seeds. */
static void test_init(void) {
  cx_graph *r = NULL, *m = NULL, *m3 = NULL, *e = NULL, *again = NULL, *other = NULL;
  cx_model_build("resnet20", &r, NULL);
  cx_model_build("mobilenet_v2:width=0.5,classes=10,input=1x28x28", &m, NULL);
  cx_model_build("mobilenet_v3_small:classes=100,input=3x32x32", &m3, NULL);
  cx_model_build("efficientnet_b0:classes=100,input=3x32x32", &e, NULL);
  cx_model_build("resnet20", &again, NULL);
  cx_model_build("resnet20:seed=1", &other, NULL);
  CHECK(r && m && m3 && e && again && other, "build: %s", cx_last_error());
  if (r && m && m3 && e && again && other) {
    check_std(r, "layer3.0.conv2.weight", sqrt(2.0 / (64 * 9)));
    check_std(m, "features.17.conv.1.0.weight", sqrt(2.0 / (480 * 9))); /* depthwise */
    check_uniform(r, "fc.weight", 1 / 8.0);
    check_bound(r, "fc.bias", 1 / 8.0);
    check_std(m, "classifier.1.weight", 0.01);
    check_filled(m, "classifier.1.bias", 0);
    check_std(m3, "classifier.3.weight", 0.01);
    check_filled(m3, "features.1.block.1.fc1.bias", 0);
    check_uniform(e, "classifier.1.weight", 1 / sqrt(100.0));
    check_filled(e, "classifier.1.bias", 0);
    check_filled(r, "layer1.0.bn1.weight", 1);
    check_filled(r, "layer1.0.bn1.bias", 0);
    check_filled(r, "layer1.0.bn1.running_mean", 0);
    check_filled(r, "layer1.0.bn1.running_var", 1);
    check_bn_attrs(r, "resnet20", 1e-5f, 0.9f);
    check_bn_attrs(m, "mobilenet_v2", 1e-5f, 0.9f);
    check_bn_attrs(m3, "mobilenet_v3_small", 1e-3f, 0.99f);
    check_bn_attrs(e, "efficientnet_b0", 1e-5f, 0.9f);
    const char *w = "layer2.1.conv1.weight";
    const float *a = init_of(r, w), *b = init_of(again, w), *c = init_of(other, w);
    CHECK(a && b && c && memcmp(a, b, 32 * 32 * 9 * sizeof(float)) == 0, "same seed, other values");
    CHECK(a && c && memcmp(a, c, 32 * 32 * 9 * sizeof(float)) != 0, "seed=1 changed nothing");
  }
  cx_graph_free(r);
  cx_graph_free(m);
  cx_graph_free(m3);
  cx_graph_free(e);
  cx_graph_free(again);
  cx_graph_free(other);
}

/* Adds labels and a cross-entropy loss to a built model and compiles it for training. */
static cx_program *training_program(const char *spec, int64_t batch, cx_graph **gp) {
  cx_graph *g = NULL;
  cx_program *p = NULL;
  CHECK(cx_model_build(spec, &g, NULL) == CX_OK, "%s: %s", spec, cx_last_error());
  if (!g) return NULL;
  cx_shape ls = {.ndim = 1, .d = {-1}};
  int labels = cx_graph_input(g, "labels", CX_S64, &ls);
  int loss = cx_graph_op(g, "SoftmaxCrossEntropyLoss", "loss",
                         (int[]){cx_graph_find_value(g, "logits"), labels}, 2);
  cx_graph_mark_output(g, loss);
  cx_compile_opts o = {.batch = batch, .training = true, .loss = "loss",
                       .backend = cx_backend_cpu(), .seed = 3};
  CHECK(cx_program_compile(g, &o, &p) == CX_OK, "%s: compile: %s", spec, cx_last_error());
  if (!p) {
    cx_graph_free(g);
    return NULL;
  }
  fill_normal(cx_program_tensor(p, "input"), 21);
  int64_t *y = cx_program_tensor(p, "labels")->data;
  for (int64_t i = 0; i < batch; i++) y[i] = i % 10;
  *gp = g;
  return p;
}

/* A few SGD steps on one random batch (dropout and stochastic depth on): the loss falls, so
 * gradients flow through every kind of layer. */
static void check_trains(const char *spec, float lr, float momentum) {
  cx_graph *g = NULL;
  cx_program *p = training_program(spec, 8, &g);
  if (!p) return;
  cx_optim_config c = cx_optim_defaults(CX_OPTIM_SGD);
  c.momentum = momentum, c.weight_decay = 0;
  cx_optimizer *opt = NULL;
  CHECK(cx_optimizer_for_program(&c, p, &opt) == CX_OK, "sgd: %s", cx_last_error());
  float loss[8] = {0};
  for (int step = 0; opt && step < 8; step++) {
    if (cx_program_forward(p) != CX_OK || cx_program_backward(p) != CX_OK ||
        cx_optimizer_step_program(opt, p, lr) != CX_OK) {
      CHECK(0, "%s: step %d: %s", spec, step, cx_last_error());
      break;
    }
    loss[step] = *(float *)cx_program_tensor(p, "loss")->data;
  }
  float tail = (loss[5] + loss[6] + loss[7]) / 3;
  printf("%s: loss %.4f -> %.4f %.4f %.4f in 8 steps\n", spec, loss[0], loss[5], loss[6], loss[7]);
  CHECK(isfinite(tail) && tail < 0.7f * loss[0], "%s: loss fell only from %g to %g (last three)",
        spec, loss[0], tail);
  cx_optimizer_free(opt);
  cx_program_free(p);
  cx_graph_free(g);
}

static void test_training(void) {
  check_trains("resnet20:classes=10,input=3x32x32", 0.05f, 0.9f);
  check_trains("mobilenet_v2:width=0.5,classes=10,input=1x28x28", 0.05f, 0.9f);
  check_trains("mobilenet_v3_small:classes=10,input=3x32x32", 0.05f, 0.9f);
  /* torchvision draws EfficientNet's classifier from U(+-1/sqrt(classes)): with 10 classes the
   * first logits are large and the gradients reach ~1e3, so it takes smaller steps (64 px keeps a
   * 2x2 last feature map, whose batch statistics are less noisy). */
  check_trains("efficientnet_b0:classes=10,input=3x64x64", 0.005f, 0);
}

static int count_nodes(const cx_graph *g, const char *suffix) {
  int n = 0;
  size_t k = strlen(suffix);
  for (int i = 0; i < g->n_nodes; i++) {
    size_t len = strlen(g->nodes[i].name);
    n += len >= k && strcmp(g->nodes[i].name + len - k, suffix) == 0;
  }
  return n;
}

/* Stochastic depth: one drop per residual MBConv after the first block (torchvision: probability
 * p * block / blocks), per image in training, nothing at inference. */
static void test_stochastic_depth(void) {
  cx_graph *g = NULL, *plain = NULL;
  cx_program *p = training_program("efficientnet_b0:classes=10,input=3x32x32,stochastic_depth=0.5",
                                   16, &g);
  if (!p) return;
  CHECK(count_nodes(g, ".stochastic_depth") == 9, "b0 has %d stochastic-depth nodes, want 9",
        count_nodes(g, ".stochastic_depth"));
  CHECK(cx_program_forward(p) == CX_OK, "forward: %s", cx_last_error());
  /* features.6.3 is block 14 of 16: p = 0.5 * 14 / 16 */
  cx_tensor *keep = cx_program_tensor(p, "features.6.3.stochastic_depth");
  float scale = 1.0f / (1.0f - 0.5f * 14 / 16);
  int zeros = 0, kept = 0;
  CHECK(keep && keep->shape.ndim == 4 && keep->shape.d[0] == 16 && cx_tensor_numel(keep) == 16,
        "the drop mask should be [16,1,1,1]");
  for (int i = 0; keep && i < 16; i++) {
    float v = ((float *)keep->data)[i];
    zeros += v == 0;
    kept += fabsf(v - scale) < 1e-6f;
  }
  CHECK(zeros + kept == 16 && zeros > 0 && kept > 0, "mask: %d zeros, %d kept of 16", zeros, kept);
  cx_program_free(p);
  cx_graph_free(g);

  /* At inference the drops and dropout are identities: same weights, same logits without them. */
  cx_model_build("efficientnet_b0:classes=10,input=3x32x32", &g, NULL);
  cx_model_build("efficientnet_b0:classes=10,input=3x32x32,stochastic_depth=0,dropout=0", &plain,
                 NULL);
  CHECK(g && plain && count_nodes(plain, ".stochastic_depth") == 0, "build");
  cx_program *a = NULL, *b = NULL;
  cx_compile_opts o = {.batch = 2, .backend = cx_backend_cpu()};
  if (g && plain && cx_program_compile(g, &o, &a) == CX_OK &&
      cx_program_compile(plain, &o, &b) == CX_OK) {
    fill_normal(cx_program_tensor(a, "input"), 5);
    fill_normal(cx_program_tensor(b, "input"), 5);
    CHECK(cx_program_forward(a) == CX_OK && cx_program_forward(b) == CX_OK, "forward");
    CHECK(memcmp(cx_program_tensor(a, "logits")->data, cx_program_tensor(b, "logits")->data,
                 20 * sizeof(float)) == 0, "stochastic depth changed inference logits");
  }
  cx_program_free(a);
  cx_program_free(b);
  cx_graph_free(g);
  cx_graph_free(plain);
}

/* Runs `g` (inference, batch 2) on the fixture's input: max |ours - torch| / max |torch|. */
static double fixture_error(const cx_graph *g, const float *x, const float *want, int64_t n) {
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = 2, .backend = cx_backend_cpu()};
  double md = INFINITY, mr = 0;
  CHECK(cx_program_compile(g, &o, &p) == CX_OK, "compile: %s", cx_last_error());
  if (p) {
    cx_tensor *in = cx_program_tensor(p, "input"), *out = cx_program_tensor(p, "logits");
    memcpy(in->data, x, cx_tensor_nbytes(in));
    CHECK(cx_program_forward(p) == CX_OK && cx_tensor_numel(out) == n, "forward: %s",
          cx_last_error());
    md = 0;
    for (int64_t i = 0; i < n; i++) {
      md = fmax(md, fabs(((float *)out->data)[i] - want[i]));
      mr = fmax(mr, fabs(want[i]));
    }
  }
  cx_program_free(p);
  return md / mr;
}

/* Equivalence with a real torchvision export: mobilenet_v2 at width 0.25, 10 classes, 32 px, BN
 * statistics randomised, exported by PyTorch with BN kept at opsets 11, 13 and 17
 * (tests/fixtures/torch, made by tests/fixtures/make_torch_fixtures.py). Its weights load by name
 * into the built-in graph of the same spec, which then gives PyTorch's logits within 1e-4. A
 * BN-folded export does not load, and says why. */
static void test_torchvision_onnx(void) {
  const char *spec = "mobilenet_v2:width=0.25,classes=10,input=3x32x32,small_input=0";
  char path[1024];
  cx_dtype dt;
  cx_shape xs, ys;
  void *x = NULL, *y = NULL;
  CHECK(cx_npy_read(test_path(path, sizeof path, "fixtures/torch/mobilenet_v2_input.npy"), &dt,
                    &xs, &x) == CX_OK &&
            cx_npy_read(test_path(path, sizeof path, "fixtures/torch/mobilenet_v2_output.npy"),
                        &dt, &ys, &y) == CX_OK, "fixtures: %s", cx_last_error());
  const char *files[] = {"op11_bnkept", "op13_bnkept", "op17_bnkept", "op13_bnfolded"};
  for (int i = 0; x && y && i < 4; i++) {
    char rel[128];
    snprintf(rel, sizeof rel, "fixtures/torch/mobilenet_v2_%s.onnx", files[i]);
    cx_graph *onnx = NULL, *ours = NULL;
    CHECK(cx_onnx_import(test_path(path, sizeof path, rel), &onnx, NULL) == CX_OK &&
              cx_model_build_skeleton(spec, &ours, NULL) == CX_OK, "%s: %s", rel, cx_last_error());
    if (onnx && ours && i == 3) {
      CHECK(cx_model_load(ours, onnx) == CX_ERR_ARG &&
                strstr(cx_last_error(), "is not in the source") &&
                strstr(cx_last_error(), "BN kept"), "folded export loaded: %s", cx_last_error());
    } else if (onnx && ours) {
      CHECK(cx_model_load(ours, onnx) == CX_OK, "%s: %s", rel, cx_last_error());
      double err = fixture_error(ours, x, y, cx_shape_numel(&ys));
      printf("%s into %s: relative error %.2e\n", rel, spec, err);
      CHECK(err <= 1e-4, "%s: relative error %g", rel, err);
    }
    cx_graph_free(onnx);
    cx_graph_free(ours);
  }
  free(x);
  free(y);
}

/* Each bad spec fails with CX_ERR_ARG, returns no graph, and its message names what is valid. */
static void test_bad_specs(void) {
  static const struct {
    const char *spec, *want[3];
  } bad[] = {
      {"vgg16", {"unknown architecture 'vgg16'", "mobilenet_v3_small", "efficientnet_b3"}},
      {"", {"unknown architecture", "resnet20", "resnet:depth=N"}},
      {"resnet18:widht=2", {"unknown key 'widht'", "classes, input, seed"}},
      {"resnet18:width=2", {"unknown key 'width' for resnet18", "classes, input, seed"}},
      {"efficientnet_b0:width=2", {"unknown key 'width'", "stochastic_depth"}},
      {"mobilenet_v2:width=0", {"width='0'", "(0, 4]"}},
      {"mobilenet_v2:width=-0.5", {"width='-0.5'", "(0, 4]"}},
      {"mobilenet_v3_large:width=wide", {"width='wide'", "(0, 4]"}},
      {"resnet18:input=3x16x16", {"total stride 32", "at least 32x32", "resnet20"}},
      {"mobilenet_v2:input=3x28x28,small_input=0", {"total stride 32", "small_input=1"}},
      {"mobilenet_v2:input=3x12x12", {"total stride 16", "at least 16x16"}},
      {"efficientnet_b0:input=3x224x31", {"31", "total stride 32"}},
      {"resnet56:input=3x3x3", {"total stride 4", "at least 4x4"}},
      {"resnet:depth=19", {"depth=19", "20, 32, 44, 56, 110", "18, 34, 50, 101"}},
      {"resnet", {"needs depth=N"}},
      {"resnet:depth=50,width=2", {"unknown key 'width'", "depth, classes, input, seed"}},
      {"resnet20:input=3x32", {"input='3x32'", "CxHxW"}},
      {"resnet20:classes=0", {"classes='0'", "[1, 1000000]"}},
      {"resnet20:classes=10,classes=10", {"'classes' is given twice"}},
      {"resnet20:classes", {"'classes' is not key=value", "classes, input, seed"}},
      {"mobilenet_v2:small_input=maybe", {"small_input='maybe'", "true/false"}},
      {"efficientnet_b0:dropout=1", {"dropout='1'", "[0, 1)"}},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    cx_graph *g = (cx_graph *)&fails; /* must come back NULL */
    cx_status s = cx_model_build(bad[i].spec, &g, NULL);
    const char *msg = cx_last_error();
    CHECK(s == CX_ERR_ARG && g == NULL, "'%s' was accepted", bad[i].spec);
    for (int k = 0; k < 3 && bad[i].want[k]; k++)
      CHECK(strstr(msg, bad[i].want[k]), "'%s': message lacks \"%s\": %s", bad[i].spec,
            bad[i].want[k], msg);
    if (s == CX_OK && g) cx_graph_free(g);
  }
  /* and the good forms */
  cx_model_info info;
  CHECK(cx_model_describe("resnet:depth=56", &info) == CX_OK &&
            strcmp(info.arch, "resnet56") == 0 && info.params == 855770,
        "resnet:depth=56: %s", cx_last_error());
  CHECK(cx_model_describe("mobilenet_v2:width=0.5,classes=10,input=1x28x28", &info) == CX_OK &&
            info.stride == 16 && info.channels == 1 && info.classes == 10,
        "small input: %s", cx_last_error());
  CHECK(cx_model_describe("mobilenet_v2:input=3x32x32,small_input=no", &info) == CX_OK &&
            info.stride == 32, "small_input=no: %s", cx_last_error());
}

int main(void) {
  test_parity();
  test_names();
  test_compiled();
  test_init();
  test_training();
  test_stochastic_depth();
  test_bad_specs();
  test_torchvision_onnx();
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
