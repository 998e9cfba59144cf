/* Magnitude and N:M pruning (prune/mask.h, docs/prune.md).
 *   test_prune_mask        the schedule against Zhu-Gupta's formula, the configuration checks,
 *                          target selection (defaults, globs, layouts, refusals), magnitude masks
 *                          (global and per layer) against a sort of every weight, N:M masks
 *                          against a search over every subset, the one-shot graph pruning;
 *   test_prune_mask train  short Fashion-MNIST runs with the masking extension (SGD with
 *                          momentum and AdamW, EMA on, a gradual schedule): the pruned weights,
 *                          their optimizer state and their average are exactly zero after every
 *                          update, the trained model is exactly masked, also after a stop and a
 *                          resume, and the resumed run (through the guard backend: host code
 *                          cannot touch its memory) ends bit-identical to an uninterrupted one
 *                          on the CPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/backend.h"
#include "../core/program.h"
#include "../kernels/cpu/cpu.h"
#include "../kernels/guard/guard.h"
#include "../models/zoo.h"
#include "../core/rng.h"
#include "../prune/channel.h"
#include "../prune/mask.h"
#include "../train/trainer.h"
#include "check.h"
#include "fmnist.h"

static bool has(const char *msg, const char *part) { return strstr(msg, part) != NULL; }

/* ---- the schedule ---- */

static double zhu_gupta(double si, double sf, double t0, double n_dt, double t) {
  return sf + (si - sf) * pow(1 - (t - t0) / n_dt, 3);
}

static void test_schedule(void) {
  cx_prune_config c = cx_prune_defaults();
  c.initial_sparsity = 0.1, c.sparsity = 0.8, c.start = 10, c.end = 50, c.every = 10;
  /* step: the last pruning step at or before it */
  const int64_t steps[] = {0, 9, 10, 15, 20, 29, 35, 49, 50, 51, 1000};
  const double last[] = {-1, -1, 10, 10, 20, 20, 30, 40, 50, 50, 50};
  for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
    double want = last[i] < 0 ? 0.1 : zhu_gupta(0.1, 0.8, 10, 40, last[i]);
    double got = cx_prune_schedule_sparsity(&c, steps[i]);
    CHECK(fabs(got - want) < 1e-12, "schedule at step %lld: %.15g, expected %.15g",
          (long long)steps[i], got, want);
  }
  CHECK(fabs(cx_prune_schedule_sparsity(&c, 20) - 0.5046875) < 1e-12, "step 20: %.10g",
        cx_prune_schedule_sparsity(&c, 20));
  for (int64_t t = 0; t <= 60; t++) {
    bool want = t >= 10 && t <= 50 && t % 10 == 0;
    CHECK(cx_prune_schedule_is_step(&c, t) == want, "pruning step %lld: %d", (long long)t, !want);
  }
  c.start = 0, c.end = 25, c.every = 10; /* end not on the grid: a last step at end */
  for (int64_t t = 0; t <= 30; t++) {
    bool want = t == 0 || t == 10 || t == 20 || t == 25;
    CHECK(cx_prune_schedule_is_step(&c, t) == want, "pruning step %lld of 0..25/10", (long long)t);
  }
  CHECK(fabs(cx_prune_schedule_sparsity(&c, 24) - zhu_gupta(0.1, 0.8, 0, 25, 20)) < 1e-12 &&
        cx_prune_schedule_sparsity(&c, 25) == 0.8, "%s", "0..25 every 10: steps 24, 25");
  c.start = c.end = 5; /* one-shot */
  CHECK(cx_prune_schedule_sparsity(&c, 4) == 0.1 && cx_prune_schedule_sparsity(&c, 5) == 0.8 &&
        cx_prune_schedule_sparsity(&c, 6) == 0.8, "%s", "one-shot at step 5");
  CHECK(!cx_prune_schedule_is_step(&c, 4) && cx_prune_schedule_is_step(&c, 5) &&
        !cx_prune_schedule_is_step(&c, 6), "%s", "one-shot: only step 5 prunes");
  cx_prune_config d = cx_prune_defaults();
  CHECK(cx_prune_schedule_sparsity(&d, 0) == 0.5 && cx_prune_schedule_is_step(&d, 0) &&
        !cx_prune_schedule_is_step(&d, 1), "%s", "the default: one-shot at step 0");
}

/* ---- the configuration ---- */

static void refused(const cx_prune_config *c, const char *part, const char *what) {
  cx_status s = cx_prune_config_check(c);
  CHECK(s == CX_ERR_ARG && has(cx_last_error(), part), "%s: %d '%s' (expected '%s')", what, s,
        s == CX_OK ? "" : cx_last_error(), part);
}

