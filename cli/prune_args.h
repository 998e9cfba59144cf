#ifndef CX_CLI_PRUNE_ARGS_H
#define CX_CLI_PRUNE_ARGS_H

/* The options of `compress prune` and `compress prune scan` (cli/stage_args.h: turned into the
 * [prune], [data] and [train] tables the pipeline reads, cli/prune_config.h). */

#include <stdbool.h>

#include "prune_config.h"
#include "stage_args.h"

typedef cx_stage_args cx_prune_args;

/* Fills a from the arguments after "prune" (scan: after "prune scan"); returns 0, or the exit
 * code of a usage error (printed). */
int cx_prune_args_parse(const cx_command *c, int argc, char **argv, bool scan, cx_prune_args *a);
/* Reads the tables: the pruning keys into p and, with --data, the fine-tune into tc (its backend
 * chosen by --device; mean and std from the model's metadata, info, when it has them). */
cx_status cx_prune_args_read(cx_prune_args *a, const cx_onnx_info *info, cx_cli_prune *p,
                             cx_train_config *tc);
void cx_prune_args_free(cx_prune_args *a, cx_cli_prune *p, cx_train_config *tc);

/* compress prune scan (cli/prune_scan.c). */
int cx_prune_scan_run(int argc, char **argv);

#endif
