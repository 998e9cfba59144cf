/* Distillation's pure logic: the KD graph's gradients against finite differences (hard labels,
 * soft targets, FitNets and attention hints), the top-k encoding of teacher logits, the cache
 * file's round trip and its refusals. (The report's tests: tests/test_report.c.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/rng.h"
#include "../distill/distill.h"
#include "op_check.h"
#include "check.h"

/* ---- the KD graph ---- */

/* Turns the graph input `name` into a constant of the given shape (op_check feeds no inputs). */
static void input_to_const(cx_graph *g, const char *name, const cx_shape *s, cx_dtype t,
                           uint64_t seed, int64_t classes) {
  int v = cx_graph_find_value(g, name);
  if (v < 0) return;
  int64_t n = cx_shape_numel(s);
  void *data = malloc((size_t)n * cx_dtype_size(t));
  for (int64_t i = 0; i < n; i++) {
    float u = cx_rng_uniform(seed, (uint64_t)i);
    if (t == CX_S64) ((int64_t *)data)[i] = (int64_t)(u * (float)classes);
    else ((float *)data)[i] = 4 * u - 2;
  }
  cx_value *x = &g->values[v];
  x->kind = CX_VALUE_CONST;
  x->shape = *s;
  free(x->init);
  x->init = data;
}

/* soft targets: rows of positive numbers summing to 1 */
static void targets_to_const(cx_graph *g, int64_t n, int64_t classes) {
  int v = cx_graph_find_value(g, "targets");
  if (v < 0) return;
  float *t = malloc(sizeof(float) * (size_t)(n * classes));
  for (int64_t i = 0; i < n; i++) {
    float sum = 0;
    for (int64_t c = 0; c < classes; c++) sum += t[i * classes + c] = 0.1f + cx_rng_uniform(77, (uint64_t)(i * classes + c));
    for (int64_t c = 0; c < classes; c++) t[i * classes + c] /= sum;
  }
  cx_value *x = &g->values[v];
  x->kind = CX_VALUE_CONST;
  x->shape = (cx_shape){2, {n, classes}};
  free(x->init);
  x->init = t;
}

/* input [-1, 4] -> MatMul W [4, 5] + b -> logits */
static cx_graph *dense_student(void) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "input", CX_F32, &S(-1, 4));
  int w = oc_param(g, "fc.weight", &S(4, 5), -1, 1, 1);
  int b = oc_param(g, "fc.bias", &S(5), -0.5f, 0.5f, 2);
  int mm = cx_graph_op(g, "MatMul", "fc/matmul", (int[]){x, w}, 2);
  cx_graph_mark_output(g, cx_graph_op(g, "Add", "logits", (int[]){mm, b}, 2));
  return g;
}

/* input [-1, 2, 4, 4] -> Conv (3 ch) "feat" -> Relu -> GlobalAveragePool -> Flatten -> MatMul */
static cx_graph *conv_student(void) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "input", CX_F32, &S(-1, 2, 4, 4));
  int w = oc_param(g, "conv.weight", &S(3, 2, 3, 3), -0.5f, 0.5f, 3);
  int node = cx_graph_node(g, "Conv", "feat", (int[]){x, w}, 2, 1);
  cx_node_set_ints(g, node, "kernel_shape", (int64_t[]){3, 3}, 2);
  cx_node_set_ints(g, node, "pads", (int64_t[]){1, 1, 1, 1}, 4);
  int r = cx_graph_op(g, "Relu", "relu", (int[]){cx_node_output(g, node, 0)}, 1);
  int p = cx_graph_op(g, "GlobalAveragePool", "pool", &r, 1);
  node = cx_graph_node(g, "Flatten", "flat", &p, 1, 1);
  cx_node_set_int(g, node, "axis", 1);
  int w2 = oc_param(g, "fc.weight", &S(3, 5), -1, 1, 4);
  cx_graph_mark_output(g, cx_graph_op(g, "MatMul", "logits",
                                      (int[]){cx_node_output(g, node, 0), w2}, 2));
  return g;
}

