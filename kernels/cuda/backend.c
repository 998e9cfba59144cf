/* The CUDA backend's table: device memory from cudaMalloc (a program allocates its arena, its
 * persistent values and its scratch once, at compile time), copies and memsets queued on the
 * program's stream, and the kernel tables of this folder. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/op.h"
#include "cuda.h"

static const cx_kernel *const families[] = {
    cx_cuda_eltwise, cx_cuda_activation, cx_cuda_shape, cx_cuda_conv, cx_cuda_linear,
    cx_cuda_pool,    cx_cuda_norm,       cx_cuda_loss,  cx_cuda_optim, cx_cuda_dropout,
    cx_cuda_softmax, cx_cuda_slice, cx_cuda_reduce,
    cx_cuda_quant,
    cx_cuda_layer_norm,
    cx_cuda_gather, cx_cuda_select, cx_cuda_compare,
};

/* A table lookup only: it answers on machines without a GPU too (`compress ops`, the coverage
 * test), so nothing here may touch the device. */
static const cx_kernel *find_kernel(const cx_backend *b, const cx_node *n, const cx_tensor *in,
                                    int n_in) {
  (void)b;
  (void)in;
  (void)n_in;
  return cx_kernel_lookup(families, sizeof families / sizeof *families, n);
}

cx_status cx_cuda_fail(const char *call, const char *why, const char *file, int line) {
  return cx_fail(CX_ERR_BACKEND, "%s failed: %s (%s:%d)", call, why, file, line);
}

/* ---- probe and the default stream ------------------------------------------------------------ */

static struct {
  pthread_once_t once;
  cx_status status;
  char why[400];
  cx_stream dflt;
  int local_rank, device; /* this process among its machine's; the device it runs on */
} P = {.once = PTHREAD_ONCE_INIT};

void cx_cuda_set_local_rank(int local_rank) { P.local_rank = local_rank > 0 ? local_rank : 0; }

int cx_cuda_device(void) { return P.device; }

int cx_cuda_device_count(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

static cx_status open_stream(cx_stream *s, cudaStream_t cs) {
  s->s = cs;
  CX_CUBLAS(cublasCreate(&s->blas));
  CX_CUBLAS(cublasSetStream(s->blas, cs));
  CX_CUDNN(cudnnCreate(&s->dnn));
  CX_CUDNN(cudnnSetStream(s->dnn, cs));
  return CX_OK;
}

static cx_status probe_once_inner(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    return cx_fail(CX_ERR_UNSUPPORTED, "no usable GPU: cudaGetDeviceCount: %s",
                   cudaGetErrorString(e));
  if (n == 0) return cx_fail(CX_ERR_UNSUPPORTED, "no usable GPU: the driver sees no device");
  /* ranks of a data-parallel run take their machine's GPUs in turn (docs/distributed.md) */
  P.device = P.local_rank % n;
  CX_CUDA(cudaSetDevice(P.device));
  return open_stream(&P.dflt, 0);
}

static void probe_once(void) {
  P.status = probe_once_inner();
  if (P.status != CX_OK) snprintf(P.why, sizeof P.why, "%s", cx_last_error());
}

cx_status cx_cuda_probe(void) {
  pthread_once(&P.once, probe_once);
  return P.status == CX_OK ? CX_OK : cx_fail(P.status, "%s", P.why);
}

cx_stream *cx_cuda_stream(cx_stream *s) { return s ? s : &P.dflt; }

/* ---- memory and copies ----------------------------------------------------------------------- */

/* memset_zero returns nothing: its failure is kept and reported by the next sync. */
static struct {
  pthread_mutex_t lock;
  cx_status status;
  char msg[300];
} pending = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void set_pending(cudaError_t e, const char *what) {
  pthread_mutex_lock(&pending.lock);
  if (pending.status == CX_OK) {
    pending.status = CX_ERR_BACKEND;
    snprintf(pending.msg, sizeof pending.msg, "%s failed: %s", what, cudaGetErrorString(e));
  }
  pthread_mutex_unlock(&pending.lock);
}

static cx_status take_pending(void) {
  pthread_mutex_lock(&pending.lock);
  cx_status s = pending.status;
  char msg[sizeof pending.msg];
  memcpy(msg, pending.msg, sizeof msg);
  pending.status = CX_OK;
  pthread_mutex_unlock(&pending.lock);
  return s == CX_OK ? CX_OK : cx_fail(s, "%s", msg);
}

static void *cuda_alloc(size_t bytes) {
  if (cx_cuda_probe() != CX_OK) return NULL;
  void *p = NULL;
  return cudaMalloc(&p, bytes ? bytes : 256) == cudaSuccess ? p : NULL;
}

static void cuda_free(void *p) {
  if (p) cudaFree(p);
}

static void cuda_memset_zero(void *p, size_t bytes, cx_stream *s) {
  cudaError_t e = cudaMemsetAsync(p, 0, bytes, cx_cuda_stream(s)->s);
  if (e != cudaSuccess) set_pending(e, "cudaMemsetAsync");
}

/* cudaMemcpyDefault: unified addressing tells host from device pointers. A pageable host buffer
 * makes the copy synchronous for the host side, which is what the callers (uploads of batches and
 * parameters, downloads of results followed by sync) need anyway. */
static cx_status cuda_copy(void *dst, cx_device_kind dk, const void *src, cx_device_kind sk,
                           size_t bytes, cx_stream *s) {
  (void)dk;
  (void)sk;
  if (!bytes) return CX_OK;
  CX_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cx_cuda_stream(s)->s));
  return CX_OK;
}

