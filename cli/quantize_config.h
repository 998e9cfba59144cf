#ifndef CX_CLI_QUANTIZE_CONFIG_H
#define CX_CLI_QUANTIZE_CONFIG_H

/* The quantization keys (docs/quantize.md), read from the pipeline's [quantize] table or from
 * the options of `compress quantize`, which the command writes as such a table: one reader, one
 * set of messages. */

#include "../core/toml.h"
#include "../quantize/quantize.h"

/* The keys cx_cli_quant_read takes, NULL-terminated (QAT's training keys come on top). */
extern const char *const cx_cli_quant_keys[];

typedef struct cx_cli_quant {
  cx_quant_config c;
  const char **globs; /* keep_fp32, pointing into the document; owned array */
  const cx_toml *table;
} cx_cli_quant;

/* Reads the keys of t (other keys are the caller's) into q->c and checks them. */
cx_status cx_cli_quant_read(const cx_toml *t, cx_cli_quant *q);
void cx_cli_quant_free(cx_cli_quant *q);

#endif
