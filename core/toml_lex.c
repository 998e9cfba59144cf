#include "toml_lex.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffers, positions, messages ---- */

bool tp_buf_put(toml_buf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 32;
    while (cap < b->n + n + 1) cap *= 2;
    char *grown = realloc(b->s, cap);
    if (!grown) return false;
    b->s = grown;
    b->cap = cap;
  }
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = '\0';
  return true;
}

void tp_where(toml_parser *t, const char *at, int *line, int *col) {
  if (!t->pos_at) {
    t->pos_at = t->pos_line_start = t->src;
    t->pos_line = 1;
  }
  while (at < t->pos_line_start) { /* back to an earlier line: walk back, not from the start */
    const char *q = t->pos_line_start - 1;
    while (q > t->src && q[-1] != '\n') q--;
    t->pos_line_start = q;
    t->pos_line--;
  }
  if (at < t->pos_at) t->pos_at = t->pos_line_start;
  for (const char *q = t->pos_at; q < at && q < t->end; q++) {
    if (*q == '\n') {
      t->pos_line++;
      t->pos_line_start = q + 1;
    }
  }
  t->pos_at = at;
  int c = 1;
  for (const char *q = t->pos_line_start; q < at && q < t->end; q++)
    if (((unsigned char)*q & 0xC0) != 0x80) c++; /* count characters, not UTF-8 bytes */
  *line = t->pos_line;
  *col = c;
}

cx_status tp_error(toml_parser *t, cx_status s, const char *at, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int line, col;
  tp_where(t, at, &line, &col);
  return cx_fail(s, "%s:%d:%d: %s", t->file, line, col, msg);
}

/* The code point at s (bytes already checked to be UTF-8). */
static unsigned decode_utf8(const unsigned char *s) {
  if (s[0] < 0x80) return s[0];
  int n = s[0] >= 0xF0 ? 3 : s[0] >= 0xE0 ? 2 : 1;
  unsigned cp = s[0] & (0x3F >> n);
  for (int i = 1; i <= n; i++) cp = cp << 6 | (s[i] & 0x3F);
  return cp;
}

const char *tp_found(const toml_parser *t, const char *at, char buf[32]) {
  if (at >= t->end) return "end of file";
  if (tp_newline(t, at)) return "end of line";
  unsigned char c = (unsigned char)*at;
  if (c >= 0x20 && c < 0x7F)
    snprintf(buf, 32, "'%c'", c);
  else
    snprintf(buf, 32, "U+%04X", decode_utf8((const unsigned char *)at));
  return buf;
}

