/* The loader: batches are the same whatever the number of workers, the prefetch depth or the
 * storage mode; every sample comes exactly once per epoch, and exactly once across shards;
 * augmentation is reproducible and does what it says (crop, flip, normalise); mixup and cutmix
 * mix the right pairs with targets that sum to 1; offline augmentation equals the loader's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../data/data.h"
#include "check.h"

static char dir[64], set_path[128];

enum { N = 1001, H = 12, W = 10, C = 3, K = 7 };

static uint8_t pixel(int64_t i, int64_t k) {
  return (uint8_t)((i * 2654435761u + k * 40503u) >> 7);
}

static void make_set(void) {
  snprintf(set_path, sizeof set_path, "%s/set.h5", dir);
  cx_dataset_meta m = {.h = H, .w = W, .c = C, .num_classes = K, .source = "test"};
  cx_dataset_writer *w;
  if (cx_dataset_writer_create(set_path, &m, &w) != CX_OK) return;
  uint8_t img[H * W * C];
  for (int64_t i = 0; i < N; i++) {
    int64_t label = i % K;
    for (int k = 0; k < H * W * C; k++) img[k] = pixel(i, k);
    cx_dataset_writer_append(w, "", img, &label, 1);
  }
  CHECK(cx_dataset_writer_finish(w) == CX_OK, "writing the set: %s", cx_last_error());
}

/* ---- one epoch, collected ---- */

typedef struct epoch_run {
  int64_t n, batches, floats, classes;
  int64_t *ids, *labels, *sizes;
  float *images, *targets;
  uint16_t *bf16;
} epoch_run;

static void run_free(epoch_run *r) {
  free(r->ids), free(r->labels), free(r->sizes), free(r->images), free(r->targets), free(r->bf16);
  memset(r, 0, sizeof *r);
}

static bool collect(const cx_loader_opts *o, int64_t epoch, epoch_run *r) {
  memset(r, 0, sizeof *r);
  cx_loader *l;
  if (cx_loader_open(set_path, o, &l) != CX_OK) {
    CHECK(0, "open: %s", cx_last_error());
    return false;
  }
  int64_t cap = cx_loader_samples(l);
  r->batches = cx_loader_batches(l);
  r->ids = malloc((size_t)cap * 8), r->labels = malloc((size_t)cap * 8);
  r->sizes = calloc((size_t)r->batches + 1, 8);
  cx_loader_epoch_begin(l, epoch);
  cx_batch b;
  int64_t nb = 0;
  while (cx_loader_next(l, &b) == CX_OK && b.size > 0) {
    CHECK(b.index == nb, "batch %lld came as number %lld", (long long)b.index, (long long)nb);
    int64_t fl = b.c * b.h * b.w;
    r->floats = fl, r->classes = b.num_classes;
    r->images = realloc(r->images, (size_t)((r->n + b.size) * fl) * sizeof(float));
    if (b.dtype == CX_BF16) {
      r->bf16 = realloc(r->bf16, (size_t)((r->n + b.size) * fl) * 2);
      memcpy(r->bf16 + r->n * fl, b.images, (size_t)(b.size * fl) * 2);
    } else {
      memcpy(r->images + r->n * fl, b.images, (size_t)(b.size * fl) * sizeof(float));
    }
    if (b.targets) {
      r->targets = realloc(r->targets, (size_t)((r->n + b.size) * b.num_classes) * sizeof(float));
      memcpy(r->targets + r->n * b.num_classes, b.targets,
             (size_t)(b.size * b.num_classes) * sizeof(float));
    }
    memcpy(r->ids + r->n, b.ids, (size_t)b.size * 8);
    memcpy(r->labels + r->n, b.labels, (size_t)b.size * 8);
    r->sizes[nb++] = b.size;
    r->n += b.size;
  }
  CHECK(nb == r->batches && r->n == cap, "got %lld batches, %lld samples; expected %lld, %lld",
        (long long)nb, (long long)r->n, (long long)r->batches, (long long)cap);
  cx_loader_close(l);
  return true;
}

