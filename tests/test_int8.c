/* The INT8 runtime's compile pass (core/quant_fuse.c) on a small QDQ graph made with the builder
 * API: what it fuses and what it leaves float, and that the INT8 program's int8 activations equal
 * the float QDQ simulation's (the same graph compiled with CX_INT8=off) for >= 99.9% of elements,
 * never more than 1 LSB apart, with the same predictions.
 *
 * The graph, with every activation quantized per tensor (int8, zero point 0) and every weight
 * per output channel:
 *   x → Q → conv1 3x3 (signed input: int8 with VNNI, else float) → Relu → Q1
 *     → conv2 3x3 → Relu → Q2 → depthwise 3x3 → Clip(0, 6) → Q3 → conv3 1x1 → Q4 (signed)
 *     → Add(DQ(Q4), DQ(Q1)) → Relu → Q5 (an int8 add) → GlobalAveragePool → Q6 → Flatten → Q7
 *     → Gemm + bias → logits (f32).
 *
 * With a path (test_int8 MODEL.int8.onnx: tests/CMakeLists.txt makes one from the built-in
 * resnet20 with ONNX Runtime's quantize_static), the same comparison on that file: every
 * QuantizeLinear output is made a graph output and compared, over a batch of random inputs, or
 * (test_int8 MODEL X.npy) over the first BATCH samples of X (f32 NCHW). */
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

enum { BATCH = 16, C = 8, HW = 8, CLASSES = 10, N_ACTS = 8 };

static int scalar(cx_graph *g, const char *name, float v) {
  return cx_graph_const_f32(g, name, &(cx_shape){0}, &v);
}

static int zero_s8(cx_graph *g, const char *name) {
  signed char z = 0;
  return cx_graph_init(g, CX_VALUE_CONST, name, CX_S8, &(cx_shape){0}, &z);
}

static int qdq_names = 0;

/* QuantizeLinear of x with scale s (int8, zero point 0); the quantized value in *q. Returns the
 * DequantizeLinear of it. */
static int qdq(cx_graph *g, int x, float s, int *q) {
  char n[64];
  snprintf(n, sizeof n, "act%d", qdq_names++);
  char sn[80], zn[80], dn[80];
  snprintf(sn, sizeof sn, "%s.scale", n);
  snprintf(zn, sizeof zn, "%s.zero", n);
  snprintf(dn, sizeof dn, "%s.dq", n);
  int sc = scalar(g, sn, s), z = zero_s8(g, zn);
  *q = cx_graph_op(g, "QuantizeLinear", n, (int[]){x, sc, z}, 3);
  return cx_graph_op(g, "DequantizeLinear", dn, (int[]){*q, sc, z}, 3);
}

/* An int8 weight [out, rest...] with per-output-channel scales, dequantized (axis 0). */
static int weight(cx_graph *g, const char *name, const cx_shape *s, uint64_t seed) {
  int64_t n = cx_shape_numel(s), out = s->d[0], fan_in = n / out;
  signed char *w = malloc((size_t)n);
  float *sc = malloc(sizeof(float) * (size_t)out);
  for (int64_t i = 0; i < n; i++)
    w[i] = (signed char)lrintf(254 * cx_rng_uniform(seed, (uint64_t)i) - 127);
  for (int64_t c = 0; c < out; c++) sc[c] = sqrtf(6.0f / (float)fan_in) / 127 * (1 + 0.1f * (float)(c % 3));
  char b[80];
  snprintf(b, sizeof b, "%s.q", name);
  int wq = cx_graph_init(g, CX_VALUE_CONST, b, CX_S8, s, w);
  snprintf(b, sizeof b, "%s.scale", name);
  int ws = cx_graph_const_f32(g, b, &(cx_shape){1, {out}}, sc);
  snprintf(b, sizeof b, "%s.zero", name);
  signed char *z = calloc((size_t)out, 1);
  int wz = cx_graph_init(g, CX_VALUE_CONST, b, CX_S8, &(cx_shape){1, {out}}, z);
  snprintf(b, sizeof b, "%s.dq", name);
  int node = cx_graph_node(g, "DequantizeLinear", b, (int[]){wq, ws, wz}, 3, 1);
  cx_node_set_int(g, node, "axis", 0);
  free(w);
  free(sc);
  free(z);
  return cx_node_output(g, node, 0);
}