bool tp_is_bare(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

int tp_newline(const toml_parser *t, const char *q) {
  if (q < t->end && *q == '\n') return 1;
  if (q + 1 < t->end && q[0] == '\r' && q[1] == '\n') return 2;
  return 0;
}

/* Control characters other than tab may not appear raw in comments or strings. */
static bool is_control(char c) { return ((unsigned char)c < 0x20 && c != '\t') || c == 0x7F; }

static cx_status control_error(toml_parser *t, const char *at, const char *where) {
  if (*at == '\r')
    return tp_fail(t, at, "a carriage return must be followed by a newline (\\n)");
  return tp_fail(t, at, "control character U+%04X is not allowed in %s", (unsigned char)*at,
                 where);
}

/* ---- UTF-8 ---- */

/* Length of the valid UTF-8 sequence at s (shortest form, no surrogates, at most U+10FFFF),
 * or 0. */
static int utf8_len(const unsigned char *s, const unsigned char *end) {
  unsigned c = s[0], cp, min;
  int n;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 1, cp = c & 0x1F, min = 0x80;
  else if ((c & 0xF0) == 0xE0) n = 2, cp = c & 0x0F, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) n = 3, cp = c & 0x07, min = 0x10000;
  else return 0;
  if (end - s <= n) return 0;
  for (int i = 1; i <= n; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n + 1;
}

cx_status tp_check_utf8(toml_parser *t) {
  const unsigned char *s = (const unsigned char *)t->src, *end = (const unsigned char *)t->end;
  while (s < end) {
    if (*s == 0)
      return tp_fail(t, (const char *)s, "a NUL byte is not allowed in a TOML document");
    int n = utf8_len(s, end);
    if (!n) return tp_fail(t, (const char *)s, "invalid UTF-8 (byte 0x%02X)", *s);
    s += n;
  }
  return CX_OK;
}

/* ---- whitespace and comments ---- */

void tp_skip_ws(toml_parser *t) {
  while (t->p < t->end && (*t->p == ' ' || *t->p == '\t')) t->p++;
}

cx_status tp_skip_comment(toml_parser *t) {
  if (t->p >= t->end || *t->p != '#') return CX_OK;
  for (t->p++; t->p < t->end && *t->p != '\n'; t->p++) {
    if (tp_newline(t, t->p)) break;
    if (is_control(*t->p)) return control_error(t, t->p, "a comment");
  }
  return CX_OK;
}

cx_status tp_skip_blank(toml_parser *t) {
  for (;;) {
    tp_skip_ws(t);
    CX_TRY(tp_skip_comment(t));
    int nl = tp_newline(t, t->p);
    if (!nl) return CX_OK;
    t->p += nl;
  }
}

cx_status tp_expect_eol(toml_parser *t, const char *after) {
  tp_skip_ws(t);
  CX_TRY(tp_skip_comment(t));
  if (t->p >= t->end) return CX_OK;
  int nl = tp_newline(t, t->p);
  if (nl) {
    t->p += nl;
    return CX_OK;
  }
  char buf[32];
  if (*t->p == '\r') return control_error(t, t->p, "");
  return tp_fail(t, t->p, "expected a newline or a comment after %s, found %s", after,
                 tp_found(t, t->p, buf));
}

/* ---- strings ---- */

static cx_status nomem(void) { return cx_fail(CX_ERR_NOMEM, "out of memory parsing TOML"); }

static bool put_utf8(toml_buf *b, unsigned cp) {
  char u[4];
  size_t n;
  if (cp < 0x80) u[0] = (char)cp, n = 1;
  else if (cp < 0x800) u[0] = (char)(0xC0 | cp >> 6), n = 2;
  else if (cp < 0x10000) u[0] = (char)(0xE0 | cp >> 12), n = 3;
  else u[0] = (char)(0xF0 | cp >> 18), n = 4;
  for (size_t i = 1; i < n; i++) u[i] = (char)(0x80 | ((cp >> (6 * (n - 1 - i))) & 0x3F));
  return tp_buf_put(b, u, n);
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* \uXXXX or \UXXXXXXXX at p (the backslash). */
static cx_status unicode_escape(toml_parser *t, toml_buf *out) {
  const char *at = t->p;
  int digits = at[1] == 'u' ? 4 : 8;
  unsigned long cp = 0;
  for (int i = 0; i < digits; i++) {
    const char *d = at + 2 + i;
    int h = d < t->end ? hex_value(*d) : -1;
    char buf[32];
    if (h < 0)
      return tp_fail(t, d, "expected %d hex digits after \\%c, found %s", digits, at[1],
                     tp_found(t, d, buf));
    cp = cp << 4 | (unsigned)h;
  }
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return tp_fail(t, at, "\\%c%.*s is not a Unicode scalar value", at[1], digits, at + 2);
  if (!put_utf8(out, (unsigned)cp)) return nomem();
  t->p = at + 2 + digits;
  return CX_OK;
}

/* An escape sequence at p (the backslash) in a basic string. */
static cx_status escape(toml_parser *t, toml_buf *out) {
  const char *at = t->p;
  char e = at + 1 < t->end ? at[1] : '\0', c;
  switch (e) {
  case 'b': c = '\b'; break;
  case 't': c = '\t'; break;
  case 'n': c = '\n'; break;
  case 'f': c = '\f'; break;
  case 'r': c = '\r'; break;
  case '"': c = '"'; break;
  case '\\': c = '\\'; break;
  case 'u': case 'U': return unicode_escape(t, out);
  default: {
    char buf[32];
    return tp_fail(t, at, "invalid escape: expected one of \\b \\t \\n \\f \\r \\\" \\\\ \\uXXXX "
                          "\\UXXXXXXXX after the backslash, found %s", tp_found(t, at + 1, buf));
  }
  }
  if (!tp_buf_put(out, &c, 1)) return nomem();
  t->p = at + 2;
  return CX_OK;
}

static cx_status unterminated(toml_parser *t, const char *open, const char *quote,
                              const char *before) {
  return tp_fail(t, open, "unterminated string: no closing %s before the end of the %s", quote,
                 before);
}

/* One-line strings: '...' (literal) or "..." (basic, with escapes). */
static cx_status string_line(toml_parser *t, char quote, toml_buf *out) {
  const char *open = t->p++;
  for (;;) {
    const char *c = t->p;
    if (c >= t->end) return unterminated(t, open, quote == '"' ? "\"" : "'", "file");
    if (tp_newline(t, c)) return unterminated(t, open, quote == '"' ? "\"" : "'", "line");
    if (*c == quote) {
      t->p++;
      return CX_OK;
    }
    if (*c == '\\' && quote == '"') {
      CX_TRY(escape(t, out));
      continue;
    }
    if (is_control(*c)) return control_error(t, c, "a string");
    if (!tp_buf_put(out, c, 1)) return nomem();
    t->p++;
  }
}

/* A backslash at p that ends a line in a multi-line basic string: it and all whitespace and
 * newlines after it are dropped. False when the backslash starts an ordinary escape instead. */
static bool line_ending_backslash(toml_parser *t) {
  const char *q = t->p + 1;
  while (q < t->end && (*q == ' ' || *q == '\t')) q++;
  if (!tp_newline(t, q)) return false;
  for (;;) {
    int nl = tp_newline(t, q);
    if (nl) q += nl;
    else if (q < t->end && (*q == ' ' || *q == '\t')) q++;
    else break;
  }
  t->p = q;
  return true;
}

/* A run of quotes in a multi-line string: three close it (up to two more before them belong to
 * the string); fewer are content. True when the string ended. */
static bool quote_run(toml_parser *t, char quote, toml_buf *out, bool *ok) {
  size_t run = 0;
  while (t->p + run < t->end && t->p[run] == quote && run < 5) run++;
  size_t content = run >= 3 ? run - 3 : run;
  *ok = tp_buf_put(out, t->p, content);
  t->p += run;
  return run >= 3;
}

/* """...""" and '''...''': a newline right after the opening quotes is dropped; CRLF reads as
 * LF. */
static cx_status string_multi(toml_parser *t, char quote, toml_buf *out) {
  const char *open = t->p;
  t->p += 3;
  t->p += tp_newline(t, t->p);
  for (;;) {
    const char *c = t->p;
    if (c >= t->end) return unterminated(t, open, quote == '"' ? "\"\"\"" : "'''", "file");
    bool ok = true;
    if (*c == quote) {
      if (quote_run(t, quote, out, &ok)) return ok ? CX_OK : nomem();
    } else if (*c == '\\' && quote == '"') {
      if (!line_ending_backslash(t)) CX_TRY(escape(t, out));
    } else if (tp_newline(t, c)) {
      ok = tp_buf_put(out, "\n", 1);
      t->p += tp_newline(t, c);
    } else if (is_control(*c)) {
      return control_error(t, c, "a string");
    } else {
      ok = tp_buf_put(out, c, 1);
      t->p++;
    }
    if (!ok) return nomem();
  }
}

cx_status tp_string(toml_parser *t, bool key, toml_buf *out) {
  char quote = *t->p;
  bool multi = t->p + 2 < t->end && t->p[1] == quote && t->p[2] == quote;
  /* An empty string still has a buffer, so that callers always get a NUL-terminated one. */
  if (!tp_buf_put(out, "", 0)) return nomem();
  if (multi && key) return tp_fail(t, t->p, "a key cannot be a multi-line string");
  return multi ? string_multi(t, quote, out) : string_line(t, quote, out);
}
