#ifndef CX_DISTILL_H
#define CX_DISTILL_H

/* Knowledge distillation (docs/distill.md): the training graph with the KD loss, the teacher
 * run inference-only on the batch the student sees, a cache of the teacher's outputs on disk,
 * and the trainer extension (train/extension.h) that ties them together.
 *
 *   cx_kd *kd;
 *   cx_kd_open(&kd_opts, &train_opts, &kd);   // teachers compiled on train_opts.backend
 *   cx_train_ext ext = cx_kd_extension(kd);    // one of the run's extensions
 *   train_opts.extensions = &ext, train_opts.n_extensions = 1;
 *   cx_train(student, &train_opts, &result);
 *   cx_kd_close(kd);                           // writes the last epoch's cache file
 */

#include <stdbool.h>
#include <stdint.h>

#include "../core/backend.h"
#include "../core/graph.h"
#include "../data/data.h"

struct cx_program;
struct cx_train_opts;
struct cx_train_ext;

/* ---- the KD training graph ---- */

typedef enum cx_hint_kind {
  CX_HINT_FITNET,    /* MSE between a learned 1x1 conv of the student's feature and the teacher's */
  CX_HINT_ATTENTION, /* attention transfer: MSE of the L2-normalised maps mean_c(F^2) */
} cx_hint_kind;

/* A feature-distillation term between a student value and a teacher value (names as `compress
 * inspect` shows them). The teacher's feature is fed as the input "teacher_feat/<teacher>". */
typedef struct cx_kd_hint {
  cx_hint_kind kind;
  const char *student, *teacher;
  float weight;           /* of the term in the loss; 0: 1 */
  int64_t teacher_shape[3]; /* C, H, W of the teacher's feature (cx_kd_teacher_feature_shape) */
} cx_kd_hint;

typedef struct cx_kd_config {
  float temperature;     /* T > 0 (default 4) */
  float alpha;           /* weight of the KD term in [0, 1]; the hard-label term gets 1 - alpha */
  float label_smoothing; /* of the hard-label term */
  int64_t classes;       /* the teacher's classes: "teacher_logits" is [N, classes] */
  /* > 0: the hard-label term is the cross-entropy with soft targets "targets" f32 [N, classes]
   * (the trainer feeds them when mixup or cutmix is on) instead of "labels" s64 [N]. */
  bool soft_targets;
  int n_hints;
  const cx_kd_hint *hints;
  uint64_t seed;         /* initialisation of the FitNets adapters */
} cx_kd_config;

/* T 4, alpha 0.9, no smoothing, no hints; classes must be set. */
cx_kd_config cx_kd_config_defaults(void);

/* The student plus the input "teacher_logits" f32 [N, classes] and the loss
 *   alpha * KLDivTemperature(logits, teacher_logits; T)        (T^2 included, batch mean)
 *   + (1 - alpha) * CrossEntropy(logits, labels or targets)    (label smoothing optional)
 *   + sum of weight * hint terms
 * Outputs: the scalar "loss" first, the student's logits second (what the trainer expects).
 * FitNets adapters are PARAMs named "distill.adapter.<n>.weight". Hints need the student's
 * feature shapes: the student is compiled once at batch 1 to learn them. */
cx_status cx_kd_graph(const cx_graph *student, const cx_kd_config *c, cx_graph **out);

/* The trainer writes every trained parameter back into the model it was given, so the FitNets
 * adapters must be in the student while it trains: _add appends them (as PARAMs, unused by the
 * student's nodes; cx_kd_graph then uses them) and _strip removes them afterwards, before the
 * student is exported. Hints of other kinds have no parameters. */
cx_status cx_kd_adapters_add(cx_graph *student, const cx_kd_config *c);
cx_status cx_kd_adapters_strip(cx_graph *student);

/* ---- the teacher, inference only ---- */

typedef struct cx_kd_teacher cx_kd_teacher;