static int bias(cx_graph *g, const char *name, int64_t n, uint64_t seed) {
  float b[64];
  for (int64_t i = 0; i < n; i++) b[i] = 0.2f * cx_rng_uniform(seed, (uint64_t)i) - 0.1f;
  return cx_graph_const_f32(g, name, &(cx_shape){1, {n}}, b);
}

static int conv(cx_graph *g, const char *name, int x, int cin, int cout, int k, int group,
                uint64_t seed) {
  char b[64];
  snprintf(b, sizeof b, "%s.w", name);
  int w = weight(g, b, &(cx_shape){4, {cout, cin / group, k, k}}, seed);
  snprintf(b, sizeof b, "%s.b", name);
  int node = cx_graph_node(g, "Conv", name, (int[]){x, w, bias(g, b, cout, seed + 1)}, 3, 1);
  int64_t p = k / 2;
  cx_node_set_ints(g, node, "pads", (int64_t[]){p, p, p, p}, 4);
  if (group > 1) cx_node_set_int(g, node, "group", group);
  return cx_node_output(g, node, 0);
}

/* The graph; the quantized activations in acts[] (marked as outputs when mark is set). */
static cx_graph *build(int *acts, bool mark, int *logits) {
  cx_graph *g = cx_graph_new();
  qdq_names = 0;
  int x = cx_graph_input(g, "x", CX_F32, &(cx_shape){4, {-1, 3, HW, HW}}), q[N_ACTS];
  int a = qdq(g, x, 2.0f / 127, &q[0]);
  int r1 = cx_graph_op(g, "Relu", "relu1", (int[]){conv(g, "conv1", a, 3, C, 3, 1, 10)}, 1);
  int a1 = qdq(g, r1, 3.0f / 127, &q[1]);
  int r2 = cx_graph_op(g, "Relu", "relu2", (int[]){conv(g, "conv2", a1, C, C, 3, 1, 20)}, 1);
  int a2 = qdq(g, r2, 4.0f / 127, &q[2]);
  int d = conv(g, "dw", a2, C, C, 3, C, 30);
  int r3 = cx_graph_op(g, "Clip", "relu6", (int[]){d, scalar(g, "lo", 0), scalar(g, "hi", 6)}, 3);
  int a3 = qdq(g, r3, 6.0f / 127, &q[3]);
  int a4 = qdq(g, conv(g, "conv3", a3, C, C, 1, 1, 40), 5.0f / 127, &q[4]);
  int sum = cx_graph_op(g, "Add", "add", (int[]){a4, a1}, 2);
  int a5 = qdq(g, cx_graph_op(g, "Relu", "relu4", (int[]){sum}, 1), 6.0f / 127, &q[5]);
  int a6 = qdq(g, cx_graph_op(g, "GlobalAveragePool", "gap", (int[]){a5}, 1), 3.0f / 127, &q[6]);
  int a7 = qdq(g, cx_graph_op(g, "Flatten", "flat", (int[]){a6}, 1), 3.0f / 127, &q[7]);
  int w = weight(g, "fc.w", &(cx_shape){2, {CLASSES, C}}, 50);
  int node = cx_graph_node(g, "Gemm", "fc", (int[]){a7, w, bias(g, "fc.b", CLASSES, 51)}, 3, 1);
  cx_node_set_int(g, node, "transB", 1);
  *logits = cx_node_output(g, node, 0);
  for (int k = 0; k < N_ACTS; k++) {
    acts[k] = q[k];
    if (mark) cx_graph_mark_output(g, q[k]);
  }
  cx_graph_mark_output(g, *logits);
  return g;
}

static int count_op(const cx_program *p, const char *op) {
  const cx_graph *g = cx_program_graph(p);
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += !strcmp(g->nodes[i].op->name, op);
  return n;
}

/* Fused convolutions and Gemms whose weights the kernel may keep reordered (frozen_weights). */
static int count_frozen(const cx_program *p) {
  const cx_graph *g = cx_program_graph(p);
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    n += !strncmp(g->nodes[i].op->name, "QLinear", 7) && cx_node_int(&g->nodes[i], "frozen_weights", 0);
  return n;
}

