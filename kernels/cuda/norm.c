/* Batch normalization on the GPU: BatchNormalization (running statistics), BatchNormTrain (batch
 * statistics, saved mean and inverse std, running-statistics update, fused clamp activation of
 * core/fuse.c) and BatchNormGrad, as kernels/cpu/norm.c computes them, on plain NCHW data.
 *
 * Scratch (device): per-channel partial sums, then the channel sums (2C + 1 doubles, the last
 * being the count for a synchronised BatchNorm). State (host): 2C + 1 doubles through which a
 * synchronised BatchNorm's sums go to the replicas' reduce, which takes host memory. */
#include <stdlib.h>

#include "../../core/ops/norm.h"
#include "cuda.h"
#include "norm_launch.h"

/* Elements per partial block: enough to amortise a block, few enough to fill the GPU. */
enum { PART_ELEMS = 4096, MAX_PARTS = 64 };

static cx_bn_geom geom_of(const cx_tensor *x) {
  cx_bn_geom g = {x->shape.d[0], x->shape.d[1], 1, 1};
  for (int i = 2; i < x->shape.ndim; i++) g.s *= x->shape.d[i];
  int64_t p = (g.n * g.s + PART_ELEMS - 1) / PART_ELEMS;
  g.p = (int)(p < 1 ? 1 : p > MAX_PARTS ? MAX_PARTS : p);
  return g;
}

/* doubles: 2 per partial block (the gradient's two sums), then 2C + 1 channel sums */
static size_t scratch_of(cx_bn_geom g) {
  return (2 * (size_t)(g.c * g.p) + 2 * (size_t)g.c + 1) * sizeof(double);
}

typedef struct bn_state {
  double *host; /* 2C + 1 */
} bn_state;

static void bn_release(void *p) {
  bn_state *s = p;
  if (s) free(s->host);
  free(s);
}

static cx_status prepare_x(const cx_kernel_args *a, int xi, void **state, size_t *scratch) {
  cx_bn_geom g = geom_of(&a->in[xi]);
  *scratch = scratch_of(g);
  bn_state *s = calloc(1, sizeof *s);
  if (s) s->host = malloc((2 * (size_t)g.c + 1) * sizeof(double));
  if (!s || !s->host) {
    bn_release(s);
    return cx_fail(CX_ERR_NOMEM, "node '%s': out of memory", a->node->name);
  }
  *state = s;
  return CX_OK;
}

static cx_status bn_prepare(const cx_kernel_args *a, void **state, size_t *scratch) {
  return prepare_x(a, 0, state, scratch);
}

static cx_status bn_grad_prepare(const cx_kernel_args *a, void **state, size_t *scratch) {
  return prepare_x(a, 1, state, scratch);
}

/* Synchronised BatchNorm: n per-channel sums on the device pooled over the replicas in place
 * (the reduce callback works on host doubles, so the sums make a round trip); with count, the
 * local element count is appended as element n and pooled too. */
static cx_status pool(const cx_kernel_args *a, double *dev, int64_t n, bool count, double m) {
  const cx_replicas *r = a->sync_stats;
  double *host = ((bn_state *)a->state)->host;
  cudaStream_t st = cx_cuda_stream(a->stream)->s;
  size_t bytes = (size_t)n * sizeof(double);
  CX_CUDA(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, st));
  CX_CUDA(cudaStreamSynchronize(st));
  if (count) host[n] = m;
  int64_t total = n + (count ? 1 : 0);
  CX_TRY(r->reduce(r->user, host, total, CX_REDUCE_SUM));
  /* pageable source: the copy has read host before cudaMemcpyAsync returns, but the buffer is
   * reused by the next pooling, so wait for it anyway */
  CX_CUDA(cudaMemcpyAsync(dev, host, (size_t)total * sizeof(double), cudaMemcpyHostToDevice, st));
  CX_CUDA(cudaStreamSynchronize(st));
  return CX_OK;
}

static bool plain_arg(const cx_tensor *t) { return cx_tensor_is_contiguous(t); }

static cx_status bn_infer_run(const cx_kernel_args *a) {
  cx_bn_geom g = geom_of(&a->in[0]);
  if (g.n * g.c * g.s == 0) return CX_OK;
  cx_cuda_bn_infer(cx_cuda_f32(&a->in[0]), cx_cuda_f32(&a->out[0]), cx_cuda_f32(&a->in[1]),
                   cx_cuda_f32(&a->in[2]), cx_cuda_f32(&a->in[3]), cx_cuda_f32(&a->in[4]),
                   cx_node_float(a->node, "epsilon", 1e-5f), g, cx_cuda_stream(a->stream)->s);
  CX_CUDA_LAUNCHED();
  return CX_OK;
}

