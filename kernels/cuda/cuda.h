#ifndef CX_CUDA_H
#define CX_CUDA_H

/* Inside the CUDA backend: the stream type, error checks and the kernel tables. Kernel tables are
 * C (the .c files of this folder read a node's attributes and shapes); device code is in .cu files behind
 * plain C launchers (the _launch.h headers), so no core header is ever compiled as C++. */

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "../../core/backend.h"
#include "cuda_backend.h"

/* One per program: its kernels and copies are queued on s in program order; the library handles
 * are bound to s. */
struct cx_stream {
  cudaStream_t s;
  cublasHandle_t blas;
  cudnnHandle_t dnn;
};

/* The stream a kernel queues on (a->stream; the backend's default stream when NULL, as in a
 * program's prepare, which queues nothing). */
cx_stream *cx_cuda_stream(cx_stream *s);

/* Every runtime, cuBLAS and cuDNN call is checked; the message names the call, file and line. */
cx_status cx_cuda_fail(const char *call, const char *why, const char *file, int line);
#define CX_CUDA(call)                                                                              \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) return cx_cuda_fail(#call, cudaGetErrorString(e_), __FILE__, __LINE__); \
  } while (0)
#define CX_CUBLAS(call)                                                                            \
  do {                                                                                             \
    cublasStatus_t e_ = (call);                                                                    \
    if (e_ != CUBLAS_STATUS_SUCCESS)                                                               \
      return cx_cuda_fail(#call, cublasGetStatusString(e_), __FILE__, __LINE__);                   \
  } while (0)
#define CX_CUDNN(call)                                                                             \
  do {                                                                                             \
    cudnnStatus_t e_ = (call);                                                                     \
    if (e_ != CUDNN_STATUS_SUCCESS)                                                                \
      return cx_cuda_fail(#call, cudnnGetErrorString(e_), __FILE__, __LINE__);                     \
  } while (0)
/* After a launch of our own kernels: a bad configuration is reported at once, not at the next
 * sync. */
#define CX_CUDA_LAUNCHED() CX_CUDA(cudaGetLastError())

/* The backend table's optional hooks: events for profiling (event.c) and the device's
 * utilization and memory (monitor.c). */
cx_status cx_cuda_event_create(cx_event **out);
cx_status cx_cuda_event_record(cx_event *e, cx_stream *s);
cx_status cx_cuda_event_elapsed(cx_event *from, cx_event *to, double *seconds);
void cx_cuda_event_free(cx_event *e);
cx_status cx_cuda_device_stats(const cx_backend *b, cx_device_stats *out);

/* Contiguous f32 data of a kernel argument (device memory). */
static inline float *cx_cuda_f32(const cx_tensor *t) { return (float *)t->data; }

/* NULL-terminated kernel tables, one per file family, as kernels/cpu/. */
extern const cx_kernel cx_cuda_eltwise[], cx_cuda_activation[], cx_cuda_shape[], cx_cuda_conv[],
    cx_cuda_linear[], cx_cuda_pool[], cx_cuda_norm[], cx_cuda_loss[], cx_cuda_optim[],
    cx_cuda_dropout[], cx_cuda_softmax[], cx_cuda_slice[], cx_cuda_reduce[], cx_cuda_quant[];
extern const cx_kernel cx_cuda_layer_norm[];
extern const cx_kernel cx_cuda_gather[], cx_cuda_select[], cx_cuda_compare[];

#endif
