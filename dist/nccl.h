#ifndef CX_DIST_NCCL_H
#define CX_DIST_NCCL_H

/* Gradient all-reduces between GPUs (internal to dist/): one NCCL communicator per job, its
 * unique id made on rank 0 and broadcast over MPI; reductions queued on a stream of their own,
 * each after an event of the program's stream, so that they overlap the rest of backward. Built
 * with the CUDA backend when NCCL is found (nccl.c); otherwise nccl_none.c says why not. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/backend.h"

typedef struct cx_nccl cx_nccl;

/* Whether this rank can reduce with NCCL: a build with NCCL, a GPU, and libnccl.so.2 loads;
 * `gpu` gets the PCI bus id of the backend's device (NCCL refuses two ranks on one device: the
 * ranks compare them, ddp.c). Not collective. Else false, and `why` says why not. */
bool cx_nccl_usable(char *gpu, size_t gpu_len, char *why, size_t why_len);
/* Collective: the communicator of all ranks on the backend's current device, a stream, and an
 * event pair for each of n_buckets buckets. */
cx_status cx_nccl_open(int rank, int world, int n_buckets, cx_nccl **out);
void cx_nccl_close(cx_nccl *c);
/* Queues the average over the ranks of n floats of device memory at buf, in place, after the
 * work queued so far on `after` (the program's stream: the copies that filled it). */
cx_status cx_nccl_start(cx_nccl *c, int bucket, float *buf, int64_t n, cx_stream *after);
/* Whether a started bucket's reduction has finished; does not wait. */
cx_status cx_nccl_test(cx_nccl *c, int bucket, bool *done);
/* Waits on the host for every bucket (reporting NCCL's asynchronous errors, which abort the
 * communicator) and makes `s` wait for them too. */
cx_status cx_nccl_wait(cx_nccl *c, cx_stream *s);
/* The NCCL version this process loaded, "2.28.9" (or "none"). */
const char *cx_nccl_version(void);

#endif
