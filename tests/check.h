#ifndef CX_TESTS_CHECK_H
#define CX_TESTS_CHECK_H

#include <stdio.h>

/* The tests' assertion: a failed check prints where and why and counts in `fails`, and the test
 * goes on, so one run shows every failure; main returns non-zero when fails is. */
static int fails;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fails++;                                                                                     \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                  \
      printf(__VA_ARGS__);                                                                         \
      printf("\n");                                                                                \
    }                                                                                              \
  } while (0)

#endif