static bool same_run(const epoch_run *a, const epoch_run *b) {
  if (a->n != b->n || a->floats != b->floats) return false;
  bool same = !memcmp(a->ids, b->ids, (size_t)a->n * 8) &&
              !memcmp(a->labels, b->labels, (size_t)a->n * 8) &&
              !memcmp(a->images, b->images, (size_t)(a->n * a->floats) * sizeof(float));
  if (a->targets || b->targets)
    same = same && a->targets && b->targets &&
           !memcmp(a->targets, b->targets, (size_t)(a->n * a->classes) * sizeof(float));
  return same;
}

static cx_loader_opts base_opts(void) {
  cx_loader_opts o = cx_loader_defaults();
  o.batch_size = 64;
  o.seed = 42;
  o.workers = 1;
  return o;
}

static cx_augment full_aug(void) {
  cx_augment a = {.crop = CX_CROP_PAD, .pad = 2, .flip = true, .cutout_prob = 0.5f,
                  .cutout_size = 4, .mixup_alpha = 0.4f, .cutmix_alpha = 1.0f,
                  .mean = {0.5f, 0.4f, 0.3f}, .std = {0.2f, 0.25f, 0.3f}};
  return a;
}

/* ---- order and coverage ---- */

static void test_workers_and_modes(void) {
  cx_loader_opts o = base_opts();
  o.aug = full_aug();
  epoch_run one, three, stream;
  o.workers = 1, o.prefetch = 1;
  collect(&o, 3, &one);
  o.workers = 3, o.prefetch = 5;
  collect(&o, 3, &three);
  o.workers = 2, o.mode = CX_LOADER_STREAM, o.cache_bytes = 1; /* the smallest cache */
  collect(&o, 3, &stream);
  CHECK(same_run(&one, &three), "1 and 3 workers gave different batches");
  CHECK(same_run(&one, &stream), "memory and streaming modes gave different batches");
  run_free(&one), run_free(&three), run_free(&stream);
}

static bool is_permutation(const int64_t *ids, int64_t n, int64_t total) {
  char *seen = calloc((size_t)total, 1);
  bool ok = n == total;
  for (int64_t i = 0; ok && i < n; i++) {
    ok = ids[i] >= 0 && ids[i] < total && !seen[ids[i]];
    if (ok) seen[ids[i]] = 1;
  }
  free(seen);
  return ok;
}

static void test_epochs(void) {
  cx_loader_opts o = base_opts();
  o.workers = 2;
  epoch_run e0, e1, again;
  collect(&o, 0, &e0);
  collect(&o, 1, &e1);
  collect(&o, 0, &again);
  CHECK(is_permutation(e0.ids, e0.n, N), "epoch 0 is not every sample exactly once");
  CHECK(is_permutation(e1.ids, e1.n, N), "epoch 1 is not every sample exactly once");
  CHECK(e0.batches == 16 && e0.sizes[15] == N % 64 && e0.sizes[0] == 64, "batch sizes");
  CHECK(memcmp(e0.ids, e1.ids, N * 8) != 0, "epochs 0 and 1 have the same order");
  CHECK(same_run(&e0, &again), "epoch 0 twice gave different batches");
  int64_t order[N];
  cx_data_epoch_order(42, 1, N, true, order);
  CHECK(!memcmp(order, e1.ids, sizeof order), "the order is not cx_data_epoch_order(seed, epoch)");
  for (int64_t i = 0; i < N; i++)
    CHECK(e0.labels[i] == e0.ids[i] % K, "label of %lld", (long long)i);
  run_free(&e0), run_free(&e1), run_free(&again);
  o.shuffle = false;
  collect(&o, 5, &e0);
  for (int64_t i = 0; i < N; i++) CHECK(e0.ids[i] == i, "unshuffled order at %lld", (long long)i);
  run_free(&e0);
}

