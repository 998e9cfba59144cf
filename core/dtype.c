#include "dtype.h"

#include <math.h>
#include <string.h>

size_t cx_dtype_size(cx_dtype t) {
  static const size_t sizes[CX_DTYPE_COUNT] = {4, 2, 2, 1, 1, 4, 8, 1, 8};
  return (unsigned)t < CX_DTYPE_COUNT ? sizes[t] : 0;
}

const char *cx_dtype_name(cx_dtype t) {
  static const char *names[CX_DTYPE_COUNT] = {"f32", "f16", "bf16", "s8", "u8",
                                              "s32", "s64", "bool", "f64"};
  return (unsigned)t < CX_DTYPE_COUNT ? names[t] : "invalid";
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float cx_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    float v = ldexpf((float)man, -24); /* subnormal or zero */
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t cx_f32_to_f16(float f) {
  uint32_t u = f32_bits(f), sign = (u >> 16) & 0x8000;
  if (isnan(f)) return (uint16_t)(sign | 0x7e00);
  float a = fabsf(f);
  if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00);
  if (a < 6.103515625e-05f) { /* f16 subnormal range: quantise to multiples of 2^-24 */
    return (uint16_t)(sign | (uint32_t)nearbyintf(a * 16777216.0f));
  }
  uint32_t exp = ((u >> 23) & 0xff) - 112, man = u & 0x7fffff;
  uint32_t h = (exp << 10) | (man >> 13), rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++; /* carry into exponent is correct */
  return (uint16_t)(sign | h);
}

float cx_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t cx_f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

double cx_dtype_load(cx_dtype t, const void *p, size_t i) {
  switch (t) {
  case CX_F32: return ((const float *)p)[i];
  case CX_F16: return cx_f16_to_f32(((const uint16_t *)p)[i]);
  case CX_BF16: return cx_bf16_to_f32(((const uint16_t *)p)[i]);
  case CX_S8: return ((const int8_t *)p)[i];
  case CX_U8: return ((const uint8_t *)p)[i];
  case CX_S32: return ((const int32_t *)p)[i];
  case CX_S64: return (double)((const int64_t *)p)[i];
  case CX_BOOL: return ((const uint8_t *)p)[i] != 0;
  case CX_F64: return ((const double *)p)[i];
  default: return 0;
  }
}

void cx_dtype_store(cx_dtype t, void *p, size_t i, double v) {
  switch (t) {
  case CX_F32: ((float *)p)[i] = (float)v; break;
  case CX_F16: ((uint16_t *)p)[i] = cx_f32_to_f16((float)v); break;
  case CX_BF16: ((uint16_t *)p)[i] = cx_f32_to_bf16((float)v); break;
  case CX_S8: ((int8_t *)p)[i] = (int8_t)v; break;
  case CX_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
  case CX_S32: ((int32_t *)p)[i] = (int32_t)v; break;
  case CX_S64: ((int64_t *)p)[i] = (int64_t)v; break;
  case CX_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  case CX_F64: ((double *)p)[i] = v; break;
  default: break;
  }
}
