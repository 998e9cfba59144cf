/* Layer normalization kernels (layer_norm_launch.h). The arithmetic follows
 * kernels/cpu/layer_norm.c operation for operation: the row sums in double, the mean and the
 * inverse std rounded to f32 as the CPU rounds them, and explicit _rn intrinsics wherever the CPU
 * (C11, no contraction) does a separate multiply and add, which nvcc would otherwise fuse. */
#include "common.cuh"
#include "layer_norm_launch.h"

namespace {

/* Rows run one per block, over a grid of at most 65536 blocks. */
#define ROW_STRIDE(r, rows) for (int64_t r = blockIdx.x; r < (rows); r += gridDim.x)

/* y, mean and invstd of each row (run_ln and row_stats of the CPU) */
__global__ void forward_kernel(const float *__restrict__ x, const float *__restrict__ scale,
                               const float *__restrict__ bias, float *__restrict__ y,
                               float *mean, float *invstd, float eps, cx_ln_geom g) {
  __shared__ double t[THREADS];
  const int64_t cols = g.cols;
  ROW_STRIDE(r, g.rows) {
    const float *xr = x + r * cols;
    float *yr = y + r * cols;
    double s = 0;
    for (int64_t j = threadIdx.x; j < cols; j += THREADS) s = __dadd_rn(s, (double)xr[j]);
    block_sum(t, s);
    const float m = (float)__ddiv_rn(t[0], (double)cols);
    __syncthreads(); /* everyone has read t[0] before t is reused */
    double v = 0;
    for (int64_t j = threadIdx.x; j < cols; j += THREADS) {
      float d = __fsub_rn(xr[j], m);
      v = __dadd_rn(v, __dmul_rn((double)d, (double)d));
    }
    block_sum(t, v);
    const float is =
        (float)__ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(__ddiv_rn(t[0], (double)cols), (double)eps)));
    __syncthreads();
    if (bias) {
      for (int64_t j = threadIdx.x; j < cols; j += THREADS)
        yr[j] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(xr[j], m), is), scale[j]), bias[j]);
    } else {
      for (int64_t j = threadIdx.x; j < cols; j += THREADS)
        yr[j] = __fmul_rn(__fmul_rn(__fsub_rn(xr[j], m), is), scale[j]);
    }
    if (threadIdx.x == 0) {
      if (mean) mean[r] = m;
      if (invstd) invstd[r] = is;
    }
  }
}

/* dX of each row (the first loop of the CPU's run_ln_grad) */
__global__ void grad_dx_kernel(const float *__restrict__ dy, const float *__restrict__ x,
                               const float *__restrict__ scale, const float *__restrict__ mean,
                               const float *__restrict__ invstd, float *__restrict__ dx,
                               cx_ln_geom g) {
  __shared__ double t[THREADS];
  const int64_t cols = g.cols;
  ROW_STRIDE(r, g.rows) {
    const float *dyr = dy + r * cols, *xr = x + r * cols;
    float *dxr = dx + r * cols;
    const float m = mean[r], is = invstd[r];
    double mg = 0, mgx = 0;
    for (int64_t j = threadIdx.x; j < cols; j += THREADS) {
      float gv = __fmul_rn(dyr[j], scale[j]);
      float xh = __fmul_rn(__fsub_rn(xr[j], m), is);
      mg = __dadd_rn(mg, (double)gv);
      mgx = __dadd_rn(mgx, __dmul_rn((double)gv, (double)xh));
    }
    block_sum(t, mg);
    const float a1 = (float)__ddiv_rn(t[0], (double)cols);
    __syncthreads();
    block_sum(t, mgx);
    const float a2 = (float)__ddiv_rn(t[0], (double)cols);
    __syncthreads();
    for (int64_t j = threadIdx.x; j < cols; j += THREADS) {
      float gv = __fmul_rn(dyr[j], scale[j]);
      float xh = __fmul_rn(__fsub_rn(xr[j], m), is);
      dxr[j] = __fmul_rn(is, __fsub_rn(__fsub_rn(gv, a1), __fmul_rn(xh, a2)));
    }
  }
}

/* Chunk blockIdx.y of the rows: part[y * cols + j] = sum of dy * xhat over the chunk's rows in
 * order, part[(p + y) * cols + j] = sum of dy. One thread per column (coalesced rows). */
__global__ void grad_partial_kernel(const float *__restrict__ dy, const float *__restrict__ x,
                                    const float *__restrict__ mean,
                                    const float *__restrict__ invstd, double *part, cx_ln_geom g) {
  const int64_t cols = g.cols, len = (g.rows + g.p - 1) / g.p;
  const int64_t r0 = (int64_t)blockIdx.y * len;
  const int64_t r1 = r0 + len < g.rows ? r0 + len : g.rows;
  GRID_STRIDE(j, cols) {
    double s = 0, tt = 0;
    for (int64_t r = r0; r < r1; r++) {
      float d = dy[r * cols + j];
      float xh = __fmul_rn(__fsub_rn(x[r * cols + j], mean[r]), invstd[r]);
      s = __dadd_rn(s, __dmul_rn((double)d, (double)xh));
      tt = __dadd_rn(tt, (double)d);
    }
    part[(int64_t)blockIdx.y * cols + j] = s;
    part[((int64_t)g.p + blockIdx.y) * cols + j] = tt;
  }
}

/* The p chunks of each column added in chunk order (one thread per column) */
__global__ void grad_fold_kernel(const double *part, float *dscale, float *dbias, cx_ln_geom g) {
  const int64_t cols = g.cols;
  GRID_STRIDE(j, cols) {
    double s = 0, tt = 0;
    for (int i = 0; i < g.p; i++) {
      s = __dadd_rn(s, part[(int64_t)i * cols + j]);
      tt = __dadd_rn(tt, part[((int64_t)g.p + i) * cols + j]);
    }
    if (dscale) dscale[j] = (float)s;
    if (dbias) dbias[j] = (float)tt;
  }
}

unsigned row_grid(int64_t rows) { return blocks_for(rows, 1, GRID_CAP_64K); }

}  // namespace

extern "C" {

void cx_cuda_ln_forward(const float *x, const float *scale, const float *bias, float *y,
                        float *mean, float *invstd, float eps, cx_ln_geom g, cudaStream_t st) {
  forward_kernel<<<row_grid(g.rows), THREADS, 0, st>>>(x, scale, bias, y, mean, invstd, eps, g);
}

void cx_cuda_ln_grad_dx(const float *dy, const float *x, const float *scale, const float *mean,
                        const float *invstd, float *dx, cx_ln_geom g, cudaStream_t st) {
  grad_dx_kernel<<<row_grid(g.rows), THREADS, 0, st>>>(dy, x, scale, mean, invstd, dx, g);
}

void cx_cuda_ln_grad_params(const float *dy, const float *x, const float *mean,
                            const float *invstd, double *part, float *dscale, float *dbias,
                            cx_ln_geom g, cudaStream_t st) {
  dim3 grid(blocks_for(g.cols, THREADS, GRID_CAP_64K), (unsigned)g.p);
  grad_partial_kernel<<<grid, THREADS, 0, st>>>(dy, x, mean, invstd, part, g);
  grad_fold_kernel<<<blocks_for(g.cols, THREADS, GRID_CAP_64K), THREADS, 0, st>>>(part, dscale,
                                                                                  dbias, g);
}

}  // extern "C"