static void test_shards(void) {
  for (int world = 2; world <= 3; world++) {
    cx_loader_opts o = base_opts();
    o.world = world;
    int64_t all[N], n = 0;
    for (int rank = 0; rank < world; rank++) {
      epoch_run r;
      o.rank = rank;
      collect(&o, 2, &r);
      CHECK(r.n == (N - rank + world - 1) / world, "rank %d of %d has %lld samples", rank, world,
            (long long)r.n);
      if (n + r.n <= N) memcpy(all + n, r.ids, (size_t)r.n * 8);
      n += r.n;
      run_free(&r);
    }
    CHECK(is_permutation(all, n, N), "%d shards do not hold every sample exactly once", world);
  }
  cx_loader_opts o = base_opts();
  o.world = 2, o.drop_last = true;
  for (int rank = 0; rank < 2; rank++) {
    epoch_run r;
    o.rank = rank;
    collect(&o, 0, &r);
    CHECK(r.batches == 7 && r.n == 7 * 64, "drop_last: rank %d has %lld batches", rank,
          (long long)r.batches);
    run_free(&r);
  }
}

/* Stopping an epoch early and starting another must not hang nor leak old batches into it. */
static void test_restart(void) {
  cx_loader_opts o = base_opts();
  o.workers = 3, o.aug = full_aug();
  cx_loader *l;
  if (cx_loader_open(set_path, &o, &l) != CX_OK) return;
  cx_batch b;
  cx_loader_next(l, &b);
  cx_loader_next(l, &b);
  cx_loader_epoch_begin(l, 4);
  int64_t ids[N], n = 0;
  while (cx_loader_next(l, &b) == CX_OK && b.size) {
    memcpy(ids + n, b.ids, (size_t)b.size * 8);
    n += b.size;
  }
  cx_loader_close(l);
  epoch_run fresh;
  collect(&o, 4, &fresh);
  CHECK(n == N && !memcmp(ids, fresh.ids, sizeof ids), "a restarted epoch differs");
  run_free(&fresh);
}

/* ---- what augmentation does ---- */

static float norm(const cx_augment *a, int c, uint8_t v) {
  return ((float)v / 255.0f - a->mean[c]) / (a->std[c] ? a->std[c] : 1);
}

/* Each output is the image shifted by (dy, dx), mirrored or not, with zeros outside. */
static bool matches_window(const cx_augment *a, const float *out, int64_t id, int dy, int dx,
                           bool flip) {
  for (int c = 0; c < C; c++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) {
        int sy = y + dy, sx = (flip ? W - 1 - x : x) + dx;
        uint8_t v = sy < 0 || sy >= H || sx < 0 || sx >= W ? 0 : pixel(id, (sy * W + sx) * C + c);
        if (fabsf(out[(c * H + y) * W + x] - norm(a, c, v)) > 1e-5f) return false;
      }
  return true;
}

static void test_crop_flip_normalise(void) {
  cx_loader_opts o = base_opts();
  o.aug = (cx_augment){.crop = CX_CROP_PAD, .pad = 2, .flip = true, .mean = {0.1f, 0.2f, 0.3f},
                       .std = {0.5f, 0.25f, 2.0f}};
  epoch_run r, same, other;
  collect(&o, 0, &r);
  collect(&o, 0, &same);
  o.seed = 43;
  collect(&o, 0, &other);
  CHECK(same_run(&r, &same), "the same seed gave different augmentation");
  CHECK(!same_run(&r, &other), "another seed gave the same augmentation");
  int flips = 0, shifted = 0, bad = 0;
  for (int64_t i = 0; i < r.n; i++) {
    bool found = false;
    for (int dy = -2; dy <= 2 && !found; dy++)
      for (int dx = -2; dx <= 2 && !found; dx++)
        for (int f = 0; f < 2 && !found; f++)
          if (matches_window(&o.aug, r.images + i * r.floats, r.ids[i], dy, dx, f))
            found = true, flips += f, shifted += dy || dx;
    bad += !found;
  }
  CHECK(!bad, "%d outputs are no padded, shifted, maybe mirrored window of their image", bad);
  CHECK(flips > N / 3 && flips < 2 * N / 3 && shifted > N / 2, "%d flips, %d shifts in %d", flips,
        shifted, N);
  run_free(&r), run_free(&same), run_free(&other);
}

