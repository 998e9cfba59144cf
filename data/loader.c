/* The loader: worker threads build whole batches (read, augment, mix, convert) into a ring of
 * reusable batch buffers; the consumer takes them in batch order. Which batch a worker builds
 * changes with timing, what is in it does not: batch b of epoch e holds samples
 * order(seed, e)[rank + world * (b * B + i)], each augmented from (seed, e, sample). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chunk_cache.h"
#include "internal.h"

typedef struct batch_slot {
  int64_t batch; /* the batch it holds; -1: none */
  bool ready;
  cx_status status;
  char message[1024];
  int64_t size;
  void *images;
  int64_t *labels, *ids;
  float *targets;
} batch_slot;

typedef struct worker {
  cx_loader *l;
  pthread_t thread;
  float *scratch, *f32; /* resampling taps; the f32 batch when the output is bf16 */
} worker;

struct cx_loader {
  cx_loader_opts o;
  cx_dataset *ds;
  cx_dataset_info info;
  cx_aug_plan plan;
  bool mixing;
  uint8_t *mem;          /* memory mode: every image */
  cx_chunk_cache *cache; /* stream mode */
  int64_t image_floats, n_rank, n_batches;
  int64_t *perm, *order; /* this epoch's permutation; this rank's share of it */
  batch_slot *slots;
  int depth;
  worker *workers;
  int nworkers, started; /* threads allocated; threads running */
  pthread_mutex_t mu;
  pthread_cond_t work_cv, ready_cv, idle_cv;
  /* under mu */
  bool running, quit;
  uint64_t gen;
  int64_t epoch, next_claim, handed, released;
  int active;
  double wait_seconds;
};

cx_loader_opts cx_loader_defaults(void) {
  cx_loader_opts o = {.batch_size = 1, .shuffle = true, .world = 1, .out_dtype = CX_F32};
  for (int c = 0; c < 4; c++) o.aug.std[c] = 1;
  return o;
}

/* ---- building one batch (in a worker) ---- */

static cx_status sample_pixels(cx_loader *l, int64_t id, const uint8_t **px, int *handle) {
  if (l->mem) {
    *px = l->mem + id * l->info.h * l->info.w * l->info.c;
    return CX_OK;
  }
  return cx_chunk_cache_get(l->cache, id, px, handle);
}

static cx_status fill_batch(cx_loader *l, worker *w, int64_t b, int64_t epoch, batch_slot *s) {
  int64_t B = l->o.batch_size, start = b * B;
  s->size = l->n_rank - start < B ? l->n_rank - start : B;
  float *out = l->o.out_dtype == CX_F32 ? s->images : w->f32;
  for (int64_t i = 0; i < s->size; i++) {
    int64_t id = l->order[start + i];
    const uint8_t *px;
    int handle = -1;
    CX_TRY(sample_pixels(l, id, &px, &handle));
    uint64_t key = cx_data_key(l->o.seed, CX_SALT_SAMPLE, (uint64_t)epoch, (uint64_t)id);
    cx_aug_sample(&l->plan, px, key, out + i * l->image_floats, w->scratch);
    if (handle >= 0) cx_chunk_cache_release(l->cache, handle);
    s->ids[i] = id;
    s->labels[i] = cx_dataset_labels(l->ds)[id];
  }
  if (l->mixing) {
    uint64_t batch = (uint64_t)l->o.rank << 40 | (uint64_t)b;
    uint64_t key = cx_data_key(l->o.seed, CX_SALT_MIX, (uint64_t)epoch, batch);
    cx_aug_mix(&l->plan, key, out, s->labels, s->size, l->info.num_classes, s->targets);
  }
  if (l->o.out_dtype == CX_BF16) {
    uint16_t *dst = s->images;
    for (int64_t k = 0; k < s->size * l->image_floats; k++) dst[k] = cx_f32_to_bf16(out[k]);
  }
  return CX_OK;
}

static bool can_claim(const cx_loader *l) {
  return l->running && l->next_claim < l->n_batches && l->next_claim < l->released + l->depth;
}

