/* PTQ and QAT as the CLI runs them (cli/quantize_run.h). */
#include <stdlib.h>

#include "quantize_run.h"

cx_quant_data cx_cli_quant_data(const cx_train_config *tc) {
  return (cx_quant_data){.path = tc->train_path, .part = tc->opts.train_part,
                         .pre = &tc->opts.val_aug, .batch = tc->opts.batch_size};
}

cx_status cx_cli_quant_print_sqnr(const cx_cli_quant_job *j, const cx_graph *folded,
                                  const cx_graph *quantized) {
  if (!j->log) return CX_OK;
  cx_quant_data d = cx_cli_quant_data(j->train);
  cx_quant_sqnr_table t = {0};
  CX_TRY(cx_quant_sqnr(folded, quantized, j->config, j->train->opts.backend, &d, &t));
  fprintf(j->log, "SQNR of each layer's output against floating point (%s):\n", j->model_name);
  cx_quant_sqnr_print(&t, j->log);
  cx_quant_sqnr_free(&t);
  return CX_OK;
}

cx_status cx_cli_quant_ptq(const cx_cli_quant_job *j, const cx_graph *g, cx_graph **quantized,
                           cx_graph **folded, cx_quant_plan *plan) {
  cx_quant_data d = cx_cli_quant_data(j->train);
  cx_graph *f = NULL;
  cx_quant_plan p = {0};
  *quantized = NULL;
  cx_status s = cx_quant_ptq(g, j->config, j->train->opts.backend, &d, j->model_name, quantized,
                             &f, &p);
  if (s == CX_OK) s = cx_quant_check_ranges(&p, j->model_name);
  if (s == CX_OK) s = cx_cli_quant_print_sqnr(j, f, *quantized);
  if (s != CX_OK) cx_graph_free(*quantized), *quantized = NULL;
  if (s == CX_OK && folded) *folded = f, f = NULL;
  if (s == CX_OK && plan) *plan = p;
  else cx_quant_plan_free(&p);
  cx_graph_free(f);
  return s;
}

/* QAT of folded from the calibrated plan; *out the quantized result. */
static cx_status qat(const cx_cli_quant_job *j, const cx_graph *folded, const cx_quant_plan *plan,
                     cx_graph **out) {
  cx_train_opts *o = &j->train->opts;
  cx_quant_qat *q = NULL;
  CX_TRY(cx_quant_qat_open(folded, plan, j->config, j->log, &q));
  /* the command's run has no other extensions (the pipeline's stage adds QAT's to its own) */
  cx_train_ext ext = cx_quant_qat_ext(q);
  o->extensions = &ext, o->n_extensions = 1;
  cx_graph *g = cx_quant_qat_graph(q);
  cx_train_result r = {0};
  cx_status s = cx_train(g, o, &r);
  o->extensions = NULL, o->n_extensions = 0;
  if (s == CX_OK && r.val.n && j->log)
    fprintf(j->log, "QAT: %lld steps in %.1f s, validation top-1 %.2f%% (simulated INT8)\n",
            (long long)r.steps, r.seconds, r.val.top1);
  if (s == CX_OK) s = cx_quant_qat_finish(q, g, out, NULL);
  cx_quant_qat_close(q);
  return s;
}

cx_status cx_cli_quantize(const cx_cli_quant_job *j, const cx_graph *g, cx_graph **out) {
  cx_graph *folded = NULL;
  cx_quant_plan plan = {0};
  *out = NULL;
  bool is_qat = j->config->method == CX_QUANT_QAT;
  CX_TRY(cx_cli_quant_ptq(j, g, out, is_qat ? &folded : NULL, is_qat ? &plan : NULL));
  if (!is_qat) return CX_OK;
  cx_graph_free(*out);
  *out = NULL;
  cx_status s = qat(j, folded, &plan, out);
  cx_quant_plan_free(&plan);
  cx_graph_free(folded);
  return s;
}