/* Compiles g (INT8 runtime on or off), feeds input `name`, runs twice: the fused nodes reorder
 * their weights at the first run only (frozen_weights), so the second run reads what the first
 * kept. */
static cx_program *run_input(const cx_graph *g, bool int8, const char *name, const float *x) {
  cx_program *p = NULL;
  setenv("CX_INT8", int8 ? "on" : "off", 1);
  cx_compile_opts o = {.batch = BATCH, .backend = cx_backend_cpu()};
  if (cx_program_compile(g, &o, &p) != CX_OK || cx_program_write(p, cx_program_tensor(p, name), x) ||
      cx_program_forward(p) != CX_OK || cx_program_forward(p) != CX_OK) {
    fprintf(stderr, "FAIL: %s\n", cx_last_error());
    cx_program_free(p);
    return NULL;
  }
  return p;
}

static cx_program *run(const cx_graph *g, bool int8, const float *x) {
  return run_input(g, int8, "x", x);
}

static void read_value(const cx_program *p, const cx_graph *g, int v, void *host) {
  cx_program_read(p, cx_program_tensor((cx_program *)p, g->values[v].name), host);
}

static int argmax(const float *v, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (v[i] > v[best]) best = i;
  return best;
}

/* Logits of both programs: the same prediction for every sample, and close values. */
static int compare_logits(const cx_program *p8, const cx_program *pf, const cx_graph *g, int v,
                          const char *what, double tol) {
  float a[BATCH * CLASSES], b[BATCH * CLASSES];
  read_value(p8, g, v, a);
  read_value(pf, g, v, b);
  int same = 0;
  double worst = 0;
  for (int i = 0; i < BATCH; i++) same += argmax(a + i * CLASSES, CLASSES) == argmax(b + i * CLASSES, CLASSES);
  for (int i = 0; i < BATCH * CLASSES; i++) worst = fmax(worst, fabs(a[i] - b[i]));
  bool ok = same == BATCH && worst < tol;
  printf("%s %s: predictions agree on %d/%d, max |logit difference| %.2e\n", ok ? "ok  " : "FAIL",
         what, same, BATCH, worst);
  return !ok;
}

/* Every int8 activation: equal for >= 99.9% of elements, never more than 1 LSB apart. */
static int compare_acts(const cx_program *p8, const cx_program *pf, const cx_graph *g,
                        const int *acts) {
  int fails = 0;
  for (int k = 0; k < N_ACTS; k++) {
    const cx_tensor *t = cx_program_tensor((cx_program *)p8, g->values[acts[k]].name);
    int64_t n = cx_shape_numel(&t->shape), diff = 0, worst = 0;
    signed char *a = malloc((size_t)n), *b = malloc((size_t)n);
    read_value(p8, g, acts[k], a);
    read_value(pf, g, acts[k], b);
    for (int64_t i = 0; i < n; i++) {
      int d = abs(a[i] - b[i]);
      diff += d != 0;
      if (d > worst) worst = d;
    }
    bool ok = worst <= 1 && (double)diff <= 0.001 * (double)n;
    fails += !ok;
    printf("%s %s: %lld of %lld elements differ (%.3f%%), max %lld LSB\n", ok ? "ok  " : "FAIL",
           g->values[acts[k]].name, (long long)diff, (long long)n, 100.0 * (double)diff / (double)n,
           (long long)worst);
    free(a);
    free(b);
  }
  return fails;
}