/* Compiles `teacher` as an inference program for batches of `batch` (no activations kept for a
 * backward pass, no gradients), computing in `precision` (CX_PRECISION_BF16: bf16 autocast in the
 * kernels that have it, the backend permitting). Its image input is "input", or its only graph
 * input; its logits its first output. Values named in `features` become outputs too (feature
 * hints). */
cx_status cx_kd_teacher_open(const cx_graph *teacher, const cx_backend *backend,
                             cx_precision precision, int64_t batch, const char *const *features,
                             int n_features, cx_kd_teacher **out);
void cx_kd_teacher_close(cx_kd_teacher *t);
int64_t cx_kd_teacher_classes(const cx_kd_teacher *t);
/* The teacher's input as [C, H, W]. */
void cx_kd_teacher_input_shape(const cx_kd_teacher *t, int64_t chw[3]);
/* Runs the teacher on n <= batch images (f32 NCHW); the rest of the batch is zero-padded. */
cx_status cx_kd_teacher_run(cx_kd_teacher *t, const float *images, int64_t n);
/* Its logits [batch, classes] after a run. */
const float *cx_kd_teacher_logits(const cx_kd_teacher *t);
/* Feature `i` of the list given at open, [batch, C, H, W], after a run; shape may be NULL. */
const float *cx_kd_teacher_feature(const cx_kd_teacher *t, int i, cx_shape *shape);

/* ---- the teacher-output cache ----
 * One HDF5 file per (key, epoch): <dir>/<key>/epoch-<e>.h5 holding, for every sample served, the
 * top-k logits (fp16, shifted so that the largest is 0) with their classes, and one fill value
 * standing for every other class (docs/distill.md). */

typedef struct cx_kd_cache cx_kd_cache;

#define CX_KD_CACHE_FORMAT "compress.teacher_cache"
#define CX_KD_CACHE_FORMAT_VERSION 1
#define CX_KD_KEY_HEX 32

typedef struct cx_kd_cache_opts {
  const char *dir;         /* the cache directory (created when missing) */
  const char *key;         /* CX_KD_KEY_HEX hex digits naming what the outputs depend on */
  const char *description; /* the key's parts in words, stored in each file */
  int64_t samples;         /* of the data set part: ids lie in [0, samples) */
  int64_t classes;
  int k;                   /* logits kept per sample; 0: min(classes, 10) */
  bool quiet;              /* no warnings about unreadable cache files on stderr */
} cx_kd_cache_opts;

cx_status cx_kd_cache_open(const cx_kd_cache_opts *o, cx_kd_cache **out);
/* Makes `epoch` the current one: its file is read when present and valid (a damaged file or one
 * written for another key is ignored with a warning and rewritten). */
cx_status cx_kd_cache_epoch(cx_kd_cache *c, int64_t epoch);
/* The reconstructed logits [n, classes] of samples ids[0..n) when every one of them is cached
 * for the current epoch (returns true), else false and logits untouched. */
bool cx_kd_cache_get(const cx_kd_cache *c, const int64_t *ids, int64_t n, float *logits);
/* Stores the logits [n, classes] of samples ids (kept top-k in fp16). */
cx_status cx_kd_cache_put(cx_kd_cache *c, const int64_t *ids, int64_t n, const float *logits);
/* Writes the current epoch's file when something was added (temporary name, synced, renamed). */
cx_status cx_kd_cache_flush(cx_kd_cache *c);
/* Samples of the current epoch held, and the path of its file. */
int64_t cx_kd_cache_count(const cx_kd_cache *c);
const char *cx_kd_cache_path(const cx_kd_cache *c);
int cx_kd_cache_k(const cx_kd_cache *c);
void cx_kd_cache_close(cx_kd_cache *c); /* does not flush */

/* The top-k encoding itself, for tests: logits [classes] -> k (class, fp16 value) pairs and the
 * fill value, and back. */
void cx_kd_topk_encode(const float *logits, int64_t classes, int k, uint16_t *cls, uint16_t *val,
                       uint16_t *fill);