static cx_status cuda_sync(cx_stream *s) {
  CX_CUDA(cudaStreamSynchronize(cx_cuda_stream(s)->s));
  return take_pending();
}

static cx_status cuda_stream_create(cx_stream **out) {
  CX_TRY(cx_cuda_probe());
  cx_stream *s = calloc(1, sizeof *s);
  if (!s) return cx_fail(CX_ERR_NOMEM, "out of memory");
  cudaStream_t cs;
  cudaError_t e = cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    free(s);
    return cx_cuda_fail("cudaStreamCreateWithFlags", cudaGetErrorString(e), __FILE__, __LINE__);
  }
  cx_status st = open_stream(s, cs);
  if (st != CX_OK) {
    if (s->dnn) cudnnDestroy(s->dnn);
    if (s->blas) cublasDestroy(s->blas);
    cudaStreamDestroy(cs);
    free(s);
    return st;
  }
  *out = s;
  return CX_OK;
}

static void cuda_stream_free(cx_stream *s) {
  if (!s) return;
  cudaStreamSynchronize(s->s);
  cudnnDestroy(s->dnn);
  cublasDestroy(s->blas);
  cudaStreamDestroy(s->s);
  free(s);
}

/* Tensors between ops stay f32 (core/backend.h); under BF16 and F16 the convolutions and matrix
 * products compute on tensor cores from operands rounded to that type, accumulating in f32. */
static cx_status cuda_check_precision(const cx_backend *b, cx_precision p) {
  (void)b;
  CX_TRY(cx_cuda_probe());
  if (p == CX_PRECISION_F32 || p == CX_PRECISION_F16) return CX_OK;
  int major = 0;
  CX_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  return major >= 8 ? CX_OK
                    : cx_fail(CX_ERR_UNSUPPORTED, "bf16 needs a GPU of compute capability 8.0 "
                              "or later (this one is %d.x); use fp16", major);
}

static const cx_backend cuda = {
    .name = "cuda",
    .device = CX_DEVICE_CUDA,
    .find_kernel = find_kernel,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .memset_zero = cuda_memset_zero,
    .copy_async = cuda_copy,
    .sync = cuda_sync,
    .check_precision = cuda_check_precision,
    .stream_create = cuda_stream_create,
    .stream_free = cuda_stream_free,
    .event_create = cx_cuda_event_create,
    .event_record = cx_cuda_event_record,
    .event_elapsed = cx_cuda_event_elapsed,
    .event_free = cx_cuda_event_free,
    .device_stats = cx_cuda_device_stats,
};

const cx_backend *cx_backend_cuda(void) { return &cuda; }
