/* libFuzzer target: .npy reading (core/npy.c) of any bytes, through the stream reader the file
 * reader uses. Covers: magic, version, header length, the header dict parser, dtype decoding,
 * the size checks against the bytes present and the trailing-bytes check. */
#define _GNU_SOURCE /* fmemopen */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../core/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0; /* fmemopen refuses an empty buffer */
  FILE *f = fmemopen((void *)data, size, "rb");
  if (!f) return 0;
  cx_dtype t;
  cx_shape s;
  void *p = NULL;
  if (cx_npy_read_stream(f, "fuzz.npy", &t, &s, &p) == CX_OK) {
    /* what a caller does next: size the array from its shape */
    volatile int64_t n = cx_shape_numel(&s);
    (void)n;
  }
  free(p);
  fclose(f);
  return 0;
}
