/* The TOML parser: keys, values, table headers and the rules on what may define or extend a table
 * (toml_impl.h's origins). The scanner it uses is in toml_lex.c and toml_num.c. */
#include "toml_lex.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DEPTH = 128 }; /* nested arrays and inline tables: bounds the recursion */

static cx_status nomem(void) { return cx_fail(CX_ERR_NOMEM, "out of memory parsing TOML"); }

/* ---- keys ---- */

typedef struct key_part {
  char *s;
  size_t len;
  const char *at;
} key_part;

typedef struct key {
  key_part *parts;
  int n, cap;
} key;

static void key_free(key *k) {
  for (int i = 0; i < k->n; i++) free(k->parts[i].s);
  free(k->parts);
}

/* The first n parts of a key below table base, as a message shows them: a.b."c d". */
static const char *key_name(const cx_toml *base, const key *k, int n, char *buf, size_t cap) {
  cx_toml_path(base, buf, cap);
  for (int i = 0; i < n; i++) {
    size_t l = strlen(buf);
    if (l && l + 1 < cap) memcpy(buf + l, ".", 2);
    cx_toml_name_append(buf, cap, k->parts[i].s, k->parts[i].len);
  }
  return buf;
}

static cx_status simple_key(toml_parser *t, key *k) {
  toml_buf b = {0};
  const char *at = t->p;
  char found[32];
  if (at < t->end && (*at == '"' || *at == '\'')) {
    cx_status s = tp_string(t, true, &b);
    if (s != CX_OK) {
      free(b.s);
      return s;
    }
  } else {
    while (t->p < t->end && tp_is_bare(*t->p)) t->p++;
    if (t->p == at) return tp_fail(t, at, "expected a key, found %s", tp_found(t, at, found));
    if (!tp_buf_put(&b, at, (size_t)(t->p - at))) return nomem();
  }
  if (k->n >= MAX_DEPTH) {
    free(b.s);
    return tp_fail(t, at, "a key may have at most %d parts", MAX_DEPTH);
  }
  if (k->n == k->cap) {
    int cap = k->cap ? 2 * k->cap : 4;
    key_part *grown = realloc(k->parts, (size_t)cap * sizeof *grown);
    if (!grown) {
      free(b.s);
      return nomem();
    }
    k->parts = grown;
    k->cap = cap;
  }
  k->parts[k->n++] = (key_part){b.s, b.n, at};
  return CX_OK;
}

/* simple-key *( ws "." ws simple-key ); spaces after the last part are left alone. */
static cx_status parse_key(toml_parser *t, key *k) {
  CX_TRY(simple_key(t, k));
  for (;;) {
    const char *save = t->p;
    tp_skip_ws(t);
    if (t->p >= t->end || *t->p != '.') {
      t->p = save;
      return CX_OK;
    }
    t->p++;
    tp_skip_ws(t);
    CX_TRY(simple_key(t, k));
  }
}

/* ---- nodes ---- */

static cx_toml *new_node(toml_parser *t, cx_toml_type type, toml_origin origin, const char *at) {
  int line, col;
  tp_where(t, at, &line, &col);
  cx_toml *n = cx_toml_node_new(type, t->file, line, col);
  if (n) n->origin = origin;
  return n;
}

/* Names the node after a key part, and adds it to table; frees it when that fails. */
static cx_status attach(toml_parser *t, cx_toml *table, cx_toml *node, const key_part *part) {
  node->key = malloc(part->len + 1);
  if (node->key) {
    memcpy(node->key, part->s, part->len + 1);
    node->key_len = part->len;
    tp_where(t, part->at, &node->key_line, &node->key_col);
  }
  if (!node->key || !cx_toml_node_add(table, node)) {
    cx_toml_node_free(node);
    return nomem();
  }
  return CX_OK;
}

