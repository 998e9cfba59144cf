#ifndef CX_CLI_PRUNE_CONFIG_H
#define CX_CLI_PRUNE_CONFIG_H

/* The pruning keys (docs/prune.md), read from the pipeline's [prune] table or from the options of
 * `compress prune`, which the command writes as such a table: one reader, one set of messages. */

#include "../core/toml.h"
#include "../prune/prune.h"

/* The keys read_prune_config takes, NULL-terminated (the training keys come on top). */
extern const char *const cx_cli_prune_keys[];

typedef struct cx_cli_prune {
  cx_prune_config c;
  const char **globs; /* include then exclude, pointing into the document; owned array */
  const cx_toml *table;
} cx_cli_prune;

/* Reads the keys of t (other keys are the caller's) into p->c and checks them. */
cx_status cx_cli_prune_read(const cx_toml *t, cx_cli_prune *p);
void cx_cli_prune_free(cx_cli_prune *p);
/* "magnitude", "2:4", "channel" (for messages and the report). */
const char *cx_cli_prune_method_name(const cx_prune_config *c, char *buf, size_t size);

#endif
