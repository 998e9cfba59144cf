/* Structured channel pruning (prune/channel.h).
 *
 * The equivalence test: a pruned channel's producing filters and biases, and its BatchNorms'
 * gamma and beta, are zeroed in a copy of the original graph (the masked reference, made here
 * from the analysis's units and nothing of the rewrite). Those channels are then exactly 0
 * everywhere (every activation of these models maps 0 to 0, and an SE gate multiplies a zero
 * channel), so the masked graph and the rewritten one compute the same function, up to the
 * order of float sums. Both run on our engine; they must agree to 1e-4 relative.
 *
 *   test_prune_channel          zoo models, hand-built graphs (Concat, grouped and depthwise
 *                               convs, an op the analysis does not know, SE), scopes, round_to
 *   test_prune_channel torch    PyTorch-exported torchvision models and a Concat + grouped-conv
 *                               graph: imported, pruned at 0.3, exported; onnx.checker and ONNX
 *                               Runtime (tests/ort_check.py) agree with our engine */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/graph_cost.h"
#include "../core/npy.h"
#include "../core/op.h"
#include "../core/program.h"
#include "../core/rng.h"
#include "../export/onnx_export.h"
#include "../import/onnx.h"
#include "../kernels/cpu/cpu.h"
#include "../models/zoo.h"
#include "../prune/channel.h"
#include "../train/train_graph.h"
#include "check.h"
#include "op_check.h"

#ifndef CX_ORT_CHECK
#define CX_ORT_CHECK "tests/ort_check.py"
#endif
#ifndef CX_TORCH_MODELS
#define CX_TORCH_MODELS "tests/torch_models.py"
#endif
#define PYTHON CX_PYTHON /* the tests' Python (tests/CMakeLists.txt) */
#define BATCH 2
#define TOL 1e-4

static cx_prune_config config(double sparsity) {
  return (cx_prune_config){.method = CX_PRUNE_CHANNEL,
                           .sparsity = sparsity,
                           .scope = CX_PRUNE_GLOBAL,
                           .importance = CX_IMPORTANCE_L1};
}

/* ---- running ---- */

static float *input_of(const cx_graph *g, int64_t *n) {
  int in = -1;
  for (int v = 0; v < g->n_values && in < 0; v++)
    if (g->values[v].kind == CX_VALUE_INPUT) in = v;
  cx_shape s = g->values[in].shape;
  s.d[0] = BATCH;
  *n = cx_shape_numel(&s);
  float *x = malloc((size_t)*n * sizeof *x);
  for (int64_t i = 0; i < *n; i++) x[i] = cx_rng_normal(cx_rng_key(7, 1, 0), (uint64_t)i);
  return x;
}

/* The first output for BATCH inputs of a fixed normal pattern; NULL after a failure. */
static float *run(const cx_graph *g, int64_t *n_out) {
  cx_program *p = NULL;
  cx_compile_opts co = {.batch = BATCH, .backend = cx_backend_cpu()};
  cx_status s = cx_program_compile(g, &co, &p);
  CHECK(s == CX_OK, "compile: %s", cx_last_error());
  if (s != CX_OK) return NULL;
  int64_t n;
  float *x = input_of(g, &n);
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].kind == CX_VALUE_INPUT)
      memcpy(cx_program_tensor(p, g->values[v].name)->data, x, (size_t)n * sizeof *x);
  free(x);
  float *y = NULL;
  s = cx_program_forward(p);
  CHECK(s == CX_OK, "forward: %s", cx_last_error());
  if (s == CX_OK) {
    cx_tensor *t = cx_program_tensor(p, g->values[g->outputs[0]].name);
    *n_out = cx_shape_numel(&t->shape);
    y = malloc(cx_tensor_nbytes(t));
    memcpy(y, t->data, cx_tensor_nbytes(t));
  }
  cx_program_free(p);
  return y;
}

static double rel_diff(const float *a, const float *ref, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - ref[i]);
    if (!(d <= diff)) diff = d;
    if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
  }
  return diff / (scale > 0 ? scale : 1e-30);
}

/* ---- the masked reference ---- */

static void zero_rows(cx_value *w, int64_t c, bool rows, int64_t cout) {
  float *d = w->init;
  int64_t size = cx_shape_numel(&w->shape), len = size / cout;
  for (int64_t j = 0; j < len; j++) d[rows ? c * len + j : j * cout + c] = 0;
}

