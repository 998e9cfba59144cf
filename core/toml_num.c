/* TOML numbers: decimal, hex, octal and binary integers, floats, inf and nan. Each is scanned
 * against the grammar first (so that an error points at the character that breaks it) and only
 * then converted, with underscores removed, by strtoll/strtod. */
#include "toml_lex.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct number {
  toml_parser *t;
  const char *start;
  char token[48]; /* the number as written (shortened), for messages */
} number;

static cx_status invalid(number *n, const char *at, const char *what) {
  char buf[32];
  return tp_fail(n->t, at, "invalid number '%s': %s, found %s", n->token, what,
                 tp_found(n->t, at, buf));
}

static bool is_digit(char c, int base) {
  if (base == 16)
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  return c >= '0' && c < '0' + base;
}

static bool at(const toml_parser *t, const char *q, char c) { return q < t->end && *q == c; }

/* One or more digits with single underscores between digits; *q moves past them. */
static cx_status digits(number *n, const char **q, int base) {
  const toml_parser *t = n->t;
  static const char *const expected[17] = {[2] = "expected a binary digit",
                                           [8] = "expected an octal digit",
                                           [10] = "expected a digit",
                                           [16] = "expected a hex digit"};
  if (*q >= t->end || !is_digit(**q, base)) return invalid(n, *q, expected[base]);
  while (*q < t->end) {
    if (is_digit(**q, base)) {
      (*q)++;
    } else if (**q == '_') {
      if (*q + 1 >= t->end || !is_digit((*q)[1], base))
        return invalid(n, *q + 1, "an underscore must sit between two digits: expected a digit");
      (*q)++;
    } else {
      break;
    }
  }
  return CX_OK;
}

/* What follows a number must not continue it: "1.2.3", "0x1g", "1e5x" are errors here. */
static cx_status ended(number *n, const char *q) {
  if (q < n->t->end && (tp_is_bare(*q) || *q == '.' || *q == '+'))
    return invalid(n, q, "expected the end of the number");
  return CX_OK;
}

static bool starts_with(const toml_parser *t, const char *q, const char *word) {
  size_t len = strlen(word);
  return (size_t)(t->end - q) >= len && memcmp(q, word, len) == 0;
}

/* 1979-05-27 or 07:32:00 (the start of a date-time, a date or a time). */
static bool looks_like_date(const toml_parser *t, const char *q) {
  int d = 0;
  while (q + d < t->end && d < 4 && is_digit(q[d], 10)) d++;
  return (d == 4 && at(t, q + 4, '-')) || (d >= 2 && at(t, q + 2, ':'));
}

/* The scanned text without underscores, '.' as the C library's locale writes it. */
static cx_status clean(const char *from, const char *to, toml_buf *out) {
  char point = *localeconv()->decimal_point;
  for (const char *q = from; q < to; q++) {
    char c = *q == '.' ? point : *q;
    if (*q != '_' && !tp_buf_put(out, &c, 1)) return cx_fail(CX_ERR_NOMEM, "out of memory");
  }
  if (!tp_buf_put(out, "", 0)) return cx_fail(CX_ERR_NOMEM, "out of memory");
  return CX_OK;
}

static cx_status to_int(number *n, const char *from, const char *to, int base, cx_toml *node) {
  toml_buf b = {0};
  cx_status s = clean(from, to, &b);
  if (s == CX_OK) {
    errno = 0;
    node->v.i = strtoll(b.s, NULL, base);
    if (errno == ERANGE)
      s = tp_fail(n->t, n->start, "integer '%s' does not fit in 64 bits", n->token);
  }
  free(b.s);
  node->type = CX_TOML_INT;
  return s;
}

static cx_status to_float(number *n, const char *to, cx_toml *node) {
  toml_buf b = {0};
  cx_status s = clean(n->start, to, &b);
  if (s == CX_OK) {
    errno = 0;
    node->v.f = strtod(b.s, NULL);
    if (errno == ERANGE && isinf(node->v.f))
      s = tp_fail(n->t, n->start, "float '%s' is too large for a 64-bit float", n->token);
  }
  free(b.s);
  node->type = CX_TOML_FLOAT;
  return s;
}

static cx_status special(number *n, const char *q, bool negative, cx_toml *node) {
  node->type = CX_TOML_FLOAT;
  node->v.f = *q == 'i' ? INFINITY : NAN;
  if (negative) node->v.f = copysign(node->v.f, -1.0);
  CX_TRY(ended(n, q + 3));
  n->t->p = q + 3;
  return CX_OK;
}

static cx_status prefixed(number *n, const char *q, cx_toml *node) {
  int base = q[1] == 'x' ? 16 : q[1] == 'o' ? 8 : 2;
  const char *from = q + 2;
  q = from;
  CX_TRY(digits(n, &q, base));
  CX_TRY(ended(n, q));
  n->t->p = q;
  return to_int(n, from, q, base, node);
}

/* [+-] int [. digits] [e [+-] digits], with no leading zeros in the integer part. */
static cx_status decimal(number *n, const char *q, cx_toml *node) {
  bool is_float = false;
  if (q < n->t->end && *q == '0' && q + 1 < n->t->end && (is_digit(q[1], 10) || q[1] == '_'))
    return tp_fail(n->t, q, "invalid number '%s': leading zeros are not allowed", n->token);
  CX_TRY(digits(n, &q, 10));
  if (at(n->t, q, '.')) {
    q++;
    CX_TRY(digits(n, &q, 10));
    is_float = true;
  }
  if (at(n->t, q, 'e') || at(n->t, q, 'E')) {
    q++;
    if (at(n->t, q, '+') || at(n->t, q, '-')) q++;
    CX_TRY(digits(n, &q, 10));
    is_float = true;
  }
  CX_TRY(ended(n, q));
  n->t->p = q;
  return is_float ? to_float(n, q, node) : to_int(n, n->start, q, 10, node);
}

cx_status tp_number(toml_parser *t, cx_toml *node) {
  number n = {.t = t, .start = t->p};
  size_t len = 0;
  while (t->p + len < t->end && len < sizeof n.token - 1 &&
         (tp_is_bare(t->p[len]) || t->p[len] == '.' || t->p[len] == '+'))
    len++;
  memcpy(n.token, t->p, len);
  n.token[len] = '\0';
  if (looks_like_date(t, t->p))
    return tp_error(t, CX_ERR_UNSUPPORTED, t->p,
                    "dates are not supported: write the date or time as a string");
  const char *q = t->p;
  bool sign = at(t, q, '+') || at(t, q, '-');
  if (sign) q++;
  if (starts_with(t, q, "inf") || starts_with(t, q, "nan"))
    return special(&n, q, *t->p == '-', node);
  bool prefix = at(t, q, '0') && (at(t, q + 1, 'x') || at(t, q + 1, 'o') || at(t, q + 1, 'b'));
  if (prefix && sign)
    return tp_fail(t, t->p, "invalid number '%s': no sign is allowed before 0%c", n.token, q[1]);
  return prefix ? prefixed(&n, q, node) : decimal(&n, q, node);
}