static void test_config(void) {
  cx_prune_config c = cx_prune_defaults();
  CHECK(cx_prune_config_check(&c) == CX_OK, "defaults: %s", cx_last_error());
  c.sparsity = 1;
  refused(&c, "sparsity 1 must be in [0, 1)", "sparsity 1");
  c.sparsity = -0.1;
  refused(&c, "sparsity -0.1", "sparsity -0.1");
  c.sparsity = NAN;
  refused(&c, "sparsity nan", "sparsity NaN");
  c = cx_prune_defaults(), c.method = CX_PRUNE_NM, c.n = 4, c.m = 4;
  refused(&c, "1 <= n < m; got 4:4", "4:4");
  c = cx_prune_defaults(), c.start = 10, c.end = 5;
  refused(&c, "end 5 is before start 10", "end < start");
  c = cx_prune_defaults(), c.every = 0;
  refused(&c, "every 0 must be >= 1", "every 0");
  c = cx_prune_defaults(), c.initial_sparsity = 0.6;
  refused(&c, "initial_sparsity 0.6", "initial above final");
  c = cx_prune_defaults(), c.importance = CX_IMPORTANCE_TAYLOR;
  refused(&c, "\"taylor\" is for method \"channel\"", "taylor with magnitude");
  c = cx_prune_defaults(), c.round_to = -1;
  refused(&c, "round_to -1", "round_to");
  const char *empty[] = {""};
  c = cx_prune_defaults(), c.include = empty, c.n_include = 1;
  refused(&c, "include: entry 1 is empty", "empty glob");
}

/* ---- selection ---- */

/* input [N,8] -> Gemm(transB) W1 [16,8] -> MatMul W2 [16,12] -> Gemm W3 [12,10] -> logits */
static cx_graph *linear_graph(void) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "input", CX_F32, &(cx_shape){2, {-1, 8}});
  int w1 = cx_graph_param(g, "w1", &(cx_shape){2, {16, 8}}, NULL);
  int w2 = cx_graph_param(g, "w2", &(cx_shape){2, {16, 12}}, NULL);
  int w3 = cx_graph_param(g, "w3", &(cx_shape){2, {12, 10}}, NULL);
  int k = cx_graph_node(g, "Gemm", "fc1", (int[]){x, w1}, 2, 1);
  cx_node_set_int(g, k, "transB", 1);
  int h = cx_node_output(g, k, 0);
  h = cx_graph_op(g, "MatMul", "mm", (int[]){h, w2}, 2);
  h = cx_graph_op(g, "Gemm", "head", (int[]){h, w3}, 2);
  cx_graph_mark_output(g, h);
  return g;
}

static void test_select(void) {
  cx_graph *cnn = fmnist_small_cnn(3), *lin = linear_graph();
  CHECK(cx_graph_status(lin) == CX_OK, "linear graph: %s", cx_last_error());
  cx_prune_config c = cx_prune_defaults();
  cx_prune_targets t;
  /* default: not the first conv (block1) and not the classifier (fc) */
  CHECK(cx_prune_select(cnn, &c, "cnn", &t) == CX_OK, "%s", cx_last_error());
  CHECK(t.n == 1 && !strcmp(t.t[0].weight_name, "block2.0.weight") && t.t[0].outer == 16 &&
        t.t[0].channels == 8 && t.t[0].inner == 9, "cnn default: %d targets, first %s [%lld %lld "
        "%lld]", t.n, t.n ? t.t[0].weight_name : "-", t.n ? (long long)t.t[0].outer : 0,
        t.n ? (long long)t.t[0].channels : 0, t.n ? (long long)t.t[0].inner : 0);
  cx_prune_targets_free(&t);
  /* include takes the first conv and the classifier too; exclude drops after include */
  const char *inc[] = {"block*", "fc*"}, *exc[] = {"block2*"};
  c.include = inc, c.n_include = 2;
  CHECK(cx_prune_select(cnn, &c, "cnn", &t) == CX_OK && t.n == 3, "include block* fc*: %d targets: %s",
        t.n, cx_last_error());
  cx_prune_targets_free(&t);
  c.exclude = exc, c.n_exclude = 1;
  CHECK(cx_prune_select(cnn, &c, "cnn", &t) == CX_OK && t.n == 2 &&
        strcmp(t.t[0].weight_name, "block2.0.weight") && strcmp(t.t[1].weight_name,
        "block2.0.weight"), "include minus exclude: %d targets", t.n);
  cx_prune_targets_free(&t);
  /* a glob that names nothing, nothing left */
  const char *typo[] = {"blok*"};
  c = cx_prune_defaults(), c.exclude = typo, c.n_exclude = 1;
  cx_status s = cx_prune_select(cnn, &c, "cnn", &t);
  CHECK(s == CX_ERR_ARG && has(cx_last_error(), "exclude glob 'blok*' matches no") && t.n == 0,
        "typo glob: %d %s", s, cx_last_error());
  const char *all2[] = {"*2*"};
  c.exclude = all2;
  s = cx_prune_select(cnn, &c, "small.onnx", &t);
  CHECK(s == CX_ERR_ARG && has(cx_last_error(), "small.onnx: nothing to prune"),
        "nothing left: %d %s", s, cx_last_error());
  /* Gemm [N,K] with transB, MatMul [K,N]; the classifier is the last Gemm */
  c = cx_prune_defaults();
  CHECK(cx_prune_select(lin, &c, "lin", &t) == CX_OK && t.n == 2, "linear: %d targets: %s", t.n,
        cx_last_error());
  if (t.n == 2) {
    CHECK(!strcmp(t.t[0].node_name, "fc1") && t.t[0].outer == 16 && t.t[0].channels == 8 &&
          t.t[0].inner == 1, "fc1 view [%lld %lld %lld]", (long long)t.t[0].outer,
          (long long)t.t[0].channels, (long long)t.t[0].inner);
    CHECK(!strcmp(t.t[1].node_name, "mm") && t.t[1].outer == 1 && t.t[1].channels == 16 &&
          t.t[1].inner == 12, "mm view [%lld %lld %lld]", (long long)t.t[1].outer,
          (long long)t.t[1].channels, (long long)t.t[1].inner);
  }
  cx_prune_targets_free(&t);
  cx_graph_free(cnn);
  cx_graph_free(lin);
}

