/* The GPU reductions of a build without NCCL (or without the CUDA backend): never usable, so
 * data parallelism reduces over MPI through host memory (ddp.c). */
#include <stdio.h>

#include "nccl.h"

bool cx_nccl_usable(char *gpu, size_t gpu_len, char *why, size_t why_len) {
  snprintf(gpu, gpu_len, "?");
  snprintf(why, why_len, "this build of compress has no NCCL");
  return false;
}

cx_status cx_nccl_open(int rank, int world, int n_buckets, cx_nccl **out) {
  (void)rank, (void)world, (void)n_buckets;
  *out = NULL;
  return cx_fail(CX_ERR_UNSUPPORTED, "this build of compress has no NCCL");
}

void cx_nccl_close(cx_nccl *c) { (void)c; }

cx_status cx_nccl_start(cx_nccl *c, int bucket, float *buf, int64_t n, cx_stream *after) {
  (void)c, (void)bucket, (void)buf, (void)n, (void)after;
  return cx_fail(CX_ERR_UNSUPPORTED, "this build of compress has no NCCL");
}

cx_status cx_nccl_test(cx_nccl *c, int bucket, bool *done) {
  (void)c, (void)bucket;
  *done = true;
  return cx_fail(CX_ERR_UNSUPPORTED, "this build of compress has no NCCL");
}

cx_status cx_nccl_wait(cx_nccl *c, cx_stream *s) {
  (void)c, (void)s;
  return cx_fail(CX_ERR_UNSUPPORTED, "this build of compress has no NCCL");
}

const char *cx_nccl_version(void) { return "none"; }
