/* A fuzz target as a plain program: each file named on the command line goes to its
 * LLVMFuzzerTestOneInput once, as libFuzzer would hand it over. Built without sanitizers
 * (tests/CMakeLists.txt: replay_<target>) so that valgrind can watch what ASan cannot: libhdf5
 * is not instrumented, and a read of its own past a buffer it allocated shows under ASan only
 * when the memory next to the buffer is a redzone, which depends on what ran before (a 30-minute
 * run's one report that no single input reproduced); valgrind reports such a read every time. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return perror(path), 1;
  uint8_t *b = NULL;
  size_t n = 0, cap = 0;
  for (size_t got = 1; got;) {
    if (n == cap) {
      uint8_t *nb = realloc(b, cap = cap ? 2 * cap : 65536);
      if (!nb) return free(b), fclose(f), fprintf(stderr, "%s: out of memory\n", path), 1;
      b = nb;
    }
    n += got = fread(b + n, 1, cap - n, f);
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) return free(b), fprintf(stderr, "%s: read error\n", path), 1;
  LLVMFuzzerTestOneInput(b, n);
  free(b);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return fprintf(stderr, "usage: %s FILE...\n", argv[0]), 2;
  int status = 0;
  for (int i = 1; i < argc; i++) status |= replay(argv[i]);
  return status;
}
