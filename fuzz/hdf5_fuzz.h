#ifndef CX_FUZZ_HDF5_FUZZ_H
#define CX_FUZZ_HDF5_FUZZ_H

/* What the targets that open HDF5 files (fuzz_dataset.c, fuzz_checkpoint.c) set up alike; each
 * includes this header once, in its one translation unit. */

#include <hdf5.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

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

/* Every HDF5 object the input opened is closed again: one left open on an error path keeps its
 * file open, and the next input, written to the same path (often given the same inode), would
 * be served from that file's stale state, a crash no single input reproduces. A finding. */
static void cx_fuzz_no_open_hdf5(void) {
  ssize_t n = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (n == 0) return;
  fprintf(stderr, "%zd HDF5 object(s) left open after the input\n", n);
  abort();
}

#endif