static void kd_grad_case(const char *label, cx_graph *student, const cx_kd_config *c,
                         const cx_shape *in) {
  cx_graph *g = NULL;
  cx_status s = cx_kd_graph(student, c, &g);
  CHECK(s == CX_OK, "%s: %s", label, cx_last_error());
  if (s != CX_OK) return;
  CHECK(strcmp(g->values[g->outputs[0]].name, "loss") == 0 && g->n_outputs == 2 &&
            g->outputs[1] == student->outputs[0], "%s: outputs are not (loss, logits)", label);
  int64_t n = in->d[0];
  input_to_const(g, "input", in, CX_F32, 11, 0);
  input_to_const(g, "teacher_logits", &S(n, 5), CX_F32, 12, 0);
  input_to_const(g, "labels", &S(n), CX_S64, 13, 5);
  targets_to_const(g, n, 5);
  for (int i = 0; i < c->n_hints; i++) {
    char name[300];
    snprintf(name, sizeof name, "teacher_feat/%s", c->hints[i].teacher);
    const int64_t *t = c->hints[i].teacher_shape;
    input_to_const(g, name, &S(n, t[0], t[1], t[2]), CX_F32, 14 + (uint64_t)i, 0);
  }
  oc_opts o = {.grad = true, .seed = 5, .grad_tol = 2e-3};
  fails += oc_check(label, g, &o);
  cx_graph_free(g);
}

static void test_kd_graph(void) {
  cx_graph *dense = dense_student(), *conv = conv_student();
  cx_kd_config c = cx_kd_config_defaults();
  c.classes = 5;
  c.temperature = 2.5f;
  c.alpha = 0.7f;
  c.label_smoothing = 0.1f;
  kd_grad_case("kd labels", dense, &c, &S(3, 4));
  c.alpha = 1;
  kd_grad_case("kd only", dense, &c, &S(3, 4));
  c.alpha = 0.5f;
  c.soft_targets = true;
  kd_grad_case("kd soft targets", dense, &c, &S(2, 4));
  c.soft_targets = false;
  cx_kd_hint hints[2] = {
      {.kind = CX_HINT_FITNET, .student = "feat", .teacher = "t.layer1", .weight = 0.5f,
       .teacher_shape = {4, 4, 4}},
      {.kind = CX_HINT_ATTENTION, .student = "feat", .teacher = "t.layer2", .weight = 2,
       .teacher_shape = {6, 4, 4}},
  };
  c.hints = hints;
  c.n_hints = 2;
  kd_grad_case("kd hints", conv, &c, &S(2, 2, 4, 4));
  /* adapters kept in the student while it trains are used by the KD graph, then stripped */
  cx_graph *g = NULL;
  int before = conv->n_values;
  CHECK(cx_kd_adapters_add(conv, &c) == CX_OK && conv->n_values == before + 1,
        "adapters add: %s", cx_last_error());
  CHECK(cx_kd_graph(conv, &c, &g) == CX_OK, "kd graph with adapters: %s", cx_last_error());
  int adapters = 0;
  for (int v = 0; g && v < g->n_values; v++)
    adapters += strncmp(g->values[v].name, "distill.adapter.", 16) == 0;
  CHECK(adapters == 1, "%d adapters in the KD graph", adapters);
  cx_graph_free(g);
  g = NULL;
  CHECK(cx_kd_adapters_strip(conv) == CX_OK && conv->n_values == before, "strip: %s",
        cx_last_error());
  /* refusals */
  hints[0].student = "nope";
  CHECK(cx_kd_graph(conv, &c, &g) == CX_ERR_ARG && strstr(cx_last_error(), "'nope'"),
        "unknown student value: %s", cx_last_error());
  hints[0].student = "feat";
  hints[0].teacher_shape[1] = 8;
  CHECK(cx_kd_graph(conv, &c, &g) == CX_ERR_SHAPE && strstr(cx_last_error(), "spatial"),
        "spatial mismatch: %s", cx_last_error());
  c.n_hints = 0;
  c.temperature = 0;
  CHECK(cx_kd_graph(dense, &c, &g) == CX_ERR_ARG && strstr(cx_last_error(), "temperature"),
        "T = 0 accepted: %s", cx_last_error());
  cx_graph_free(dense);
  cx_graph_free(conv);
}

/* ---- the top-k encoding ---- */

