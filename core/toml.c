/* The TOML node tree and what callers do with it: look values up, read them as types, check a
 * table's keys against a schema. The parser is in toml_parse.c. */
#include "toml_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- nodes ---- */

cx_toml *cx_toml_node_new(cx_toml_type type, const char *file, int line, int col) {
  cx_toml *n = calloc(1, sizeof *n);
  if (!n) return NULL;
  n->type = type;
  n->file = file;
  n->line = n->key_line = line;
  n->col = n->key_col = col;
  return n;
}

bool cx_toml_node_add(cx_toml *parent, cx_toml *child) {
  if (parent->v.kids.n == parent->v.kids.cap) {
    size_t cap = parent->v.kids.cap ? 2 * parent->v.kids.cap : 4;
    cx_toml **grown = realloc(parent->v.kids.at, cap * sizeof *grown);
    if (!grown) return false;
    parent->v.kids.at = grown;
    parent->v.kids.cap = cap;
  }
  parent->v.kids.at[parent->v.kids.n++] = child;
  child->parent = parent;
  return true;
}

/* Tables are searched in order: config tables have tens of keys, not thousands. */
cx_toml *cx_toml_node_find(const cx_toml *table, const char *key, size_t len) {
  if (table->type != CX_TOML_TABLE) return NULL;
  for (size_t i = 0; i < table->v.kids.n; i++) {
    cx_toml *c = table->v.kids.at[i];
    if (c->key_len == len && memcmp(c->key, key, len) == 0) return c;
  }
  return NULL;
}

void cx_toml_node_free(cx_toml *n) {
  if (!n) return;
  if (n->type == CX_TOML_TABLE || n->type == CX_TOML_ARRAY) {
    for (size_t i = 0; i < n->v.kids.n; i++) cx_toml_node_free(n->v.kids.at[i]);
    free(n->v.kids.at);
  } else if (n->type == CX_TOML_STRING) {
    free(n->v.str.s);
  }
  free(n->key);
  free(n);
}

void cx_toml_free(cx_toml *root) {
  if (!root) return;
  char *file = (char *)root->file; /* the root owns the document name */
  cx_toml_node_free(root);
  free(file);
}

/* ---- names for messages ---- */

static void append(char *buf, size_t cap, const char *s, size_t n) {
  size_t l = strlen(buf);
  if (l + 1 >= cap) return;
  if (n > cap - 1 - l) n = cap - 1 - l;
  memcpy(buf + l, s, n);
  buf[l + n] = '\0';
}

static bool is_bare(const char *s, size_t len) {
  if (!len) return false;
  for (size_t i = 0; i < len; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '_' || c == '-'))
      return false;
  }
  return true;
}

/* s as a TOML basic string would write it, cut after max bytes with "...". */
static void append_quoted(char *buf, size_t cap, const char *s, size_t len, size_t max) {
  append(buf, cap, "\"", 1);
  for (size_t i = 0; i < len && i < max; i++) {
    unsigned char c = (unsigned char)s[i];
    char esc[8];
    if (c == '"' || c == '\\') snprintf(esc, sizeof esc, "\\%c", c);
    else if (c < 0x20 || c == 0x7F) snprintf(esc, sizeof esc, "\\u%04X", c);
    else esc[0] = (char)c, esc[1] = '\0';
    append(buf, cap, esc, strlen(esc));
  }
  append(buf, cap, len > max ? "\"..." : "\"", len > max ? 4 : 1);
}

void cx_toml_name_append(char *buf, size_t cap, const char *key, size_t len) {
  if (is_bare(key, len)) append(buf, cap, key, len);
  else append_quoted(buf, cap, key, len, 64);
}

static void path_append(const cx_toml *n, char *buf, size_t cap) {
  const cx_toml *p = n->parent;
  if (!p) return;
  path_append(p, buf, cap);
  if (p->type == CX_TOML_ARRAY) {
    size_t i = 0;
    while (i < p->v.kids.n && p->v.kids.at[i] != n) i++;
    char idx[32];
    snprintf(idx, sizeof idx, "[%zu]", i);
    append(buf, cap, idx, strlen(idx));
    return;
  }
  if (buf[0]) append(buf, cap, ".", 1);
  cx_toml_name_append(buf, cap, n->key, n->key_len);
}

