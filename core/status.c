#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char message[2048];

const char *cx_status_name(cx_status s) {
  switch (s) {
  case CX_OK: return "ok";
  case CX_ERR_ARG: return "invalid argument";
  case CX_ERR_SHAPE: return "shape error";
  case CX_ERR_UNSUPPORTED: return "unsupported";
  case CX_ERR_IO: return "I/O error";
  case CX_ERR_FORMAT: return "format error";
  case CX_ERR_NOMEM: return "out of memory";
  case CX_ERR_NUMERIC: return "numeric error";
  case CX_ERR_BACKEND: return "backend error";
  }
  return "unknown status";
}

cx_status cx_fail(cx_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  return s;
}

void cx_error_prefix(const char *fmt, ...) {
  char prefix[512], old[sizeof message];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, message, sizeof old);
  /* Truncation is acceptable: the message is for people and keeps its start. */
  size_t n = strlen(prefix);
  if (n > sizeof message - 3) n = sizeof message - 3;
  memcpy(message, prefix, n);
  memcpy(message + n, ": ", 2);
  size_t rest = sizeof message - n - 3, m = strlen(old);
  if (m > rest) m = rest;
  memcpy(message + n + 2, old, m);
  message[n + 2 + m] = '\0';
}

const char *cx_last_error(void) { return message; }

void cx_error_clear(void) { message[0] = '\0'; }

const char *cx_printable(const char *name) {
  static _Thread_local char buf[8][256];
  static _Thread_local unsigned next;
  char *out = buf[next++ % 8];
  size_t at = 0;
  for (const unsigned char *p = (const unsigned char *)(name ? name : ""); *p; p++) {
    if (at > 200) {
      memcpy(out + at, "...", 4);
      return out;
    }
    if (*p < 0x20 || *p == 0x7f) at += (size_t)snprintf(out + at, 5, "\\x%02x", *p);
    else out[at++] = (char)*p;
  }
  out[at] = '\0';
  return out;
}
