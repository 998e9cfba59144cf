/* The trainer hooks: each micro-batch, the teachers' logits for exactly the images the student
 * sees (same augmented batch) come from the cache or from running the teachers, several
 * teachers are combined, and the result is written into the training program's inputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/program_input.h"
#include "../train/trainer.h"
#include "internal.h"

typedef struct teacher {
  cx_kd_teacher *t;
  cx_kd_cache *cache;
  float weight;
  char name[64];
  float *logits; /* [micro, classes] */
} teacher;

struct cx_kd {
  cx_kd_config kd;
  cx_kd_hint *hints;
  int n_teachers;
  teacher *teachers;
  int64_t micro, classes, epoch;
  bool started, aug_random, quiet;
  float *combined; /* [micro, classes] */
  double *mix;     /* [classes]: one sample's averaged distribution */
  cx_kd_stats stats;
};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- opening ---- */

static uint64_t hash_f(uint64_t h, float v) { return cx_kd_fnv(h, &v, sizeof v); }
static uint64_t hash_i(uint64_t h, int64_t v) { return cx_kd_fnv(h, &v, sizeof v); }

/* Every field that changes the images the teacher sees (not label smoothing). */
static uint64_t hash_aug(uint64_t h, const cx_augment *a) {
  h = hash_i(hash_i(hash_i(hash_i(h, a->out_h), a->out_w), a->crop), a->pad);
  h = hash_f(hash_f(hash_f(hash_f(h, a->scale_min), a->scale_max), a->ratio_min), a->ratio_max);
  h = hash_i(hash_f(hash_i(h, a->flip), a->cutout_prob), a->cutout_size);
  h = hash_f(hash_f(hash_f(h, a->mixup_alpha), a->cutmix_alpha), a->mix_prob);
  for (int c = 0; c < 4; c++) h = hash_f(hash_f(h, a->mean[c]), a->std[c]);
  return h;
}

typedef struct key_parts {
  uint64_t teacher, data;
  int64_t samples;
  const cx_train_opts *train;
  int64_t micro;
  int k;
  cx_precision precision; /* the teacher's forward pass */
} key_parts;

static uint64_t hash_parts(uint64_t h, const key_parts *p) {
  const cx_augment *a = &p->train->loader.aug;
  h = hash_i(hash_i(hash_i(hash_i(h, CX_KD_CACHE_FORMAT_VERSION), (int64_t)p->teacher),
                    (int64_t)p->data), p->samples);
  h = hash_i(hash_aug(h, a), p->k);
  if (cx_kd_aug_random(a)) h = hash_i(h, (int64_t)p->train->seed);
  /* fp32 keeps the keys caches had before the precision was a choice */
  if (p->precision != CX_PRECISION_F32) h = hash_i(h, p->precision);
  /* mixed pairs are formed within a batch: the batch layout decides which images are mixed;
   * data-parallel ranks each keep their own shard of the cache (their samples) */
  if (cx_kd_aug_mixing(a) || p->train->loader.world > 1)
    h = hash_i(hash_i(hash_i(h, p->micro), p->train->loader.rank), p->train->loader.world);
  return h;
}

