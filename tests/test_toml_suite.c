/* The official toml-test suite (TOML 1.0), as Debian ships it inside the Go package
 * golang-github-burntsushi-toml-dev: every valid/ document must parse to exactly the values its
 * .json file gives, every invalid/ document must fail with a "file:line:col: " message. Valid
 * documents that hold dates must fail with "dates are not supported" instead (we reject dates).
 * valid/string/escape-esc is skipped as the suite's own runner does for 1.0.0 (\e is TOML 1.1).
 * Every file is also cut at every length and has each byte replaced by characters that matter to
 * the grammar: the parser must never crash (run it under ASan) and must place every error.
 * Without the package (or CX_TOML_TEST_DIR pointing at a tests/ folder) the test says so and
 * passes. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/toml.h"

static const char *const DEFAULT_DIR =
    "/usr/share/gocode/src/github.com/BurntSushi/toml/internal/toml-test/tests";

static int failures, valid_ok, invalid_ok, dated;
static long mutated;

/* ---- a JSON reader for the suite's expected values (objects, arrays and strings only) ---- */

typedef enum { J_OBJ, J_ARR, J_STR } jtype;

typedef struct json {
  jtype type;
  char *s; /* J_STR */
  size_t len;
  struct json **kids; /* J_OBJ: key (J_STR), value, key, value...; J_ARR: elements */
  size_t n;
} json;

static void json_free(json *j) {
  if (!j) return;
  for (size_t i = 0; i < j->n; i++) json_free(j->kids[i]);
  free(j->kids);
  free(j->s);
  free(j);
}

static void skip(const char **p) {
  while (**p == ' ' || **p == '\n' || **p == '\r' || **p == '\t') (*p)++;
}

static void put(json *j, unsigned cp) {
  char *s = realloc(j->s, j->len + 5);
  if (!s) return;
  j->s = s;
  if (cp < 0x80) s[j->len++] = (char)cp;
  else if (cp < 0x800) {
    s[j->len++] = (char)(0xC0 | cp >> 6);
    s[j->len++] = (char)(0x80 | (cp & 0x3F));
  }
  else if (cp < 0x10000) {
    s[j->len++] = (char)(0xE0 | cp >> 12);
    s[j->len++] = (char)(0x80 | ((cp >> 6) & 0x3F));
    s[j->len++] = (char)(0x80 | (cp & 0x3F));
  } else {
    s[j->len++] = (char)(0xF0 | cp >> 18);
    s[j->len++] = (char)(0x80 | ((cp >> 12) & 0x3F));
    s[j->len++] = (char)(0x80 | ((cp >> 6) & 0x3F));
    s[j->len++] = (char)(0x80 | (cp & 0x3F));
  }
  s[j->len] = '\0';
}

static unsigned hex4(const char *p) {
  char h[5] = {p[0], p[1], p[2], p[3], 0};
  return (unsigned)strtoul(h, NULL, 16);
}

static json *json_string(const char **p) {
  json *j = calloc(1, sizeof *j);
  j->type = J_STR;
  put(j, 0);
  j->len = 0;
  for ((*p)++; **p && **p != '"'; (*p)++) {
    if (**p != '\\') {
      char *s = realloc(j->s, j->len + 2);
      j->s = s;
      s[j->len++] = **p;
      s[j->len] = '\0';
      continue;
    }
    char e = *++(*p);
    const char *from = "bfnrt\"\\/", *to = "\b\f\n\r\t\"\\/";
    const char *k = strchr(from, e);
    if (e == 'u') {
      unsigned cp = hex4(*p + 1);
      *p += 4;
      if (cp >= 0xD800 && cp < 0xDC00 && (*p)[1] == '\\' && (*p)[2] == 'u') {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4(*p + 3) - 0xDC00);
        *p += 6;
      }
      put(j, cp);
    } else if (k && e) {
      put(j, (unsigned char)to[k - from]);
    }
  }
  if (**p == '"') (*p)++;
  return j;
}

static json *json_value(const char **p);

static json *json_list(const char **p, jtype type) {
  json *j = calloc(1, sizeof *j);
  j->type = type;
  char close = type == J_OBJ ? '}' : ']';
  (*p)++;
  for (;;) {
    skip(p);
    if (**p == close || !**p) break;
    if (**p == ',') {
      (*p)++;
      continue;
    }
    json *item = json_value(p);
    if (!item) break;
    j->kids = realloc(j->kids, (j->n + 1) * sizeof *j->kids);
    j->kids[j->n++] = item;
    skip(p);
    if (type == J_OBJ && **p == ':') (*p)++;
  }
  if (**p) (*p)++;
  return j;
}

