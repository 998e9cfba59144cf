#ifndef CX_DTYPE_H
#define CX_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum cx_dtype {
  CX_F32,
  CX_F16,
  CX_BF16,
  CX_S8,
  CX_U8,
  CX_S32,
  CX_S64,
  CX_BOOL,
  CX_F64,
  CX_DTYPE_COUNT
} cx_dtype;

size_t cx_dtype_size(cx_dtype t);
const char *cx_dtype_name(cx_dtype t);

float cx_f16_to_f32(uint16_t h);
uint16_t cx_f32_to_f16(float f);   /* round to nearest even; overflow gives inf */
float cx_bf16_to_f32(uint16_t h);
uint16_t cx_f32_to_bf16(float f);  /* round to nearest even; NaN stays NaN */

/* Element i of a buffer of type t, as double; for tests, .npy and checks, not hot loops. */
double cx_dtype_load(cx_dtype t, const void *p, size_t i);
void cx_dtype_store(cx_dtype t, void *p, size_t i, double v);

#endif