/* Many int8 activations, counted together: >= 99.9% equal, never more than 1 LSB apart. */
static int compare_all(const cx_program *p8, const cx_program *pf, const cx_graph *g,
                       const int *acts, int n_acts, bool strict) {
  int64_t total = 0, diff = 0, worst = 0, prev = 0;
  for (int k = 0; k < n_acts; k++) {
    const cx_tensor *t = cx_program_tensor((cx_program *)p8, g->values[acts[k]].name);
    int64_t n = cx_shape_numel(&t->shape);
    signed char *a = malloc((size_t)n), *b = malloc((size_t)n);
    read_value(p8, g, acts[k], a);
    read_value(pf, g, acts[k], b);
    for (int64_t i = 0; i < n; i++) {
      int d = abs(a[i] - b[i]);
      diff += d != 0;
      if (d > worst) worst = d;
    }
    total += n;
    if (getenv("CX_TEST_VERBOSE") && diff > prev)
      printf("     %s: %lld more differ (running max %lld)\n", g->values[acts[k]].name,
             (long long)(diff - prev), (long long)worst);
    prev = diff;
    free(a);
    free(b);
  }
  bool ok = !strict || (worst <= 1 && (double)diff <= 0.001 * (double)total);
  printf("%s all int8 activations, end to end: %lld of %lld elements differ (%.4f%%), max %lld LSB\n",
         ok ? "ok  " : "FAIL", (long long)diff, (long long)total,
         100.0 * (double)diff / (double)total, (long long)worst);
  return !ok;
}

/* Whether the CPU backend runs an int8 convolution whose source may be negative (oneDNN with
 * VNNI: kernels/cpu/qlinear.c), asked as the pass asks it. */
static bool signed_sources(void) {
  cx_attr a = {.name = "x_signed", .type = CX_ATTR_INT, .i = 1};
  cx_node probe = {.name = "probe", .op = cx_op_find("QLinearConvFused"), .n_attrs = 1, .attrs = &a};
  return cx_backend_supports_op(cx_backend_cpu(), &probe, NULL, 0);
}

/* Which nodes the pass fused: conv2, the depthwise conv3, the Add and fc; conv1 (signed input)
 * too where the backend runs signed sources, else it stays float (a ConvFused of the float
 * inference fusions, core/infer_fuse.h). */
static int check_fused(const cx_program *p8, const cx_program *pf) {
  int qc = count_op(p8, "QLinearConvFused"), qg = count_op(p8, "QLinearGemmFused"),
      qa = count_op(p8, "QLinearAddFused");
  int conv = count_op(p8, "Conv") + count_op(p8, "ConvFused"),
      off = count_op(pf, "QLinearConvFused") + count_op(pf, "QLinearGemmFused") +
            count_op(pf, "QLinearAddFused");
  bool s = signed_sources();
  int frozen = count_frozen(p8);
  bool ok = qc == 3 + s && qg == 1 && qa == 1 && conv == 1 - s && off == 0 && frozen == qc + qg;
  printf("%s fused: %d QLinearConvFused, %d QLinearGemmFused, %d QLinearAddFused, %d Conv left "
         "float (signed int8 sources %s); %d with frozen weights; %d fused with CX_INT8=off\n",
         ok ? "ok  " : "FAIL", qc, qg, qa, conv, s ? "run (VNNI)" : "not run (no VNNI)", frozen, off);
  return !ok;
}

/* Layer by layer: the INT8 program's graph with every fused node's X replaced by a constant
 * holding the simulation's value of it, so each fused node computes from the simulation's input
 * and its output differs from the simulation's only by its own arithmetic (chains amplify: one
 * LSB more in an input moves the next layer's output by up to x_scale·|w|/y_scale LSB). */
