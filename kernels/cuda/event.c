/* CUDA events, the backend table's event hooks: profiling times each node of a program between
 * two events queued on its stream (core/node_timer.h) and reads them once a step, so the GPU is
 * never made to wait for the host between nodes. */
#include <stdlib.h>

#include "cuda.h"

struct cx_event {
  cudaEvent_t e;
};

cx_status cx_cuda_event_create(cx_event **out) {
  *out = NULL;
  CX_TRY(cx_cuda_probe());
  cx_event *ev = calloc(1, sizeof *ev);
  if (!ev) return cx_fail(CX_ERR_NOMEM, "out of memory");
  /* timing on (no cudaEventDisableTiming); spinning waits (no cudaEventBlockingSync), so the
   * host reads its clock as soon as the step's last event is reached */
  cudaError_t e = cudaEventCreateWithFlags(&ev->e, cudaEventDefault);
  if (e != cudaSuccess) {
    free(ev);
    return cx_cuda_fail("cudaEventCreateWithFlags", cudaGetErrorString(e), __FILE__, __LINE__);
  }
  *out = ev;
  return CX_OK;
}

cx_status cx_cuda_event_record(cx_event *e, cx_stream *s) {
  CX_CUDA(cudaEventRecord(e->e, cx_cuda_stream(s)->s));
  return CX_OK;
}

cx_status cx_cuda_event_elapsed(cx_event *from, cx_event *to, double *seconds) {
  CX_CUDA(cudaEventSynchronize(to->e));
  float ms = 0;
  CX_CUDA(cudaEventElapsedTime(&ms, from->e, to->e));
  *seconds = (double)ms * 1e-3;
  return CX_OK;
}

void cx_cuda_event_free(cx_event *e) {
  if (!e) return;
  cudaEventDestroy(e->e);
  free(e);
}