/* ---- magnitude masks against a sort ---- */

typedef struct entry {
  float mag;
  int target;
  int64_t index;
} entry;

static int by_mag(const void *a, const void *b) {
  const entry *x = a, *y = b;
  if (x->mag != y->mag) return x->mag < y->mag ? -1 : 1;
  if (x->target != y->target) return x->target - y->target;
  return (x->index > y->index) - (x->index < y->index);
}

/* The reference: sort (|w|, target, index), prune the first round(s * n) of targets [a, b). */
static void sort_masks(const cx_prune_target *t, float *const *w, int a, int b, double s,
                       uint8_t **masks) {
  int64_t n = 0, at = 0;
  for (int i = a; i < b; i++) n += t[i].outer * t[i].channels * t[i].inner;
  entry *e = malloc(sizeof *e * (size_t)n);
  for (int i = a; i < b; i++)
    for (int64_t j = 0; j < t[i].outer * t[i].channels * t[i].inner; j++)
      e[at++] = (entry){fabsf(w[i][j]), i, j};
  qsort(e, (size_t)n, sizeof *e, by_mag);
  int64_t k = (int64_t)floor(s * (double)n + 0.5);
  for (int64_t j = 0; j < n; j++) masks[e[j].target][e[j].index] = j >= k;
  free(e);
}

enum { NT = 3 };
static cx_prune_target synth[NT] = {
    {.node_name = "conv_a", .weight_name = "a", .outer = 6, .channels = 8, .inner = 9},
    {.node_name = "fc_b", .weight_name = "b", .outer = 10, .channels = 16, .inner = 1},
    {.node_name = "mm_c", .weight_name = "c", .outer = 1, .channels = 12, .inner = 7},
};

static int64_t count(int i) { return synth[i].outer * synth[i].channels * synth[i].inner; }

/* Weights with many ties: a quarter drawn from five levels (zeros among them), signs mixed. */
static void fill_weights(float **w, unsigned seed) {
  srand(seed);
  for (int i = 0; i < NT; i++)
    for (int64_t j = 0; j < count(i); j++) {
      float x = (float)rand() / (float)RAND_MAX - 0.5f;
      if (rand() % 4 == 0) x = 0.1f * (float)(rand() % 5 - 2);
      w[i][j] = x;
    }
}

static void test_magnitude(void) {
  float *w[NT];
  uint8_t *m[NT], *ref[NT];
  for (int i = 0; i < NT; i++) {
    w[i] = malloc(sizeof(float) * (size_t)count(i));
    m[i] = malloc((size_t)count(i));
    ref[i] = malloc((size_t)count(i));
  }
  cx_prune_targets t = {NT, synth};
  const double sp[] = {0, 0.1, 0.25, 0.5, 0.8, 0.95, 0.999};
  for (unsigned seed = 1; seed <= 3; seed++) {
    fill_weights(w, seed);
    for (size_t k = 0; k < sizeof sp / sizeof *sp; k++)
      for (int scope = 0; scope < 2; scope++) {
        cx_status s = cx_prune_masks_magnitude(&t, (const float *const *)w, (cx_prune_scope)scope,
                                               sp[k], m);
        CHECK(s == CX_OK, "magnitude: %s", cx_last_error());
        if (scope == CX_PRUNE_GLOBAL) sort_masks(synth, w, 0, NT, sp[k], ref);
        else
          for (int i = 0; i < NT; i++) sort_masks(synth, w, i, i + 1, sp[k], ref);
        for (int i = 0; i < NT; i++)
          CHECK(!memcmp(m[i], ref[i], (size_t)count(i)), "%s sparsity %g seed %u: target %d "
                "differs from the sort", scope ? "layer" : "global", sp[k], seed, i);
      }
  }
  /* a global threshold is not the per-layer one: with one layer of larger weights it prunes
   * the others more */
  for (int64_t j = 0; j < count(1); j++) w[1][j] *= 10;
  int64_t z_global = 0, z_layer = 0;
  cx_prune_masks_magnitude(&t, (const float *const *)w, CX_PRUNE_GLOBAL, 0.5, m);
  for (int64_t j = 0; j < count(1); j++) z_global += !m[1][j];
  cx_prune_masks_magnitude(&t, (const float *const *)w, CX_PRUNE_LAYER, 0.5, m);
  for (int64_t j = 0; j < count(1); j++) z_layer += !m[1][j];
  CHECK(z_layer == count(1) / 2 && z_global < z_layer / 4, "scaled layer: %lld pruned globally, "
        "%lld per layer", (long long)z_global, (long long)z_layer);
  w[2][5] = NAN;
  cx_status s = cx_prune_masks_magnitude(&t, (const float *const *)w, CX_PRUNE_GLOBAL, 0.5, m);
  CHECK(s == CX_ERR_NUMERIC && has(cx_last_error(), "'c' of node 'mm_c' holds NaN"), "NaN: %d %s",
        s, cx_last_error());
  for (int i = 0; i < NT; i++) free(w[i]), free(m[i]), free(ref[i]);
}