static void describe(char *buf, size_t size, const teacher *t, const key_parts *p) {
  const cx_train_opts *o = p->train;
  const cx_augment *a = &o->loader.aug;
  int n = snprintf(buf, size, "teacher '%s' (graph %016llx); data %s part '%s' (%lld samples, "
                   "identity %016llx); augmentation crop %d pad %d flip %d cutout %g mixup %g "
                   "cutmix %g; ", t->name, (unsigned long long)p->teacher, o->train_path,
                   o->train_part ? o->train_part : "", (long long)p->samples,
                   (unsigned long long)p->data, (int)a->crop, a->pad, (int)a->flip,
                   (double)a->cutout_prob, (double)a->mixup_alpha, (double)a->cutmix_alpha);
  if (n < 0 || (size_t)n >= size) return;
  if (p->precision != CX_PRECISION_F32) {
    int m = snprintf(buf + n, size - (size_t)n, "forward in %s; ",
                     p->precision == CX_PRECISION_BF16 ? "bf16" : "fp16");
    if (m < 0 || (size_t)(n += m) >= size) return;
  }
  if (!cx_kd_aug_random(a)) snprintf(buf + n, size - (size_t)n, "deterministic: one epoch");
  else if (!cx_kd_aug_mixing(a) && o->loader.world <= 1)
    snprintf(buf + n, size - (size_t)n, "seed %llu", (unsigned long long)o->seed);
  else
    snprintf(buf + n, size - (size_t)n, "seed %llu, batch %lld, rank %d of %d",
             (unsigned long long)o->seed, (long long)p->micro, o->loader.rank, o->loader.world);
}

static cx_status open_cache(cx_kd *kd, teacher *t, const cx_kd_opts *o, const cx_train_opts *train,
                            int64_t samples) {
  const cx_kd_teacher_spec *sp = &o->teachers[t - kd->teachers];
  key_parts p = {.teacher = cx_kd_graph_hash(sp->graph), .samples = samples, .train = train,
                 .micro = kd->micro, .k = o->cache_k, .precision = sp->precision};
  CX_TRY(cx_kd_data_identity(train->train_path, train->train_part, &p.data));
  uint64_t h1 = hash_parts(CX_FNV_OFFSET, &p), h2 = hash_parts(h1 ^ 0x9e3779b97f4a7c15ULL, &p);
  char key[CX_KD_KEY_HEX + 1], desc[1024];
  snprintf(key, sizeof key, "%016llx%016llx", (unsigned long long)h1, (unsigned long long)h2);
  describe(desc, sizeof desc, t, &p);
  cx_kd_cache_opts co = {.dir = o->cache_dir, .key = key, .description = desc,
                         .samples = samples, .classes = kd->classes, .k = o->cache_k,
                         .quiet = o->quiet};
  return cx_kd_cache_open(&co, &t->cache);
}

/* The teacher must take the loader's images and give the data's classes. */
static cx_status check_teacher(const teacher *t, const cx_dataset_info *d, const cx_augment *a,
                               const char *path) {
  int64_t chw[3], h = a->out_h ? a->out_h : d->h, w = a->out_w ? a->out_w : d->w;
  cx_kd_teacher_input_shape(t->t, chw);
  if (chw[0] != d->c || chw[1] != h || chw[2] != w)
    return cx_fail(CX_ERR_SHAPE, "teacher '%s' takes images of %lldx%lldx%lld (CxHxW), but %s "
                   "gives %lldx%lldx%lld", t->name, (long long)chw[0], (long long)chw[1],
                   (long long)chw[2], path, (long long)d->c, (long long)h, (long long)w);
  if (cx_kd_teacher_classes(t->t) != d->num_classes)
    return cx_fail(CX_ERR_SHAPE, "teacher '%s' has %lld classes, but %s has %lld", t->name,
                   (long long)cx_kd_teacher_classes(t->t), path, (long long)d->num_classes);
  return CX_OK;
}

/* Hints name features of the first teacher; their shapes come from its program. */
static cx_status open_hints(cx_kd *kd, const cx_kd_opts *o, const char **names) {
  int n = o->kd.n_hints;
  kd->hints = calloc((size_t)n + 1, sizeof *kd->hints);
  if (!kd->hints) return cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int i = 0; i < n; i++) {
    kd->hints[i] = o->kd.hints[i];
    names[i] = o->kd.hints[i].teacher;
  }
  kd->kd.hints = kd->hints;
  return CX_OK;
}