static void random_logits(float *z, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = 0; i < n; i++) z[i] = scale * (2 * cx_rng_uniform(seed, (uint64_t)i) - 1);
}

static void test_topk(void) {
  float z[100], d[100];
  uint16_t cls[10], val[10], fill;
  /* k = classes: every logit kept, shifted so that the largest is 0, within fp16 precision */
  random_logits(z, 10, 1, 12);
  cx_kd_topk_encode(z, 10, 10, cls, val, &fill);
  cx_kd_topk_decode(cls, val, fill, 10, 10, d);
  float max = z[0];
  for (int c = 1; c < 10; c++) max = fmaxf(max, z[c]);
  double err = 0;
  for (int c = 0; c < 10; c++) err = fmax(err, fabs(d[c] - (z[c] - max)) / fmax(fabs(z[c] - max), 1e-3));
  CHECK(err <= 1.0 / 2048, "k = classes: relative error %g above fp16's 2^-11", err);
  /* k < classes: the top 5 in order, the others one fill value below the 5th that keeps their
   * probability mass at T = 1 */
  random_logits(z, 100, 2, 6);
  cx_kd_topk_encode(z, 100, 5, cls, val, &fill);
  cx_kd_topk_decode(cls, val, fill, 100, 5, d);
  for (int j = 1; j < 5; j++) CHECK(z[cls[j - 1]] >= z[cls[j]], "top-k not in order at %d", j);
  int above = 0;
  for (int c = 0; c < 100; c++) above += z[c] > z[cls[4]];
  CHECK(above == 4, "%d logits above the 5th kept one", above);
  max = z[cls[0]];
  double rest = 0, rest_d = 0;
  bool kept[100] = {false};
  for (int j = 0; j < 5; j++) kept[cls[j]] = true;
  for (int c = 0; c < 100; c++)
    if (!kept[c]) rest += exp(z[c] - max), rest_d += exp(d[c]);
  CHECK(fabs(rest_d / rest - 1) < 2e-3, "tail mass %g reconstructed as %g", rest, rest_d);
  CHECK(cx_f16_to_f32(fill) <= cx_f16_to_f32(val[4]), "fill above the k-th logit");
  /* a hopeless tail stays finite: exp underflows, the fill is fp16's lowest, not -inf */
  for (int c = 0; c < 100; c++) z[c] = c == 7 ? 0 : -1e6f;
  cx_kd_topk_encode(z, 100, 1, cls, val, &fill);
  CHECK(isfinite(cx_f16_to_f32(fill)) && cls[0] == 7, "underflowed tail: fill %g",
        (double)cx_f16_to_f32(fill));
}

/* softmax(combined / T) is the weighted mean of the teachers' softmax(z / T) */
static void test_combine(void) {
  float a[2 * 6], b[2 * 6], out[2 * 6], T = 3;
  random_logits(a, 12, 21, 8);
  random_logits(b, 12, 22, 8);
  const float *logits[2] = {a, b}, weights[2] = {1, 3};
  double work[6], err = 0;
  cx_kd_combine_teachers(logits, weights, 2, 2, 6, T, work, out);
  for (int s = 0; s < 2; s++) {
    double pa[6], pb[6], po[6], sa = 0, sb = 0, so = 0;
    for (int c = 0; c < 6; c++) {
      sa += pa[c] = exp(a[s * 6 + c] / T);
      sb += pb[c] = exp(b[s * 6 + c] / T);
      so += po[c] = exp(out[s * 6 + c] / T);
    }
    for (int c = 0; c < 6; c++)
      err = fmax(err, fabs(po[c] / so - (0.25 * pa[c] / sa + 0.75 * pb[c] / sb)));
  }
  CHECK(err < 1e-6, "combined teachers: distribution off by %g", err);
  /* one teacher: the same distribution as its own logits */
  cx_kd_combine_teachers(logits, weights, 1, 2, 6, T, work, out);
  double shift = out[0] - a[0];
  err = 0;
  for (int i = 0; i < 6; i++) err = fmax(err, fabs(out[i] - a[i] - shift));
  CHECK(err < 1e-4, "a single teacher's logits moved by more than a shift: %g", err);
}

/* ---- the cache ---- */

