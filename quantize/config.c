/* The quantize stage's configuration: defaults, names and the checks every entry point runs
 * first. */
#include <string.h>

#include "quantize.h"

static const char *const calibrator_names[] = {"minmax", "percentile", "mse", "entropy", NULL};

cx_quant_config cx_quant_defaults(void) {
  return (cx_quant_config){.method = CX_QUANT_PTQ, .calibrator = CX_CALIB_MSE,
                           .percentile = 99.99, .calibration_batches = 16,
                           .activations = CX_QUANT_INT8, .freeze_observers_after = 1,
                           .observe_every = 10, .observer_momentum = 0.01};
}

const char *cx_quant_calibrator_name(cx_quant_calibrator c) {
  return c >= CX_CALIB_MINMAX && c <= CX_CALIB_ENTROPY ? calibrator_names[c] : "?";
}

int cx_quant_calibrator_parse(const char *name) {
  for (int i = 0; name && calibrator_names[i]; i++)
    if (!strcmp(name, calibrator_names[i])) return i;
  return -1;
}

static cx_status check_qat(const cx_quant_config *c) {
  if (c->freeze_bn_after != 0)
    return cx_fail(CX_ERR_ARG, "quantize: freeze_bn_after %lld: BatchNorm is folded into its "
                   "convolution before QAT (docs/quantize.md, \"QAT\"), so its statistics are "
                   "frozen from the start; only 0 is accepted", (long long)c->freeze_bn_after);
  if (c->freeze_observers_after < 0)
    return cx_fail(CX_ERR_ARG, "quantize: freeze_observers_after %lld < 0 (epochs)",
                   (long long)c->freeze_observers_after);
  if (c->observe_every < 1)
    return cx_fail(CX_ERR_ARG, "quantize: observe_every %lld must be >= 1 (optimizer steps)",
                   (long long)c->observe_every);
  if (!(c->observer_momentum > 0 && c->observer_momentum <= 1))
    return cx_fail(CX_ERR_ARG, "quantize: observer_momentum %g must be in (0, 1]",
                   c->observer_momentum);
  return CX_OK;
}

cx_status cx_quant_config_check(const cx_quant_config *c) {
  if (c->method != CX_QUANT_PTQ && c->method != CX_QUANT_QAT)
    return cx_fail(CX_ERR_ARG, "quantize: unknown method %d", (int)c->method);
  if (c->calibrator < CX_CALIB_MINMAX || c->calibrator > CX_CALIB_ENTROPY)
    return cx_fail(CX_ERR_ARG, "quantize: unknown calibrator %d", (int)c->calibrator);
  if (c->activations != CX_QUANT_INT8 && c->activations != CX_QUANT_UINT8)
    return cx_fail(CX_ERR_ARG, "quantize: unknown activations %d", (int)c->activations);
  if (!(c->percentile > 0 && c->percentile <= 100))
    return cx_fail(CX_ERR_ARG, "quantize: percentile %g must be in (0, 100]", c->percentile);
  if (c->calibration_batches < 1)
    return cx_fail(CX_ERR_ARG, "quantize: calibration_batches %lld must be >= 1",
                   (long long)c->calibration_batches);
  if (c->n_keep_fp32 < 0 || (c->n_keep_fp32 > 0 && !c->keep_fp32))
    return cx_fail(CX_ERR_ARG, "quantize: keep_fp32: %d globs and no list of them",
                   c->n_keep_fp32);
  for (int i = 0; i < c->n_keep_fp32; i++)
    if (!c->keep_fp32[i] || !c->keep_fp32[i][0])
      return cx_fail(CX_ERR_ARG, "quantize: keep_fp32: entry %d is empty; expected a node-name "
                     "glob", i + 1);
  return check_qat(c);
}