static json *json_value(const char **p) {
  skip(p);
  if (**p == '{') return json_list(p, J_OBJ);
  if (**p == '[') return json_list(p, J_ARR);
  if (**p == '"') return json_string(p);
  return NULL;
}

static const json *json_member(const json *obj, const char *key) {
  for (size_t i = 0; i + 1 < obj->n; i += 2)
    if (!strcmp(obj->kids[i]->s, key)) return obj->kids[i + 1];
  return NULL;
}

/* {"type": "...", "value": "..."}: a scalar, as opposed to a table. */
static bool is_scalar(const json *j) {
  const json *t = json_member(j, "type"), *v = json_member(j, "value");
  return j->n == 4 && t && v && t->type == J_STR && v->type == J_STR;
}

/* ---- comparison ---- */

static bool same(const json *want, const cx_toml *have, char *why, size_t cap);

static bool same_scalar(const json *want, const cx_toml *have, char *why, size_t cap) {
  const char *type = json_member(want, "type")->s;
  const json *value = json_member(want, "value");
  const char *v = value->s;
  cx_toml_type t = cx_toml_type_of(have);
  bool ok = false;
  if (!strcmp(type, "string"))
    ok = t == CX_TOML_STRING && cx_toml_len(have) == value->len &&
         !memcmp(cx_toml_bytes(have), v, value->len);
  else if (!strcmp(type, "integer")) {
    int64_t i;
    ok = t == CX_TOML_INT && cx_toml_as_int(have, &i) == CX_OK && i == strtoll(v, NULL, 10);
  } else if (!strcmp(type, "float")) {
    double f = 0;
    ok = t == CX_TOML_FLOAT && cx_toml_as_float(have, &f) == CX_OK;
    if (strstr(v, "nan")) ok = ok && isnan(f);
    else ok = ok && f == strtod(v, NULL);
  } else if (!strcmp(type, "bool")) {
    bool b;
    ok = t == CX_TOML_BOOL && cx_toml_as_bool(have, &b) == CX_OK && b == !strcmp(v, "true");
  }
  if (!ok) snprintf(why, cap, "expected %s %s, found %s", type, v, cx_toml_type_name(t));
  return ok;
}

static bool same_table(const json *want, const cx_toml *have, char *why, size_t cap) {
  if (cx_toml_type_of(have) != CX_TOML_TABLE || cx_toml_len(have) != want->n / 2) {
    snprintf(why, cap, "expected a table of %zu keys, found %s of %zu", want->n / 2,
             cx_toml_type_name(cx_toml_type_of(have)), cx_toml_len(have));
    return false;
  }
  for (size_t i = 0; i + 1 < want->n; i += 2) {
    const json *key = want->kids[i];
    const cx_toml *child = NULL;
    for (size_t k = 0; k < cx_toml_len(have) && !child; k++) {
      const cx_toml *c = cx_toml_at(have, k);
      if (!strcmp(cx_toml_key(c), key->s)) child = c; /* the suite has no keys with NULs */
    }
    if (!child) {
      snprintf(why, cap, "key '%s' is missing", key->s);
      return false;
    }
    if (!same(want->kids[i + 1], child, why, cap)) return false;
  }
  return true;
}

static bool same(const json *want, const cx_toml *have, char *why, size_t cap) {
  if (want->type == J_OBJ) {
    return is_scalar(want) ? same_scalar(want, have, why, cap) : same_table(want, have, why, cap);
  }
  if (want->type != J_ARR || cx_toml_type_of(have) != CX_TOML_ARRAY ||
      cx_toml_len(have) != want->n) {
    snprintf(why, cap, "expected an array of %zu values", want->n);
    return false;
  }
  for (size_t i = 0; i < want->n; i++)
    if (!same(want->kids[i], cx_toml_at(have, i), why, cap)) return false;
  return true;
}

/* ---- running the files ---- */

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  size_t got = fread(s, 1, (size_t)n, f);
  s[got] = '\0';
  fclose(f);
  return s;
}

/* The message must start with "path:line:col: ". */
static bool positioned(const char *msg, const char *path) {
  size_t n = strlen(path);
  int line = 0, col = 0, used = 0;
  return !strncmp(msg, path, n) && sscanf(msg + n, ":%d:%d: %n", &line, &col, &used) == 2 &&
         used > 0 && line > 0 && col > 0;
}