/* The original with every removed channel's filters, biases and BN gamma/beta zeroed. */
static cx_graph *masked(const cx_channel_groups *cg, const bool *keep) {
  cx_graph *m = cx_graph_clone(cg->g);
  for (int i = 0; i < m->n_nodes; i++) {
    const cx_node *n = &m->nodes[i];
    const char *op = n->op->name;
    bool conv = !strcmp(op, "Conv"), bn = !strcmp(op, "BatchNormalization");
    if (!conv && !bn && strcmp(op, "Gemm") && strcmp(op, "MatMul")) continue;
    int v = bn ? n->in[0] : n->out[0];
    for (int64_t c = 0; c < cg->channels[v]; c++) {
      if (keep[cx_channel_unit(cg, v, c)]) continue;
      if (bn) {
        ((float *)m->values[n->in[1]].init)[c] = 0;
        ((float *)m->values[n->in[2]].init)[c] = 0;
        continue;
      }
      zero_rows(&m->values[n->in[1]], c, conv || cx_node_int(n, "transB", 0), cg->channels[v]);
      int b = n->n_in > 2 ? n->in[2] : -1;
      if (b >= 0 && cx_shape_numel(&m->values[b].shape) == cg->channels[v])
        ((float *)m->values[b].init)[c] = 0;
    }
  }
  return m;
}

/* Prunes g with c and checks the result: MACs at most max_frac of the original and equal to
 * the chooser's own count, the graph validates, runs, and equals the masked reference. Returns
 * the pruned graph. */
static cx_graph *check_pruned_with(const char *label, const cx_graph *g, const cx_prune_config *c,
                                   const cx_prune_scores *taylor, double max_frac, FILE *log) {
  cx_channel_groups *cg = NULL;
  cx_status s = cx_channel_groups_build(g, log, &cg);
  CHECK(s == CX_OK, "%s: analysis: %s", label, cx_last_error());
  if (s != CX_OK) return NULL;
  double *score = calloc((size_t)cg->n_units + 1, sizeof *score);
  bool *keep = calloc((size_t)cg->n_units + 1, sizeof *keep);
  cx_graph *out = NULL, *ref = NULL;
  s = cx_channel_select(cg, c, log);
  if (s == CX_OK) s = cx_channel_importance(cg, c->importance, taylor, log, score);
  if (s == CX_OK) s = cx_channel_choose(cg, c, score, keep);
  if (s == CX_OK) s = cx_channel_rewrite(cg, keep, &out);
  CHECK(s == CX_OK, "%s: %s", label, cx_last_error());
  cx_graph_cost before, after;
  if (s == CX_OK && cx_graph_measure_cost(g, &before) == CX_OK &&
      cx_graph_measure_cost(out, &after) == CX_OK) {
    double frac = (double)after.macs / (double)before.macs;
    CHECK(frac <= max_frac, "%s: %.1f%% of the MACs left, expected at most %.0f%%", label,
          100 * frac, 100 * max_frac);
    CHECK(after.macs == cx_channel_macs(cg, keep),
          "%s: the rewritten graph has %lld MACs, the "
          "chooser counted %lld",
          label, (long long)after.macs, (long long)cx_channel_macs(cg, keep));
    CHECK(cx_graph_validate(out) == CX_OK, "%s: %s", label, cx_last_error());
    ref = masked(cg, keep);
    int64_t n1 = 0, n2 = 0;
    float *y = run(out, &n1), *r = run(ref, &n2);
    if (y && r && n1 == n2) {
      double d = rel_diff(y, r, n1);
      CHECK(d <= TOL, "%s: pruned and masked outputs differ by %.3g relative", label, d);
      int frozen = 0;
      for (int k = 0; k < cg->n_groups; k++) frozen += cg->groups[k].frozen;
      printf(
          "ok   %s: %d groups (%d frozen), MACs %lld -> %lld (%.1f%%), params %lld -> %lld, "
          "masked reference within %.1e\n",
          label, cg->n_groups, frozen, (long long)before.macs, (long long)after.macs, 100 * frac,
          (long long)before.params, (long long)after.params, d);
    } else {
      CHECK(false, "%s: outputs %lld and %lld values", label, (long long)n1, (long long)n2);
    }
    free(y), free(r);
  }
  cx_graph_free(ref);
  free(score), free(keep);
  cx_channel_groups_free(cg);
  return out;
}

static cx_graph *check_pruned(const char *label, const cx_graph *g, const cx_prune_config *c,
                              double max_frac, FILE *log) {
  return check_pruned_with(label, g, c, NULL, max_frac, log);
}

/* ---- zoo models ---- */

static void test_zoo(void) {
  const char *specs[] = {
      "resnet20", "resnet18:classes=10,input=3x32x32", "mobilenet_v2:classes=10,input=3x32x32",
      "mobilenet_v3_small:classes=10,input=3x64x64", "efficientnet_b0:classes=10,input=3x32x32"};
  for (size_t k = 0; k < sizeof specs / sizeof *specs; k++) {
    cx_graph *g = NULL;
    cx_status s = cx_model_build(specs[k], &g, NULL);
    CHECK(s == CX_OK, "%s: %s", specs[k], cx_last_error());
    if (s != CX_OK) continue;
    cx_prune_config c = config(0.3);
    cx_graph_free(check_pruned(specs[k], g, &c, 0.75, NULL));
    cx_graph_free(g);
  }
}

