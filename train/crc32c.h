#ifndef CX_CRC32C_H
#define CX_CRC32C_H

/* CRC-32C (Castagnoli), as TFRecord files and our checkpoint header use it. The SSE4.2 crc32
 * instruction computes it where the CPU has one (several GB/s), a bitwise loop elsewhere. */

#include <stddef.h>
#include <stdint.h>

/* The CRC of the bytes seen so far (crc; 0 before any) followed by n more. */
uint32_t cx_crc32c_extend(uint32_t crc, const void *data, size_t n);
uint32_t cx_crc32c(const void *data, size_t n);
/* TFRecord's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t cx_crc32c_masked(const void *data, size_t n);

#endif
