#ifndef CX_CPU_STAGE_H
#define CX_CPU_STAGE_H

/* bf16 activations (core/act_dtype.h) in kernels that compute in f32: runs of elements pass
 * through small f32 buffers (CX_STAGE floats, in L1), converted on the way in and rounded to
 * nearest even on the way out, so each kernel's f32 loops run unchanged. An f32 argument is used
 * in place. Offsets and counts are in elements of the tensor's memory order. */

#include <stdbool.h>
#include <stdint.h>

#include "../../core/tensor.h"

enum { CX_STAGE = 2048 };

/* y[i] = x[i] widened; y[i] = x[i] rounded to bf16 (AVX512-BF16 where present) */
void cx_cpu_bf16_widen(float *y, const uint16_t *x, int64_t n);
void cx_cpu_bf16_round(uint16_t *y, const float *x, int64_t n);

/* Elements [i, i + n) of t as f32: t's own floats, or buf (n floats) filled from bf16. */
const float *cx_stage_in(const cx_tensor *t, int64_t i, int64_t n, float *buf);
/* Where the f32 results for elements [i, ...) of t go: t's own floats, or buf. */
float *cx_stage_out(const cx_tensor *t, int64_t i, float *buf);
/* After writing n results there: buf rounded into t when t holds bf16. */
void cx_stage_commit(const cx_tensor *t, int64_t i, int64_t n, const float *buf);

/* y = f(x[0], ..., x[n_x - 1]) over every element, split between the threads (if par) and staged
 * CX_STAGE at a time; x[k] NULL (an omitted operand) reaches f as NULL. Each tensor is f32 or bf16
 * with y's element count. */
enum { CX_STAGE_MAX_IN = 4 };
typedef void (*cx_stage_fn)(const void *ctx, float *y, const float *const *x, int64_t n);
void cx_stage_map(cx_stage_fn f, const void *ctx, const cx_tensor *y, const cx_tensor *const *x,
                  int n_x, bool par);

/* Whether any of the kernel's tensors holds bf16 (then it takes its staged path). */
bool cx_stage_any_bf16(const cx_tensor *in, int n_in, const cx_tensor *out, int n_out);

/* Whether every present one holds bf16 and cx_cpu_bf16_direct() (bf16_vec.h): then a kernel
 * with AVX-512 loops reads and writes them in place instead of staging. */
bool cx_stage_all_bf16(const cx_tensor *in, int n_in, const cx_tensor *out, int n_out);

#endif
