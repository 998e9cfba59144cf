#ifndef CX_STATUS_H
#define CX_STATUS_H

/* Errors are values: every call that can fail returns a cx_status and leaves a message (per thread)
 * that names the file, line or node and what was expected. Only main() exits. */

typedef enum cx_status {
  CX_OK = 0,
  CX_ERR_ARG,         /* a caller passed something invalid */
  CX_ERR_SHAPE,       /* shapes or dtypes do not fit the op */
  CX_ERR_UNSUPPORTED, /* valid, but not something we implement */
  CX_ERR_IO,          /* a file could not be opened, read or written */
  CX_ERR_FORMAT,      /* a file was read but its contents are malformed */
  CX_ERR_NOMEM,
  CX_ERR_NUMERIC,     /* NaN or Inf where a number was needed */
  CX_ERR_BACKEND,     /* a library call (oneDNN, CUDA, ...) failed */
} cx_status;

const char *cx_status_name(cx_status s);

/* Sets the message for this thread and returns s, so that `return cx_fail(...)` reads naturally. */
cx_status cx_fail(cx_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Puts context in front of the current message: "node 'conv1' (Conv): <message>". */
void cx_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

const char *cx_last_error(void);

/* A name read from a file, fit to print in a message: control characters (and DEL) become \xNN
 * and a name longer than 200 bytes is cut with "...". The result lives in one of 8 per-thread
 * buffers used in turn, so up to 8 calls may appear in one cx_fail. */
const char *cx_printable(const char *name);
void cx_error_clear(void);

#define CX_TRY(expr)                                                                               \
  do {                                                                                             \
    cx_status cx_try_status_ = (expr);                                                             \
    if (cx_try_status_ != CX_OK) return cx_try_status_;                                            \
  } while (0)

#endif