static const char *origin_text(const cx_toml *n) {
  if (n->type == CX_TOML_ARRAY)
    return n->origin == ORIGIN_AOT ? "as an array of tables" : "as an array";
  if (n->type != CX_TOML_TABLE) return "as a value";
  switch (n->origin) {
  case ORIGIN_HEADER: return "by a [table] header";
  case ORIGIN_DOTTED: return "by dotted keys";
  case ORIGIN_INLINE: return "as an inline table";
  default: return "as a table";
  }
}

/* "<lead>'a.b' is already defined at line 3, column 1 (by dotted keys)<why>". */
static cx_status taken(toml_parser *t, const char *at, const char *lead, const char *name,
                       const cx_toml *old, const char *why) {
  bool header = old->origin == ORIGIN_HEADER || old->origin == ORIGIN_AOT;
  return tp_fail(t, at, "%s'%s' is already defined at line %d, column %d (%s)%s", lead, name,
                 header ? old->line : old->key_line, header ? old->col : old->key_col,
                 origin_text(old), why);
}

/* ---- values ---- */

static cx_status value(toml_parser *t, cx_toml **out);

/* Closes an inline table (and whatever dotted keys made inside it) to later changes. */
static void freeze(cx_toml *n) {
  if (n->type != CX_TOML_TABLE && n->type != CX_TOML_ARRAY) return;
  n->origin = ORIGIN_INLINE;
  for (size_t i = 0; i < n->v.kids.n; i++) freeze(n->v.kids.at[i]);
}

static cx_status array(toml_parser *t, cx_toml *arr) {
  char found[32];
  t->p++;
  for (;;) {
    CX_TRY(tp_skip_blank(t));
    if (t->p < t->end && *t->p == ']') break;
    cx_toml *elem;
    CX_TRY(value(t, &elem));
    if (!cx_toml_node_add(arr, elem)) {
      cx_toml_node_free(elem);
      return nomem();
    }
    CX_TRY(tp_skip_blank(t));
    if (t->p < t->end && *t->p == ',') {
      t->p++;
      continue;
    }
    if (t->p < t->end && *t->p == ']') break;
    return tp_fail(t, t->p, "expected ',' or ']' in the array, found %s",
                   tp_found(t, t->p, found));
  }
  t->p++;
  return CX_OK;
}

static cx_status keyval(toml_parser *t, cx_toml *table);

/* { key = value, ... } on one line, without a trailing comma (TOML 1.0). */
static cx_status inline_table(toml_parser *t, cx_toml *tab) {
  char found[32];
  int section = t->section;
  t->section = ++t->sections; /* dotted keys inside may extend each other, nothing else */
  t->p++;
  tp_skip_ws(t);
  bool first = true;
  while (!(first && t->p < t->end && *t->p == '}')) {
    if (tp_newline(t, t->p))
      return tp_fail(t, t->p, "expected a key in the inline table (an inline table must fit on "
                              "one line), found end of line");
    CX_TRY(keyval(t, tab));
    tp_skip_ws(t);
    if (t->p < t->end && *t->p == '}') break;
    if (t->p >= t->end || *t->p != ',')
      return tp_fail(t, t->p, "expected ',' or '}' in the inline table%s, found %s",
                     tp_newline(t, t->p) ? " (an inline table must fit on one line)" : "",
                     tp_found(t, t->p, found));
    t->p++;
    tp_skip_ws(t);
    if (t->p < t->end && *t->p == '}')
      return tp_fail(t, t->p, "expected a key after ',' (an inline table may not end with a "
                              "comma), found '}'");
    first = false;
  }
  t->p++;
  t->section = section;
  freeze(tab);
  return CX_OK;
}

static cx_status string_value(toml_parser *t, cx_toml *n) {
  toml_buf b = {0};
  cx_status s = tp_string(t, false, &b);
  if (s != CX_OK) {
    free(b.s);
    return s;
  }
  n->v.str.s = b.s;
  n->v.str.len = b.n;
  return CX_OK;
}