/* ---- N:M masks against every subset ---- */

/* The n-subset of group g (m weights `stride` apart) with the largest sum of |w|; among equal
 * sums the lexicographically first. */
static unsigned best_subset(const float *w, int64_t stride, int n, int m) {
  unsigned best = 0;
  double best_sum = -1;
  for (unsigned set = 0; set < (1u << m); set++) {
    if (__builtin_popcount(set) != n) continue;
    double sum = 0;
    for (int r = 0; r < m; r++)
      if (set >> r & 1) sum += fabs((double)w[r * stride]);
    /* lexicographically first index set: the lowest indices, i.e. the reversed-bit order */
    bool first = false;
    if (sum == best_sum)
      for (int r = 0; r < m; r++)
        if ((set >> r & 1) != (best >> r & 1)) {
          first = set >> r & 1;
          break;
        }
    if (sum > best_sum || first) best = set, best_sum = sum;
  }
  return best;
}

static void test_nm(void) {
  float *w[NT];
  uint8_t *m[NT];
  for (int i = 0; i < NT; i++) {
    w[i] = malloc(sizeof(float) * (size_t)count(i));
    m[i] = malloc((size_t)count(i));
  }
  cx_prune_targets t = {NT, synth}; /* channels 8, 16, 12: multiples of 4 */
  const int nm[][2] = {{2, 4}, {1, 4}, {3, 4}, {1, 2}};
  for (unsigned seed = 1; seed <= 3; seed++)
    for (size_t q = 0; q < sizeof nm / sizeof *nm; q++) {
      int n = nm[q][0], mm = nm[q][1];
      fill_weights(w, seed);
      CHECK(cx_prune_masks_nm(&t, (const float *const *)w, n, mm, m) == CX_OK, "%d:%d: %s", n, mm,
            cx_last_error());
      int64_t bad = 0;
      for (int i = 0; i < NT; i++) {
        const cx_prune_target *g = &synth[i];
        for (int64_t o = 0; o < g->outer; o++)
          for (int64_t c = 0; c < g->channels; c += mm)
            for (int64_t s = 0; s < g->inner; s++) {
              int64_t at = (o * g->channels + c) * g->inner + s;
              unsigned want = best_subset(w[i] + at, g->inner, n, mm), got = 0;
              for (int r = 0; r < mm; r++) got |= (unsigned)m[i][at + r * g->inner] << r;
              bad += got != want;
            }
        CHECK(!cx_prune_nm_holds(g, w[i], n, mm), "dense %s holds %d:%d", g->node_name, n, mm);
        for (int64_t j = 0; j < count(i); j++)
          if (!m[i][j]) w[i][j] = 0;
        CHECK(cx_prune_nm_holds(g, w[i], n, mm), "masked %s does not hold %d:%d", g->node_name, n,
              mm);
      }
      CHECK(bad == 0, "%d:%d seed %u: %lld groups differ from the subset search", n, mm, seed,
            (long long)bad);
    }
  /* one more non-zero in one group breaks the pattern */
  fill_weights(w, 9);
  cx_prune_masks_nm(&t, (const float *const *)w, 2, 4, m);
  for (int64_t j = 0; j < count(0); j++)
    if (!m[0][j]) w[0][j] = 0;
  w[0][2 * 9 + 4] = w[0][2 * 9 + 4] == 0 ? 0.5f : w[0][2 * 9 + 4];
  w[0][3 * 9 + 4] = w[0][3 * 9 + 4] == 0 ? 0.5f : w[0][3 * 9 + 4];
  w[0][0 * 9 + 4] = w[0][0 * 9 + 4] == 0 ? 0.5f : w[0][0 * 9 + 4];
  CHECK(!cx_prune_nm_holds(&synth[0], w[0], 2, 4), "%s", "three non-zeros in a group of 4 hold 2:4");
  /* channels not a multiple of m */
  cx_prune_target odd = {.node_name = "conv_odd", .weight_name = "odd", .outer = 2, .channels = 6,
                         .inner = 1};
  cx_prune_targets t1 = {1, &odd};
  cx_status s = cx_prune_masks_nm(&t1, (const float *const *)w, 2, 4, m);
  CHECK(s == CX_ERR_ARG && has(cx_last_error(), "'conv_odd' has 6 input channels"),
        "6 channels at 2:4: %d %s", s, cx_last_error());
  CHECK(!cx_prune_nm_holds(&odd, w[0], 2, 4), "%s", "6 channels hold 2:4");
  for (int i = 0; i < NT; i++) free(w[i]), free(m[i]);
}

/* ---- one-shot on a graph ---- */

static const float *weights(const cx_graph *g, const char *name, int64_t *n) {
  int v = cx_graph_find_value(g, name);
  *n = v >= 0 ? cx_shape_numel(&g->values[v].shape) : 0;
  return v >= 0 ? g->values[v].init : NULL;
}