/* Layer scope, BN importance and round_to on MobileNetV2: every pruned group keeps a multiple
 * of 8 channels. */
static void test_options(void) {
  cx_graph *g = NULL;
  CHECK(cx_model_build("mobilenet_v2:classes=10,input=3x32x32", &g, NULL) == CX_OK, "%s",
        cx_last_error());
  cx_prune_config c = config(0.4);
  c.scope = CX_PRUNE_LAYER, c.importance = CX_IMPORTANCE_BN, c.round_to = 8;
  cx_graph *out = check_pruned("mobilenet_v2 layer/bn/round 8", g, &c, 0.6, NULL);
  cx_channel_groups *a = NULL, *b = NULL;
  if (out && cx_channel_groups_build(g, NULL, &a) == CX_OK &&
      cx_channel_groups_build(out, NULL, &b) == CX_OK) {
    /* the Conv outputs of the original whose count changed now hold a multiple of 8 */
    int changed = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      if (strcmp(g->nodes[i].op->name, "Conv")) continue;
      int64_t before = a->channels[g->nodes[i].out[0]], after = b->channels[out->nodes[i].out[0]];
      if (after == before) continue;
      changed++;
      CHECK(after % 8 == 0, "%s: %lld channels left of %lld, not a multiple of 8", g->nodes[i].name,
            (long long)after, (long long)before);
    }
    CHECK(changed > 10, "only %d convolutions were pruned", changed);
  }
  cx_channel_groups_free(a), cx_channel_groups_free(b);
  cx_graph_free(out);
  /* a target that the frozen rest cannot meet is an error naming what is reachable */
  c = config(0.99);
  cx_graph *none = NULL;
  cx_status s = cx_prune_channels(g, &c, NULL, NULL, &none, NULL);
  CHECK(s != CX_OK && !none && strstr(cx_last_error(), "cannot be reached"), "sparsity 0.99: %s",
        s == CX_OK ? "accepted" : cx_last_error());
  cx_error_clear();
  /* the shared selection's errors are channel pruning's: a glob that matches no node */
  static const char *const nothing[] = {"no_such_layer*"};
  c = config(0.3);
  c.include = nothing, c.n_include = 1;
  s = cx_prune_channels(g, &c, NULL, NULL, &none, NULL);
  CHECK(s != CX_OK && !none && strstr(cx_last_error(), "no_such_layer"), "unmatched glob: %s",
        s == CX_OK ? "accepted" : cx_last_error());
  cx_error_clear();
  cx_graph_free(g);
}

/* ---- hand-built graphs ---- */

static int conv(cx_graph *g, const char *name, int x, int64_t cin, int64_t cout, int64_t group,
                uint64_t seed) {
  char w[64], b[64];
  snprintf(w, sizeof w, "%s.weight", name);
  snprintf(b, sizeof b, "%s.bias", name);
  int wv = oc_param(g, w, &S(cout, cin / group, 3, 3), -0.5f, 0.5f, seed);
  int bv = oc_param(g, b, &S(cout), -0.2f, 0.2f, seed + 1);
  int node = cx_graph_node(g, "Conv", name, (int[]){x, wv, bv}, 3, 1);
  cx_node_set_ints(g, node, "kernel_shape", (int64_t[]){3, 3}, 2);
  cx_node_set_ints(g, node, "pads", (int64_t[]){1, 1, 1, 1}, 4);
  if (group > 1) cx_node_set_int(g, node, "group", group);
  char relu[64];
  snprintf(relu, sizeof relu, "%s.relu", name);
  return cx_graph_op(g, "Relu", relu, &(int){cx_node_output(g, node, 0)}, 1);
}

/* stem -> (a | b) Concat -> grouped conv (+ residual) -> depthwise x2 -> pointwise -> SE ->
 * Reshape to [N, 24·64] -> Gemm. With `unknown`, a Transpose on branch b, which freezes it. */