static void test_resized_and_bf16(void) {
  cx_loader_opts o = base_opts();
  o.aug = (cx_augment){.out_h = 16, .out_w = 14, .crop = CX_CROP_RESIZED, .flip = true,
                       .cutout_prob = 1, .cutout_size = 3};
  epoch_run f, b;
  collect(&o, 1, &f);
  o.out_dtype = CX_BF16, o.workers = 2;
  collect(&o, 1, &b);
  CHECK(f.floats == C * 16 * 14, "resized crop output size");
  int64_t bad = 0, zeros = 0;
  for (int64_t k = 0; k < f.n * f.floats; k++) {
    bad += f.images[k] < 0 || f.images[k] > 1.0f + 1e-6f;
    zeros += f.images[k] == 0;
    bad += b.bf16 && b.bf16[k] != cx_f32_to_bf16(f.images[k]);
  }
  CHECK(!bad, "%lld values out of [0, 1] or bf16 values not the rounded f32 ones", (long long)bad);
  CHECK(zeros >= f.n * 9 * C / 4, "cutout left too few zeros (%lld)", (long long)zeros);
  run_free(&f), run_free(&b);
}

/* ---- mixup and cutmix ---- */

static bool targets_sum_to_one(const epoch_run *r) {
  for (int64_t i = 0; i < r->n; i++) {
    double s = 0;
    for (int64_t k = 0; k < r->classes; k++) {
      if (r->targets[i * r->classes + k] < 0) return false;
      s += r->targets[i * r->classes + k];
    }
    if (fabs(s - 1) > 1e-5) return false;
  }
  return true;
}

/* Within a batch, sample i is mixed with sample size-1-i. Checks every pair against the unmixed
 * images; returns how many batches were mixed. */
static int check_mixed(const epoch_run *plain, const epoch_run *mixed, bool cut) {
  int mixed_batches = 0;
  for (int64_t b = 0, at = 0; b < mixed->batches; at += mixed->sizes[b++]) {
    int64_t n = mixed->sizes[b];
    bool any = false;
    for (int64_t i = 0; i < n; i++) {
      int64_t j = n - 1 - i, yi = mixed->labels[at + i], yj = mixed->labels[at + j];
      if (yi == yj) continue;
      float lambda = mixed->targets[(at + i) * K + yi];
      const float *xi = plain->images + (at + i) * plain->floats;
      const float *xj = plain->images + (at + j) * plain->floats;
      const float *m = mixed->images + (at + i) * plain->floats;
      int64_t from_j = 0, bad = 0;
      for (int64_t k = 0; k < plain->floats; k++) {
        if (cut) {
          bool is_i = m[k] == xi[k], is_j = m[k] == xj[k];
          bad += !is_i && !is_j;
          from_j += is_j && !is_i;
        } else {
          bad += fabsf(m[k] - (lambda * xi[k] + (1 - lambda) * xj[k])) > 1e-4f;
        }
      }
      CHECK(!bad, "batch %lld sample %lld: %lld values are not mixed from the pair",
            (long long)b, (long long)i, (long long)bad);
      if (cut)
        CHECK(from_j <= llroundf((1 - lambda) * (float)plain->floats) + 1,
              "cutmix took %lld values from the pair for lambda %g", (long long)from_j, lambda);
      any = any || lambda < 1;
    }
    mixed_batches += any;
  }
  return mixed_batches;
}

