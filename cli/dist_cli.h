#ifndef CX_CLI_DIST_H
#define CX_CLI_DIST_H

/* Data parallelism in the commands that train (docs/distributed.md): under mpirun every rank
 * runs the same command; rank 0 alone writes and reports. */

#include <stdio.h>

#include "../dist/dist.h"
#include "../train/trainer.h"

/* o's data shard (this rank of the job's ranks); on ranks other than 0 also no checkpoints
 * written, no evaluation (rank 0's is everyone's: the replicas are the same) and no progress
 * lines. */
void cx_cli_dist_train_opts(cx_train_opts *o);

/* The ddp extension of one training run; none (d NULL) in a job of one rank. */
typedef struct cx_cli_ddp {
  cx_ddp *d;
  bool sync_bn;
} cx_cli_ddp;
/* sync_bn: the training table's (synchronised BatchNorm). */
cx_status cx_cli_ddp_open(cx_cli_ddp *c, bool sync_bn);
/* Appends the extension to ext (of capacity cap, *n used) when there is one. */
cx_status cx_cli_ddp_add(cx_cli_ddp *c, cx_train_ext *ext, int cap, int *n);
/* One line after training: ranks, bytes reduced per step, waiting for communication. */
void cx_cli_ddp_print(const cx_cli_ddp *c, const cx_train_result *r, FILE *f);
/* JSON members (",\"ranks\":...") for the same, nothing in a job of one rank. */
void cx_cli_ddp_json(const cx_cli_ddp *c, const cx_train_result *r, FILE *f);
void cx_cli_ddp_close(cx_cli_ddp *c);

#endif