static cx_graph *small_graph(bool unknown) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "input", CX_F32, &S(-1, 3, 8, 8));
  int s = conv(g, "stem", x, 3, 16, 1, 10);
  int a = conv(g, "a", s, 16, 12, 1, 20), b = conv(g, "b", s, 16, 20, 1, 30);
  if (unknown) {
    int t = cx_graph_node(g, "Transpose", "odd", &b, 1, 1);
    cx_node_set_ints(g, t, "perm", (int64_t[]){0, 1, 3, 2}, 4);
    b = cx_node_output(g, t, 0);
  }
  int cat = cx_graph_node(g, "Concat", "cat", (int[]){a, b}, 2, 1);
  cx_node_set_int(g, cat, "axis", 1);
  int c = cx_node_output(g, cat, 0);
  int gc = conv(g, "grouped", c, 32, 32, 4, 40);
  int r = cx_graph_op(g, "Add", "res", (int[]){gc, c}, 2);
  int dw = conv(g, "dw", r, 32, 64, 32, 50);
  int pw = conv(g, "pw", dw, 64, 24, 1, 60);
  /* squeeze-and-excitation on pw */
  int p = cx_graph_op(g, "GlobalAveragePool", "se.pool", &pw, 1);
  int f1 = conv(g, "se.fc1", p, 24, 6, 1, 70);
  int f2w = oc_param(g, "se.fc2.weight", &S(24, 6, 1, 1), -0.5f, 0.5f, 80);
  int f2 = cx_graph_node(g, "Conv", "se.fc2", (int[]){f1, f2w}, 2, 1);
  cx_node_set_ints(g, f2, "kernel_shape", (int64_t[]){1, 1}, 2);
  int gate = cx_graph_op(g, "HardSigmoid", "se.gate", &(int){cx_node_output(g, f2, 0)}, 1);
  int se = cx_graph_op(g, "Mul", "se.scale", (int[]){pw, gate}, 2);
  /* a Reshape as the flatten: its target's 24·64 columns follow the kept channels */
  int target = cx_graph_const_s64(g, "flat.shape", 2, (int64_t[]){-1, 24 * 64});
  int fl = cx_graph_node(g, "Reshape", "flat", (int[]){se, target}, 2, 1);
  int fw = oc_param(g, "fc.weight", &S(5, 24 * 64), -0.1f, 0.1f, 90);
  int fb = oc_param(g, "fc.bias", &S(5), -0.1f, 0.1f, 91);
  int gm = cx_graph_node(g, "Gemm", "fc", (int[]){cx_node_output(g, fl, 0), fw, fb}, 3, 1);
  cx_node_set_int(g, gm, "transB", 1);
  cx_graph_mark_output(g, cx_node_output(g, gm, 0));
  return g;
}

static int64_t conv_out(const cx_graph *g, const char *name, const char *attr) {
  for (int i = 0; i < g->n_nodes; i++)
    if (!strcmp(g->nodes[i].name, name))
      return attr ? cx_node_int(&g->nodes[i], attr, 1) : g->values[g->nodes[i].in[1]].shape.d[0];
  return -1;
}

static void test_small(void) {
  cx_graph *g = small_graph(false);
  cx_channel_groups *cg = NULL;
  CHECK(cx_channel_groups_build(g, NULL, &cg) == CX_OK, "%s", cx_last_error());
  if (cg) {
    /* the grouped conv ties each of its 4 groups of 8 (across the Concat of a and b, the
     * residual, and the depthwise conv's 16 outputs) into one unit */
    int gc = cx_graph_find_value(g, "grouped");
    int u0 = cx_channel_unit(cg, gc, 0);
    CHECK(u0 == cx_channel_unit(cg, gc, 7) && u0 != cx_channel_unit(cg, gc, 8),
          "grouped conv channels 0..7 are not one unit apart from 8");
    CHECK(cx_channel_unit(cg, cx_graph_find_value(g, "b"), 0) ==
              cx_channel_unit(cg, cx_graph_find_value(g, "cat"), 12),
          "Concat: b's channel 0 is not the Concat's channel 12");
    CHECK(cx_channel_unit(cg, cx_graph_find_value(g, "dw"), 15) == u0,
          "depthwise (multiplier 2): output 15 is not with input 7");
    /* SE: fc2's outputs are pw's channels; fc1's are a group of their own */
    int pw = cx_graph_find_value(g, "pw"), f2 = cx_graph_find_value(g, "se.fc2");
    CHECK(cx_channel_unit(cg, pw, 5) == cx_channel_unit(cg, f2, 5), "SE scale not tied to pw");
    int f1 = cx_graph_find_value(g, "se.fc1");
    CHECK(!cg->groups[cg->unit_group[cx_channel_unit(cg, f1, 0)]].frozen &&
              cg->unit_group[cx_channel_unit(cg, f1, 0)] !=
                  cg->unit_group[cx_channel_unit(cg, pw, 0)],
          "SE inner channels are not a prunable group of their own");
    CHECK(cg->n_frozen_nodes == 0, "%d nodes frozen", cg->n_frozen_nodes);
  }
  cx_channel_groups_free(cg);
  cx_prune_config c = config(0.3);
  cx_graph_free(check_pruned("concat/grouped/depthwise/SE", g, &c, 0.75, NULL));
  /* only the grouped chain may go: whole groups leave the grouped and the depthwise conv */
  static const char *const chain[] = {"a", "b", "grouped", "dw"};
  c = config(0.1);
  c.include = chain, c.n_include = 4;
  cx_graph *out = check_pruned("grouped chain only", g, &c, 0.9, NULL);
  if (out) {
    int64_t groups = conv_out(out, "grouped", "group"), dw = conv_out(out, "dw", "group");
    CHECK(groups < 4 && groups >= 1 && conv_out(out, "grouped", NULL) == 8 * groups &&
              dw == 8 * groups && conv_out(out, "dw", NULL) == 16 * groups,
          "grouped conv: %lld groups, %lld outputs; depthwise %lld groups", (long long)groups,
          (long long)conv_out(out, "grouped", NULL), (long long)dw);
  }
  cx_graph_free(out);
  cx_graph_free(g);
  c = config(0.3);

  /* an op the analysis does not know freezes what it touches, and the log names it */
  g = small_graph(true);
  char *text = NULL;
  size_t len = 0;
  FILE *log = open_memstream(&text, &len);
  out = check_pruned("with a Transpose", g, &c, 0.75, log);
  fclose(log);
  CHECK(text && strstr(text, "node 'odd' (Transpose)"), "the log does not name the node: %s",
        text ? text : "");
  CHECK(out && conv_out(out, "b", NULL) == 20 && conv_out(out, "grouped", "group") == 4,
        "channels behind the Transpose were pruned");
  free(text);
  cx_graph_free(out);
  cx_graph_free(g);
}

