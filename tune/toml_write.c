/* A parsed TOML document written back as text, with some keys set: how each trial's pipeline
 * file is made from the tune file. Values keep their types (a float is written with a point or
 * an exponent) and every digit they need to read back exactly, so the pipeline's hashes, which hash values and not
 * text, see the same document. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tune.h"

void cx_tune_toml_float(FILE *f, double d) {
  char buf[64];
  if (isnan(d)) snprintf(buf, sizeof buf, "nan");
  else if (isinf(d)) snprintf(buf, sizeof buf, "%sinf", d < 0 ? "-" : "");
  else /* the fewest digits that read back as d: 0.1, not 0.10000000000000001 */
    for (int digits = 15; digits <= 17; digits++) {
      snprintf(buf, sizeof buf, "%.*g", digits, d);
      if (strtod(buf, NULL) == d) break;
    }
  /* a float stays a float when read back: 2 would be an integer */
  fprintf(f, "%s%s", buf, strpbrk(buf, ".eEn") ? "" : ".0");
}

void cx_tune_toml_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p);
    else fputc(*p, f);
  }
  fputc('"', f);
}

/* A key: bare when it can be, else quoted. */
static void write_key(FILE *f, const char *k) {
  bool bare = *k != 0;
  for (const char *p = k; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '_' || *p == '-'))
      bare = false;
  if (bare) fputs(k, f);
  else cx_tune_toml_string(f, k);
}

void cx_tune_toml_value(FILE *f, const cx_toml *n) {
  int64_t i;
  double d;
  bool b;
  const char *s;
  switch (cx_toml_type_of(n)) {
  case CX_TOML_STRING:
    cx_toml_as_string(n, &s);
    cx_tune_toml_string(f, s);
    break;
  case CX_TOML_INT:
    cx_toml_as_int(n, &i);
    fprintf(f, "%lld", (long long)i);
    break;
  case CX_TOML_FLOAT:
    cx_toml_as_float(n, &d);
    cx_tune_toml_float(f, d);
    break;
  case CX_TOML_BOOL:
    cx_toml_as_bool(n, &b);
    fputs(b ? "true" : "false", f);
    break;
  case CX_TOML_ARRAY:
    fputc('[', f);
    for (size_t k = 0; k < cx_toml_len(n); k++) {
      if (k) fputs(", ", f);
      cx_tune_toml_value(f, cx_toml_at(n, k));
    }
    fputc(']', f);
    break;
  case CX_TOML_TABLE: /* inline: a table inside an array */
    fputc('{', f);
    for (size_t k = 0; k < cx_toml_len(n); k++) {
      if (k) fputs(", ", f);
      write_key(f, cx_toml_key(cx_toml_at(n, k)));
      fputs(" = ", f);
      cx_tune_toml_value(f, cx_toml_at(n, k));
    }
    fputc('}', f);
    break;
  }
}

typedef struct writer {
  FILE *f;
  const cx_tune_set *sets;
  int n_sets;
  bool *used;
} writer;

static int find_set(const writer *w, const char *table, const char *key) {
  for (int i = 0; i < w->n_sets; i++)
    if (!strcmp(w->sets[i].table, table) && !strcmp(w->sets[i].key, key)) return i;
  return -1;
}

static void write_header(FILE *f, const char *const *parts, int depth) {
  fputc('[', f);
  for (int i = 0; i < depth; i++) {
    if (i) fputc('.', f);
    write_key(f, parts[i]);
  }
  fputs("]\n", f);
}

enum { MAX_DEPTH = 16 };

/* The table at parts[0..depth) (named `path`, dotted): its own keys under its header, then its
 * tables. */
static cx_status write_table(writer *w, const cx_toml *t, const char **parts, int depth,
                             const char *path, const char *skip) {
  if (depth) write_header(w->f, parts, depth);
  for (size_t i = 0; i < cx_toml_len(t); i++) {
    const cx_toml *n = cx_toml_at(t, i);
    if (cx_toml_type_of(n) == CX_TOML_TABLE) continue;
    int s = find_set(w, path, cx_toml_key(n));
    write_key(w->f, cx_toml_key(n));
    fputs(" = ", w->f);
    if (s >= 0) fputs(w->sets[s].value, w->f), w->used[s] = true;
    else cx_tune_toml_value(w->f, n);
    fputc('\n', w->f);
  }
  for (int s = 0; s < w->n_sets; s++)
    if (!w->used[s] && !strcmp(w->sets[s].table, path)) {
      write_key(w->f, w->sets[s].key);
      fprintf(w->f, " = %s\n", w->sets[s].value);
      w->used[s] = true;
    }
  for (size_t i = 0; i < cx_toml_len(t); i++) {
    const cx_toml *n = cx_toml_at(t, i);
    const char *k = cx_toml_key(n);
    if (cx_toml_type_of(n) != CX_TOML_TABLE || (skip && !depth && !strcmp(k, skip))) continue;
    if (depth + 1 >= MAX_DEPTH) return cx_fail(CX_ERR_FORMAT, "tables nested too deep to write");
    char sub[1024];
    if (snprintf(sub, sizeof sub, "%s%s%s", path, depth ? "." : "", k) >= (int)sizeof sub)
      return cx_fail(CX_ERR_FORMAT, "a table name too long to write: %s.%s", path, k);
    parts[depth] = k;
    fputc('\n', w->f);
    CX_TRY(write_table(w, n, parts, depth + 1, sub, NULL));
  }
  return CX_OK;
}

cx_status cx_tune_toml_write(FILE *f, const cx_toml *root, const cx_tune_set *sets, int n_sets,
                             const char *skip) {
  bool used[64] = {0};
  if (n_sets > 64) return cx_fail(CX_ERR_ARG, "cx_tune_toml_write: more than 64 keys to set");
  writer w = {.f = f, .sets = sets, .n_sets = n_sets, .used = used};
  const char *parts[MAX_DEPTH];
  CX_TRY(write_table(&w, root, parts, 0, "", skip));
  /* keys of tables the document does not have: each such table at the end */
  for (int s = 0; s < n_sets; s++) {
    if (used[s]) continue;
    fprintf(f, "\n[%s]\n", sets[s].table);
    for (int k = s; k < n_sets; k++)
      if (!used[k] && !strcmp(sets[k].table, sets[s].table)) {
        write_key(f, sets[k].key);
        fprintf(f, " = %s\n", sets[k].value);
        used[k] = true;
      }
  }
  return ferror(f) ? cx_fail(CX_ERR_IO, "writing TOML failed") : CX_OK;
}
