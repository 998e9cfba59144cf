/* Gradient all-reduces between GPUs over NCCL (nccl.h). The communicator's unique id is made on
 * rank 0 and broadcast over MPI (comm.h), as NCCL's own examples bootstrap; each bucket's
 * reduction waits for an event recorded on the program's stream after the copies that filled
 * it, and runs on a high-priority stream of its own, so that it overlaps the backward kernels
 * queued after it. Gradients are f32 and reduced in f32 (ncclAvg: the average, not the sum).
 *
 * libnccl is opened at run time (dlopen, as NVML in kernels/cuda/nvml.c), not linked: only
 * several GPUs need it, and a machine with the CUDA libraries but no NCCL still runs compress
 * on one GPU (its ranks, if any, then reduce over MPI, saying why). nccl.h gives the types. */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "../kernels/cuda/cuda.h"
#include "comm.h"
#include "nccl.h"

static struct {
  pthread_once_t once;
  void *lib;
  char why[300]; /* empty when loaded */
  ncclResult_t (*get_version)(int *);
  ncclResult_t (*get_unique_id)(ncclUniqueId *);
  ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                             ncclComm_t, cudaStream_t);
  ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t *);
  ncclResult_t (*comm_abort)(ncclComm_t);
  const char *(*get_error_string)(ncclResult_t);
  const char *(*get_last_error)(ncclComm_t);
} N = {.once = PTHREAD_ONCE_INIT};

/* Every entry point, or the first one missing. */
static const char *find_symbols(void) {
#define SYM(field, name) \
  if (!(N.field = (__typeof__(N.field))dlsym(N.lib, name))) return name
  SYM(get_version, "ncclGetVersion");
  SYM(get_unique_id, "ncclGetUniqueId");
  SYM(comm_init_rank, "ncclCommInitRank");
  SYM(all_reduce, "ncclAllReduce");
  SYM(comm_get_async_error, "ncclCommGetAsyncError");
  SYM(comm_abort, "ncclCommAbort");
  SYM(get_error_string, "ncclGetErrorString");
  SYM(get_last_error, "ncclGetLastError");
#undef SYM
  return NULL;
}

static void load_once(void) {
  N.lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!N.lib) {
    snprintf(N.why, sizeof N.why, "NCCL cannot be loaded: %s", dlerror());
    return;
  }
  const char *missing = find_symbols();
  if (missing) snprintf(N.why, sizeof N.why, "libnccl.so.2 has no %s (NCCL 2.13 or later needed)",
                        missing);
}

static bool loaded(void) {
  pthread_once(&N.once, load_once);
  return !N.why[0];
}

struct cx_nccl {
  ncclComm_t comm;
  cudaStream_t stream;
  cudaEvent_t *ready, *done; /* per bucket: its copies queued; its reduction finished */
  int n_buckets;
};

static cx_status nccl_fail(ncclResult_t r, const char *call, ncclComm_t comm) {
  const char *last = comm ? N.get_last_error(comm) : "";
  return cx_fail(CX_ERR_BACKEND, "NCCL: %s failed on rank %d of %d: %s%s%s", call, cx_comm_rank(),
                 cx_comm_world(), N.get_error_string(r), last && *last ? ": " : "",
                 last ? last : "");
}