/* ---- Taylor scores ---- */

static void taylor_hook(void *user, int param, const cx_tensor *value, const cx_tensor *grad) {
  cx_train_ext *e = user;
  e->grad_ready(e->self, param, value, grad, true);
}

/* The extension's sums after two identical backward passes are 2 |w g|, element by element;
 * pruning ranked by them keeps the channel with the largest score. */
static void test_taylor(void) {
  cx_graph *g = small_graph(false), *tg = NULL;
  CHECK(cx_train_graph(g, 0, 0, &tg) == CX_OK, "%s", cx_last_error());
  cx_program *p = NULL;
  cx_compile_opts co = {
      .batch = BATCH, .training = true, .loss = "loss", .backend = cx_backend_cpu()};
  CHECK(cx_program_compile(tg, &co, &p) == CX_OK, "%s", cx_last_error());
  cx_channel_taylor *t = NULL;
  CHECK(cx_channel_taylor_new(&t) == CX_OK, "%s", cx_last_error());
  cx_train_ext ext = cx_channel_taylor_ext(t);
  CHECK(ext.opened(ext.self, p) == CX_OK, "%s", cx_last_error());
  cx_program_set_grad_hook(p, taylor_hook, &ext);
  int64_t n;
  float *x = input_of(g, &n);
  int64_t labels[BATCH] = {1, 3};
  CHECK(cx_program_write(p, cx_program_tensor(p, "input"), x) == CX_OK &&
            cx_program_write(p, cx_program_tensor(p, "labels"), labels) == CX_OK,
        "%s", cx_last_error());
  for (int k = 0; k < 2; k++)
    CHECK(cx_program_forward(p) == CX_OK && cx_program_backward(p) == CX_OK &&
              ext.before_update(ext.self, p) == CX_OK,
          "%s", cx_last_error());
  const cx_prune_scores *sc = cx_channel_taylor_scores(t);
  CHECK(sc->n == cx_program_param_count(p) && sc->n > 10, "%d scores", sc->n);
  double worst = 0;
  for (int i = 0; i < sc->n && i < cx_program_param_count(p); i++) {
    const cx_tensor *w = cx_program_param(p, i), *gr = cx_program_param_grad(p, i);
    int64_t m = cx_tensor_numel(w);
    float *wh = malloc((size_t)m * sizeof *wh), *gh = malloc((size_t)m * sizeof *gh);
    CHECK(cx_program_read(p, w, wh) == CX_OK && cx_program_read(p, gr, gh) == CX_OK, "read");
    for (int64_t j = 0; j < m; j++) {
      double want = 2 * fabs((double)wh[j] * gh[j]);
      double rel = fabs(sc->values[i][j] - want) / (want > 1e-3 ? want : 1e-3);
      if (!(rel <= worst)) worst = rel;
    }
    free(wh), free(gh);
  }
  CHECK(worst < 1e-5, "Taylor sums differ from 2|w g| by %.3g relative", worst);
  cx_prune_config c = config(0.3);
  c.importance = CX_IMPORTANCE_TAYLOR;
  cx_graph_free(check_pruned_with("Taylor importance", g, &c, sc, 0.75, NULL));
  /* without the scores it is an error, not a silent L1 */
  cx_graph *none = NULL;
  CHECK(cx_prune_channels(g, &c, NULL, NULL, &none, NULL) != CX_OK && !none,
        "Taylor importance without scores accepted");
  cx_error_clear();
  free(x);
  cx_channel_taylor_free(t);
  cx_program_free(p);
  cx_graph_free(tg);
  cx_graph_free(g);
}

