/* Shared readers of stage keys (cli/config_keys.h). */
#include <stdio.h>
#include <string.h>

#include "config_keys.h"

cx_status cx_cli_key_one_of(const cx_toml *t, const char *key, const char *const *names,
                            int fallback, int *out) {
  const cx_toml *n = cx_toml_get(t, key);
  *out = fallback;
  if (!n) return CX_OK;
  const char *v;
  CX_TRY(cx_toml_as_string(n, &v));
  for (int i = 0; names[i]; i++)
    if (!strcmp(names[i], v)) return *out = i, CX_OK;
  char list[256] = "";
  for (int i = 0; names[i]; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"", i ? ", " : "",
             names[i]);
  return cx_toml_fail(n, CX_ERR_FORMAT, "\"%s\" is not one of %s", v, list);
}

cx_status cx_cli_key_range(const cx_toml *t, const char *key, double v, double lo, double hi,
                           bool hi_open) {
  const cx_toml *n = cx_toml_get(t, key);
  if (n && !(v >= lo && (hi_open ? v < hi : v <= hi)))
    return cx_toml_fail(n, CX_ERR_FORMAT, "%g is out of range: %g to %g%s", v, lo, hi,
                        hi_open ? " (exclusive)" : "");
  return CX_OK;
}

cx_status cx_cli_key_globs(const cx_toml *t, const char *key, const char **out, int *n) {
  const cx_toml *a = cx_toml_get(t, key);
  *n = 0;
  if (!a) return CX_OK;
  if (cx_toml_type_of(a) != CX_TOML_ARRAY)
    return cx_toml_fail(a, CX_ERR_FORMAT, "must be an array of node-name globs");
  for (size_t i = 0; i < cx_toml_len(a); i++) {
    CX_TRY(cx_toml_as_string(cx_toml_at(a, i), &out[*n]));
    if (!*out[*n]) return cx_toml_fail(cx_toml_at(a, i), CX_ERR_FORMAT, "an empty glob");
    (*n)++;
  }
  return CX_OK;
}
