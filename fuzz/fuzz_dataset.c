/* libFuzzer target: opening a data set (data/dataset.c, through the guard driver) from bytes,
 * as `compress data info` does: the parts, then each part opened (every check of the format,
 * dtypes, ranks, sizes against the file, num_classes, labels, class names, attributes), its
 * class table counted, and its first and last images read. The bytes are written to a file in
 * the working directory, since HDF5 reads files. */
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../data/data.h"
#include "hdf5_fuzz.h"

static void inspect(const char *path, const char *part) {
  cx_dataset *d = NULL;
  if (cx_dataset_open(path, part, &d) != CX_OK) return;
  const cx_dataset_info *in = cx_dataset_get_info(d);
  int64_t *count = calloc((size_t)in->num_classes + 1, sizeof *count);
  for (int64_t i = 0; count && i < in->n; i++) count[cx_dataset_labels(d)[i]]++;
  for (int64_t k = 0; k < in->num_classes; k++) cx_dataset_class_name(d, k);
  free(count);
  for (int i = 0; i < 3; i++) cx_dataset_attr(d, (const char *[]){"source", "created", "tool"}[i]);
  size_t image = (size_t)(in->h * in->w * in->c);
  uint8_t *px = in->n && image <= (1u << 24) ? malloc(image) : NULL;
  if (px) {
    cx_dataset_read(d, 0, 1, px);
    cx_dataset_read(d, in->n - 1, 1, px);
  }
  free(px);
  cx_dataset_close(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  snprintf(path, sizeof path, "fuzz_dataset_%ld.h5", (long)getpid());
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  size_t put = fwrite(data, 1, size, f);
  if (fclose(f) != 0 || put != size) return unlink(path), 0;
  char names[CX_DATA_MAX_PARTS][CX_DATA_PART_NAME];
  int n = 0;
  if (cx_dataset_parts(path, names, CX_DATA_MAX_PARTS, &n) == CX_OK)
    for (int i = 0; i < n; i++) inspect(path, names[i]);
  else inspect(path, "");
  cx_fuzz_no_open_hdf5();
  unlink(path);
  H5garbage_collect(); /* HDF5's free lists would otherwise grow over millions of runs */
  return 0;
}
