#ifndef CX_TEST_PYTHON_REF_H
#define CX_TEST_PYTHON_REF_H

/* Reference numbers from PyTorch, computed while the test runs: a test writes a Python script
 * (with its inputs as literals), runs it with the tests' Python (CX_PYTHON: a venv that sees Debian's python3-torch), and
 * reads back the numbers it prints. Shared by test_optim.c and test_schedule.c; a header of
 * static functions because every tests/test_*.c is built on its own. */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The tests' Python (tests/CMakeLists.txt: CX_PYTHON, the venv of scripts/install-deps.sh). */
#define PY_PYTHON CX_PYTHON

typedef struct py_script {
  char *text;
  size_t len, cap;
} py_script;

static void py_printf(py_script *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), unused));
static void py_printf(py_script *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int need = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (need < 0) return;
  if (s->len + (size_t)need + 1 > s->cap) {
    size_t cap = (s->cap ? s->cap * 2 : 4096) + (size_t)need;
    char *t = realloc(s->text, cap);
    if (!t) return;
    s->text = t;
    s->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(s->text + s->len, s->cap - s->len, fmt, ap);
  va_end(ap);
  s->len += (size_t)need;
}

/* `name = [..]` with every float written so that Python reads back the same float32. */
__attribute__((unused)) static void py_floats(py_script *s, const char *name, const float *x,
                                              int64_t n) {
  py_printf(s, "%s = [", name);
  for (int64_t i = 0; i < n; i++) py_printf(s, "%s%.9g", i ? "," : "", x[i]);
  py_printf(s, "]\n");
}

/* Runs the script; fills out[] with up to max numbers it printed and returns how many, or -1
 * after printing why (no python, no torch, the script failed). Frees the script's text. */
__attribute__((unused)) static int py_run(py_script *s, double *out, int max) {
  char path[] = "/tmp/cx_test_py_XXXXXX";
  int fd = mkstemp(path);
  int n = -1;
  if (fd < 0 || !s->text || write(fd, s->text, s->len) != (ssize_t)s->len) {
    printf("FAIL: could not write the PyTorch reference script to %s\n", path);
    goto done;
  }
  char cmd[200];
  snprintf(cmd, sizeof cmd, PY_PYTHON " -W ignore %s 2>&1", path);
  FILE *p = popen(cmd, "r");
  if (!p) goto done;
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap), *end;
  while (buf && len + 1 < cap && (end = fgets(buf + len, (int)(cap - len), p))) len += strlen(end);
  int rc = pclose(p);
  if (!buf) goto done;
  buf[len] = 0;
  char *at = buf;
  for (n = 0; n < max; n++) {
    double v = strtod(at, &end);
    if (end == at) break;
    out[n] = v;
    at = end;
  }
  while (*at == ' ' || *at == '\n') at++;
  if (rc != 0 || *at) {
    printf("FAIL: the PyTorch reference needs %s with torch (scripts/install-deps.sh makes "
           "it); it printed:\n%s\n", PY_PYTHON, buf);
    n = -1;
  }
  free(buf);
done:
  if (fd >= 0) {
    close(fd);
    unlink(path);
  }
  free(s->text);
  *s = (py_script){0};
  return n;
}

#endif