static void *worker_main(void *arg) {
  worker *w = arg;
  cx_loader *l = w->l;
  cx_h5_quiet();
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (!l->quit && !can_claim(l)) pthread_cond_wait(&l->work_cv, &l->mu);
    if (l->quit) break;
    int64_t b = l->next_claim++, epoch = l->epoch;
    uint64_t gen = l->gen;
    batch_slot *s = &l->slots[b % l->depth];
    l->active++;
    pthread_mutex_unlock(&l->mu);
    cx_status st = fill_batch(l, w, b, epoch, s);
    if (st != CX_OK) snprintf(s->message, sizeof s->message, "%s", cx_last_error());
    pthread_mutex_lock(&l->mu);
    l->active--;
    if (gen == l->gen) {
      s->batch = b, s->status = st, s->ready = true;
      pthread_cond_broadcast(&l->ready_cv);
    }
    if (!l->active) pthread_cond_broadcast(&l->idle_cv);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

/* ---- set-up ---- */

static int default_workers(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN) / 4;
  return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

static int64_t default_memory_limit(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? (int64_t)pages * size / 2 : (int64_t)1 << 32;
}

static void *buf_alloc(const cx_loader *l, size_t bytes) {
  if (l->o.alloc) return l->o.alloc(bytes, l->o.alloc_ctx);
  return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

static void buf_free(const cx_loader *l, void *p) {
  if (!p) return;
  if (l->o.free) l->o.free(p, l->o.alloc_ctx);
  else free(p);
}

static cx_status check_opts(const cx_loader_opts *o, const char *path) {
  if (o->batch_size < 1)
    return cx_fail(CX_ERR_ARG, "%s: batch size %lld < 1", path, (long long)o->batch_size);
  if (o->world < 1 || o->rank < 0 || o->rank >= o->world)
    return cx_fail(CX_ERR_ARG, "%s: rank %d is not in [0, world size %d)", path, o->rank, o->world);
  if (o->out_dtype != CX_F32 && o->out_dtype != CX_BF16)
    return cx_fail(CX_ERR_ARG, "%s: the loader writes f32 or bf16, not %s", path,
                   cx_dtype_name(o->out_dtype));
  if (o->workers < 0 || o->prefetch < 0 || (o->alloc == NULL) != (o->free == NULL))
    return cx_fail(CX_ERR_ARG, "%s: negative worker or prefetch count, or alloc without free",
                   path);
  return CX_OK;
}

/* This rank's share of an epoch: positions rank, rank + world, ... of the permutation. */
static void plan_shard(cx_loader *l) {
  int64_t n = l->info.n, B = l->o.batch_size, world = l->o.world, rank = l->o.rank;
  if (l->o.drop_last) {
    l->n_batches = n / world / B;
    l->n_rank = l->n_batches * B;
  } else {
    l->n_rank = n > rank ? (n - rank + world - 1) / world : 0;
    l->n_batches = (l->n_rank + B - 1) / B;
  }
}

static cx_status load_images(cx_loader *l) {
  int64_t bytes = l->info.n * l->info.h * l->info.w * l->info.c;
  int64_t limit = l->o.memory_limit > 0 ? l->o.memory_limit : default_memory_limit();
  bool memory = l->o.mode == CX_LOADER_MEMORY || (l->o.mode == CX_LOADER_AUTO && bytes <= limit);
  if (!memory) {
    int64_t cache = l->o.cache_bytes > 0 ? l->o.cache_bytes : (int64_t)256 << 20;
    return cx_chunk_cache_create(l->ds, cache, 2 * l->nworkers + 2, &l->cache);
  }
  if (!(l->mem = malloc((size_t)(bytes ? bytes : 1))))
    return cx_fail(CX_ERR_NOMEM, "%s: out of memory for %lld bytes of images (use streaming "
                   "mode)", cx_dataset_path(l->ds), (long long)bytes);
  return cx_dataset_read(l->ds, 0, l->info.n, l->mem);
}

static cx_status alloc_slots(cx_loader *l) {
  int64_t B = l->o.batch_size, K = l->info.num_classes;
  size_t img = (size_t)(B * l->image_floats) * cx_dtype_size(l->o.out_dtype);
  if (!(l->slots = calloc((size_t)l->depth, sizeof *l->slots))) return CX_ERR_NOMEM;
  for (int i = 0; i < l->depth; i++) {
    batch_slot *s = &l->slots[i];
    s->batch = -1;
    s->images = buf_alloc(l, img);
    s->labels = malloc((size_t)B * sizeof *s->labels);
    s->ids = malloc((size_t)B * sizeof *s->ids);
    if (l->mixing) s->targets = buf_alloc(l, (size_t)(B * K) * sizeof(float));
    if (!s->images || !s->labels || !s->ids || (l->mixing && !s->targets)) return CX_ERR_NOMEM;
  }
  return CX_OK;
}

static cx_status start_workers(cx_loader *l) {
  l->workers = calloc((size_t)l->nworkers, sizeof *l->workers);
  if (!l->workers) return CX_ERR_NOMEM;
  for (int i = 0; i < l->nworkers; i++) {
    worker *w = &l->workers[i];
    w->l = l;
    w->scratch = malloc(cx_aug_scratch_floats(&l->plan) * sizeof(float) + 64);
    if (l->o.out_dtype != CX_F32)
      w->f32 = malloc((size_t)(l->o.batch_size * l->image_floats) * sizeof(float));
    if (!w->scratch || (l->o.out_dtype != CX_F32 && !w->f32)) return CX_ERR_NOMEM;
  }
  for (; l->started < l->nworkers; l->started++)
    if (pthread_create(&l->workers[l->started].thread, NULL, worker_main,
                       &l->workers[l->started]) != 0)
      return cx_fail(CX_ERR_BACKEND, "%s: pthread_create failed for loader worker %d",
                     cx_dataset_path(l->ds), l->started);
  return CX_OK;
}

static cx_status open_all(cx_loader *l, const char *path) {
  CX_TRY(cx_dataset_open(path, l->o.part, &l->ds));
  l->info = *cx_dataset_get_info(l->ds);
  CX_TRY(cx_aug_plan_make(&l->o.aug, l->info.h, l->info.w, l->info.c, &l->plan));
  l->mixing = cx_aug_mixing(&l->plan.a);
  l->image_floats = l->info.c * l->plan.oh * l->plan.ow;
  l->nworkers = l->o.workers > 0 ? l->o.workers : default_workers();
  l->depth = (l->o.prefetch > 0 ? l->o.prefetch : 2 * l->nworkers + 1) + 1;
  plan_shard(l);
  CX_TRY(load_images(l));
  l->perm = malloc((size_t)(l->info.n ? l->info.n : 1) * sizeof *l->perm);
  l->order = malloc((size_t)(l->n_rank ? l->n_rank : 1) * sizeof *l->order);
  if (!l->perm || !l->order || alloc_slots(l) != CX_OK)
    return cx_fail(CX_ERR_NOMEM, "%s: out of memory for the loader's buffers", path);
  cx_status s = start_workers(l);
  if (s == CX_ERR_NOMEM) return cx_fail(s, "%s: out of memory for the loader's workers", path);
  return s;
}

cx_status cx_loader_open(const char *path, const cx_loader_opts *o, cx_loader **out) {
  *out = NULL;
  CX_TRY(check_opts(o, path));
  cx_loader *l = calloc(1, sizeof *l);
  if (!l) return cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
  l->o = *o;
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->work_cv, NULL);
  pthread_cond_init(&l->ready_cv, NULL);
  pthread_cond_init(&l->idle_cv, NULL);
  cx_status s = open_all(l, path);
  if (s != CX_OK) {
    cx_loader_close(l);
    return s;
  }
  *out = l;
  return CX_OK;
}

void cx_loader_close(cx_loader *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  l->quit = true;
  pthread_cond_broadcast(&l->work_cv);
  pthread_mutex_unlock(&l->mu);
  for (int i = 0; i < l->started; i++) pthread_join(l->workers[i].thread, NULL);
  for (int i = 0; l->workers && i < l->nworkers; i++) {
    free(l->workers[i].scratch);
    free(l->workers[i].f32);
  }
  for (int i = 0; l->slots && i < l->depth; i++) {
    buf_free(l, l->slots[i].images);
    buf_free(l, l->slots[i].targets);
    free(l->slots[i].labels);
    free(l->slots[i].ids);
  }
  free(l->workers);
  free(l->slots);
  free(l->perm);
  free(l->order);
  free(l->mem);
  cx_chunk_cache_free(l->cache);
  cx_dataset_close(l->ds);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->work_cv);
  pthread_cond_destroy(&l->ready_cv);
  pthread_cond_destroy(&l->idle_cv);
  free(l);
}