const char *cx_toml_path(const cx_toml *node, char *buf, size_t cap) {
  if (!cap) return buf;
  buf[0] = '\0';
  if (node) path_append(node, buf, cap);
  return buf;
}

/* "at the top level", "in [teacher.train]", or "in stage[0]" for a table in an array. */
static const char *table_label(const cx_toml *table, char *buf, size_t cap) {
  char path[256];
  cx_toml_path(table, path, sizeof path);
  size_t n = strlen(path);
  if (!n) snprintf(buf, cap, "at the top level");
  else if (path[n - 1] == ']') snprintf(buf, cap, "in %s", path);
  else snprintf(buf, cap, "in [%s]", path);
  return buf;
}

/* ---- navigating ---- */

/* The node at a dotted path; *blocker is the first part that is not a table, if one stops it. */
static const cx_toml *lookup(const cx_toml *table, const char *path, const cx_toml **blocker) {
  *blocker = NULL;
  const cx_toml *n = table;
  while (n) {
    const char *dot = strchr(path, '.');
    size_t len = dot ? (size_t)(dot - path) : strlen(path);
    if (n->type != CX_TOML_TABLE) {
      *blocker = n;
      return NULL;
    }
    n = cx_toml_node_find(n, path, len);
    if (!dot) return n;
    path = dot + 1;
  }
  return NULL;
}

const cx_toml *cx_toml_get(const cx_toml *table, const char *path) {
  const cx_toml *blocker;
  return lookup(table, path, &blocker);
}

cx_toml_type cx_toml_type_of(const cx_toml *node) { return node->type; }

const char *cx_toml_type_name(cx_toml_type type) {
  switch (type) {
  case CX_TOML_TABLE: return "a table";
  case CX_TOML_ARRAY: return "an array";
  case CX_TOML_STRING: return "a string";
  case CX_TOML_INT: return "an integer";
  case CX_TOML_FLOAT: return "a float";
  case CX_TOML_BOOL: return "a boolean";
  }
  return "an unknown type";
}

size_t cx_toml_len(const cx_toml *node) {
  if (!node) return 0;
  if (node->type == CX_TOML_TABLE || node->type == CX_TOML_ARRAY) return node->v.kids.n;
  if (node->type == CX_TOML_STRING) return node->v.str.len;
  return 0;
}

const cx_toml *cx_toml_at(const cx_toml *node, size_t i) {
  if (!node || (node->type != CX_TOML_TABLE && node->type != CX_TOML_ARRAY)) return NULL;
  return i < node->v.kids.n ? node->v.kids.at[i] : NULL;
}

const char *cx_toml_key(const cx_toml *node) { return node ? node->key : NULL; }

cx_toml_pos cx_toml_where(const cx_toml *node) {
  return (cx_toml_pos){node->file, node->line, node->col};
}

cx_toml_pos cx_toml_key_where(const cx_toml *node) {
  return (cx_toml_pos){node->file, node->key_line, node->key_col};
}

const char *cx_toml_bytes(const cx_toml *node) {
  return node && node->type == CX_TOML_STRING ? node->v.str.s : NULL;
}

/* ---- typed values ---- */

static void describe_float(double f, char *buf, size_t cap) {
  if (isnan(f)) snprintf(buf, cap, "nan");
  else if (isinf(f)) snprintf(buf, cap, f < 0 ? "-inf" : "inf");
  else {
    snprintf(buf, cap, "%.15g", f); /* the shortest of the two that reads back exactly */
    if (strtod(buf, NULL) != f) snprintf(buf, cap, "%.17g", f);
  }
}

/* What a node holds, for "found ...": string "ten", integer 3, a table. */
static const char *describe(const cx_toml *n, char *buf, size_t cap) {
  char num[40];
  buf[0] = '\0';
  switch (n->type) {
  case CX_TOML_STRING:
    append(buf, cap, "string ", 7);
    append_quoted(buf, cap, n->v.str.s, n->v.str.len, 40);
    break;
  case CX_TOML_INT: snprintf(buf, cap, "integer %lld", (long long)n->v.i); break;
  case CX_TOML_FLOAT:
    describe_float(n->v.f, num, sizeof num);
    snprintf(buf, cap, "float %s", num);
    break;
  case CX_TOML_BOOL: snprintf(buf, cap, "boolean %s", n->v.b ? "true" : "false"); break;
  case CX_TOML_TABLE: snprintf(buf, cap, "a table"); break;
  case CX_TOML_ARRAY: snprintf(buf, cap, "an array of %zu values", n->v.kids.n); break;
  }
  return buf;
}