void cx_kd_topk_decode(const uint16_t *cls, const uint16_t *val, uint16_t fill, int64_t classes,
                       int k, float *logits);

/* ---- identities for cache keys ---- */

/* A 64-bit FNV-1a hash of the graph: nodes, attributes, value names, shapes, initializers. */
uint64_t cx_kd_graph_hash(const cx_graph *g);
/* The data set file: its size and the contents of its first and last MiB, plus the part name
 * (so a copied file keeps its identity, and a re-imported or edited one does not). */
cx_status cx_kd_data_identity(const char *path, const char *part, uint64_t *id);
/* Whether the augmentation draws random numbers (crop, flip, cutout, mixing); when it does not,
 * every epoch sees the same images and the cache keeps one epoch for all. */
bool cx_kd_aug_random(const cx_augment *a);
bool cx_kd_aug_mixing(const cx_augment *a);

/* Several teachers' logits [n, classes] each, combined as their softened distributions
 * averaged with the weights: p = sum_j w_j softmax(z_j / T) / sum_j w_j, written as
 * T * log p (p clamped at 1e-30), whose softmax at temperature T is p. work holds `classes`
 * doubles. (Averaging logits instead would be a geometric mean of the distributions.) */
void cx_kd_combine_teachers(const float *const *logits, const float *weights, int n_teachers,
                            int64_t n, int64_t classes, float temperature, double *work,
                            float *out);

/* ---- the trainer hooks ---- */

typedef struct cx_kd_teacher_spec {
  const cx_graph *graph;
  /* its forward pass: CX_PRECISION_F32 (0) or CX_PRECISION_BF16 (about 1.6x faster with
   * AVX512-BF16; its outputs differ within bf16's precision, so its cache is another) */
  cx_precision precision;
  float weight;     /* 0: 1 */
  const char *name; /* for messages and the cache description; NULL: "teacher<i>" */
} cx_kd_teacher_spec;

typedef struct cx_kd_opts {
  cx_kd_config kd;             /* classes is filled from the teachers when 0 */
  int n_teachers;
  const cx_kd_teacher_spec *teachers;
  const char *cache_dir;       /* NULL: the teacher runs on every batch */
  int cache_k;                 /* 0: min(classes, 10) */
  bool quiet;
} cx_kd_opts;

typedef struct cx_kd_stats {
  int64_t batches, teacher_batches, cached_batches;
  double teacher_seconds; /* spent in the teachers' forward passes */
} cx_kd_stats;

typedef struct cx_kd cx_kd;

/* Compiles the teachers for the trainer's micro-batch and opens their caches (one per teacher,
 * keyed by the teacher's graph hash, the training data's identity and part, the augmentation,
 * the loader seed when augmentation is random, and the batch layout when batches are mixed).
 * Checks that every teacher takes the data's images and gives the data's classes. */
cx_status cx_kd_open(const cx_kd_opts *o, const struct cx_train_opts *train, cx_kd **out);
/* Writes the current epoch's cache files and frees everything. */
cx_status cx_kd_close(cx_kd *kd);
/* Distillation as a trainer extension (train/extension.h) named "distill": it builds the
 * training graph (cx_kd_graph) and feeds the teachers' outputs before each micro-batch. The feed
 * takes the epoch from the batch (cx_batch.epoch), so a run resumed in the middle of any epoch
 * uses that epoch's cache, and writes a finished epoch's cache when the next one begins. */
struct cx_train_ext cx_kd_extension(cx_kd *kd);
/* Makes epoch the current one (feed does it from each batch); writes the cache of the epoch
 * before. */
cx_status cx_kd_set_epoch(cx_kd *kd, int64_t epoch);
cx_kd_stats cx_kd_get_stats(const cx_kd *kd);
/* The configuration in use: classes and the hints' teacher shapes filled in (for
 * cx_kd_adapters_add). */
const cx_kd_config *cx_kd_get_config(const cx_kd *kd);

#endif