static void test_mask_graph(void) {
  cx_graph *g = fmnist_small_cnn(4), *orig = fmnist_small_cnn(4);
  cx_prune_config c = cx_prune_defaults();
  c.sparsity = 0.7;
  CHECK(cx_prune_mask_graph(g, &c, "cnn") == CX_OK, "%s", cx_last_error());
  cx_prune_targets t;
  CHECK(cx_prune_select(g, &c, "cnn", &t) == CX_OK, "%s", cx_last_error());
  cx_prune_count per[4], all;
  cx_prune_count_zeros(g, &t, per, &all);
  CHECK(all.total == 1152 && all.zeros == 806 && per[0].zeros == 806, "0.7 of block2: %lld of %lld "
        "zero", (long long)all.zeros, (long long)all.total);
  /* the kept weights and every other value are untouched */
  int64_t n, changed = 0;
  const float *a = weights(g, "block2.0.weight", &n), *b = weights(orig, "block2.0.weight", &n);
  for (int64_t j = 0; j < n; j++) changed += a[j] != 0 && a[j] != b[j];
  const float *f1 = weights(g, "block1.0.weight", &n), *f2 = weights(orig, "block1.0.weight", &n);
  CHECK(changed == 0 && !memcmp(f1, f2, sizeof(float) * (size_t)n), "%lld kept weights changed",
        (long long)changed);
  cx_prune_targets_free(&t);
  /* 2:4: the pattern holds; on block1 (one input channel) it is refused, naming the node */
  c.method = CX_PRUNE_NM;
  CHECK(cx_prune_mask_graph(g, &c, "cnn") == CX_OK, "2:4: %s", cx_last_error());
  CHECK(cx_prune_select(g, &c, "cnn", &t) == CX_OK && cx_prune_nm_holds(&t.t[0],
        g->values[t.t[0].weight].init, 2, 4), "%s", "2:4 does not hold after cx_prune_mask_graph");
  cx_prune_targets_free(&t);
  const char *inc[] = {"block1*"};
  c.include = inc, c.n_include = 1;
  cx_status s = cx_prune_mask_graph(g, &c, "cnn.onnx");
  CHECK(s == CX_ERR_ARG && has(cx_last_error(), "cnn.onnx: node 'block1") &&
        has(cx_last_error(), "1 input channels"), "2:4 on block1: %d %s", s, cx_last_error());
  cx_prune_masker *m = NULL;
  s = cx_prune_mask_open(g, "cnn.onnx", &c, NULL, &m);
  CHECK(s == CX_ERR_ARG && !m && has(cx_last_error(), "cnn.onnx: node 'block1"),
        "the extension on 2:4 block1: %d %s", s, cx_last_error());
  c = cx_prune_defaults(), c.method = CX_PRUNE_CHANNEL;
  CHECK(cx_prune_mask_graph(g, &c, "cnn") == CX_ERR_ARG, "%s", "channel refused");
  c = cx_prune_defaults(), c.sparsity = 1.5;
  s = cx_prune_mask_open(g, "cnn.onnx", &c, NULL, &m);
  CHECK(s == CX_ERR_ARG && !m && has(cx_last_error(), "sparsity 1.5"), "sparsity 1.5: %d %s", s,
        cx_last_error());
  cx_graph_free(g);
  cx_graph_free(orig);
  /* 2:4 by default on MobileNetV2: the depthwise convolutions (one input channel per group)
   * stay dense, the rest takes the pattern */
  CHECK(cx_model_build("mobilenet_v2:width=0.5,classes=10,input=1x28x28", &g, NULL) == CX_OK,
        "%s", cx_last_error());
  c = cx_prune_defaults(), c.method = CX_PRUNE_NM;
  CHECK(cx_prune_mask_graph(g, &c, "mbv2") == CX_OK, "2:4 on MobileNetV2: %s", cx_last_error());
  CHECK(cx_prune_select(g, &c, "mbv2", &t) == CX_OK, "%s", cx_last_error());
  int dense = 0, holding = 0;
  for (int i = 0; i < t.n; i++) {
    const float *w = g->values[t.t[i].weight].init;
    if (t.t[i].channels % 4) {
      int64_t zeros = 0;
      for (int64_t j = 0; j < t.t[i].outer * t.t[i].channels * t.t[i].inner; j++) zeros += !w[j];
      dense += zeros == 0;
    } else {
      holding += cx_prune_nm_holds(&t.t[i], w, 2, 4);
    }
  }
  printf("MobileNetV2-0.5 at 2:4: %d layers hold it, %d left dense, of %d\n", holding, dense, t.n);
  CHECK(dense > 10 && holding > 10 && dense + holding == t.n, "2:4 on MobileNetV2: %d dense, %d "
        "holding, %d targets", dense, holding, t.n);
  cx_prune_targets_free(&t);
  cx_graph_free(g);
}

/* ---- training ---- */

typedef struct paths {
  char dir[64], train[96], test[96], small[96], val[96];
} paths;

/* A probe after the masker: after every update, the pruned entries of every masked weight, of
 * the optimizer's state of it and of its average must be exactly +0. */
