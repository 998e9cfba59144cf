#ifndef CX_CLI_PRUNE_CONFIG_H
#define CX_CLI_PRUNE_CONFIG_H

/* The pruning keys (docs/prune.md), read from the pipeline's [prune] table or from the options of
 * `compress prune`, which the command writes as such a table: one reader, one set of messages. */

#include "../core/toml.h"
#include "../prune/channel.h"
#include "../prune/prune.h"
#include "../train/trainer.h"

/* The keys read_prune_config takes, NULL-terminated (the training keys come on top). */
extern const char *const cx_cli_prune_keys[];

typedef struct cx_cli_prune {
  cx_prune_config c;
  const char **globs; /* include then exclude, pointing into the document; owned array */
  const cx_toml *table;
  int taylor_batches; /* importance "taylor": batches of the scoring pass (cli/prune_taylor.c) */
} cx_cli_prune;

/* Reads the keys of t (other keys are the caller's) into p->c and checks them. */
cx_status cx_cli_prune_read(const cx_toml *t, cx_cli_prune *p);
void cx_cli_prune_free(cx_cli_prune *p);
/* "magnitude", "2:4", "channel" (for messages and the report). */
const char *cx_cli_prune_method_name(const cx_prune_config *c, char *buf, size_t size);

/* ---- Taylor importance (cli/prune_taylor.c) ---- */

/* The scoring pass: the model's cross-entropy loss forward and backward on `batches` batches of
 * o's training data (o->train_path, part, micro-batch size, seed, evaluation preprocessing, on
 * o->backend), no update; *out holds the accumulated |w * dL/dw| (cx_channel_taylor_scores).
 * The model is not changed. */
cx_status cx_cli_prune_taylor(const cx_graph *model, const cx_train_opts *o, int batches,
                              cx_channel_taylor **out);
/* cx_prune_channels with p's configuration; for importance "taylor" the scores come from the
 * scoring pass on o's training data first (o NULL or without training data: an error that says
 * so). */
cx_status cx_cli_prune_channels(const cx_graph *g, const cx_cli_prune *p, const cx_train_opts *o,
                                FILE *log, cx_graph **out, cx_prune_channel_stats *st);

#endif