static cx_kd_cache *open_cache(const char *dir, const char *key, int64_t samples, int k) {
  cx_kd_cache_opts o = {.dir = dir, .key = key, .description = "test", .samples = samples,
                        .classes = 12, .k = k, .quiet = false};
  cx_kd_cache *c = NULL;
  CHECK(cx_kd_cache_open(&o, &c) == CX_OK, "open: %s", cx_last_error());
  return c;
}

static void test_cache(const char *dir) {
  const char *key = "0123456789abcdef0123456789abcdef";
  const int64_t ids[4] = {7, 2, 30, 0}, other[2] = {7, 3};
  float z[4 * 12], got[4 * 12], again[4 * 12];
  random_logits(z, 4 * 12, 9, 8);
  cx_kd_cache *c = open_cache(dir, key, 31, 0);
  if (!c) return;
  CHECK(cx_kd_cache_k(c) == 10, "default k %d, expected min(12, 10)", cx_kd_cache_k(c));
  CHECK(cx_kd_cache_epoch(c, 3) == CX_OK, "%s", cx_last_error());
  CHECK(!cx_kd_cache_get(c, ids, 4, got), "an empty cache served a batch");
  CHECK(cx_kd_cache_put(c, ids, 4, z) == CX_OK, "%s", cx_last_error());
  CHECK(cx_kd_cache_get(c, ids, 4, got), "a stored batch was not served");
  CHECK(!cx_kd_cache_get(c, other, 2, again), "a batch with an unknown sample was served");
  CHECK(cx_kd_cache_flush(c) == CX_OK, "flush: %s", cx_last_error());
  char path[600];
  snprintf(path, sizeof path, "%s", cx_kd_cache_path(c));
  cx_kd_cache_close(c);
  /* the file serves the same logits to another run; other epochs and keys see nothing */
  c = open_cache(dir, key, 31, 0);
  CHECK(cx_kd_cache_epoch(c, 3) == CX_OK && cx_kd_cache_count(c) == 4, "reloaded %lld samples",
        (long long)cx_kd_cache_count(c));
  CHECK(cx_kd_cache_get(c, ids, 4, again) && memcmp(got, again, sizeof got) == 0,
        "the file served other logits for the same (epoch, id)");
  CHECK(cx_kd_cache_get(c, ids + 1, 1, again) && memcmp(got + 12, again, 12 * 4) == 0,
        "a single sample differs");
  CHECK(cx_kd_cache_epoch(c, 4) == CX_OK && !cx_kd_cache_get(c, ids, 1, again),
        "epoch 4 served epoch 3's logits");
  cx_kd_cache_close(c);
  c = open_cache(dir, "fedcba9876543210fedcba9876543210", 31, 0);
  CHECK(cx_kd_cache_epoch(c, 3) == CX_OK && !cx_kd_cache_get(c, ids, 1, again),
        "another key served this key's logits");
  cx_kd_cache_close(c);
  /* k differs: the file is refused (and would be rewritten) */
  c = open_cache(dir, key, 31, 5);
  CHECK(cx_kd_cache_epoch(c, 3) == CX_OK && cx_kd_cache_count(c) == 0, "a file of k = 10 read with k = 5");
  cx_kd_cache_close(c);
  /* a damaged file is refused before HDF5 reads it, and the refusal names the file */
  FILE *f = fopen(path, "r+b");
  CHECK(f != NULL, "cannot open %s", path);
  if (f) {
    fseek(f, 700, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, 700, SEEK_SET);
    fputc(ch ^ 0x5a, f);
    fclose(f);
  }
  c = open_cache(dir, key, 31, 0);
  CHECK(cx_kd_cache_epoch(c, 3) == CX_OK && cx_kd_cache_count(c) == 0, "a damaged file was read");
  cx_kd_cache_close(c);
  char tmp[700];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  CHECK(access(tmp, F_OK) != 0, "a temporary file was left behind");
  if (!getenv("KEEP")) unlink(path);
}

int main(void) {
  char dir[] = "/tmp/cx_distill_unit_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  test_kd_graph();
  test_topk();
  test_combine();
  test_cache(dir);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (!getenv("KEEP") && system(cmd) != 0) printf("could not remove %s\n", dir);
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
