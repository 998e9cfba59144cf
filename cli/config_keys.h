#ifndef CX_CLI_CONFIG_KEYS_H
#define CX_CLI_CONFIG_KEYS_H

/* Reading a stage's keys from a TOML table, with the messages every stage's reader shares: a
 * name from a list, a number in a range, an array of node-name globs. A missing key keeps the
 * fallback. */

#include <stdbool.h>

#include "../core/toml.h"

/* *out = the index in names (NULL-terminated) of the key's string, else fallback. */
cx_status cx_cli_key_one_of(const cx_toml *t, const char *key, const char *const *names,
                            int fallback, int *out);
/* When the key is there: lo <= v <= hi (v < hi when hi_open). */
cx_status cx_cli_key_range(const cx_toml *t, const char *key, double v, double lo, double hi,
                           bool hi_open);
/* The key's array of non-empty strings into out (room for cx_toml_len of it), *n of them. */
cx_status cx_cli_key_globs(const cx_toml *t, const char *key, const char **out, int *n);

#endif