static cx_status fill_hint_shapes(cx_kd *kd) {
  for (int i = 0; i < kd->kd.n_hints; i++) {
    cx_shape s;
    cx_kd_teacher_feature(kd->teachers[0].t, i, &s);
    if (s.ndim != 4)
      return cx_fail(CX_ERR_SHAPE, "feature hint: the teacher's '%s' has rank %d; a feature map "
                     "[N,C,H,W] is needed", kd->hints[i].teacher, s.ndim);
    for (int d = 0; d < 3; d++) kd->hints[i].teacher_shape[d] = s.d[1 + d];
  }
  return CX_OK;
}

static cx_status open_teachers(cx_kd *kd, const cx_kd_opts *o, const cx_train_opts *train,
                               const cx_dataset_info *d) {
  const char *names[16] = {0};
  if (o->kd.n_hints > 14) return cx_fail(CX_ERR_ARG, "at most 14 feature hints");
  CX_TRY(open_hints(kd, o, names));
  for (int i = 0; i < o->n_teachers; i++) {
    teacher *t = &kd->teachers[i];
    const cx_kd_teacher_spec *sp = &o->teachers[i];
    snprintf(t->name, sizeof t->name, "%s", sp->name ? sp->name : "");
    if (!sp->name) snprintf(t->name, sizeof t->name, "teacher%d", i);
    t->weight = sp->weight > 0 ? sp->weight : 1.0f;
    if (!sp->graph) return cx_fail(CX_ERR_ARG, "teacher '%s' has no graph", t->name);
    CX_TRY(cx_kd_teacher_open(sp->graph, train->backend, sp->precision, kd->micro, names,
                              i == 0 ? o->kd.n_hints : 0, &t->t));
    CX_TRY(check_teacher(t, d, &train->loader.aug, train->train_path));
    t->logits = malloc(sizeof(float) * (size_t)(kd->micro * d->num_classes));
    if (!t->logits) return cx_fail(CX_ERR_NOMEM, "out of memory");
  }
  kd->classes = d->num_classes;
  if (kd->kd.classes == 0) kd->kd.classes = d->num_classes;
  if (kd->kd.classes != d->num_classes)
    return cx_fail(CX_ERR_ARG, "distillation: %lld classes configured, but %s has %lld",
                   (long long)kd->kd.classes, train->train_path, (long long)d->num_classes);
  return fill_hint_shapes(kd);
}

static cx_status open_all(cx_kd *kd, const cx_kd_opts *o, const cx_train_opts *train) {
  cx_dataset *ds = NULL;
  CX_TRY(cx_dataset_open(train->train_path, train->train_part, &ds));
  cx_dataset_info d = *cx_dataset_get_info(ds);
  cx_dataset_close(ds);
  kd->teachers = calloc((size_t)o->n_teachers, sizeof *kd->teachers);
  kd->combined = malloc(sizeof(float) * (size_t)(kd->micro * d.num_classes));
  kd->mix = malloc(sizeof(double) * (size_t)d.num_classes);
  if (!kd->teachers || !kd->combined || !kd->mix) return cx_fail(CX_ERR_NOMEM, "out of memory");
  kd->n_teachers = o->n_teachers;
  CX_TRY(open_teachers(kd, o, train, &d));
  /* with feature hints the teacher runs on every batch anyway: its logits come with it */
  bool cache = o->cache_dir && *o->cache_dir && o->kd.n_hints == 0;
  for (int i = 0; cache && i < kd->n_teachers; i++)
    CX_TRY(open_cache(kd, &kd->teachers[i], o, train, d.n));
  return CX_OK;
}

