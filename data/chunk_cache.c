/* Streaming mode's cache of image chunks, shared by the loader's workers. A chunk is read once
 * by whichever worker first needs it; others wanting it wait for that read instead of repeating
 * it. A pinned chunk is never evicted; the least recently used unpinned one is. */
#include <stdlib.h>

#include "chunk_cache.h"

typedef struct cache_slot {
  int64_t chunk; /* -1: empty */
  int pins;
  bool loading;
  uint64_t used;
  uint8_t *data;
} cache_slot;

struct cx_chunk_cache {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  cx_dataset *ds;
  int64_t chunk_images, image_bytes, n;
  cache_slot *slots;
  int nslots;
  uint64_t tick;
};

cx_status cx_chunk_cache_create(cx_dataset *ds, int64_t bytes, int min_slots,
                                cx_chunk_cache **out) {
  const cx_dataset_info *in = cx_dataset_get_info(ds);
  cx_chunk_cache *c = calloc(1, sizeof *c);
  if (!c) return cx_fail(CX_ERR_NOMEM, "%s: out of memory", cx_dataset_path(ds));
  c->ds = ds;
  c->n = in->n;
  c->image_bytes = in->h * in->w * in->c;
  c->chunk_images = in->chunk_images;
  int64_t chunk_bytes = c->chunk_images * c->image_bytes, want = bytes / chunk_bytes;
  c->nslots = want < min_slots ? min_slots : want > 1 << 20 ? 1 << 20 : (int)want;
  c->slots = calloc((size_t)c->nslots, sizeof *c->slots);
  cx_status s = c->slots ? CX_OK : cx_fail(CX_ERR_NOMEM, "%s: out of memory", cx_dataset_path(ds));
  for (int i = 0; s == CX_OK && i < c->nslots; i++) {
    c->slots[i].chunk = -1;
    if (!(c->slots[i].data = malloc((size_t)chunk_bytes)))
      s = cx_fail(CX_ERR_NOMEM, "%s: out of memory for a %d-chunk cache of %lld bytes each",
                  cx_dataset_path(ds), c->nslots, (long long)chunk_bytes);
  }
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  if (s != CX_OK) {
    cx_chunk_cache_free(c);
    return s;
  }
  *out = c;
  return CX_OK;
}

void cx_chunk_cache_free(cx_chunk_cache *c) {
  if (!c) return;
  for (int i = 0; c->slots && i < c->nslots; i++) free(c->slots[i].data);
  free(c->slots);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

/* Under the lock: the slot holding chunk, or the least recently used free slot (or NULL). */
static cache_slot *find(cx_chunk_cache *c, int64_t chunk, cache_slot **victim) {
  *victim = NULL;
  for (int i = 0; i < c->nslots; i++) {
    cache_slot *s = &c->slots[i];
    if (s->chunk == chunk) return s;
    if (!s->pins && !s->loading && (!*victim || s->used < (*victim)->used)) *victim = s;
  }
  return NULL;
}

static cx_status load(cx_chunk_cache *c, cache_slot *s, int64_t chunk) {
  int64_t first = chunk * c->chunk_images, count = c->n - first;
  if (count > c->chunk_images) count = c->chunk_images;
  s->chunk = chunk, s->loading = true, s->pins = 1;
  pthread_mutex_unlock(&c->mu);
  cx_status st = cx_dataset_read(c->ds, first, count, s->data);
  pthread_mutex_lock(&c->mu);
  s->loading = false;
  s->used = ++c->tick;
  if (st != CX_OK) s->chunk = -1, s->pins = 0;
  pthread_cond_broadcast(&c->cv);
  return st;
}

cx_status cx_chunk_cache_get(cx_chunk_cache *c, int64_t image, const uint8_t **pixels,
                             int *handle) {
  int64_t chunk = image / c->chunk_images;
  pthread_mutex_lock(&c->mu);
  cx_status st = CX_OK;
  for (;;) {
    cache_slot *victim, *s = find(c, chunk, &victim);
    if (s && s->loading) {
      pthread_cond_wait(&c->cv, &c->mu);
      continue;
    }
    if (s) {
      s->pins++;
      s->used = ++c->tick;
    } else if (victim) {
      s = victim;
      st = load(c, s, chunk);
    } else {
      pthread_cond_wait(&c->cv, &c->mu); /* every slot pinned: wait for a release */
      continue;
    }
    if (st == CX_OK) {
      *handle = (int)(s - c->slots);
      *pixels = s->data + (image - chunk * c->chunk_images) * c->image_bytes;
    }
    break;
  }
  pthread_mutex_unlock(&c->mu);
  return st;
}

void cx_chunk_cache_release(cx_chunk_cache *c, int handle) {
  pthread_mutex_lock(&c->mu);
  if (--c->slots[handle].pins == 0) pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}