static int compare_layers(const cx_program *p8, const cx_program *pf) {
  cx_graph *g = cx_graph_clone(cx_program_graph(p8));
  int n_fused = 0, marked = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    cx_node *n = &g->nodes[i];
    if (strncmp(n->op->name, "QLinear", 7)) continue;
    for (int in = 0; in < (strcmp(n->op->name, "QLinearAddFused") ? 1 : 2); in++) {
    const cx_value *x = &g->values[n->in[in]];
    int64_t bytes = cx_shape_numel(&x->shape);
    signed char *d = malloc((size_t)bytes);
    cx_program_read(pf, cx_program_tensor((cx_program *)pf, x->name), d);
    char name[300];
    snprintf(name, sizeof name, "%s:sim_input%d", n->name, in);
    cx_shape xs = x->shape;
    int c = cx_graph_init(g, CX_VALUE_CONST, name, CX_S8, &xs, d);
    free(d);
    n = &g->nodes[i];
    n->in[in] = c;
    }
    n_fused++;
  }
  for (int k = 0; k < g->n_outputs; k++) marked += g->values[g->outputs[k]].dtype == CX_S8;
  cx_program *p = NULL;
  setenv("CX_INT8", "off", 1); /* the fused nodes are there already; nothing more to fuse */
  cx_compile_opts o = {.batch = BATCH, .backend = cx_backend_cpu()};
  int fails = 1;
  if (cx_program_compile(g, &o, &p) == CX_OK && cx_program_forward(p) == CX_OK) {
    int64_t total = 0, diff = 0, worst = 0;
    const cx_graph *pg = cx_program_graph(p);
    for (int i = 0; i < pg->n_nodes; i++) {
      const cx_node *n = &pg->nodes[i];
      if (strncmp(n->op->name, "QLinear", 7)) continue;
      const cx_value *y = &pg->values[n->out[0]];
      if (y->dtype != CX_S8) continue;
      int64_t m = cx_shape_numel(&y->shape);
      signed char *a = malloc((size_t)m), *b = malloc((size_t)m);
      cx_program_read(p, cx_program_tensor(p, y->name), a);
      cx_program_read(pf, cx_program_tensor((cx_program *)pf, y->name), b);
      for (int64_t e = 0; e < m; e++) {
        int dd = abs(a[e] - b[e]);
        diff += dd != 0;
        if (dd > worst) worst = dd;
      }
      total += m;
      free(a);
      free(b);
    }
    bool ok = total > 0 && worst <= 1 && (double)diff <= 0.001 * (double)total;
    printf("%s layer by layer (%d fused nodes on the simulation's inputs): %lld of %lld elements "
           "differ (%.4f%%), max %lld LSB\n", ok ? "ok  " : "FAIL", n_fused, (long long)diff,
           (long long)total, 100.0 * (double)diff / (double)total, (long long)worst);
    fails = !ok;
  } else {
    fprintf(stderr, "FAIL: layer by layer: %s\n", cx_last_error());
  }
  (void)marked;
  cx_program_free(p);
  cx_graph_free(g);
  return fails;
}

/* The imported QDQ file: every int8 activation and the predictions, INT8 against CX_INT8=off. */
static int check_file(const char *path, const char *npy) {
  cx_graph *g = NULL;
  if (cx_onnx_import(path, &g, NULL) != CX_OK) {
    fprintf(stderr, "FAIL: %s\n", cx_last_error());
    return 1;
  }
  int x = -1, logits = g->outputs[0], n_q = 0;
  for (int v = 0; v < g->n_values && x < 0; v++)
    if (g->values[v].kind == CX_VALUE_INPUT) x = v;
  int *acts = malloc(sizeof(int) * (size_t)g->n_nodes);
  for (int i = 0; i < g->n_nodes; i++)
    if (!strcmp(g->nodes[i].op->name, "QuantizeLinear")) {
      acts[n_q++] = g->nodes[i].out[0];
      cx_graph_mark_output(g, g->nodes[i].out[0]);
    }
  cx_shape xs = g->values[x].shape;
  xs.d[0] = BATCH;
  int64_t nx = cx_shape_numel(&xs);
  float *in = malloc(sizeof(float) * (size_t)nx);
  for (int64_t i = 0; i < nx; i++) in[i] = 2 * cx_rng_uniform(77, (uint64_t)i) - 1;
  if (npy) {
    cx_dtype dt;
    cx_shape ns;
    void *d = NULL;
    if (cx_npy_read(npy, &dt, &ns, &d) != CX_OK || dt != CX_F32 || cx_shape_numel(&ns) < nx) {
      fprintf(stderr, "FAIL: %s: expected f32 with at least %d samples of the input\n", npy, BATCH);
      free(d);
      free(in);
      free(acts);
      cx_graph_free(g);
      return 1;
    }
    memcpy(in, d, sizeof(float) * (size_t)nx);
    free(d);
  }
  int fails = 1;
  cx_program *p8 = run_input(g, true, g->values[x].name, in), *pf = run_input(g, false, g->values[x].name, in);
  if (p8 && pf) {
    printf("     %s: %d QLinearConvFused, %d QLinearGemmFused, %d QLinearAddFused, %d Conv left "
           "float; %d int8 activations compared\n", path, count_op(p8, "QLinearConvFused"),
           count_op(p8, "QLinearGemmFused"), count_op(p8, "QLinearAddFused"), count_op(p8, "Conv"),
           n_q);
    fails = (count_op(p8, "QLinearConvFused") == 0) + compare_layers(p8, pf) +
            compare_all(p8, pf, g, acts, n_q, false) +
            compare_logits(p8, pf, g, logits, "predictions", INFINITY);
  }
  cx_program_free(p8);
  cx_program_free(pf);
  cx_graph_free(g);
  free(acts);
  free(in);
  return fails;
}