cx_status cx_kd_open(const cx_kd_opts *o, const cx_train_opts *train, cx_kd **out) {
  *out = NULL;
  int accum = train->accum_steps > 0 ? train->accum_steps : 1;
  if (o->n_teachers < 1 || o->n_teachers > 16 || !o->teachers)
    return cx_fail(CX_ERR_ARG, "distillation needs 1 to 16 teachers, not %d", o->n_teachers);
  if (train->batch_size <= 0 || train->batch_size % accum)
    return cx_fail(CX_ERR_ARG, "distillation: batch %lld for %d accumulation steps",
                   (long long)train->batch_size, accum);
  cx_kd *kd = calloc(1, sizeof *kd);
  if (!kd) return cx_fail(CX_ERR_NOMEM, "out of memory");
  kd->kd = o->kd;
  kd->kd.soft_targets = cx_kd_aug_mixing(&train->loader.aug);
  /* the trainer's micro-batch: a data-parallel rank's share (train/trainer.h) */
  kd->micro = train->batch_size / accum / (train->loader.world > 1 ? train->loader.world : 1);
  kd->aug_random = cx_kd_aug_random(&train->loader.aug);
  kd->quiet = o->quiet;
  cx_status s = open_all(kd, o, train);
  if (s == CX_OK) {
    *out = kd;
    return CX_OK;
  }
  cx_kd_close(kd);
  return s;
}

/* ---- epochs and the cache ---- */

static void flush_caches(cx_kd *kd) {
  for (int i = 0; i < kd->n_teachers; i++) {
    teacher *t = &kd->teachers[i];
    if (!t->cache || cx_kd_cache_flush(t->cache) == CX_OK) continue;
    if (!kd->quiet)
      fprintf(stderr, "warning: teacher cache of '%s' not written, and off from now on: %s\n",
              t->name, cx_last_error());
    cx_error_clear();
    cx_kd_cache_close(t->cache);
    t->cache = NULL;
  }
}

cx_status cx_kd_set_epoch(cx_kd *kd, int64_t epoch) {
  if (kd->started && epoch != kd->epoch) flush_caches(kd);
  kd->epoch = epoch;
  kd->started = true;
  return CX_OK;
}

cx_status cx_kd_close(cx_kd *kd) {
  if (!kd) return CX_OK;
  cx_status s = CX_OK;
  for (int i = 0; i < kd->n_teachers; i++) {
    teacher *t = &kd->teachers[i];
    if (t->cache && s == CX_OK) s = cx_kd_cache_flush(t->cache);
    cx_kd_cache_close(t->cache);
    cx_kd_teacher_close(t->t);
    free(t->logits);
  }
  free(kd->teachers);
  free(kd->combined);
  free(kd->mix);
  free(kd->hints);
  free(kd);
  return s;
}

/* ---- each batch ---- */

static cx_status teacher_logits(cx_kd *kd, teacher *t, const cx_batch *b) {
  size_t bytes = sizeof(float) * (size_t)(b->size * kd->classes);
  if (t->cache) {
    CX_TRY(cx_kd_cache_epoch(t->cache, kd->aug_random ? kd->epoch : 0));
    if (cx_kd_cache_get(t->cache, b->ids, b->size, t->logits)) {
      kd->stats.cached_batches++;
      return CX_OK;
    }
  }
  double t0 = now();
  CX_TRY(cx_kd_teacher_run(t->t, b->images, b->size));
  memcpy(t->logits, cx_kd_teacher_logits(t->t), bytes);
  kd->stats.teacher_seconds += now() - t0;
  kd->stats.teacher_batches++;
  if (!t->cache) return CX_OK;
  /* the student gets what the cache will serve later (top-k, fp16), so that a run does not
   * depend on whether its teacher outputs were computed or read */
  CX_TRY(cx_kd_cache_put(t->cache, b->ids, b->size, t->logits));
  cx_kd_cache_get(t->cache, b->ids, b->size, t->logits);
  return CX_OK;
}