/* ---- network slimming's penalty ---- */

/* The training loss and every parameter's gradient after one forward and backward pass, by the
 * parameter's value id in g (grads[v]); ext, if not NULL, wraps the training graph first. */
static float train_pass(const cx_graph *g, const cx_train_ext *ext, float **grads) {
  cx_graph *tg = NULL;
  CHECK(cx_train_graph(g, 0, 0, &tg) == CX_OK, "%s", cx_last_error());
  if (ext) CHECK(ext->wrap_graph(ext->self, tg) == CX_OK, "%s", cx_last_error());
  cx_program *p = NULL;
  cx_compile_opts co = {
      .batch = BATCH, .training = true, .loss = "loss", .backend = cx_backend_cpu()};
  CHECK(cx_program_compile(tg, &co, &p) == CX_OK, "%s", cx_last_error());
  int64_t n;
  float *x = input_of(g, &n), loss = NAN;
  int64_t labels[BATCH] = {1, 3};
  CHECK(cx_program_write(p, cx_program_tensor(p, "input"), x) == CX_OK &&
            cx_program_write(p, cx_program_tensor(p, "labels"), labels) == CX_OK &&
            cx_program_forward(p) == CX_OK && cx_program_backward(p) == CX_OK &&
            cx_program_read(p, cx_program_tensor(p, "loss"), &loss) == CX_OK,
        "%s", cx_last_error());
  for (int i = 0; i < cx_program_param_count(p); i++) {
    const cx_tensor *gr = cx_program_param_grad(p, i);
    int v = cx_graph_find_value(g, cx_program_param_name(p, i));
    CHECK(v >= 0 && !grads[v], "parameter '%s'", cx_program_param_name(p, i));
    if (v < 0 || grads[v]) continue;
    grads[v] = malloc((size_t)cx_tensor_numel(gr) * sizeof(float));
    CHECK(cx_program_read(p, gr, grads[v]) == CX_OK, "%s", cx_last_error());
  }
  free(x);
  cx_program_free(p);
  cx_graph_free(tg);
  return loss;
}

/* With bn_l1 = lambda, every BatchNorm scale's gradient gains exactly lambda * sign(gamma) (0 at
 * gamma = 0), every other gradient is unchanged, and the loss gains lambda * sum |gamma|. The
 * scales are set to positive, negative and zero values so that each case of the sign is seen. */
static void test_bn_l1(void) {
  cx_graph *g = NULL;
  CHECK(cx_model_build("resnet20:classes=10,input=3x8x8", &g, NULL) == CX_OK, "%s",
        cx_last_error());
  if (!g) return;
  CHECK(g->n_values < 4096, "%d values", g->n_values);
  double abs_sum = 0;
  int scales = 0;
  bool is_scale[4096] = {false};
  for (int i = 0; i < g->n_nodes; i++) {
    if (strcmp(g->nodes[i].op->name, "BatchNormalization")) continue;
    cx_value *v = &g->values[g->nodes[i].in[1]];
    float *gam = v->init;
    for (int64_t j = 0; j < cx_shape_numel(&v->shape); j++) {
      gam[j] = j % 3 == 0 ? 0.5f + 0.01f * (float)j : j % 3 == 1 ? -0.3f : 0.0f;
      abs_sum += fabs(gam[j]);
    }
    is_scale[g->nodes[i].in[1]] = true;
    scales++;
  }
  const float lambda = 1e-2f;
  cx_prune_bn_l1 bn = {.lambda = lambda};
  cx_train_ext ext = cx_prune_bn_l1_extension(&bn);
  static float *g0[4096], *g1[4096];
  float l0 = train_pass(g, NULL, g0), l1 = train_pass(g, &ext, g1);
  CHECK(bn.scales == scales && scales > 10, "%d scales penalised of %d", bn.scales, scales);
  CHECK(fabs((l1 - l0) - lambda * abs_sum) <= 1e-5 * (fabs(l0) + lambda * abs_sum),
        "loss %g -> %g; the penalty is %g", l0, l1, lambda * abs_sum);
  double worst = 0;
  int params = 0;
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].kind != CX_VALUE_PARAM || !g0[v] || !g1[v]) continue;
    const float *w = g->values[v].init;
    params++;
    for (int64_t j = 0; j < cx_shape_numel(&g->values[v].shape); j++) {
      double want = g0[v][j] + (is_scale[v] ? lambda * ((w[j] > 0) - (w[j] < 0)) : 0);
      double err = fabs(g1[v][j] - want) / (fabs(want) + 1e-6);
      if (!(err <= worst)) worst = err;
    }
  }
  CHECK(params > 40, "%d parameters compared", params);
  CHECK(worst < 1e-4, "gradients with bn_l1 differ from grad + lambda sign(gamma) by %.3g "
        "relative", worst);
  for (int i = 0; i < 4096; i++) free(g0[i]), free(g1[i]), g0[i] = g1[i] = NULL;
  /* a model without BatchNorm is refused, not silently unpenalised */
  cx_graph *plain = small_graph(false), *tg = NULL;
  CHECK(cx_train_graph(plain, 0, 0, &tg) == CX_OK, "%s", cx_last_error());
  CHECK(ext.wrap_graph(ext.self, tg) != CX_OK && strstr(cx_last_error(), "BatchNormalization"),
        "bn_l1 on a model without BatchNorm: %s", cx_last_error());
  cx_error_clear();
  cx_graph_free(tg);
  cx_graph_free(plain);
  cx_graph_free(g);
}