/* true, false, inf and nan; any other bare word is an error that suggests quotes. */
static cx_status word(toml_parser *t, cx_toml *n) {
  size_t w = 0;
  while (t->p + w < t->end && tp_is_bare(t->p[w])) w++;
  if ((w == 4 && !memcmp(t->p, "true", 4)) || (w == 5 && !memcmp(t->p, "false", 5))) {
    n->type = CX_TOML_BOOL;
    n->v.b = w == 4;
    t->p += w;
    return CX_OK;
  }
  if (w == 3 && (!memcmp(t->p, "inf", 3) || !memcmp(t->p, "nan", 3))) return tp_number(t, n);
  char found[32];
  if (!w)
    return tp_fail(t, t->p, "expected a value (string, number, boolean, array or inline table), "
                            "found %s", tp_found(t, t->p, found));
  return tp_fail(t, t->p, "expected a value, found '%.*s' (a string needs quotes)",
                 w > 40 ? 40 : (int)w, t->p);
}

static cx_status value_of(toml_parser *t, cx_toml *n) {
  char c = t->p < t->end ? *t->p : '\0';
  if (c == '"' || c == '\'') {
    n->type = CX_TOML_STRING;
    return string_value(t, n);
  }
  if (c == '[') {
    n->type = CX_TOML_ARRAY;
    return array(t, n);
  }
  if (c == '{') {
    n->type = CX_TOML_TABLE;
    return inline_table(t, n);
  }
  if (c == '+' || c == '-' || (c >= '0' && c <= '9')) return tp_number(t, n);
  return word(t, n);
}

static cx_status value(toml_parser *t, cx_toml **out) {
  if (t->depth >= MAX_DEPTH)
    return tp_fail(t, t->p, "arrays and inline tables are nested more than %d deep", MAX_DEPTH);
  cx_toml *n = new_node(t, CX_TOML_INT, ORIGIN_INLINE, t->p);
  if (!n) return nomem();
  t->depth++;
  cx_status s = value_of(t, n);
  t->depth--;
  if (n->type != CX_TOML_TABLE && n->type != CX_TOML_ARRAY) n->origin = ORIGIN_VALUE;
  if (s != CX_OK) {
    cx_toml_node_free(n);
    return s;
  }
  *out = n;
  return CX_OK;
}

/* ---- key = value ---- */

/* The table that the dotted key's part i names, made by this section's dotted keys. */
static cx_status dotted_step(toml_parser *t, const key *k, int i, const cx_toml *base,
                             cx_toml **table) {
  char name[256];
  cx_toml *child = cx_toml_node_find(*table, k->parts[i].s, k->parts[i].len);
  if (!child) {
    child = new_node(t, CX_TOML_TABLE, ORIGIN_DOTTED, k->parts[i].at);
    if (!child) return nomem();
    CX_TRY(attach(t, *table, child, &k->parts[i]));
  } else if (child->type == CX_TOML_TABLE && child->origin == ORIGIN_IMPLICIT) {
    child->origin = ORIGIN_DOTTED; /* from now on it belongs to this section's dotted keys */
    tp_where(t, k->parts[i].at, &child->key_line, &child->key_col);
  } else if (!(child->type == CX_TOML_TABLE && child->origin == ORIGIN_DOTTED &&
               child->section == t->section)) {
    return taken(t, k->parts[i].at, "", key_name(base, k, i + 1, name, sizeof name), child,
                 child->type == CX_TOML_TABLE ? ": dotted keys cannot add to it here" : "");
  }
  child->section = t->section;
  *table = child;
  return CX_OK;
}