typedef struct probe {
  cx_prune_masker *m;
  cx_program *p;
  cx_optimizer *o;
  cx_ema *ema;
  int64_t checked, bad, steps;
} probe;

static cx_status probe_opened(void *self, cx_program *p) {
  ((probe *)self)->p = p;
  return CX_OK;
}

static cx_status probe_ready(void *self, cx_optimizer *o, cx_ema *ema) {
  probe *q = self;
  q->o = o, q->ema = ema;
  return CX_OK;
}

/* Pruned entries of t (names `name`'s mask) that are not +0. */
static int64_t nonzero_pruned(probe *q, const cx_tensor *t, const uint8_t *mask) {
  int64_t n = cx_tensor_numel(t), bad = 0;
  float *h = malloc(sizeof(float) * (size_t)n);
  if (cx_backend_download(cx_program_backend(q->p), h, t, cx_program_stream(q->p)) != CX_OK)
    bad = n;
  for (int64_t j = 0; j < n && bad < n; j++) bad += !mask[j] && (h[j] != 0 || signbit(h[j]));
  free(h);
  q->checked++;
  return bad;
}

static cx_status probe_after(void *self, cx_program *p, int64_t step, bool updated) {
  probe *q = self;
  (void)updated, (void)step;
  const cx_prune_targets *t = cx_prune_mask_targets(q->m);
  q->steps++;
  for (int i = 0; i < t->n; i++) {
    const char *w = t->t[i].weight_name;
    const uint8_t *mask = cx_prune_mask_of(q->m, i);
    q->bad += nonzero_pruned(q, cx_program_tensor(p, w), mask);
    for (int k = 0; k < cx_optimizer_state_count(q->o); k++) {
      const char *s = strchr(cx_optimizer_state_name(q->o, k), '/');
      if (s && !strcmp(s + 1, w)) q->bad += nonzero_pruned(q, cx_optimizer_state(q->o, k), mask);
    }
    for (int k = 0; q->ema && k < cx_ema_count(q->ema); k++)
      if (!strcmp(cx_ema_name(q->ema, k) + 4, w))
        q->bad += nonzero_pruned(q, cx_ema_tensor(q->ema, k), mask);
  }
  return CX_OK;
}

#define MAX_TARGETS 16 /* channel pruning masks every tensor it cuts: 9 here */

typedef struct outcome {
  cx_status status;
  cx_train_result r;
  cx_graph *model;
  uint8_t *masks[MAX_TARGETS];
  int64_t mask_len[MAX_TARGETS];
  int n_targets;
  double sparsity;
  probe q;
  cx_graph *rewritten; /* channel: the trained model rewritten for the channels kept */
  cx_prune_channel_stats st;
} outcome;

static cx_train_opts recipe(const paths *p, const cx_backend *b, cx_optim_kind kind,
                            const char *ckdir) {
  cx_train_opts o = cx_train_defaults();
  o.backend = b;
  o.train_path = p->small;
  o.batch_size = 32;
  o.epochs = 3; /* 8 steps an epoch */
  o.optim = cx_optim_defaults(kind);
  float lr = kind == CX_OPTIM_SGD ? 0.05f : 0.003f;
  o.schedule = cx_schedule_defaults(CX_SCHEDULE_COSINE, lr);
  o.use_ema = true;
  o.ema.decay = 0.9f;
  o.quiet = true;
  o.log_every = 4;
  o.seed = 7;
  o.checkpoint_dir = ckdir;
  o.loader.aug.mean[0] = 0.286f;
  o.loader.aug.std[0] = 0.353f;
  return o;
}

/* Magnitude: three layers, one global threshold, 0 -> 70% over steps 0..16 every 4;
 * N:M: 2:4 on block2 from step 4; channel: both convolutions, 0 -> 50% of the MACs over steps
 * 0..16 every 4. stop > 0: stopped there and resumed with a fresh masker. */