/* ---- sensitivity allocation ---- */

/* resnet20's unfrozen groups with made-up sensitivities (group i loses (i % 4 + 1) * level
 * points): the fractions are those of one tolerance t (each group the largest level whose drop
 * is at most t), meet the MAC target, and the next smaller tolerance among the drops would not;
 * the least sensitive groups give the most. */
static void test_allocate(void) {
  cx_graph *g = NULL;
  CHECK(cx_model_build("resnet20", &g, NULL) == CX_OK, "%s", cx_last_error());
  if (!g) return;
  cx_channel_groups *cg = NULL;
  cx_prune_config c = config(0.3);
  CHECK(cx_channel_groups_build(g, NULL, &cg) == CX_OK && cx_channel_select(cg, &c, NULL) == CX_OK,
        "%s", cx_last_error());
  enum { L = 9 };
  double levels[L], *score = malloc((size_t)cg->n_units * sizeof *score);
  for (int k = 0; k < L; k++) levels[k] = 0.1 * (k + 1);
  const char *names[64];
  double drop[64 * L], f[64];
  int n = 0;
  for (int k = 0; k < cg->n_groups && n < 64; k++)
    if (!cg->groups[k].frozen && cg->groups[k].producer >= 0) {
      names[n] = g->nodes[cg->groups[k].producer].name;
      for (int j = 0; j < L; j++) drop[n * L + j] = (n % 4 + 1) * levels[j] * 10;
      n++;
    }
  CHECK(n > 5, "%d groups", n);
  CHECK(cx_channel_importance(cg, CX_IMPORTANCE_L1, NULL, NULL, score) == CX_OK &&
            cx_channel_allocate(cg, &c, score, n, names, L, levels, drop, f) == CX_OK,
        "%s", cx_last_error());
  bool *keep = malloc((size_t)cg->n_units * sizeof *keep);
  cx_prune_config r = c;
  r.ratio_nodes = names, r.ratios = f, r.n_ratios = n;
  CHECK(cx_channel_choose(cg, &r, score, keep) == CX_OK, "%s", cx_last_error());
  int64_t target = (int64_t)floor(0.7 * (double)cg->macs);
  CHECK(cx_channel_macs(cg, keep) <= target, "MACs %lld above the target %lld",
        (long long)cx_channel_macs(cg, keep), (long long)target);
  /* one tolerance: the largest drop taken is t, and no group stopped below it */
  double t = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < L && levels[j] <= f[i] + 1e-12; j++)
      if (drop[i * L + j] > t) t = drop[i * L + j];
  bool one = true;
  for (int i = 0; i < n; i++) {
    int j = 0;
    while (j < L && levels[j] <= f[i] + 1e-12) j++;
    if (j < L && drop[i * L + j] <= t) one = false;
  }
  CHECK(one && t > 0, "the fractions are not those of one tolerance (t = %g)", t);
  CHECK(f[0] > f[3], "the least sensitive group gave %g, the most sensitive %g", f[0], f[3]);
  /* the next smaller tolerance misses the target */
  double below = -1;
  for (int j = 0; j < n * L; j++)
    if (drop[j] < t && drop[j] > below) below = drop[j];
  for (int i = 0; i < n; i++) {
    f[i] = 0;
    for (int j = 0; j < L && drop[i * L + j] <= below; j++) f[i] = levels[j];
  }
  CHECK(cx_channel_choose(cg, &r, score, keep) == CX_OK && cx_channel_macs(cg, keep) > target,
        "a smaller tolerance (%g) meets the target too", below);
  /* a target the largest levels cannot reach is an error */
  c.sparsity = 0.97;
  CHECK(cx_channel_allocate(cg, &c, score, n, names, L, levels, drop, f) != CX_OK &&
            strstr(cx_last_error(), "sensitivity"),
        "an unreachable target: %s", cx_last_error());
  cx_error_clear();
  free(keep), free(score);
  cx_channel_groups_free(cg);
  cx_graph_free(g);
}