static cx_status keyval(toml_parser *t, cx_toml *table) {
  const cx_toml *base = table; /* for messages: where the key starts */
  key k = {0};
  char name[256], found[32];
  cx_status s = parse_key(t, &k);
  if (s == CX_OK) {
    tp_skip_ws(t);
    if (t->p >= t->end || *t->p != '=')
      s = tp_fail(t, t->p, "expected '=' after the key '%s', found %s",
                  key_name(base, &k, k.n, name, sizeof name), tp_found(t, t->p, found));
  }
  for (int i = 0; s == CX_OK && i < k.n - 1; i++) s = dotted_step(t, &k, i, base, &table);
  const key_part *last = s == CX_OK ? &k.parts[k.n - 1] : NULL;
  cx_toml *old = last ? cx_toml_node_find(table, last->s, last->len) : NULL;
  if (old)
    s = taken(t, last->at, "duplicate key: ", key_name(base, &k, k.n, name, sizeof name), old, "");
  cx_toml *v = NULL;
  if (s == CX_OK) {
    t->p++;
    tp_skip_ws(t);
    s = value(t, &v);
  }
  if (s == CX_OK) s = attach(t, table, v, last);
  key_free(&k);
  return s;
}

/* ---- [table] and [[array of tables]] ---- */

/* The table that part i of a header names on the way to its last part. */
static cx_status header_step(toml_parser *t, const key *k, int i, cx_toml **table) {
  char name[256];
  cx_toml *child = cx_toml_node_find(*table, k->parts[i].s, k->parts[i].len);
  if (!child) {
    child = new_node(t, CX_TOML_TABLE, ORIGIN_IMPLICIT, k->parts[i].at);
    if (!child) return nomem();
    CX_TRY(attach(t, *table, child, &k->parts[i]));
  } else if (child->type == CX_TOML_ARRAY && child->origin == ORIGIN_AOT) {
    child = child->v.kids.at[child->v.kids.n - 1]; /* the last table added */
  } else if (child->type != CX_TOML_TABLE || child->origin == ORIGIN_INLINE) {
    return taken(t, k->parts[i].at, "", key_name(t->root, k, i + 1, name, sizeof name), child,
                 ": a header cannot add to it");
  }
  *table = child;
  return CX_OK;
}

static cx_status define_table(toml_parser *t, const key *k, cx_toml *parent, const char *open) {
  char name[256];
  const key_part *last = &k->parts[k->n - 1];
  cx_toml *tab = cx_toml_node_find(parent, last->s, last->len);
  if (!tab) {
    tab = new_node(t, CX_TOML_TABLE, ORIGIN_HEADER, open);
    if (!tab) return nomem();
    CX_TRY(attach(t, parent, tab, last));
  } else if (tab->type == CX_TOML_TABLE && tab->origin == ORIGIN_IMPLICIT) {
    tab->origin = ORIGIN_HEADER; /* named before on the way to a sub-table: now defined */
    tp_where(t, open, &tab->line, &tab->col);
    tp_where(t, last->at, &tab->key_line, &tab->key_col);
  } else {
    return taken(t, open, tab->type == CX_TOML_TABLE ? "table defined twice: " : "",
                 key_name(t->root, k, k->n, name, sizeof name), tab,
                 tab->origin == ORIGIN_AOT ? ": use [[...]] to add a table to it" : "");
  }
  t->current = tab;
  return CX_OK;
}

static cx_status append_table(toml_parser *t, const key *k, cx_toml *parent, const char *open) {
  char name[256];
  const key_part *last = &k->parts[k->n - 1];
  cx_toml *arr = cx_toml_node_find(parent, last->s, last->len);
  if (!arr) {
    arr = new_node(t, CX_TOML_ARRAY, ORIGIN_AOT, open);
    if (!arr) return nomem();
    CX_TRY(attach(t, parent, arr, last));
  } else if (arr->type != CX_TOML_ARRAY || arr->origin != ORIGIN_AOT) {
    return taken(t, open, "", key_name(t->root, k, k->n, name, sizeof name), arr,
                 ": [[...]] can only add to an array of tables");
  }
  cx_toml *tab = new_node(t, CX_TOML_TABLE, ORIGIN_HEADER, open);
  if (!tab) return nomem();
  tab->key_line = tab->line;
  tab->key_col = tab->col;
  if (!cx_toml_node_add(arr, tab)) {
    cx_toml_node_free(tab);
    return nomem();
  }
  t->current = tab;
  return CX_OK;
}

