#ifndef CX_CLI_QUANTIZE_RUN_H
#define CX_CLI_QUANTIZE_RUN_H

/* What `compress quantize` and the pipeline's quantize stage share: the calibration data from a
 * training config, PTQ with its checks and SQNR table, and QAT around cx_train. */

#include <stdio.h>

#include "../quantize/quantize.h"
#include "../train/train_config.h"

typedef struct cx_cli_quant_job {
  const cx_quant_config *config;
  cx_train_config *train; /* [data] (calibration: its training set, evaluation preprocessing,
                             batch) and for QAT the [train] settings; its backend runs it all */
  const char *model_name; /* for messages */
  FILE *log;              /* the SQNR table and progress; NULL: quiet */
} cx_cli_quant_job;

/* The calibration batches: the training set in order, normalised as for evaluation. */
cx_quant_data cx_cli_quant_data(const cx_train_config *tc);
/* PTQ of g: *quantized (float weights and FakeQuantize at calibrated scales); *folded (may be
 * NULL) the BatchNorm-folded float model, *plan (may be NULL) the sites. Refuses an all-zero
 * weight channel or activation (cx_quant_check_ranges) and prints the per-layer SQNR to log. */
cx_status cx_cli_quant_ptq(const cx_cli_quant_job *j, const cx_graph *g, cx_graph **quantized,
                           cx_graph **folded, cx_quant_plan *plan);
/* The quantized model: PTQ, or for QAT PTQ's scales fine-tuned with cx_train (j->train's
 * options, with the QAT extension as its only one: compress quantize's run). The SQNR printed
 * is PTQ's. */
cx_status cx_cli_quantize(const cx_cli_quant_job *j, const cx_graph *g, cx_graph **out);
/* The SQNR of quantized against folded on the calibration data, printed to log (NULL: nothing). */
cx_status cx_cli_quant_print_sqnr(const cx_cli_quant_job *j, const cx_graph *folded,
                                  const cx_graph *quantized);

#endif
