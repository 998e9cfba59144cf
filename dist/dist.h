#ifndef CX_DIST_H
#define CX_DIST_H

/* Data-parallel training across processes (docs/distributed.md): `mpirun -np N compress ...`
 * runs N ranks, each training on 1/N of every global batch, their gradients averaged by the
 * "ddp" trainer extension before every update. A process not started by an MPI launcher is rank
 * 0 of 1 and never calls MPI. */

#include <stdbool.h>
#include <stdint.h>

#include "../core/status.h"
#include "../train/extension.h"

/* MPI_Init when an MPI launcher started the process (OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE
 * in the environment); nothing otherwise. Call once, first thing in main. */
cx_status cx_dist_init(void);
/* At exit: MPI_Finalize when every rank ends together (rc 0, or a failure all ranks agreed on
 * with cx_dist_agree); otherwise MPI_Abort, so that the other ranks do not wait for this one
 * in a collective (a failure only this rank saw). Returns rc. */
int cx_dist_finalize(int rc);
int cx_dist_rank(void);
int cx_dist_world(void);
/* This rank among the ranks on its machine (0 when alone): which of the machine's GPUs it
 * takes (cli/device.c). */
int cx_dist_local_rank(void);
static inline bool cx_dist_is_root(void) { return cx_dist_rank() == 0; }

/* Collective: every rank passes its own status and gets CX_OK when all passed, else the first
 * failing rank's status with its message ("rank R: ...") on every rank. Ranks must call it at
 * the same points (after the checks that read input, before training). */
cx_status cx_dist_agree(cx_status s);
/* Every rank waits until all reach it (rank 0 wrote a file the others read next). */
cx_status cx_dist_barrier(void);

/* ---- the "ddp" trainer extension ----
 * Gradients are f32 and reduced in f32 whatever the program's precision (mixed precision keeps
 * them so). A program on the CPU reduces over MPI; on GPUs, over NCCL where every rank has a GPU
 * of its own, else over MPI through host memory (dist/nccl.h). */

typedef struct cx_ddp_config {
  /* Buckets of gradients reduced together, filled in reverse parameter order (PyTorch DDP's):
   * the first one (the last layers', ready first) of first_bucket_mb, then bucket_mb each. */
  double bucket_mb, first_bucket_mb;
  /* Parameters compared across ranks (a checksum) every check_every optimizer steps (0: only at
   * the start and at checkpoints). */
  int64_t check_every;
  /* Synchronised BatchNorm ([train] sync_bn): every BatchNorm of the training program
   * normalises with the statistics of the whole global batch, its per-channel sums pooled over
   * the ranks in forward and backward (kernels/cpu/norm.c); the running statistics are then the
   * same on every rank and the replica checks compare them. */
  bool sync_bn;
} cx_ddp_config;

cx_ddp_config cx_ddp_defaults(void); /* 25 MB, 1 MB, 100, no sync_bn */

typedef struct cx_ddp cx_ddp;

typedef struct cx_ddp_stats {
  /* how the gradients are reduced: "MPI" (host memory), "NCCL 2.28.9" (device memory), or "MPI
   * through host memory, not NCCL: <why>" for a program on GPUs that cannot all use NCCL */
  const char *transport;
  int buckets;
  int64_t bytes_per_step;  /* reduced by each rank each optimizer step */
  int64_t reductions;      /* optimizer steps reduced */
  int64_t checks;          /* parameter comparisons made */
  double wait_s;           /* in before_update, waiting for reductions to finish */
  double hidden_frac;      /* buckets already complete when before_update came (of all) */
  /* the program's own reductions (cx_replicas): synchronised BatchNorm's sums, quantization's
   * observer ranges; blocking, inside forward and backward */
  int64_t pool_calls, pool_bytes;
  double pool_s;
} cx_ddp_stats;

cx_status cx_ddp_create(const cx_ddp_config *c, cx_ddp **out);
void cx_ddp_free(cx_ddp *d);
/* The extension (name "ddp"); put it last in the run's list, so that what other extensions do
 * before the update is done on the averaged gradients. */
cx_train_ext cx_ddp_extension(cx_ddp *d);
void cx_ddp_get_stats(const cx_ddp *d, cx_ddp_stats *s);

#endif
