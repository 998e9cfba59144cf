#ifndef CX_CLI_TRAIN_COMMON_H
#define CX_CLI_TRAIN_COMMON_H

/* Pieces shared by the commands that train (compress train, compress pipeline): the model a
 * config names, the output folder, the metrics writers behind the trainer's callbacks, and the
 * export of a trained model with its input preprocessing in the metadata. */

#include <stdbool.h>
#include <stddef.h>

#include "../core/graph.h"
#include "../train/metrics.h"
#include "../train/tensorboard.h"
#include "../train/train_config.h"

enum { CX_CLI_PATH_MAX = 4200 };

/* The model c names ([model] spec or onnx, or whatever the caller put in model_spec /
 * model_onnx / model_node), with its image input named "input" (*old_input: the name it had, to
 * put back before export; NULL when it had that name). Messages start with the key's position. */
cx_status cx_cli_train_load_model(const cx_train_config *c, cx_graph **g, char **old_input);
/* Gives the input its old name back (frees old). */
void cx_cli_train_restore_input(cx_graph *g, char *old);

/* mkdir -p. */
cx_status cx_cli_make_dirs(const char *path);
/* What killed runs left in out and out/sub (cx_file_remove_stale_tmp): their temporary files. */
void cx_cli_remove_stale_tmp(const char *out, const char *sub);

/* Metrics writers, a trainer extension (cx_cli_sinks_extension: its on_step and on_epoch); the
 * first write error is kept and training goes on. With a stage, each metrics line has "stage": "<stage>"
 * and TensorBoard tags become "<stage>/train/loss", so that one file holds every stage. */
typedef struct cx_cli_sinks {
  cx_metrics *metrics;
  cx_tb_writer *tb;
  const char *stage;   /* NULL: plain names */
  const char *command; /* for the warning: "compress train" */
  cx_status status;
  char error[512];
} cx_cli_sinks;

/* metrics.jsonl and tensorboard/ in out (append: keep the lines already there). */
cx_status cx_cli_sinks_open(const char *out, bool append, cx_cli_sinks *k);
/* Before a run continues from a checkpoint at (step, epoch): drops from out/metrics.jsonl what
 * the interrupted run logged after that checkpoint, so that the steps it trains again are logged
 * once, as by a run that never stopped: the lines of stage (NULL: lines without a "stage") of a
 * later step, their validation lines of epoch `epoch` on (not evaluated at the checkpoint), and a
 * last line cut short. The file is replaced whole (temporary
 * name, renamed); no file: nothing to do. TensorBoard files are left (a reader takes the newest
 * value of a step). */
cx_status cx_cli_metrics_rewind(const char *out, const char *stage, int64_t step, int64_t epoch);
/* Closes both; the first error seen while writing, if any. k is cleared. */
cx_status cx_cli_sinks_close(cx_cli_sinks *k);
cx_train_ext cx_cli_sinks_extension(cx_cli_sinks *k);

/* Writes g to path as ONNX with the preprocessing of c's data ([data] mean, std; the class names
 * of its training set) and the config's path and hash in metadata_props (train/train_config.h). */
typedef struct cx_cli_export {
  int opset;    /* 0: 13 */
  bool fold_bn;
} cx_cli_export;
cx_status cx_cli_export_trained(const cx_train_config *c, const cx_graph *g, const char *path,
                                const cx_cli_export *e);

#endif
