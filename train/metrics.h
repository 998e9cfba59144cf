#ifndef CX_METRICS_H
#define CX_METRICS_H

/* Training metrics as JSON lines (docs/train_files.md): one object per call, written whole and
 * flushed, so that `tail -f`, jq or pandas.read_json(lines=True) can follow a running job.
 *
 *   {"step":120,"epoch":1,"time":1718000000.123,"loss":0.6931,"lr":0.1}
 *   {"step":120,"epoch":1,"time":1718000000.125,"stage":"distill","loss":0.7}   (tagged)
 *
 * A NaN or infinite value is written as null and its key is listed, with what it was, in
 * "nonfinite": {"loss":"nan","grad_norm":"inf"} (absent when every value is finite), so that
 * every line stays strict JSON and the cause is still on record. */

#include <stdbool.h>
#include <stdint.h>

#include "../core/status.h"

typedef struct cx_metrics cx_metrics;

/* append: keep the lines already in the file (a resumed run); else the file is truncated. */
cx_status cx_metrics_open(const char *path, bool append, cx_metrics **out);
/* One line: "step", "epoch", "time" (Unix seconds), then names[i]: values[i] in order. A name
 * may be any UTF-8 string except "step", "epoch", "time" and "nonfinite"; it is escaped as JSON
 * needs. Numbers are written with the fewest digits that read back as the same double. */
cx_status cx_metrics_write(cx_metrics *m, int64_t step, int64_t epoch, int n,
                           const char *const *names, const double *values);
/* A string field of a line, such as {"stage", "teacher"}: which part of a job the numbers
 * belong to, so that one file holds the lines of several (the stages of a pipeline). */
typedef struct cx_metrics_tag {
  const char *key, *value;
} cx_metrics_tag;
/* The same line with n_tags string fields after "time", before the numbers. A tag's key follows
 * the rules of a metric's name and differs from them; its value is any UTF-8 string. */
cx_status cx_metrics_write_tagged(cx_metrics *m, int64_t step, int64_t epoch, int n_tags,
                                  const cx_metrics_tag *tags, int n, const char *const *names,
                                  const double *values);
const char *cx_metrics_path(const cx_metrics *m);
/* Closes the file (reporting a failed final write) and frees m; NULL is allowed. */
cx_status cx_metrics_close(cx_metrics *m);

/* Writes the JSON form of v into buf ("0.1", "-3", "1e+300"; "null" when not finite), with the
 * fewest digits that read back as v; buf holds at least 32 bytes. Returns buf. */
char *cx_json_number(double v, char *buf);

/* Whether s is well-formed UTF-8 (JSON text and protobuf strings must be). */
bool cx_utf8_valid(const char *s);

#endif
