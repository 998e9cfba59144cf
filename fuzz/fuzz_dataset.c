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

/* libhdf5 1.10 leaks a little on some of its own error paths (H5Fopen of a file whose root
 * object header is damaged loses 112 bytes inside H5C_protect): not ours to fix, and not a
 * finding, when the leak check is turned on (-detect_leaks=1 after the flag added below). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libhdf5_serial.so\n"; }

/* Every H5Fopen callocs HDF5's metadata cache (megabytes), so the leak check libFuzzer makes after
 * each input that HDF5's own leaks set off costs more than the input: it is turned off here
 * (flags are parsed after this hook); ASan's other checks and UBSan stay on. */
/* libhdf5 mallocs sizes it read from the file (a metadata block of 2^60 bytes): malloc returns
 * NULL for those and HDF5 fails the call, as it does outside ASan, which would abort instead. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  static char *args[256];
  static char off[] = "-detect_leaks=0";
  int n = 0;
  for (; n < *argc && n < 254; n++) args[n] = (*argv)[n];
  args[n++] = off;
  args[n] = NULL;
  *argc = n;
  *argv = args;
  return 0;
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
  unlink(path);
  H5garbage_collect(); /* HDF5's free lists would otherwise grow over millions of runs */
  return 0;
}
