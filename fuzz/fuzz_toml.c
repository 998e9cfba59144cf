/* libFuzzer target: TOML parsing (core/toml.h) of any bytes, then a walk over every node as the
 * config readers do it (types, typed getters, paths and positions for messages). */
#include <stdint.h>
#include <stdio.h>

#include "../core/toml.h"

static void walk(const cx_toml *n, int depth) {
  char path[256];
  cx_toml_path(n, path, sizeof path);
  cx_toml_where(n);
  cx_toml_key_where(n);
  int64_t i;
  double d;
  bool b;
  const char *s;
  switch (cx_toml_type_of(n)) {
  case CX_TOML_INT: cx_toml_as_int(n, &i); break;
  case CX_TOML_FLOAT: cx_toml_as_float(n, &d); break;
  case CX_TOML_BOOL: cx_toml_as_bool(n, &b); break;
  case CX_TOML_STRING: cx_toml_as_string(n, &s), cx_toml_bytes(n); break;
  default: break;
  }
  if (depth > 64) return; /* the parser bounds nesting; this only keeps the walk's stack small */
  for (size_t k = 0; k < cx_toml_len(n) && cx_toml_type_of(n) <= CX_TOML_ARRAY; k++)
    walk(cx_toml_at(n, k), depth + 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cx_toml *root = NULL;
  if (cx_toml_parse_buffer((const char *)data, size, "fuzz.toml", &root) == CX_OK) {
    walk(root, 0);
    cx_toml_get(root, "a.b.c");
    cx_toml_free(root);
  }
  return 0;
}
