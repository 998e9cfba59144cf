#ifndef CX_CPU_NORM_BF16_H
#define CX_CPU_NORM_BF16_H

/* BatchNorm's element-wise passes on bf16 activations read and written in place (norm_nhwc.c,
 * bf16_vec.h): each computes exactly what norm_nhwc.c's f32 loops compute, in the same order
 * (products and sums apart, as the ISO C build compiles them), so a result is bit for bit the
 * staged one. n floats in tiles of t (a multiple of 16); the last tile may be short. Only where
 * cx_cpu_bf16_direct(). */

#include <stdbool.h>
#include <stdint.h>

/* y = x * k + b, clamped to [act[0], act[1]] unless act is NULL */
void cx_bn_bf16_affine(const uint16_t *x, uint16_t *y, int64_t n, int64_t t, const float *k,
                       const float *b, const float *act);

/* dx = k * dz - kx * x + b, dz = dy, or with act dy where act[0] < x * kf + bf < act[1], else 0 */
void cx_bn_bf16_grad(const uint16_t *dy, const uint16_t *x, uint16_t *dx, int64_t n, int64_t t,
                     const float *k, const float *kx, const float *b, const float *kf,
                     const float *bf, const float *act);

/* Whether cx_bn_bf16_dots takes tiles of t floats (t <= 128) */
bool cx_bn_bf16_dots_fit(int64_t t);

/* l0 += dz, l1 += dz * (x - m) over n values in tiles of t, each lane's tiles in order; dz as
 * cx_bn_bf16_grad's */
void cx_bn_bf16_dots(const uint16_t *dy, const uint16_t *x, int64_t n, int64_t t, const float *m,
                     const float *kf, const float *bf, const float *act, float *l0, float *l1);

#endif