static void run_valid(const char *path) {
  char json_path[1024], why[512] = "";
  snprintf(json_path, sizeof json_path, "%.*s.json", (int)(strlen(path) - 5), path);
  char *text = slurp(json_path);
  if (!text) {
    failures++;
    printf("FAIL %s: no %s\n", path, json_path);
    return;
  }
  bool has_dates = strstr(text, "\"datetime") || strstr(text, "\"date-local\"") ||
                   strstr(text, "\"time-local\"");
  cx_toml *doc;
  cx_status s = cx_toml_parse_file(path, &doc);
  if (has_dates) {
    if (s == CX_ERR_UNSUPPORTED && strstr(cx_last_error(), "dates are not supported") &&
        positioned(cx_last_error(), path))
      dated++;
    else
      failures++, printf("FAIL %s: holds dates, expected them rejected: %s\n", path,
                         s ? cx_last_error() : "parsed");
  } else if (s != CX_OK) {
    failures++;
    printf("FAIL %s: %s\n", path, cx_last_error());
  } else {
    const char *p = text;
    json *want = json_value(&p);
    if (want && same(want, doc, why, sizeof why)) valid_ok++;
    else failures++, printf("FAIL %s: %s\n", path, why);
    json_free(want);
  }
  if (s == CX_OK) cx_toml_free(doc);
  free(text);
}

static void run_invalid(const char *path) {
  cx_toml *doc;
  cx_status s = cx_toml_parse_file(path, &doc);
  if (s == CX_OK) {
    failures++;
    printf("FAIL %s: parsed, but the document is invalid\n", path);
    cx_toml_free(doc);
  } else if (!positioned(cx_last_error(), path)) {
    failures++;
    printf("FAIL %s: message without file:line:col: %s\n", path, cx_last_error());
  } else {
    invalid_ok++;
    if (getenv("CX_TOML_TEST_VERBOSE")) printf("ok %s\n  %s\n", path, cx_last_error());
  }
}

/* Parses a copy of exactly n bytes, so that ASan sees any read past the end. */
static void parse_mutant(const char *text, size_t n) {
  char *copy = malloc(n ? n : 1);
  memcpy(copy, text, n);
  cx_toml *doc;
  cx_status s = cx_toml_parse_buffer(copy, n, "m.toml", &doc);
  if (s == CX_OK) cx_toml_free(doc);
  else if (strncmp(cx_last_error(), "m.toml:", 7) != 0 && s != CX_ERR_NOMEM)
    failures++, printf("FAIL mutant: message without a position: %s\n", cx_last_error());
  free(copy);
  mutated++;
}

static void mutate(const char *path) {
  static const char subs[] = {'"', '\'', '[', ']', '{', '}', '=', '.', ',', '\n', '\\', '#',
                              '0', '_', 'e', ' ', '\r', 'x', '\0', (char)0xC3};
  FILE *f = fopen(path, "rb");
  if (!f) return;
  char text[1 << 15];
  size_t n = fread(text, 1, sizeof text, f);
  fclose(f);
  for (size_t cut = 0; cut < n; cut++) parse_mutant(text, cut);
  for (size_t i = 0; i < n; i++) {
    char saved = text[i];
    for (size_t k = 0; k < sizeof subs; k++) {
      text[i] = subs[k];
      parse_mutant(text, n);
    }
    text[i] = saved;
  }
}

static void walk(const char *dir, bool valid) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (stat(path, &st) != 0) continue;
    size_t n = strlen(path);
    if (S_ISDIR(st.st_mode)) walk(path, valid);
    else if (n > 5 && !strcmp(path + n - 5, ".toml") && !strstr(path, "valid/string/escape-esc")) {
      valid ? run_valid(path) : run_invalid(path);
      mutate(path);
    }
  }
  closedir(d);
}

int main(void) {
  const char *dir = getenv("CX_TOML_TEST_DIR") ? getenv("CX_TOML_TEST_DIR") : DEFAULT_DIR;
  char valid[1024], invalid[1024];
  snprintf(valid, sizeof valid, "%s/valid", dir);
  snprintf(invalid, sizeof invalid, "%s/invalid", dir);
  struct stat st;
  if (stat(valid, &st) != 0 || stat(invalid, &st) != 0) {
    printf("FAIL: toml-test suite not found at %s (scripts/install-deps.sh installs "
           "golang-github-burntsushi-toml-dev; or set CX_TOML_TEST_DIR)\n", dir);
    return 1;
  }
  walk(valid, true);
  walk(invalid, false);
  printf("toml-test (%s): %d valid documents read exactly, %d valid documents with dates "
         "rejected as unsupported, %d invalid documents rejected, %ld mutants parsed; "
         "%d failures\n", dir, valid_ok, dated, invalid_ok, mutated, failures);
  if (valid_ok + invalid_ok == 0) failures++;
  return failures != 0;
}