static void test_mixing(void) {
  cx_loader_opts o = base_opts();
  o.aug = full_aug();
  o.aug.mixup_alpha = o.aug.cutmix_alpha = 0;
  epoch_run plain, mix, cut, smooth;
  collect(&o, 2, &plain);
  o.aug.mixup_alpha = 0.4f;
  collect(&o, 2, &mix);
  o.aug.mixup_alpha = 0, o.aug.cutmix_alpha = 1;
  collect(&o, 2, &cut);
  o.aug.mixup_alpha = 0.4f, o.aug.label_smoothing = 0.1f, o.workers = 3;
  collect(&o, 2, &smooth);
  CHECK(mix.targets && cut.targets && smooth.targets && !plain.targets, "soft targets");
  if (!mix.targets || !cut.targets || !smooth.targets) return;
  CHECK(targets_sum_to_one(&mix), "mixup targets do not sum to 1");
  CHECK(targets_sum_to_one(&cut), "cutmix targets do not sum to 1");
  CHECK(targets_sum_to_one(&smooth), "smoothed targets do not sum to 1");
  CHECK(check_mixed(&plain, &mix, false) == (int)mix.batches, "mixup left batches unmixed");
  CHECK(check_mixed(&plain, &cut, true) > (int)cut.batches / 2, "cutmix mixed too few batches");
  run_free(&plain), run_free(&mix), run_free(&cut), run_free(&smooth);
}

/* ---- offline augmentation ---- */

static void test_offline(void) {
  char out[160];
  snprintf(out, sizeof out, "%s/aug.h5", dir);
  cx_augment a = {.crop = CX_CROP_PAD, .pad = 3, .flip = true, .cutout_prob = 0.5f,
                  .cutout_size = 3};
  CHECK(cx_data_augment_file(set_path, NULL, out, &a, 2, false, 9, "test") == CX_OK,
        "augment: %s", cx_last_error());
  cx_dataset *d;
  if (cx_dataset_open(out, "", &d) != CX_OK) return;
  CHECK(cx_dataset_get_info(d)->n == 2 * N, "copies");
  uint8_t *img = malloc((size_t)2 * N * H * W * C);
  cx_dataset_read(d, 0, 2 * N, img);
  cx_loader_opts o = base_opts();
  o.seed = 9, o.shuffle = false, o.aug = a;
  for (int c = 0; c < C; c++) o.aug.std[c] = 1.0f / 255;
  int64_t bad = 0;
  for (int copy = 0; copy < 2; copy++) {
    epoch_run r;
    collect(&o, copy, &r);
    for (int64_t i = 0; i < N; i++)
      for (int c = 0; c < C; c++)
        for (int k = 0; k < H * W; k++) {
          uint8_t stored = img[((copy * N + i) * H * W + k) * C + c];
          float v = r.images[i * r.floats + c * H * W + k];
          float want = v == 0 && stored == 0 ? 0 : v; /* cutout: 0 in both */
          bad += lroundf(want) != stored;
        }
    run_free(&r);
  }
  CHECK(!bad, "%lld stored pixels differ from the loader's epochs 0 and 1", (long long)bad);
  free(img);
  cx_dataset_close(d);
}

static void test_bad_opts(void) {
  cx_loader *l = NULL;
  cx_loader_opts o = base_opts();
  o.rank = 2, o.world = 2;
  CHECK(cx_loader_open(set_path, &o, &l) != CX_OK && strstr(cx_last_error(), "rank"), "rank");
  o = base_opts(), o.batch_size = 0;
  CHECK(cx_loader_open(set_path, &o, &l) != CX_OK, "batch size 0 was accepted");
  o = base_opts(), o.aug.crop = CX_CROP_CENTER, o.aug.out_h = 20;
  CHECK(cx_loader_open(set_path, &o, &l) != CX_OK && strstr(cx_last_error(), "centre crop"),
        "a centre crop larger than the image was accepted");
  CHECK(l == NULL, "a loader was returned");
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/cx_test_loader_XXXXXX");
  if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
  make_set();
  test_workers_and_modes();
  test_epochs();
  test_shards();
  test_restart();
  test_crop_flip_normalise();
  test_resized_and_bf16();
  test_mixing();
  test_offline();
  test_bad_opts();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("could not remove %s\n", dir);
  printf("%s: %d failure(s)\n", fails ? "FAILED" : "passed", fails);
  return fails != 0;
}