static cx_status expect_close(toml_parser *t, bool aot) {
  char found[32];
  tp_skip_ws(t);
  for (int i = 0; i < (aot ? 2 : 1); i++, t->p++)
    if (t->p >= t->end || *t->p != ']')
      return tp_fail(t, t->p, "expected '%s' to close the %s header, found %s", aot ? "]]" : "]",
                     aot ? "array of tables" : "table", tp_found(t, t->p, found));
  return CX_OK;
}

static cx_status header(toml_parser *t) {
  const char *open = t->p;
  bool aot = t->p + 1 < t->end && t->p[1] == '[';
  t->p += aot ? 2 : 1;
  tp_skip_ws(t);
  key k = {0};
  cx_status s = parse_key(t, &k);
  if (s == CX_OK) s = expect_close(t, aot);
  cx_toml *parent = t->root;
  for (int i = 0; s == CX_OK && i < k.n - 1; i++) s = header_step(t, &k, i, &parent);
  if (s == CX_OK)
    s = aot ? append_table(t, &k, parent, open) : define_table(t, &k, parent, open);
  t->section = ++t->sections;
  key_free(&k);
  return s;
}

/* ---- the document ---- */

static cx_status document(toml_parser *t) {
  if (t->end - t->p >= 3 && !memcmp(t->p, "\xEF\xBB\xBF", 3)) t->p += 3; /* a byte order mark */
  while (t->p < t->end) {
    tp_skip_ws(t);
    if (t->p >= t->end) break;
    if (*t->p == '#' || *t->p == '\r' || tp_newline(t, t->p)) {
      CX_TRY(tp_expect_eol(t, "a comment"));
    } else if (*t->p == '[') {
      CX_TRY(header(t));
      CX_TRY(tp_expect_eol(t, "a table header"));
    } else {
      CX_TRY(keyval(t, t->current));
      CX_TRY(tp_expect_eol(t, "a key = value pair"));
    }
  }
  return CX_OK;
}

cx_status cx_toml_parse_buffer(const char *text, size_t len, const char *name, cx_toml **out) {
  if (!out || (!text && len)) return cx_fail(CX_ERR_ARG, "cx_toml_parse_buffer: no text or no out");
  *out = NULL;
  if (!name) name = "<string>";
  cx_toml *root = cx_toml_node_new(CX_TOML_TABLE, NULL, 1, 1);
  char *file = malloc(strlen(name) + 1);
  if (!root || !file) {
    free(root);
    free(file);
    return nomem();
  }
  strcpy(file, name);
  root->file = file;
  root->origin = ORIGIN_ROOT;
  toml_parser t = {.src = text, .end = text + len, .p = text, .file = file, .root = root,
                   .current = root};
  cx_status s = tp_check_utf8(&t);
  if (s == CX_OK) s = document(&t);
  if (s != CX_OK) {
    cx_toml_free(root);
    return s;
  }
  *out = root;
  return CX_OK;
}

cx_status cx_toml_parse_string(const char *text, const char *name, cx_toml **out) {
  if (!text || !out) return cx_fail(CX_ERR_ARG, "cx_toml_parse_string: no text or no out");
  return cx_toml_parse_buffer(text, strlen(text), name, out);
}

cx_status cx_toml_parse_file(const char *path, cx_toml **out) {
  if (!path || !out) return cx_fail(CX_ERR_ARG, "cx_toml_parse_file: no path or no out");
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return cx_fail(CX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  toml_buf b = {0};
  char chunk[65536];
  size_t n;
  bool ok = tp_buf_put(&b, "", 0);
  while (ok && (n = fread(chunk, 1, sizeof chunk, f)) > 0) ok = tp_buf_put(&b, chunk, n);
  bool read_error = ferror(f);
  fclose(f);
  cx_status s;
  if (!ok) s = nomem();
  else if (read_error) s = cx_fail(CX_ERR_IO, "%s: read error", path);
  else s = cx_toml_parse_buffer(b.s, b.n, path, out);
  free(b.s);
  return s;
}