static outcome prune_run(const paths *p, const cx_backend *b, cx_optim_kind kind,
                         cx_prune_method method, int64_t stop) {
  outcome out = {.model = fmnist_small_cnn(5)};
  char ckdir[128];
  snprintf(ckdir, sizeof ckdir, "%s/ck-%d", p->dir, rand());
  const char *inc[] = {"block*", "fc*"};
  cx_prune_config c = cx_prune_defaults();
  if (method == CX_PRUNE_MAGNITUDE) {
    c.sparsity = 0.7, c.start = 0, c.end = 16, c.every = 4;
    c.include = inc, c.n_include = 2;
  } else if (method == CX_PRUNE_CHANNEL) {
    c.method = CX_PRUNE_CHANNEL, c.sparsity = 0.5, c.start = 0, c.end = 16, c.every = 4;
    c.include = inc, c.n_include = 1;
  } else {
    c.method = CX_PRUNE_NM, c.start = c.end = 4;
  }
  cx_prune_masker *m = NULL;
  for (int leg = 0; leg < (stop ? 2 : 1); leg++) {
    cx_train_opts o = recipe(p, b, kind, ckdir);
    char last[4200];
    if (leg == 1) {
      CHECK(cx_checkpoint_find_last(ckdir, last, sizeof last) == CX_OK, "%s", cx_last_error());
      o.resume_from = last;
    }
    o.stop_after = leg == 0 ? stop : 0;
    /* N:M: the resumed leg reuses the first leg's masker (a masker may serve several runs) */
    if (!(leg == 1 && method == CX_PRUNE_NM)) {
      cx_prune_mask_close(m);
      m = NULL;
      out.status = cx_prune_mask_open(out.model, "cnn", &c, NULL, &m);
      if (out.status != CX_OK) break;
    }
    out.q = (probe){.m = m};
    cx_train_ext ext[2] = {cx_prune_mask_extension(m),
                           {.name = "probe", .self = &out.q, .opened = probe_opened,
                            .optimizer_ready = probe_ready, .after_update = probe_after}};
    o.extensions = ext;
    o.n_extensions = 2;
    out.status = cx_train(out.model, &o, &out.r);
    const cx_prune_targets *t = cx_prune_mask_targets(m);
    CHECK(t->n <= MAX_TARGETS, "%d targets", t->n);
    out.n_targets = t->n < MAX_TARGETS ? t->n : MAX_TARGETS;
    out.sparsity = cx_prune_mask_sparsity(m);
    for (int i = 0; i < t->n && i < MAX_TARGETS; i++) {
      out.mask_len[i] = t->t[i].outer * t->t[i].channels * t->t[i].inner;
      free(out.masks[i]);
      out.masks[i] = malloc((size_t)out.mask_len[i]);
      memcpy(out.masks[i], cx_prune_mask_of(m, i), (size_t)out.mask_len[i]);
    }
    /* after the stopped leg too: what the trainer wrote back is exactly masked */
    for (int i = 0; out.status == CX_OK && i < t->n && i < MAX_TARGETS; i++) {
      int64_t n, bad = 0;
      const float *w = weights(out.model, t->t[i].weight_name, &n);
      for (int64_t j = 0; j < n; j++) bad += !out.masks[i][j] && (w[j] != 0 || signbit(w[j]));
      CHECK(n == out.mask_len[i] && bad == 0, "leg %d: %lld pruned weights of %s are not +0", leg,
            (long long)bad, t->t[i].weight_name);
    }
    CHECK(out.q.steps > 0 && out.q.bad == 0, "leg %d: %lld pruned entries not +0 in %lld tensor "
          "checks over %lld steps", leg, (long long)out.q.bad, (long long)out.q.checked,
          (long long)out.q.steps);
    if (out.status != CX_OK) break;
  }
  if (out.status == CX_OK && method == CX_PRUNE_CHANNEL)
    out.status = cx_prune_mask_rewrite(m, out.model, NULL, &out.rewritten, &out.st);
  cx_prune_mask_close(m);
  CHECK(out.status == CX_OK, "train: %s", cx_last_error());
  return out;
}

static bool same_model(const cx_graph *a, const cx_graph *b) {
  for (int v = 0; v < a->n_values; v++) {
    const cx_value *x = &a->values[v];
    if (x->kind != CX_VALUE_PARAM && x->kind != CX_VALUE_STATE) continue;
    int64_t n;
    const float *y = weights(b, x->name, &n);
    if (!y || n != cx_shape_numel(&x->shape) || memcmp(x->init, y, sizeof(float) * (size_t)n))
      return printf("  differs: %s\n", x->name), false;
  }
  return true;
}

static void free_outcome(outcome *o) {
  cx_graph_free(o->model);
  cx_graph_free(o->rewritten);
  for (int i = 0; i < MAX_TARGETS; i++) free(o->masks[i]);
}

/* The logits of g for 8 images of a fixed normal pattern (NULL after a failure). */
static float *logits(const cx_graph *g, int64_t *n) {
  cx_program *p = NULL;
  cx_compile_opts co = {.batch = 8, .backend = cx_backend_cpu()};
  cx_status s = cx_program_compile(g, &co, &p);
  CHECK(s == CX_OK, "compile: %s", cx_last_error());
  if (s != CX_OK) return NULL;
  cx_tensor *x = cx_program_tensor(p, "input");
  float *in = x->data;
  for (int64_t i = 0; i < cx_tensor_numel(x); i++)
    in[i] = cx_rng_normal(cx_rng_key(3, 1, 0), (uint64_t)i);
  float *y = NULL;
  if ((s = cx_program_forward(p)) == CX_OK) {
    cx_tensor *t = cx_program_tensor(p, g->values[g->outputs[0]].name);
    *n = cx_tensor_numel(t);
    if ((y = malloc(cx_tensor_nbytes(t)))) memcpy(y, t->data, cx_tensor_nbytes(t));
  }
  CHECK(s == CX_OK, "forward: %s", cx_last_error());
  cx_program_free(p);
  return y;
}

/* Gradual channel pruning: the MAC target met by the masks and by the rewritten graph, which
 * computes what the trained, masked one does; the resumed run rewrote the same graph. */