void cx_kd_combine_teachers(const float *const *logits, const float *weights, int n_teachers,
                            int64_t n, int64_t classes, float temperature, double *work,
                            float *out) {
  double T = temperature, wsum = 0;
  for (int i = 0; i < n_teachers; i++) wsum += weights[i];
  for (int64_t s = 0; s < n; s++) {
    memset(work, 0, sizeof(double) * (size_t)classes);
    for (int i = 0; i < n_teachers; i++) {
      const float *z = logits[i] + s * classes;
      double max = z[0], sum = 0;
      for (int64_t c = 1; c < classes; c++) max = fmax(max, z[c]);
      for (int64_t c = 0; c < classes; c++) sum += exp((z[c] - max) / T);
      for (int64_t c = 0; c < classes; c++)
        work[c] += weights[i] / wsum * exp((z[c] - max) / T) / sum;
    }
    for (int64_t c = 0; c < classes; c++)
      out[s * classes + c] = (float)(T * log(fmax(work[c], 1e-30)));
  }
}

static void combine(cx_kd *kd, int64_t n, float *out) {
  const float *logits[16];
  float weights[16];
  for (int i = 0; i < kd->n_teachers; i++)
    logits[i] = kd->teachers[i].logits, weights[i] = kd->teachers[i].weight;
  cx_kd_combine_teachers(logits, weights, kd->n_teachers, n, kd->classes, kd->kd.temperature,
                         kd->mix, out);
}

static cx_status write_input(cx_program *p, const char *name, const float *src, int64_t n,
                             size_t per) {
  if (!cx_program_tensor(p, name)) return CX_OK; /* alpha 0: the graph does not read the teacher */
  cx_status s = cx_program_write_input(p, name, src, per * (size_t)n);
  if (s != CX_OK) cx_error_prefix("distillation");
  return s;
}

static cx_status write_features(cx_kd *kd, cx_program *p, int64_t n) {
  for (int i = 0; i < kd->kd.n_hints; i++) {
    cx_shape s;
    const float *f = cx_kd_teacher_feature(kd->teachers[0].t, i, &s);
    char name[300];
    snprintf(name, sizeof name, "teacher_feat/%s", kd->hints[i].teacher);
    size_t per = sizeof(float) * (size_t)(s.d[1] * s.d[2] * s.d[3]);
    CX_TRY(write_input(p, name, f, n, per));
  }
  return CX_OK;
}

static cx_status feed(void *user, cx_program *train, const cx_batch *b) {
  cx_kd *kd = user;
  if (b->dtype != CX_F32)
    return cx_fail(CX_ERR_UNSUPPORTED, "distillation: the teacher takes f32 images, the loader "
                   "gives %s", cx_dtype_name(b->dtype));
  if (b->size > kd->micro)
    return cx_fail(CX_ERR_ARG, "distillation: a batch of %lld for teachers compiled for %lld",
                   (long long)b->size, (long long)kd->micro);
  /* the batch's own epoch: a run resumed in epoch e reads and fills e's cache file */
  if (!kd->started || b->epoch != kd->epoch) CX_TRY(cx_kd_set_epoch(kd, b->epoch));
  for (int i = 0; i < kd->n_teachers; i++) CX_TRY(teacher_logits(kd, &kd->teachers[i], b));
  const float *z = kd->teachers[0].logits;
  if (kd->n_teachers > 1) {
    combine(kd, b->size, kd->combined);
    z = kd->combined;
  }
  kd->stats.batches++;
  CX_TRY(write_input(train, "teacher_logits", z, b->size, sizeof(float) * (size_t)kd->classes));
  return write_features(kd, train, b->size);
}

static cx_status build_graph(void *user, const cx_graph *model, cx_graph **out) {
  cx_kd *kd = user;
  return cx_kd_graph(model, &kd->kd, out);
}

cx_train_ext cx_kd_extension(cx_kd *kd) {
  return (cx_train_ext){.name = "distill", .self = kd, .build_graph = build_graph, .feed = feed};
}

cx_kd_stats cx_kd_get_stats(const cx_kd *kd) { return kd->stats; }

const cx_kd_config *cx_kd_get_config(const cx_kd *kd) { return &kd->kd; }
