#include "crc32c.h"

#include <string.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#define CX_CRC_HW 1
#endif

static uint32_t extend_bitwise(uint32_t c, const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
  }
  return c;
}

#ifdef CX_CRC_HW
__attribute__((target("sse4.2"))) static uint32_t extend_sse42(uint32_t c, const uint8_t *p,
                                                               size_t n) {
  uint64_t c64 = c;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
  }
  c = (uint32_t)c64;
  for (; n; p++, n--) c = _mm_crc32_u8(c, *p);
  return c;
}
#endif

uint32_t cx_crc32c_extend(uint32_t crc, const void *data, size_t n) {
  uint32_t c = ~crc;
#ifdef CX_CRC_HW
  if (__builtin_cpu_supports("sse4.2")) return ~extend_sse42(c, data, n);
#endif
  return ~extend_bitwise(c, data, n);
}

uint32_t cx_crc32c(const void *data, size_t n) { return cx_crc32c_extend(0, data, n); }

uint32_t cx_crc32c_masked(const void *data, size_t n) {
  uint32_t c = cx_crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
