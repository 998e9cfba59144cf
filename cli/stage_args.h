#ifndef CX_CLI_STAGE_ARGS_H
#define CX_CLI_STAGE_ARGS_H

/* The options of a command that runs one pipeline stage on its own (`compress prune`,
 * `compress quantize`), turned into the stage's table and the [data] and [train] tables the
 * pipeline reads: each option is one "key = value" line, so the pipeline's readers check them
 * and their messages name the key. A command describes its options in a cx_stage_args_spec. */

#include <stdbool.h>

#include "../core/toml.h"
#include "../import/onnx.h"
#include "../train/train_config.h"
#include "commands.h"

enum { CX_STAGE_ARGS_MAX = 64 };

/* An option and the key it writes; string: the value is quoted as a TOML string. For a switch
 * (an option without a value) `value` is the TOML value it writes. */
typedef struct cx_stage_flag {
  const char *name, *key;
  bool string;
  const char *value;
} cx_stage_flag;

typedef struct cx_stage_args_spec {
  const char *table;              /* the stage's table: "prune", "quantize" */
  const cx_stage_flag *flags;     /* options with a value that are keys of that table */
  const cx_stage_flag *lists;     /* repeatable options collected into one array key */
  const cx_stage_flag *switches;  /* options without a value that write a key of the table */
} cx_stage_args_spec;

typedef struct cx_stage_args {
  const cx_stage_args_spec *spec;
  const char *model, *out, *data, *svg, *device;
  const char *val; /* the command's own: the data it evaluates on (prune scan: --data) */
  bool quiet, json;
  /* TOML "key = value" lines of the stage's, the [data] and the [train] tables */
  char *stage_lines[CX_STAGE_ARGS_MAX], *data_lines[CX_STAGE_ARGS_MAX];
  char *train_lines[CX_STAGE_ARGS_MAX];
  int n_stage, n_data, n_train;
  int threads;
  cx_toml *doc; /* the tables, once read */
} cx_stage_args;

/* Fills a from the arguments after the command's name; need_out: -o is required; need_data
 * names the data --data must give (NULL: --data only comes with the training options). Returns
 * 0, or the exit code of a usage error (printed). */
int cx_stage_args_parse(const cx_command *c, const cx_stage_args_spec *spec, int argc,
                        char **argv, bool need_out, const char *need_data, cx_stage_args *a);
/* Parses the tables into a->doc and, with --data, reads [data] into tc, and [train] too when
 * train is set (its backend chosen by --device; mean and std from the model's metadata, info,
 * when it has them; tc is left zeroed without --data). The stage's table is
 * cx_toml_get(a->doc, spec->table). */
cx_status cx_stage_args_read(cx_stage_args *a, const cx_onnx_info *info, bool train,
                             cx_train_config *tc);
void cx_stage_args_free(cx_stage_args *a, cx_train_config *tc);

#endif
