#ifndef CX_DIST_DDP_INTERNAL_H
#define CX_DIST_DDP_INTERNAL_H

/* The ddp extension's state, shared by ddp.c (reductions) and ddp_check.c (replica checks). */

#include "../core/backend.h"
#include "comm.h"
#include "dist.h"

struct cx_program;
struct cx_nccl;

typedef struct ddp_bucket {
  float *buf;       /* a copy of its gradients, reduced in place: host memory (MPI), or the
                       device's (NCCL) */
  int64_t n;        /* floats */
  int params;       /* gradients in it */
  int pending;      /* of them not yet handed over this step */
  bool done;       /* its reduction has finished (noted by progress) */
  cx_comm_req *req; /* MPI's */
} ddp_bucket;

struct cx_ddp {
  cx_ddp_config c;
  struct cx_program *train;
  const cx_backend *be; /* the program's */
  cx_stream *stream;
  bool on_device;       /* buckets in device memory, reduced by NCCL; else host memory, MPI */
  struct cx_nccl *nccl;
  char transport[480];  /* how the gradients are reduced, for the summary line */
  int rank, world, n_params;
  int *bucket_of;           /* parameter -> its bucket; -1: no gradient */
  int64_t *offset;          /* parameter -> its first float in the bucket */
  const cx_tensor **target; /* parameter -> the tensor the update reads, this step's */
  ddp_bucket *buckets;
  int n_buckets, next_start, next_done;
  cx_status status;         /* the first failure in grad_final */
  char error[1024];
  int64_t bytes_per_step, reductions, hidden, checks;
  double wait_s;
  int64_t pool_calls, pool_bytes; /* the program's reductions (cx_replicas) */
  double pool_s;
  int n_states;            /* STATE values the replica checks compare (ddp_check.c) */
  const cx_tensor **state; /* their tensors */
  const char **state_name;
  uint32_t *crc, *crc_root; /* replica checks: this rank's checksums, rank 0's */
  float *host;              /* room for the largest parameter */
};

double cx_ddp_now(void);
/* The STATE values that must agree across the ranks: all but the BatchNorm running statistics,
 * which are per rank unless sync_bn pools them (observer scales are STATE values). */
cx_status cx_ddp_find_states(cx_ddp *d);
/* Compares every parameter across the ranks (collective); a difference fails on every rank,
 * naming the first parameter that differs and the rank. `when` goes into the message. */
cx_status cx_ddp_check_replicas(cx_ddp *d, const char *when);
/* The test hook CX_TEST_DDP_PERTURB=RANK:STEP:PARAM (tests/test_ddp.c): after optimizer step
 * STEP, that rank adds 1 to the first element of parameter PARAM. */
void cx_ddp_test_perturb(cx_ddp *d, int64_t step);

#endif
