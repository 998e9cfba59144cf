/* Gather, GatherND and their gradients on the CPU: contiguous inner blocks copied (or, for the gradient, added
 * back in index order, so repeated indices sum the same way every run). */

#include <string.h>

#include "../../core/ops/gather.h"
#include "cpu.h"

static cx_status run_gather(const cx_kernel_args *a) {
  cx_gather_split s;
  CX_TRY(cx_gather_split_make(a->node, &a->in[0].shape, &a->in[1].shape, &s));
  const int64_t *ind = a->in[1].data;
  size_t es = cx_dtype_size(a->in[0].dtype), block = (size_t)s.inner * es;
  const char *x = a->in[0].data;
  char *y = a->out[0].data;
  for (int64_t j = 0; j < s.count; j++) {
    int64_t at;
    CX_TRY(cx_gather_index(a->node, &s, ind[j], &at));
    for (int64_t o = 0; o < s.outer; o++)
      memcpy(y + ((size_t)(o * s.count + j)) * block, x + ((size_t)(o * s.dim + at)) * block,
             block);
  }
  return CX_OK;
}

static cx_status run_gather_grad(const cx_kernel_args *a) {
  cx_gather_split s;
  CX_TRY(cx_gather_split_make(a->node, &a->out[0].shape, &a->in[1].shape, &s));
  const int64_t *ind = a->in[1].data;
  const float *dy = cx_f32(&a->in[0]);
  float *dx = cx_f32(&a->out[0]);
  memset(dx, 0, cx_tensor_nbytes(&a->out[0]));
  for (int64_t j = 0; j < s.count; j++) {
    int64_t at;
    CX_TRY(cx_gather_index(a->node, &s, ind[j], &at));
    for (int64_t o = 0; o < s.outer; o++) {
      const float *src = dy + (o * s.count + j) * s.inner;
      float *dst = dx + (o * s.dim + at) * s.inner;
      for (int64_t i = 0; i < s.inner; i++) dst[i] += src[i];
    }
  }
  return CX_OK;
}

static cx_status run_gather_nd(const cx_kernel_args *a) {
  cx_gather_nd_split s;
  CX_TRY(cx_gather_nd_split_make(a->node, &a->in[0].shape, &a->in[1].shape, &s));
  const int64_t *ind = a->in[1].data;
  size_t es = cx_dtype_size(a->in[0].dtype), block = (size_t)s.slice * es;
  const char *x = a->in[0].data;
  char *y = a->out[0].data;
  for (int64_t t = 0; t < s.tuples; t++) {
    int64_t at;
    CX_TRY(cx_gather_nd_offset(a->node, &a->in[0].shape, &s, t, ind + t * s.k, &at));
    memcpy(y + (size_t)t * block, x + (size_t)at * block, block);
  }
  return CX_OK;
}

static cx_status run_gather_nd_grad(const cx_kernel_args *a) {
  cx_gather_nd_split s;
  CX_TRY(cx_gather_nd_split_make(a->node, &a->out[0].shape, &a->in[1].shape, &s));
  const int64_t *ind = a->in[1].data;
  const float *dy = cx_f32(&a->in[0]);
  float *dx = cx_f32(&a->out[0]);
  memset(dx, 0, cx_tensor_nbytes(&a->out[0]));
  for (int64_t t = 0; t < s.tuples; t++) {
    int64_t at;
    CX_TRY(cx_gather_nd_offset(a->node, &a->out[0].shape, &s, t, ind + t * s.k, &at));
    for (int64_t i = 0; i < s.slice; i++) dx[at * s.slice + i] += dy[t * s.slice + i];
  }
  return CX_OK;
}

const cx_kernel cx_cpu_gather[] = {
    {"Gather", NULL, run_gather, NULL, 0, NULL, 0},
    {"GatherGrad", NULL, run_gather_grad, NULL, 0, NULL, 0},
    {"GatherND", NULL, run_gather_nd, NULL, 0, NULL, 0},
    {"GatherNDGrad", NULL, run_gather_nd_grad, NULL, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
