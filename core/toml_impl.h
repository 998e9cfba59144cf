#ifndef CX_TOML_IMPL_H
#define CX_TOML_IMPL_H

/* The TOML node tree, shared by the parser (toml_parse.c, toml_lex.c) and the accessors (toml.c).
 * Not part of the public interface. */

#include "toml.h"

/* How a table or array came to be: it decides what a later header or dotted key may do to it. */
typedef enum toml_origin {
  ORIGIN_VALUE,    /* a scalar */
  ORIGIN_ROOT,
  ORIGIN_IMPLICIT, /* a table named on the way to a [header]: a later [header] may define it */
  ORIGIN_HEADER,   /* defined by [header] or as an element of [[header]] */
  ORIGIN_DOTTED,   /* created by a dotted key: only that section's dotted keys may add to it */
  ORIGIN_INLINE,   /* an inline table or an array value: closed to everything */
  ORIGIN_AOT,      /* the array of an array of tables: [[header]] appends to it */
} toml_origin;

struct cx_toml {
  cx_toml_type type;
  toml_origin origin;
  int section; /* for ORIGIN_DOTTED: the section whose dotted keys created it */
  int line, col, key_line, key_col;
  const char *file; /* the root's copy of the document name */
  cx_toml *parent;
  char *key; /* NUL-terminated, may hold NULs before key_len */
  size_t key_len;
  union {
    int64_t i;
    double f;
    bool b;
    struct {
      char *s; /* NUL-terminated, may hold NULs before len */
      size_t len;
    } str;
    struct {
      cx_toml **at;
      size_t n, cap;
    } kids; /* a table's values in file order, or an array's elements */
  } v;
};

cx_toml *cx_toml_node_new(cx_toml_type type, const char *file, int line, int col);
/* Adds child to a table (whose key the child carries) or an array; false when out of memory. */
bool cx_toml_node_add(cx_toml *parent, cx_toml *child);
cx_toml *cx_toml_node_find(const cx_toml *table, const char *key, size_t len);
void cx_toml_node_free(cx_toml *node);
/* Appends a key to a name being built for a message: bare when it can be, else quoted. */
void cx_toml_name_append(char *buf, size_t cap, const char *key, size_t len);

#endif