cx_status cx_toml_fail(const cx_toml *node, cx_status s, const char *fmt, ...) {
  char msg[1024], path[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  cx_toml_path(node, path, sizeof path);
  if (!path[0]) return cx_fail(s, "%s:%d:%d: %s", node->file, node->line, node->col, msg);
  return cx_fail(s, "%s:%d:%d: '%s': %s", node->file, node->line, node->col, path, msg);
}

static cx_status no_node(const char *fn) {
  return cx_fail(CX_ERR_ARG, "%s: the node is NULL (look it up with cx_toml_get first)", fn);
}

static cx_status wrong_type(const cx_toml *n, cx_toml_type want) {
  char found[160];
  return cx_toml_fail(n, CX_ERR_FORMAT, "must be %s, found %s", cx_toml_type_name(want),
                      describe(n, found, sizeof found));
}

cx_status cx_toml_as_int(const cx_toml *node, int64_t *out) {
  if (!node) return no_node("cx_toml_as_int");
  if (node->type != CX_TOML_INT) return wrong_type(node, CX_TOML_INT);
  *out = node->v.i;
  return CX_OK;
}

cx_status cx_toml_as_float(const cx_toml *node, double *out) {
  if (!node) return no_node("cx_toml_as_float");
  if (node->type == CX_TOML_INT) *out = (double)node->v.i;
  else if (node->type == CX_TOML_FLOAT) *out = node->v.f;
  else return wrong_type(node, CX_TOML_FLOAT);
  return CX_OK;
}

cx_status cx_toml_as_bool(const cx_toml *node, bool *out) {
  if (!node) return no_node("cx_toml_as_bool");
  if (node->type != CX_TOML_BOOL) return wrong_type(node, CX_TOML_BOOL);
  *out = node->v.b;
  return CX_OK;
}

cx_status cx_toml_as_string(const cx_toml *node, const char **out) {
  if (!node) return no_node("cx_toml_as_string");
  if (node->type != CX_TOML_STRING) return wrong_type(node, CX_TOML_STRING);
  if (strlen(node->v.str.s) != node->v.str.len)
    return cx_toml_fail(node, CX_ERR_FORMAT, "the string holds a NUL character (\\u0000)");
  *out = node->v.str.s;
  return CX_OK;
}

/* The node for a getter: NULL (use the fallback) when absent; an error when a part of the path
 * that should be a table is something else. */
static cx_status find(const cx_toml *table, const char *key, const cx_toml **out) {
  const cx_toml *blocker;
  *out = table ? lookup(table, key, &blocker) : NULL;
  if (!*out && table && blocker) return wrong_type(blocker, CX_TOML_TABLE);
  return CX_OK;
}

cx_status cx_toml_int(const cx_toml *table, const char *key, int64_t fallback, int64_t *out) {
  const cx_toml *n;
  CX_TRY(find(table, key, &n));
  if (!n) *out = fallback;
  return n ? cx_toml_as_int(n, out) : CX_OK;
}

cx_status cx_toml_float(const cx_toml *table, const char *key, double fallback, double *out) {
  const cx_toml *n;
  CX_TRY(find(table, key, &n));
  if (!n) *out = fallback;
  return n ? cx_toml_as_float(n, out) : CX_OK;
}

cx_status cx_toml_bool(const cx_toml *table, const char *key, bool fallback, bool *out) {
  const cx_toml *n;
  CX_TRY(find(table, key, &n));
  if (!n) *out = fallback;
  return n ? cx_toml_as_bool(n, out) : CX_OK;
}

cx_status cx_toml_string(const cx_toml *table, const char *key, const char *fallback,
                         const char **out) {
  const cx_toml *n;
  CX_TRY(find(table, key, &n));
  if (!n) *out = fallback;
  return n ? cx_toml_as_string(n, out) : CX_OK;
}

cx_status cx_toml_need(const cx_toml *table, const char *key, cx_toml_type type,
                       const cx_toml **out) {
  char where[300];
  const cx_toml *n;
  CX_TRY(find(table, key, &n));
  if (!n && !table) return cx_fail(CX_ERR_FORMAT, "missing key '%s' (%s)", key,
                                   cx_toml_type_name(type));
  if (!n)
    return cx_fail(CX_ERR_FORMAT, "%s:%d:%d: missing key '%s' %s (%s)", table->file, table->line,
                   table->col, key, table_label(table, where, sizeof where),
                   cx_toml_type_name(type));
  bool ok = n->type == type || (type == CX_TOML_FLOAT && n->type == CX_TOML_INT);
  if (!ok) return wrong_type(n, type);
  *out = n;
  return CX_OK;
}

/* ---- schema ---- */

/* Optimal string alignment distance (Damerau-Levenshtein with adjacent swaps); long names
 * are simply "far". */
static int edit_distance(const char *a, const char *b) {
  enum { MAX = 64 };
  size_t m = strlen(a), n = strlen(b);
  if (m > MAX || n > MAX) return MAX;
  int d[MAX + 1][MAX + 1];
  for (size_t i = 0; i <= m; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= n; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= m; i++) {
    for (size_t j = 1; j <= n; j++) {
      int cost = a[i - 1] != b[j - 1];
      int best = d[i - 1][j - 1] + cost;
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  }
  return d[m][n];
}

static size_t common_prefix(const char *a, const char *b) {
  size_t i = 0;
  while (a[i] && a[i] == b[i]) i++;
  return i;
}

/* The allowed key closest to an unknown one: within two edits (fewer than the key is long), or
 * else sharing a prefix of at least 3 characters and half the shorter name. */
static const char *suggest(const char *key, const char *const *allowed) {
  const char *best = NULL;
  int best_d = 3;
  for (const char *const *a = allowed; *a; a++) {
    int d = edit_distance(key, *a);
    if (d < best_d && (size_t)d < strlen(key)) best = *a, best_d = d;
  }
  if (best) return best;
  size_t best_p = 0;
  for (const char *const *a = allowed; *a; a++) {
    size_t p = common_prefix(key, *a), kl = strlen(key), al = strlen(*a);
    size_t shorter = kl < al ? kl : al;
    if (p >= 3 && 2 * p >= shorter && p > best_p) best = *a, best_p = p;
  }
  return best;
}

static bool allowed_key(const cx_toml *n, const char *const *allowed) {
  for (const char *const *a = allowed; *a; a++)
    if (strlen(*a) == n->key_len && memcmp(*a, n->key, n->key_len) == 0) return true;
  return false;
}

static cx_status unknown_key(const cx_toml *table, const cx_toml *n, const char *const *allowed) {
  char name[160] = "", where[300], hint[1024] = "";
  cx_toml_name_append(name, sizeof name, n->key, n->key_len);
  const char *close = suggest(n->key, allowed);
  if (close) {
    snprintf(hint, sizeof hint, "did you mean '%s'?", close);
  } else if (!*allowed) {
    snprintf(hint, sizeof hint, "this table takes no keys");
  } else {
    append(hint, sizeof hint, "valid keys: ", 12);
    for (const char *const *a = allowed; *a; a++) {
      if (a != allowed) append(hint, sizeof hint, ", ", 2);
      append(hint, sizeof hint, *a, strlen(*a));
    }
  }
  return cx_fail(CX_ERR_FORMAT, "%s:%d:%d: unknown key '%s' %s; %s", n->file, n->key_line,
                 n->key_col, name, table_label(table, where, sizeof where), hint);
}

cx_status cx_toml_check_keys(const cx_toml *table, const char *const *allowed) {
  if (!allowed) return cx_fail(CX_ERR_ARG, "cx_toml_check_keys: no list of allowed keys");
  if (!table) return CX_OK;
  if (table->type != CX_TOML_TABLE) return wrong_type(table, CX_TOML_TABLE);
  for (size_t i = 0; i < table->v.kids.n; i++) {
    const cx_toml *n = table->v.kids.at[i];
    if (!allowed_key(n, allowed)) return unknown_key(table, n, allowed);
  }
  return CX_OK;
}