/* ---- epochs and batches (the consumer) ---- */

cx_status cx_loader_epoch_begin(cx_loader *l, int64_t epoch) {
  pthread_mutex_lock(&l->mu);
  l->gen++;
  l->running = false;
  while (l->active) pthread_cond_wait(&l->idle_cv, &l->mu);
  l->epoch = epoch;
  cx_data_epoch_order(l->o.seed, epoch, l->info.n, l->o.shuffle, l->perm);
  for (int64_t k = 0; k < l->n_rank; k++) l->order[k] = l->perm[l->o.rank + k * l->o.world];
  for (int i = 0; i < l->depth; i++) l->slots[i].batch = -1, l->slots[i].ready = false;
  l->next_claim = l->handed = l->released = 0;
  l->running = true;
  pthread_cond_broadcast(&l->work_cv);
  pthread_mutex_unlock(&l->mu);
  return CX_OK;
}

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

cx_status cx_loader_next(cx_loader *l, cx_batch *b) {
  pthread_mutex_lock(&l->mu);
  bool started = l->running || l->gen;
  pthread_mutex_unlock(&l->mu);
  if (!started) CX_TRY(cx_loader_epoch_begin(l, 0));
  *b = (cx_batch){.c = l->info.c, .h = l->plan.oh, .w = l->plan.ow, .dtype = l->o.out_dtype,
                  .num_classes = l->info.num_classes};
  pthread_mutex_lock(&l->mu);
  if (l->released < l->handed) { /* the caller is done with the batch it had */
    l->released = l->handed;
    pthread_cond_broadcast(&l->work_cv);
  }
  if (l->handed == l->n_batches) {
    pthread_mutex_unlock(&l->mu);
    return CX_OK;
  }
  batch_slot *s = &l->slots[l->handed % l->depth];
  double t0 = now_seconds();
  while (!(s->ready && s->batch == l->handed)) pthread_cond_wait(&l->ready_cv, &l->mu);
  l->wait_seconds += now_seconds() - t0;
  cx_status st = s->status;
  if (st == CX_OK) {
    b->size = s->size, b->index = l->handed, b->images = s->images, b->labels = s->labels;
    b->epoch = l->epoch;
    b->order_first = l->o.rank + l->o.world * l->handed * l->o.batch_size;
    b->order_stride = l->o.world;
    b->targets = s->targets, b->ids = s->ids;
    l->handed++;
  }
  pthread_mutex_unlock(&l->mu);
  return st == CX_OK ? CX_OK : cx_fail(st, "%s", s->message);
}

int64_t cx_loader_batches(const cx_loader *l) { return l->n_batches; }
int64_t cx_loader_samples(const cx_loader *l) { return l->n_rank; }
bool cx_loader_streaming(const cx_loader *l) { return l->cache != NULL; }
int cx_loader_workers(const cx_loader *l) { return l->nworkers; }
const cx_dataset_info *cx_loader_info(const cx_loader *l) { return &l->info; }

double cx_loader_wait_seconds(cx_loader *l) {
  pthread_mutex_lock(&l->mu);
  double s = l->wait_seconds;
  pthread_mutex_unlock(&l->mu);
  return s;
}