#define NCCL_TRY(call, comm)                                     \
  do {                                                           \
    ncclResult_t r_ = (call);                                    \
    if (r_ != ncclSuccess) return nccl_fail(r_, #call, (comm)); \
  } while (0)

const char *cx_nccl_version(void) {
  static char v[32];
  int code = 0;
  if (!loaded() || N.get_version(&code) != ncclSuccess) return "unknown";
  snprintf(v, sizeof v, "%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
  return v;
}

bool cx_nccl_usable(char *gpu, size_t gpu_len, char *why, size_t why_len) {
  snprintf(gpu, gpu_len, "?");
  if (cx_cuda_probe() != CX_OK) return snprintf(why, why_len, "no usable GPU"), false;
  if (cudaDeviceGetPCIBusId(gpu, (int)gpu_len, cx_cuda_device()) != cudaSuccess)
    return snprintf(why, why_len, "the GPU's PCI bus id cannot be read"), false;
  if (!loaded()) return snprintf(why, why_len, "%s", N.why), false;
  return true;
}

static cx_status make_events(cx_nccl *c, int n) {
  c->ready = calloc((size_t)n + 1, sizeof *c->ready);
  c->done = calloc((size_t)n + 1, sizeof *c->done);
  if (!c->ready || !c->done) return cx_fail(CX_ERR_NOMEM, "out of memory");
  for (; c->n_buckets < n; c->n_buckets++) {
    CX_CUDA(cudaEventCreateWithFlags(&c->ready[c->n_buckets], cudaEventDisableTiming));
    CX_CUDA(cudaEventCreateWithFlags(&c->done[c->n_buckets], cudaEventDisableTiming));
  }
  return CX_OK;
}

static cx_status open_comm(cx_nccl *c, int rank, int world, int n_buckets) {
  CX_TRY(cx_cuda_probe()); /* the backend's device is this thread's current one */
  if (!loaded()) return cx_fail(CX_ERR_UNSUPPORTED, "%s", N.why);
  ncclUniqueId id;
  if (rank == 0) NCCL_TRY(N.get_unique_id(&id), NULL);
  CX_TRY(cx_comm_bcast(&id, (int64_t)sizeof id, 0));
  NCCL_TRY(N.comm_init_rank(&c->comm, world, id, rank), NULL);
  int least = 0, greatest = 0;
  CX_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CX_CUDA(cudaStreamCreateWithPriority(&c->stream, cudaStreamNonBlocking, greatest));
  return make_events(c, n_buckets);
}

cx_status cx_nccl_open(int rank, int world, int n_buckets, cx_nccl **out) {
  cx_nccl *c = calloc(1, sizeof *c);
  if (!c) return cx_fail(CX_ERR_NOMEM, "out of memory");
  cx_status s = open_comm(c, rank, world, n_buckets);
  if (s != CX_OK) return cx_nccl_close(c), s;
  *out = c;
  return CX_OK;
}

/* Aborted, not destroyed: after a failure a reduction may wait for a rank that will never join
 * it, and destroying (or freeing its buffers) would wait with it. After a step completed
 * nothing is left in flight, and the two are the same. */
void cx_nccl_close(cx_nccl *c) {
  if (!c) return;
  if (c->comm) N.comm_abort(c->comm);
  for (int i = 0; i < c->n_buckets; i++) cudaEventDestroy(c->ready[i]), cudaEventDestroy(c->done[i]);
  if (c->stream) cudaStreamDestroy(c->stream);
  free(c->ready), free(c->done), free(c);
}

static cx_status check_bucket(const cx_nccl *c, int bucket) {
  if (bucket < 0 || bucket >= c->n_buckets)
    return cx_fail(CX_ERR_ARG, "NCCL: bucket %d of %d", bucket, c->n_buckets);
  return CX_OK;
}

cx_status cx_nccl_start(cx_nccl *c, int bucket, float *buf, int64_t n, cx_stream *after) {
  CX_TRY(check_bucket(c, bucket));
  CX_CUDA(cudaEventRecord(c->ready[bucket], cx_cuda_stream(after)->s));
  CX_CUDA(cudaStreamWaitEvent(c->stream, c->ready[bucket], 0));
  NCCL_TRY(N.all_reduce(buf, buf, (size_t)n, ncclFloat32, ncclAvg, c->comm, c->stream), c->comm);
  CX_CUDA(cudaEventRecord(c->done[bucket], c->stream));
  return CX_OK;
}

cx_status cx_nccl_test(cx_nccl *c, int bucket, bool *done) {
  CX_TRY(check_bucket(c, bucket));
  cudaError_t e = cudaEventQuery(c->done[bucket]);
  *done = e == cudaSuccess;
  if (e != cudaSuccess && e != cudaErrorNotReady) CX_CUDA(e);
  return CX_OK;
}

/* A peer that failed inside NCCL (a network error, an abort) would leave this rank's reduction
 * waiting forever: poll its communicator's error while waiting, and abort it on one. (A peer
 * process that dies is mpirun's to notice: it ends every rank.) */
static cx_status wait_one(cx_nccl *c, int bucket) {
  for (;;) {
    bool done;
    CX_TRY(cx_nccl_test(c, bucket, &done));
    if (done) return CX_OK;
    ncclResult_t async = ncclSuccess;
    NCCL_TRY(N.comm_get_async_error(c->comm, &async), c->comm);
    if (async != ncclSuccess && async != ncclInProgress) {
      cx_status s = nccl_fail(async, "a reduction", c->comm);
      N.comm_abort(c->comm);
      c->comm = NULL;
      return s;
    }
    sched_yield();
  }
}

cx_status cx_nccl_wait(cx_nccl *c, cx_stream *s) {
  if (!c->comm) return cx_fail(CX_ERR_BACKEND, "NCCL: the communicator was aborted");
  for (int i = 0; i < c->n_buckets; i++) {
    CX_TRY(wait_one(c, i));
    CX_CUDA(cudaStreamWaitEvent(cx_cuda_stream(s)->s, c->done[i], 0));
  }
  return CX_OK;
}
