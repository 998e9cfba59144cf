#ifndef CX_TENSORBOARD_H
#define CX_TENSORBOARD_H

/* TensorBoard event files (docs/train_files.md): scalars that `tensorboard --logdir DIR` plots.
 * The file is a sequence of TFRecords, each an Event protocol buffer (tensorboard/compat/proto/
 * event.proto): first {wall_time, file_version "brain.Event:2"}, then one {wall_time, step,
 * summary {value {tag, simple_value}...}} per call. The messages are so small that they are
 * encoded here by hand rather than through generated protobuf code. */

#include <stdint.h>

#include "../core/status.h"

typedef struct cx_tb_writer cx_tb_writer;

/* Creates dir (and its parents) when missing and a new file
 * "events.out.tfevents.<unix time>.<hostname>" in it (".1", ".2"... appended when that name is
 * taken), and writes the file_version record. */
cx_status cx_tb_open(const char *dir, cx_tb_writer **out);
/* One Event at `step` holding a scalar per tag (float precision; NaN and Inf are kept). The
 * record is flushed, so TensorBoard sees it while training runs. */
cx_status cx_tb_add_scalars(cx_tb_writer *w, int64_t step, int n, const char *const *tags,
                            const double *values);
/* The file's full path. */
const char *cx_tb_path(const cx_tb_writer *w);
/* Closes the file (reporting a failed final write) and frees w; NULL is allowed. */
cx_status cx_tb_close(cx_tb_writer *w);

#endif