/* ---- PyTorch-exported models ---- */

static void torch_one(const char *dir, const char *name) {
  char path[1200], pruned[1300], in_path[1400], out_dir[1300], cmd[5000];
  snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
  cx_graph *g = NULL;
  cx_status s = cx_onnx_import(path, &g, NULL);
  CHECK(s == CX_OK, "%s: import: %s", path, cx_last_error());
  if (s != CX_OK) return;
  cx_prune_config c = config(0.3);
  cx_graph *out = check_pruned(name, g, &c, 0.75, NULL);
  cx_graph_free(g);
  if (!out) return;
  snprintf(pruned, sizeof pruned, "%s/%s_pruned.onnx", dir, name);
  s = cx_onnx_export(out, pruned, NULL);
  CHECK(s == CX_OK, "%s: export: %s", name, cx_last_error());
  /* the exported file through our importer and engine, and through ONNX Runtime */
  cx_graph *back = NULL;
  if (s == CX_OK) s = cx_onnx_import(pruned, &back, NULL);
  CHECK(s == CX_OK, "%s: %s", pruned, cx_last_error());
  int64_t n = 0, ny = 0;
  float *y = s == CX_OK ? run(back, &ny) : NULL, *x = s == CX_OK ? input_of(back, &n) : NULL;
  cx_graph_cost before, after;
  if (y && x) {
    snprintf(in_path, sizeof in_path, "%s/%s_input.npy", dir, name);
    cx_shape xs = back->values[0].shape;
    for (int v = 0; v < back->n_values; v++)
      if (back->values[v].kind == CX_VALUE_INPUT) xs = back->values[v].shape;
    xs.d[0] = BATCH;
    CHECK(cx_npy_write(in_path, CX_F32, &xs, x) == CX_OK, "%s", cx_last_error());
    snprintf(out_dir, sizeof out_dir, "%s/%s.ort", dir, name);
    mkdir(out_dir, 0755);
    snprintf(cmd, sizeof cmd, PYTHON " '%s' '%s' '%s' '%s' >/dev/null", CX_ORT_CHECK, pruned,
             out_dir, in_path);
    int rc = system(cmd);
    CHECK(rc == 0, "%s: tests/ort_check.py failed (exit %d)", pruned, rc);
    snprintf(in_path, sizeof in_path, "%s/output_0.npy", out_dir);
    cx_dtype dt;
    cx_shape os;
    void *ort = NULL;
    if (rc == 0 && cx_npy_read(in_path, &dt, &os, &ort) == CX_OK && cx_shape_numel(&os) == ny) {
      double d = rel_diff(ort, y, ny);
      CHECK(d <= TOL, "%s: ONNX Runtime and our engine differ by %.3g relative", name, d);
      CHECK(cx_onnx_import(path, &g, NULL) == CX_OK && cx_graph_measure_cost(g, &before) == CX_OK &&
                cx_graph_measure_cost(back, &after) == CX_OK &&
                after.macs <= 0.75 * (double)before.macs,
            "%s: the exported file has too many MACs", name);
      cx_graph_free(g);
      printf(
          "ok   %s: exported, onnx.checker and ONNX Runtime accept it, within %.1e of ours, "
          "MACs %.1f%% of the original\n",
          name, d, 100.0 * (double)after.macs / (double)before.macs);
    } else {
      CHECK(rc != 0, "%s: ONNX Runtime's output is missing or has another size", name);
    }
    free(ort);
  }
  free(x), free(y);
  cx_graph_free(back);
  cx_graph_free(out);
}

static void test_torch(void) {
  char dir[] = "/tmp/cx_prune_torch_XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  const char *names[] = {"resnet18",           "resnet50",        "mobilenet_v2",
                         "mobilenet_v3_small", "efficientnet_b0", "concat_group"};
  char cmd[2000];
  int at = snprintf(cmd, sizeof cmd, PYTHON " -W ignore '%s' '%s'", CX_TORCH_MODELS, dir);
  for (size_t k = 0; k < sizeof names / sizeof *names; k++)
    at += snprintf(cmd + at, sizeof cmd - (size_t)at, " %s", names[k]);
  snprintf(cmd + at, sizeof cmd - (size_t)at, " >/dev/null");
  int rc = system(cmd);
  CHECK(rc == 0,
        "tests/torch_models.py failed (exit %d): it needs " PYTHON
        " with torch and torchvision",
        rc);
  for (size_t k = 0; rc == 0 && k < sizeof names / sizeof *names; k++) torch_one(dir, names[k]);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "torch")) {
    test_torch();
  } else {
    test_small();
    test_taylor();
    test_bn_l1();
    test_allocate();
    test_options();
    test_zoo();
  }
  if (fails) printf("%d check(s) failed\n", fails);
  return fails ? 1 : 0;
}