static void check_rewrite(const outcome *o, const outcome *resumed) {
  const cx_prune_channel_stats *st = &o->st;
  printf("  channel: %lld of %lld channels kept, MACs %lld -> %lld, masks at %.3f\n",
         (long long)st->channels_after, (long long)st->channels_before,
         (long long)st->macs_before, (long long)st->macs_after, o->sparsity);
  CHECK(o->rewritten && st->macs_after <= 0.5 * (double)st->macs_before &&
        st->channels_after < st->channels_before, "channel: MACs %lld of %lld",
        (long long)st->macs_after, (long long)st->macs_before);
  CHECK(fabs(1 - (double)st->macs_after / (double)st->macs_before - o->sparsity) < 1e-9,
        "channel: the masks removed %.4f of the MACs, the rewrite %.4f", o->sparsity,
        1 - (double)st->macs_after / (double)st->macs_before);
  if (!o->rewritten || !resumed->rewritten) return;
  CHECK(same_model(o->rewritten, resumed->rewritten), "channel: the resumed run rewrote "
        "another graph");
  int64_t na = 0, nb = 0;
  float *a = logits(o->model, &na), *b = logits(o->rewritten, &nb);
  double diff = 0, scale = 0;
  for (int64_t i = 0; a && b && na == nb && i < na; i++) {
    diff = fmax(diff, fabs((double)a[i] - b[i]));
    scale = fmax(scale, fabs((double)a[i]));
  }
  printf("  channel: the rewritten graph's logits differ by %.3g (largest %.3g)\n", diff, scale);
  CHECK(a && b && na == nb && diff <= 1e-5 * scale, "channel: the rewritten graph's logits "
        "differ from the masked model's by %g of %g", diff, scale);
  free(a), free(b);
}

static void test_training(const paths *p, cx_optim_kind kind, cx_prune_method method) {
  const char *what = method == CX_PRUNE_NM        ? "2:4"
                     : method == CX_PRUNE_CHANNEL ? "channel"
                                                  : "magnitude";
  outcome straight = prune_run(p, cx_backend_cpu(), kind, method, 0);
  /* the resumed leg runs through the guard backend, whose memory host code cannot touch: the
   * masker reaches backend tensors only through ops and copies */
  outcome resumed = prune_run(p, cx_backend_guard(), kind, method, 10);
  if (straight.status == CX_OK && resumed.status == CX_OK) {
    int64_t zeros = 0, total = 0;
    for (int i = 0; i < straight.n_targets; i++)
      for (int64_t j = 0; j < straight.mask_len[i]; j++) zeros += !straight.masks[i][j], total++;
    printf("%s, %s, EMA: %lld steps, loss %.4f, %lld of %lld weights in %d layers pruned "
           "(sparsity %.3f)\n", cx_optim_kind_name(kind), what, (long long)straight.r.steps,
           straight.r.final_loss, (long long)zeros, (long long)total, straight.n_targets,
           straight.sparsity);
    double want = method == CX_PRUNE_NM ? 0.5 : 0.7;
    if (method == CX_PRUNE_CHANNEL) check_rewrite(&straight, &resumed);
    else
      CHECK(zeros == (int64_t)floor(want * (double)total + 0.5) && straight.sparsity == want,
            "%s: %lld of %lld pruned, sparsity %g", what, (long long)zeros, (long long)total,
            straight.sparsity);
    CHECK(resumed.r.resumed_step == 10, "resumed at %lld", (long long)resumed.r.resumed_step);
    bool masks_same = straight.n_targets == resumed.n_targets;
    for (int i = 0; masks_same && i < straight.n_targets; i++)
      masks_same = !memcmp(straight.masks[i], resumed.masks[i], (size_t)straight.mask_len[i]);
    CHECK(masks_same, "%s %s: the resumed run's masks differ", cx_optim_kind_name(kind), what);
    CHECK(same_model(straight.model, resumed.model), "%s %s: a resumed run differs from an "
          "uninterrupted one", cx_optim_kind_name(kind), what);
    CHECK(resumed.r.final_loss == straight.r.final_loss, "final loss %.9g resumed, %.9g straight",
          resumed.r.final_loss, straight.r.final_loss);
  }
  CHECK(cx_guard_live_regions() == 0, "%d guard regions left", cx_guard_live_regions());
  free_outcome(&straight);
  free_outcome(&resumed);
}

static void run_training(void) {
  paths p;
  snprintf(p.dir, sizeof p.dir, "/tmp/cx_prune_mask_XXXXXX");
  CHECK(mkdtemp(p.dir) != NULL, "%s", "mkdtemp");
  snprintf(p.small, sizeof p.small, "%s/small.h5", p.dir);
  cx_status s = fmnist_import(p.dir, p.train, p.test);
  if (s == CX_OK) s = fmnist_subset(p.train, p.small, 0, 256);
  CHECK(s == CX_OK, "data: %s", cx_last_error());
  if (s == CX_OK) {
    test_training(&p, CX_OPTIM_SGD, CX_PRUNE_MAGNITUDE);
    test_training(&p, CX_OPTIM_ADAMW, CX_PRUNE_MAGNITUDE);
    test_training(&p, CX_OPTIM_ADAMW, CX_PRUNE_NM);
    test_training(&p, CX_OPTIM_SGD, CX_PRUNE_CHANNEL);
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", p.dir);
  if (system(cmd) != 0) printf("could not remove %s\n", p.dir);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "train")) {
    run_training();
  } else {
    test_schedule();
    test_config();
    test_select();
    test_magnitude();
    test_nm();
    test_mask_graph();
  }
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
