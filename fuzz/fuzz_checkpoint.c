/* libFuzzer target: loading a checkpoint (train/checkpoint.c) from bytes against a fixed small
 * model. Inputs that start like a checkpoint ("CXCKPT\r\n" and 512 bytes) get their size and
 * CRC-32C fields redone, so the fuzzer reaches what a hostile file with a valid checksum
 * reaches: the HDF5 structure (through the guard driver), the meta checks (format, counts), and
 * every tensor's name, stored type, dtype label, shape and values. Other inputs test the header
 * checks. The bytes are written to a file in the working directory, since HDF5 reads files. */
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../train/checkpoint.h"
#include "../train/crc32c.h"
#include "hdf5_fuzz.h"

enum { HEADER = 512 };

static void reseal(uint8_t *b, size_t n) {
  uint32_t c = cx_crc32c(b + HEADER, n - HEADER);
  for (int i = 0; i < 8; i++) b[16 + i] = (uint8_t)((uint64_t)n >> (8 * i));
  for (int i = 0; i < 4; i++) b[24 + i] = (uint8_t)(c >> (8 * i));
  c = cx_crc32c(b, 28);
  for (int i = 0; i < 4; i++) b[28 + i] = (uint8_t)(c >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *b = malloc(size ? size : 1);
  if (!b) return 0;
  memcpy(b, data, size);
  if (size >= HEADER && memcmp(b, "CXCKPT\r\n", 8) == 0) reseal(b, size);
  char path[64];
  snprintf(path, sizeof path, "fuzz_checkpoint_%ld.h5", (long)getpid());
  FILE *f = fopen(path, "wb");
  size_t put = f ? fwrite(b, 1, size, f) : 0;
  free(b);
  if (!f || fclose(f) != 0 || put != size) return unlink(path), 0;
  /* the model: what the seed corpus was saved from (fuzz/corpus/checkpoint/) */
  float w[6] = {0}, bias[3] = {0}, m[6] = {0}, scale = 0;
  int64_t count = 0;
  uint16_t h[2] = {0};
  cx_tensor tw = cx_tensor_view(CX_F32, &(cx_shape){2, {2, 3}}, w);
  cx_tensor tb = cx_tensor_view(CX_F32, &(cx_shape){1, {3}}, bias);
  cx_tensor tm = cx_tensor_view(CX_F32, &(cx_shape){2, {2, 3}}, m);
  cx_tensor ts = cx_tensor_view(CX_F32, &(cx_shape){0, {0}}, &scale);
  cx_tensor tc = cx_tensor_view(CX_S64, &(cx_shape){0, {0}}, &count);
  cx_tensor th = cx_tensor_view(CX_BF16, &(cx_shape){1, {2}}, h);
  const char *names[] = {"fc.weight", "fc.bias"}, *snames[] = {"momentum/fc.weight",
                                                                "loss_scale", "count", "half"};
  cx_tensor *p[] = {&tw, &tb}, *s[] = {&tm, &ts, &tc, &th};
  cx_checkpoint_meta meta;
  cx_checkpoint_peek(path, &meta);
  cx_checkpoint_load(path, NULL, &meta, 2, names, p, 4, snames, s);
  cx_checkpoint_load(path, "sha256:fuzz", NULL, 2, names, p, 0, NULL, NULL);
  cx_fuzz_no_open_hdf5();
  unlink(path);
  H5garbage_collect(); /* HDF5's free lists would otherwise grow over millions of runs */
  return 0;
}
