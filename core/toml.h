#ifndef CX_TOML_H
#define CX_TOML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* TOML 1.0 documents (the pipeline and training configs). Dates and times are rejected with a
 * message; everything else in the spec is accepted. A parsed document is a tree of nodes owned by
 * its root: cx_toml_free(root) frees all of it, and node pointers live as long as the root.
 *
 * Every error message starts with "file:line:column: " (columns count characters, from 1). Parse
 * errors are CX_ERR_FORMAT (dates: CX_ERR_UNSUPPORTED); errors from the getters below, which check
 * a document against what a caller expects, are CX_ERR_FORMAT too. */

typedef struct cx_toml cx_toml;

typedef enum cx_toml_type {
  CX_TOML_TABLE,
  CX_TOML_ARRAY,
  CX_TOML_STRING,
  CX_TOML_INT,
  CX_TOML_FLOAT,
  CX_TOML_BOOL,
} cx_toml_type;

typedef struct cx_toml_pos {
  const char *file; /* the name given to the parser; lives as long as the document */
  int line, col;
} cx_toml_pos;

/* ---- parsing ---- */

cx_status cx_toml_parse_file(const char *path, cx_toml **out);
/* name stands for the file in messages; text is NUL-terminated UTF-8. */
cx_status cx_toml_parse_string(const char *text, const char *name, cx_toml **out);
/* The same for text that may hold NUL bytes (which TOML rejects, with a position). */
cx_status cx_toml_parse_buffer(const char *text, size_t len, const char *name, cx_toml **out);
void cx_toml_free(cx_toml *root);

/* ---- navigating ---- */

/* The value at a dotted path below a table ("teacher.train.epochs"); NULL when any part is
 * missing, when an inner part is not a table, or when table is NULL (so lookups chain). A key that
 * holds a dot itself can only be reached through cx_toml_at. */
const cx_toml *cx_toml_get(const cx_toml *table, const char *path);
cx_toml_type cx_toml_type_of(const cx_toml *node); /* node must not be NULL */
const char *cx_toml_type_name(cx_toml_type type); /* "a string", "an integer", ... */
/* Keys of a table, elements of an array, bytes of a string; 0 for other values. */
size_t cx_toml_len(const cx_toml *node);
/* The i-th value of a table (in file order) or element of an array; NULL past the end. */
const cx_toml *cx_toml_at(const cx_toml *node, size_t i);
/* The key that names a table's value; NULL for array elements and the root. */
const char *cx_toml_key(const cx_toml *node);
/* Where the value starts (for a table defined by a [header], where the header's name starts). */
cx_toml_pos cx_toml_where(const cx_toml *node);
/* Where the key that names the value starts (its value's position when it has no key). */
cx_toml_pos cx_toml_key_where(const cx_toml *node);
/* The node's full name for messages: `teacher.train.epochs`, `layers[2].name`, `"a.b".c`; the
 * root's is empty. Truncated to fit cap; returns buf. */
const char *cx_toml_path(const cx_toml *node, char *buf, size_t cap);

/* ---- typed values ----
 * The cx_toml_as_* read one node and fail with "file:line:col: 'path' must be <type>, found
 * <value>" when it holds another type. A float accepts an integer. A string from as_string never
 * holds a NUL byte (one written as \u0000 is an error); cx_toml_bytes and cx_toml_len read a
 * string as it is, NULs included (NULL for a node that is not a string). */
/* A NULL node is CX_ERR_ARG. */
cx_status cx_toml_as_int(const cx_toml *node, int64_t *out);
cx_status cx_toml_as_float(const cx_toml *node, double *out);
cx_status cx_toml_as_bool(const cx_toml *node, bool *out);
cx_status cx_toml_as_string(const cx_toml *node, const char **out);
const char *cx_toml_bytes(const cx_toml *node);

/* A key of a table (dotted paths allowed): fallback when the key is absent, else the value as by
 * cx_toml_as_*. A NULL table counts as empty. */
cx_status cx_toml_int(const cx_toml *table, const char *key, int64_t fallback, int64_t *out);
cx_status cx_toml_float(const cx_toml *table, const char *key, double fallback, double *out);
cx_status cx_toml_bool(const cx_toml *table, const char *key, bool fallback, bool *out);
cx_status cx_toml_string(const cx_toml *table, const char *key, const char *fallback,
                         const char **out);
/* A key that must be present, of the given type (an integer passes for a float): fails with the
 * table's position and the key when it is missing. */
cx_status cx_toml_need(const cx_toml *table, const char *key, cx_toml_type type,
                       const cx_toml **out);

/* ---- schema ---- */

/* Fails on the first key of the table not in allowed (NULL-terminated), naming its position, the
 * table and the key, with "did you mean 'x'?" for a close name (edit distance at most 2, or a long
 * shared prefix) or else the list of valid keys. Only this table's own keys are checked. */
cx_status cx_toml_check_keys(const cx_toml *table, const char *const *allowed);

/* A caller's own check of a value: "file:line:col: 'path': <message>". */
cx_status cx_toml_fail(const cx_toml *node, cx_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
