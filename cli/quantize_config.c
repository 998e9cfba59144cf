/* The quantization keys of docs/quantize.md, from a TOML table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_keys.h"
#include "quantize_config.h"

const char *const cx_cli_quant_keys[] = {
    "method", "calibrator", "percentile", "calibration_batches", "activations", "keep_fp32",
    "freeze_bn_after", "freeze_observers_after", "observe_every", "observer_momentum", "lsq",
    "reduce_range", NULL};

static cx_status read_names(const cx_toml *t, cx_quant_config *c) {
  static const char *const methods[] = {"ptq", "qat", NULL};
  static const char *const acts[] = {"int8", "uint8", NULL};
  static const char *const calibrators[] = {"minmax", "percentile", "mse", "entropy", NULL};
  int m, a, k;
  CX_TRY(cx_cli_key_one_of(t, "method", methods, (int)c->method, &m));
  CX_TRY(cx_cli_key_one_of(t, "activations", acts, (int)c->activations, &a));
  CX_TRY(cx_cli_key_one_of(t, "calibrator", calibrators, (int)c->calibrator, &k));
  c->method = (cx_quant_method)m;
  c->activations = (cx_quant_act)a;
  c->calibrator = (cx_quant_calibrator)k;
  return CX_OK;
}

static cx_status read_numbers(const cx_toml *t, cx_quant_config *c) {
  CX_TRY(cx_toml_float(t, "percentile", c->percentile, &c->percentile));
  CX_TRY(cx_cli_key_range(t, "percentile", c->percentile, 50, 100, false));
  CX_TRY(cx_toml_int(t, "calibration_batches", c->calibration_batches, &c->calibration_batches));
  CX_TRY(cx_cli_key_range(t, "calibration_batches", (double)c->calibration_batches, 1, 1e9, false));
  CX_TRY(cx_toml_int(t, "freeze_bn_after", c->freeze_bn_after, &c->freeze_bn_after));
  CX_TRY(cx_toml_int(t, "freeze_observers_after", c->freeze_observers_after,
                     &c->freeze_observers_after));
  CX_TRY(cx_cli_key_range(t, "freeze_observers_after", (double)c->freeze_observers_after, 0,
                          1e9, false));
  CX_TRY(cx_toml_int(t, "observe_every", c->observe_every, &c->observe_every));
  CX_TRY(cx_cli_key_range(t, "observe_every", (double)c->observe_every, 1, 1e9, false));
  CX_TRY(cx_toml_float(t, "observer_momentum", c->observer_momentum, &c->observer_momentum));
  CX_TRY(cx_cli_key_range(t, "observer_momentum", c->observer_momentum, 0, 1, false));
  CX_TRY(cx_toml_bool(t, "reduce_range", c->reduce_range, &c->reduce_range));
  return cx_toml_bool(t, "lsq", c->lsq, &c->lsq);
}

cx_status cx_cli_quant_read(const cx_toml *t, cx_cli_quant *q) {
  memset(q, 0, sizeof *q);
  q->c = cx_quant_defaults();
  q->table = t;
  cx_quant_config *c = &q->c;
  cx_status s = read_names(t, c);
  if (s == CX_OK) s = read_numbers(t, c);
  size_t n = cx_toml_len(cx_toml_get(t, "keep_fp32"));
  if (s == CX_OK && !(q->globs = calloc(n + 1, sizeof *q->globs)))
    s = cx_fail(CX_ERR_NOMEM, "out of memory");
  if (s == CX_OK) s = cx_cli_key_globs(t, "keep_fp32", q->globs, &c->n_keep_fp32);
  c->keep_fp32 = q->globs;
  if (s == CX_OK) s = cx_quant_config_check(c);
  if (s != CX_OK) cx_error_prefix(cx_toml_path(t, (char[64]){0}, 64));
  if (s != CX_OK) cx_cli_quant_free(q);
  return s;
}

void cx_cli_quant_free(cx_cli_quant *q) {
  free(q->globs);
  q->globs = NULL;
}
