#ifndef CX_DISTILL_CACHE_FILE_H
#define CX_DISTILL_CACHE_FILE_H

/* One teacher-cache file (docs/distill.md): a 512-byte checksummed header in HDF5's user block,
 * then an HDF5 file with
 *   /ids        int64   [M]      the samples held (indices in the data set part)
 *   /top_class  uint16  [M, k]   the classes of the k largest logits, largest first
 *   /top_logit  float16 [M, k]   those logits minus the largest (so the first is 0)
 *   /fill       float16 [M]      the logit that stands for every other class
 * and root attributes format, format_version, key, description, epoch, classes, k, samples,
 * created, tool. */

#include <stdint.h>

#include "../core/status.h"

typedef struct cx_kd_cache_meta {
  char key[33];
  const char *description; /* write only */
  int64_t epoch, classes, k, samples;
} cx_kd_cache_meta;

typedef struct cx_kd_cache_rows {
  int64_t m;
  int64_t *ids;
  uint16_t *cls, *val, *fill; /* [m*k], [m*k], [m] */
} cx_kd_cache_rows;

/* Written in memory, then to "<path>.tmp.<pid>", synced and renamed over path. */
cx_status cx_kd_cache_file_write(const char *path, const cx_kd_cache_meta *meta,
                                 const cx_kd_cache_rows *rows);
/* Reads path, checking its header, checksum and format, and that its key, epoch, classes, k and
 * samples are those of `want` (else CX_ERR_FORMAT naming the difference). rows are malloc'ed;
 * free them with cx_kd_cache_rows_free. */
cx_status cx_kd_cache_file_read(const char *path, const cx_kd_cache_meta *want,
                                cx_kd_cache_rows *rows);
void cx_kd_cache_rows_free(cx_kd_cache_rows *rows);

#endif
