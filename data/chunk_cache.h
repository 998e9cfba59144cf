#ifndef CX_DATA_CHUNK_CACHE_H
#define CX_DATA_CHUNK_CACHE_H

/* The streaming loader's cache of /images chunks (internal to data/). Thread-safe. */

#include <pthread.h>

#include "data.h"

typedef struct cx_chunk_cache cx_chunk_cache;

/* About `bytes` of chunks, and at least min_slots of them (one per worker that can pin one). */
cx_status cx_chunk_cache_create(cx_dataset *ds, int64_t bytes, int min_slots, cx_chunk_cache **out);
void cx_chunk_cache_free(cx_chunk_cache *c);
/* Pins the chunk holding `image` and points *pixels at the image; release with the handle. */
cx_status cx_chunk_cache_get(cx_chunk_cache *c, int64_t image, const uint8_t **pixels, int *handle);
void cx_chunk_cache_release(cx_chunk_cache *c, int handle);

#endif
