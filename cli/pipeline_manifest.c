/* The stage manifest: small text files under out/stages/ that say which stages are complete (and
 * with what results, so that a re-run that skips them still reports them) and which are under
 * way. The first line is the hash; the others "key value", read back by name, so that a file
 * written by another version with more or fewer keys still reads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/file_replace.h"
#include "../train/metrics.h"
#include "pipeline.h"

cx_stage_result cx_stage_result_empty(void) {
  return (cx_stage_result){.seconds = NAN, .train_seconds = NAN, .images_per_s = NAN,
                           .val = {.loss = NAN, .top1 = NAN, .top5 = NAN},
                           .start = {.loss = NAN, .top1 = NAN, .top5 = NAN}};
}

void cx_pipeline_manifest_path(const char *out, const char *stage, const char *what, char *buf,
                               size_t size) {
  snprintf(buf, size, "%s/stages/%s.%s", out, stage, what);
}

/* ---- the fields, by name ---- */

typedef struct field {
  const char *key;
  double *real;
  int64_t *count;
} field;

enum { FIELDS = 15 };

static void fields_of(cx_stage_result *r, field f[FIELDS]) {
  field all[] = {{"seconds", &r->seconds, NULL},
                 {"train_seconds", &r->train_seconds, NULL},
                 {"images_per_s", &r->images_per_s, NULL},
                 {"steps", NULL, &r->steps},
                 {"ranks", NULL, &r->ranks},
                 {"comm_wait", &r->comm_wait, NULL},
                 {"val_images", NULL, &r->val.n},
                 {"val_top1", &r->val.top1, NULL},
                 {"val_top5", &r->val.top5, NULL},
                 {"val_loss", &r->val.loss, NULL},
                 {"start_images", NULL, &r->start.n},
                 {"start_top1", &r->start.top1, NULL},
                 {"start_top5", &r->start.top5, NULL},
                 {"teacher_batches", NULL, &r->teacher_batches},
                 {"cached_batches", NULL, &r->cached_batches}};
  memcpy(f, all, sizeof all);
}

static void read_field(cx_stage_result *r, const char *line) {
  field f[FIELDS];
  fields_of(r, f);
  char key[64], value[64];
  if (sscanf(line, "%63s %63s", key, value) != 2) return;
  for (int i = 0; i < FIELDS; i++) {
    if (strcmp(key, f[i].key)) continue;
    if (f[i].real) *f[i].real = strcmp(value, "null") ? strtod(value, NULL) : NAN;
    else *f[i].count = strtoll(value, NULL, 10);
  }
}

static void write_fields(FILE *f, const cx_stage_result *given) {
  cx_stage_result r = *given;
  field fs[FIELDS];
  fields_of(&r, fs);
  char num[32];
  for (int i = 0; i < FIELDS; i++) {
    if (fs[i].real) fprintf(f, "%s %s\n", fs[i].key, cx_json_number(*fs[i].real, num));
    else fprintf(f, "%s %lld\n", fs[i].key, (long long)*fs[i].count);
  }
}

/* ---- the files ---- */

bool cx_pipeline_manifest_read(const char *out, const char *stage, const char *what,
                               const char *hash, cx_stage_result *r) {
  char path[CX_CLI_PATH_MAX], line[256] = "";
  cx_pipeline_manifest_path(out, stage, what, path, sizeof path);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  bool ok = fgets(line, sizeof line, f) != NULL;
  line[strcspn(line, "\n")] = 0;
  ok = ok && !strcmp(line, hash);
  if (ok && r) {
    *r = cx_stage_result_empty();
    while (fgets(line, sizeof line, f)) read_field(r, line);
  }
  fclose(f);
  return ok;
}

cx_status cx_pipeline_manifest_write(const char *out, const char *stage, const char *what,
                                     const char *hash, const cx_stage_result *r) {
  char path[CX_CLI_PATH_MAX];
  cx_pipeline_manifest_path(out, stage, what, path, sizeof path);
  cx_file_out o;
  CX_TRY(cx_file_out_open(path, &o));
  fprintf(o.f, "%s\n", hash);
  if (r) write_fields(o.f, r);
  return cx_file_out_commit(&o);
}
