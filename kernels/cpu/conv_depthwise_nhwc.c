/* The weight and bias gradients of a depthwise 3x3 convolution on channels-last tensors, for the
 * shapes where oneDNN 2.6 has no depthwise-specialised kernel for them (its generic jit
 * convolution runs the 2x2 feature maps at the end of a MobileNet several times slower than
 * its forward). A pixel of x and of dy is a row of C contiguous floats, so every loop runs over
 * channels: dW[c][ky][kx] += dy[n,oy,ox,c] * x[n, oy*sh-pt+ky, ox*sw-pl+kx, c].
 *
 * Each thread takes a range of images and sums into its own rows (nine weight rows and the bias
 * row, float per image, folded into double per image); the threads' rows are added after. The
 * loops are plain C with `omp simd`, compiled for AVX-512, for AVX2 + FMA and for the baseline
 * target. */
#include <omp.h>
#include <string.h>

#include "conv_depthwise.h"
#include "eltwise_engine.h"

enum { ROWS = 10 }; /* nine taps and the bias */

#define DW_LOOPS(SFX, ATTR)                                                                       \
  /* acc[k][c] += the image's contributions; acc[9][c] += dy */                                  \
  ATTR static void image_##SFX(const cx_conv_geom *g, const float *restrict x,                    \
                               const float *restrict dy, float *restrict acc) {                   \
    int64_t C = g->c_in;                                                                          \
    for (int64_t oy = 0; oy < g->oh; oy++)                                                        \
      for (int64_t ox = 0; ox < g->ow; ox++) {                                                    \
        const float *d = dy + (oy * g->ow + ox) * C;                                              \
        float *b = acc + 9 * C;                                                                   \
        _Pragma("omp simd") for (int64_t c = 0; c < C; c++) b[c] += d[c];                         \
        for (int ky = 0; ky < 3; ky++) {                                                          \
          int64_t iy = oy * g->sh - g->pt + ky;                                                   \
          if (iy < 0 || iy >= g->h) continue;                                                     \
          for (int kx = 0; kx < 3; kx++) {                                                        \
            int64_t ix = ox * g->sw - g->pl + kx;                                                 \
            if (ix < 0 || ix >= g->w) continue;                                                   \
            const float *xp = x + (iy * g->w + ix) * C;                                           \
            float *a = acc + (ky * 3 + kx) * C;                                                   \
            _Pragma("omp simd") for (int64_t c = 0; c < C; c++) a[c] += d[c] * xp[c];             \
          }                                                                                       \
        }                                                                                         \
      }                                                                                           \
  }

#if defined(__x86_64__) || defined(__i386__)
DW_LOOPS(avx512, __attribute__((target("avx512f"))))
DW_LOOPS(avx2, __attribute__((target("avx2,fma"))))
#define HAVE_X86 1
#endif
DW_LOOPS(c, )

enum { ISA_C, ISA_AVX2, ISA_AVX512 };

size_t cx_conv_dw3x3_nhwc_wgrad_scratch(const cx_conv_geom *g, int threads) {
  return (size_t)threads * ROWS * (size_t)g->c_in * (sizeof(float) + sizeof(double));
}

/* This thread's images, summed into its double rows. */
static void thread_part(const cx_conv_geom *g, const float *x, const float *dy, float *acc,
                        double *part, int v) {
  int t = omp_get_thread_num(), nt = omp_get_num_threads();
  int64_t C = g->c_in, n0 = g->n * t / nt, n1 = g->n * (t + 1) / nt;
  memset(part, 0, sizeof(double) * ROWS * (size_t)C);
  for (int64_t n = n0; n < n1; n++) {
    memset(acc, 0, sizeof(float) * ROWS * (size_t)C);
    const float *xn = x + n * g->h * g->w * C, *dn = dy + n * g->oh * g->ow * C;
#ifdef HAVE_X86
    if (v == ISA_AVX512) image_avx512(g, xn, dn, acc);
    else if (v == ISA_AVX2) image_avx2(g, xn, dn, acc);
    else
#endif
      image_c(g, xn, dn, acc);
    for (int64_t i = 0; i < ROWS * C; i++) part[i] += acc[i];
  }
  (void)v;
}

void cx_conv_dw3x3_nhwc_backward_weights(const cx_conv_geom *g, const float *x, const float *dy,
                                         float *dw, float *db, void *scratch, int threads) {
  int64_t C = g->c_in;
  double *parts = scratch;
  float *accs = (float *)(parts + (size_t)threads * ROWS * (size_t)C);
  int v = cx_cpu_avx512() ? ISA_AVX512 : cx_cpu_avx2() ? ISA_AVX2 : ISA_C;
  int used = 1;
#pragma omp parallel num_threads(threads)
  {
    int t = omp_get_thread_num();
#pragma omp single
    used = omp_get_num_threads();
    thread_part(g, x, dy, accs + (size_t)t * ROWS * (size_t)C, parts + (size_t)t * ROWS * (size_t)C,
                v);
  }
  for (int64_t c = 0; c < C; c++)
    for (int k = 0; k < ROWS; k++) {
      double s = 0;
      for (int t = 0; t < used; t++) s += parts[((size_t)t * ROWS + (size_t)k) * (size_t)C + (size_t)c];
      if (k < 9 && dw) dw[c * 9 + k] = (float)s;
      if (k == 9 && db) db[c] = (float)s;
    }
}