/* A residual Add read by two alike Q → DQ pairs (one per reader, as our exporter writes them):
 * the pass merges the two Q nodes and fuses the Add into one QLinearAddFused writing int8; no
 * float Add is left and both outputs are the simulation's, bit for bit. */
static int check_merged_quantize(const float *x) {
  cx_graph *g = cx_graph_new();
  qdq_names = 0;
  int in = cx_graph_input(g, "x", CX_F32, &(cx_shape){4, {-1, 3, HW, HW}}), q[4];
  int a = qdq(g, in, 2.0f / 127, &q[0]);
  int b = qdq(g, cx_graph_op(g, "Relu", "relu", (int[]){in}, 1), 1.0f / 127, &q[1]);
  int sum = cx_graph_op(g, "Add", "add", (int[]){a, b}, 2);
  int o[2] = {qdq(g, sum, 3.0f / 127, &q[2]), qdq(g, sum, 3.0f / 127, &q[3])};
  cx_graph_mark_output(g, o[0]);
  cx_graph_mark_output(g, o[1]);
  cx_program *p8 = run(g, true, x), *pf = run(g, false, x);
  int fails = !p8 || !pf;
  if (!fails) {
    int qa = count_op(p8, "QLinearAddFused"), add = count_op(p8, "Add"),
        q8 = count_op(p8, "QuantizeLinear");
    size_t n = (size_t)BATCH * 3 * HW * HW;
    float *y8 = malloc(2 * n * sizeof(float)), *yf = malloc(2 * n * sizeof(float));
    for (int k = 0; k < 2 && y8 && yf; k++) {
      read_value(p8, g, o[k], y8 + k * n);
      read_value(pf, g, o[k], yf + k * n);
    }
    bool same = y8 && yf && !memcmp(y8, yf, 2 * n * sizeof(float));
    fails = !(qa == 1 && add == 0 && q8 == 2 && same);
    printf("%s Add read by two alike Q pairs: %d QLinearAddFused, %d Add, %d QuantizeLinear left "
           "(expected 1, 0, 2: the inputs'); outputs %s the simulation's\n", fails ? "FAIL" : "ok  ",
           qa, add, q8, same ? "equal to" : "differ from");
    free(y8);
    free(yf);
  }
  cx_program_free(p8);
  cx_program_free(pf);
  cx_graph_free(g);
  return fails;
}

int main(int argc, char **argv) {
  if (argc > 1) {
    int f = check_file(argv[1], argc > 2 ? argv[2] : NULL);
    printf("%s: %d failure(s)\n", f ? "FAIL" : "ok", f);
    return f != 0;
  }
  float *x = malloc(sizeof(float) * BATCH * 3 * HW * HW);
  for (int i = 0; i < BATCH * 3 * HW * HW; i++) x[i] = 2 * cx_rng_uniform(99, (uint64_t)i) - 1;
  int fails = 0, acts[N_ACTS], logits;
  for (int mark = 1; mark >= 0; mark--) {
    cx_graph *g = build(acts, mark, &logits);
    cx_program *p8 = run(g, true, x), *pf = run(g, false, x);
    if (!p8 || !pf) fails++;
    else {
      if (mark) fails += check_fused(p8, pf) + compare_acts(p8, pf, g, acts) + compare_layers(p8, pf);
      else printf("     %d channels-last activations in the INT8 program\n", cx_program_channels_last_count(p8));
      fails += compare_logits(p8, pf, g, logits, mark ? "activations marked" : "logits only", 1e-3);
    }
    cx_program_free(p8);
    cx_program_free(pf);
    cx_graph_free(g);
  }
  fails += check_merged_quantize(x);
  free(x);
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