static cx_status bn_train_run(const cx_kernel_args *a) {
  const cx_tensor *xt = &a->in[0];
  if (!plain_arg(xt) || !plain_arg(&a->out[0]))
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (BatchNormTrain): the CUDA kernel takes plain "
                   "NCHW tensors only", a->node->name);
  cx_bn_geom g = geom_of(xt);
  if (g.c == 0) return CX_OK;
  if (a->sync_stats && !a->state)
    return cx_fail(CX_ERR_BACKEND, "node '%s' (BatchNormTrain): not prepared", a->node->name);
  cudaStream_t st = cx_cuda_stream(a->stream)->s;
  double *part = a->scratch, *sum = part + 2 * g.c * g.p, *sq = sum + g.c + 1;
  const double m = (double)g.n * g.s;
  const double *pooled = a->sync_stats ? sum + g.c : NULL;
  const float *x = cx_cuda_f32(xt);
  cx_cuda_bn_sum(x, part, sum, g, st);
  CX_CUDA_LAUNCHED();
  if (a->sync_stats) CX_TRY(pool(a, sum, g.c, true, m));
  cx_cuda_bn_sq_dev(x, sum, part, sq, m, pooled, g, st);
  CX_CUDA_LAUNCHED();
  if (a->sync_stats) CX_TRY(pool(a, sq, g.c, false, m));
  float lo, hi;
  bool act = cx_bn_activation(a->node, &lo, &hi);
  /* a recomputed node (gradient checkpointing) has updated the running statistics already */
  bool update = a->training && !a->recompute;
  cx_cuda_bn_train_out(x, cx_cuda_f32(&a->out[0]), cx_cuda_f32(&a->in[1]),
                       cx_cuda_f32(&a->in[2]), sum, sq, m, pooled,
                       cx_node_float(a->node, "epsilon", 1e-5f),
                       cx_node_float(a->node, "momentum", 0.9f), update,
                       cx_cuda_f32(&a->out[1]), cx_cuda_f32(&a->out[2]),
                       cx_cuda_f32(&a->in[3]), cx_cuda_f32(&a->in[4]), act, lo, hi, g, st);
  CX_CUDA_LAUNCHED();
  return CX_OK;
}

/* (dY, X, scale, saved_mean, saved_invstd[, B]) -> (dX, dScale, dBias). With synchronised
 * BatchNorm the sums for dX are pooled; dScale and dBias stay this replica's, as on the CPU (the
 * gradient reduction averages them like every parameter's). */
static cx_status bn_grad_run(const cx_kernel_args *a) {
  const cx_tensor *xt = &a->in[1];
  if (!plain_arg(xt) || !plain_arg(&a->in[0]) || !plain_arg(&a->out[0]))
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (BatchNormGrad): the CUDA kernel takes plain "
                   "NCHW tensors only", a->node->name);
  cx_bn_geom g = geom_of(xt);
  if (g.c == 0) return CX_OK;
  if (a->sync_stats && !a->state)
    return cx_fail(CX_ERR_BACKEND, "node '%s' (BatchNormGrad): not prepared", a->node->name);
  cudaStream_t st = cx_cuda_stream(a->stream)->s;
  double *part = a->scratch, *sums = part + 2 * g.c * g.p;
  const double m = (double)g.n * g.s;
  float lo, hi;
  bool act = cx_bn_activation(a->node, &lo, &hi);
  const float *bias = act && a->n_in > 5 ? cx_cuda_f32(&a->in[5]) : NULL;
  if (act && !bias)
    return cx_fail(CX_ERR_ARG, "node '%s' (BatchNormGrad): a fused activation needs B",
                   a->node->name);
  const float *dy = cx_cuda_f32(&a->in[0]), *x = cx_cuda_f32(xt), *scale = cx_cuda_f32(&a->in[2]);
  const float *mean = cx_cuda_f32(&a->in[3]), *invstd = cx_cuda_f32(&a->in[4]);
  cx_cuda_bn_grad_sums(dy, x, scale, bias, mean, invstd, act, lo, hi, part, sums,
                       cx_cuda_f32(&a->out[1]), cx_cuda_f32(&a->out[2]), g, st);
  CX_CUDA_LAUNCHED();
  if (a->sync_stats) CX_TRY(pool(a, sums, 2 * g.c, true, m));
  cx_cuda_bn_grad_dx(dy, x, cx_cuda_f32(&a->out[0]), scale, bias, mean, invstd, act, lo, hi,
                     sums, m, a->sync_stats ? sums + 2 * g.c : NULL, g, st);
  CX_CUDA_LAUNCHED();
  return CX_OK;
}

const cx_kernel cx_cuda_norm[] = {
    {"BatchNormalization", NULL, bn_infer_run, NULL, 0, NULL, 0},
    {"BatchNormTrain", bn_prepare, bn_train_run, bn_release, 0, NULL, 0},
    {"BatchNormGrad", bn_grad_prepare, bn_grad_run, bn_release, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
