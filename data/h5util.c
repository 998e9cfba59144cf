#include <stdio.h>
#include <string.h>

#include "../core/rng.h"
#include "h5_guard.h"
#include "internal.h"

void cx_h5_quiet(void) {
  /* No HDF5 clean-up at exit: every file is closed by its owner, and a file whose close failed
   * (a full disk: HDF5 1.10 keeps it, half flushed) makes that clean-up crash (SIGSEGV in
   * H5F__close_cb) after the error was reported. Refused, and harmless, once HDF5 is running. */
  H5dont_atexit();
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

typedef struct reason {
  char text[400];
  bool found;
} reason;

/* Walked upwards, the first record is the most specific one: where HDF5 saw the problem. */
static herr_t first_reason(unsigned n, const H5E_error2_t *e, void *arg) {
  (void)n;
  reason *r = arg;
  if (r->found || !e->desc || !*e->desc) return 0;
  snprintf(r->text, sizeof r->text, "%s", e->desc);
  for (char *c = r->text; *c; c++) /* one line: some descriptions hold line breaks */
    if (*c == '\n' || *c == '\r') *c = ' ';
  r->found = true;
  return 0;
}

cx_status cx_h5_fail(cx_status s, const char *path, const char *what, const char *call) {
  reason r = {.found = false};
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, first_reason, &r);
  H5Eclear2(H5E_DEFAULT);
  const char *guard = cx_h5_guard_refusal();
  const char *why = r.found ? r.text : guard ? guard : "no reason given by HDF5";
  if (what && *what)
    return cx_fail(s, "%s: %s '%s': %s failed: %s", path, what[0] == '/' ? "dataset" : "attribute",
                   what, call, why);
  return cx_fail(s, "%s: %s failed: %s", path, call, why);
}

int64_t cx_h5_chunk_images(int64_t image_bytes) {
  int64_t k = (256 * 1024) / (image_bytes > 0 ? image_bytes : 1);
  return k < 1 ? 1 : k;
}

uint64_t cx_data_key(uint64_t seed, uint64_t salt, uint64_t a, uint64_t b) {
  return cx_rng_key(cx_rng_key(seed, salt, a), b, salt);
}

uint64_t cx_data_rand_below(uint64_t key, uint64_t index, uint64_t bound) {
  cx_philox r = cx_philox4x32(key, 2, index);
  uint64_t x = ((uint64_t)r.v[0] << 32) | r.v[1];
  /* Bias is below bound / 2^64: invisible for any data set size. */
  return bound ? x % bound : 0;
}

void cx_data_epoch_order(uint64_t seed, int64_t epoch, int64_t n, bool shuffle, int64_t *order) {
  for (int64_t i = 0; i < n; i++) order[i] = i;
  if (!shuffle) return;
  uint64_t key = cx_data_key(seed, CX_SALT_ORDER, (uint64_t)epoch, (uint64_t)n);
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)cx_data_rand_below(key, (uint64_t)i, (uint64_t)i + 1);
    int64_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
}
