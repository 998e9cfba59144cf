#ifndef CX_TOML_LEX_H
#define CX_TOML_LEX_H

/* The TOML scanner: positions and messages, whitespace, comments, strings and numbers. Used by
 * toml_parse.c only; not part of the public interface. */

#include "toml_impl.h"

typedef struct toml_parser {
  const char *src, *end, *p;
  const char *file;
  /* Position cache: the line number and line start of the last position asked for, so that
   * positions asked for in file order cost one pass over the text in all. */
  const char *pos_at, *pos_line_start;
  int pos_line;
  int section, sections; /* the current [header] section (inline tables get their own) */
  int depth;             /* of nested arrays and inline tables */
  cx_toml *root, *current;
} toml_parser;

/* A growing byte buffer, always NUL-terminated once something was put in it. */
typedef struct toml_buf {
  char *s;
  size_t n, cap;
} toml_buf;

bool tp_buf_put(toml_buf *b, const char *s, size_t n);

void tp_where(toml_parser *t, const char *at, int *line, int *col);
/* "file:line:col: <message>" for the position at; returns s. */
cx_status tp_error(toml_parser *t, cx_status s, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define tp_fail(t, at, ...) tp_error((t), CX_ERR_FORMAT, (at), __VA_ARGS__)
/* What stands at a position, for "expected X, found Y": 'x', end of line, end of file, U+00A0. */
const char *tp_found(const toml_parser *t, const char *at, char buf[32]);

bool tp_is_bare(char c); /* may appear in a bare key */
/* Length of the newline at q: 1 for LF, 2 for CRLF, 0 for anything else. */
int tp_newline(const toml_parser *t, const char *q);
/* The whole text must be UTF-8 without NUL bytes (those are found here, before parsing). */
cx_status tp_check_utf8(toml_parser *t);

void tp_skip_ws(toml_parser *t);
/* Skips a comment if one starts here (checking it for control characters). */
cx_status tp_skip_comment(toml_parser *t);
/* Skips spaces, comments and newlines, as allowed between array elements. */
cx_status tp_skip_blank(toml_parser *t);
/* After an expression: spaces, an optional comment, then a newline or the end of the file. */
cx_status tp_expect_eol(toml_parser *t, const char *after);

/* A string of any of the four kinds starting at p (a quote); key rejects multi-line ones. */
cx_status tp_string(toml_parser *t, bool key, toml_buf *out);
/* A number (integer, float, inf, nan) starting at p; dates and times are rejected here. */
cx_status tp_number(toml_parser *t, cx_toml *node);

#endif
