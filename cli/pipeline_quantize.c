/* The quantize stage's record functions: the one place where the pipeline meets quantize/.
 * PTQ does not train: the stage's model is the input model calibrated (cli/quantize_run.c).
 * QAT trains the BatchNorm-folded input model with the QAT extension, starting from PTQ's
 * scales, and exports the trained weights with their FakeQuantize nodes; when the pipeline has
 * a teacher, it distils from it as the prune stage does. A resumed QAT run calibrates again
 * (the same batches, the same scales) and then restores the scales from the checkpoint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "../import/onnx.h"
#include "commands.h"
#include "pipeline.h"
#include "quantize_run.h"

typedef struct quant_run {
  cx_pipeline_kd_tune kd;
  cx_quant_qat *qat;
} quant_run;

static bool is_qat(const cx_pipeline *p) { return p->quant.c.method == CX_QUANT_QAT; }

void cx_pipeline_quantize_salt(const cx_pipeline *p, const cx_pipeline_stage *s, char *buf,
                               size_t size) {
  (void)s;
  if (is_qat(p)) cx_pipeline_kd_tune_salt(p, buf, size);
}

static cx_cli_quant_job job(const cx_stage_run *r) {
  return (cx_cli_quant_job){.config = &r->p->quant.c, .train = (cx_train_config *)&r->s->tc,
                            .model_name = r->s->model, .log = r->opts->quiet ? NULL : stdout};
}

/* QAT from PTQ: the calibrated plan, and the extension on the folded model. */
static cx_status open_qat(const cx_stage_run *r, cx_quant_qat **q) {
  cx_cli_quant_job j = job(r);
  cx_graph *quantized = NULL, *folded = NULL;
  cx_quant_plan plan = {0};
  CX_TRY(cx_cli_quant_ptq(&j, r->input, &quantized, &folded, &plan));
  cx_status s = cx_quant_qat_open(folded, &plan, &r->p->quant.c, j.log, q);
  cx_quant_plan_free(&plan);
  cx_graph_free(quantized);
  cx_graph_free(folded);
  return s;
}

static cx_status run_state(cx_stage_run *r, quant_run **out) {
  if (!r->state && !(r->state = calloc(1, sizeof(quant_run))))
    return cx_fail(CX_ERR_NOMEM, "out of memory");
  *out = r->state;
  return CX_OK;
}

/* PTQ: the calibrated model. QAT: the folded model with FakeQuantize nodes whose scales are
 * state (cx_quant_qat_graph), which the trainer trains; the extension stays open for begin, so
 * the stage calibrates once. */
cx_status cx_pipeline_quantize_model(cx_stage_run *r, cx_graph **g, char **old_input) {
  *old_input = NULL;
  if (!r->input) return cx_fail(CX_ERR_ARG, "quantize: no input model");
  cx_cli_quant_job j = job(r);
  if (!is_qat(r->p)) return cx_cli_quant_ptq(&j, r->input, g, NULL, NULL);
  quant_run *q = NULL;
  CX_TRY(run_state(r, &q));
  CX_TRY(open_qat(r, &q->qat));
  *g = cx_graph_clone(cx_quant_qat_graph(q->qat));
  return *g ? CX_OK : cx_fail(CX_ERR_NOMEM, "out of memory");
}

/* QAT starts from PTQ's calibration: what PTQ alone gives (in the float simulation). */
const char *cx_pipeline_quantize_start(const cx_pipeline *p) {
  return is_qat(p) ? "PTQ, before QAT" : NULL;
}

cx_status cx_pipeline_quantize_begin(cx_stage_run *r) {
  quant_run *q = NULL;
  CX_TRY(run_state(r, &q));
  CX_TRY(cx_pipeline_kd_tune_begin(r, &q->kd));
  if (!q->qat) CX_TRY(open_qat(r, &q->qat));
  cx_train_ext e = cx_quant_qat_ext(q->qat);
  return cx_stage_run_add(r, &e);
}

cx_status cx_pipeline_quantize_trained(cx_stage_run *r, cx_graph **g) {
  quant_run *q = r->state;
  cx_graph *out = NULL;
  CX_TRY(cx_quant_qat_finish(q->qat, *g, &out, NULL));
  cx_graph_free(*g);
  *g = out;
  return CX_OK;
}

cx_status cx_pipeline_quantize_end(cx_stage_run *r) {
  quant_run *q = r->state;
  if (!q) return CX_OK;
  cx_status st = cx_pipeline_kd_tune_end(r, &q->kd);
  cx_quant_qat_close(q->qat);
  free(q);
  r->state = NULL;
  return st;
}

/* The method and calibration, and how many Q/DQ pairs the file carries. */
/* Convolutions whose output reaches its QuantizeLinear through a Relu or Clip: with symmetric
 * INT8 activations ONNX Runtime keeps such a convolution float (its QLinearConv fusion wants the
 * QuantizeLinear right after it, and cannot drop the activation, which the range below zero of
 * a zero point 0 grid does not imply); TensorRT fuses all three. */
static int act_before_quantize(const cx_graph *g) {
  bool *seen = calloc((size_t)g->n_nodes + 1, sizeof *seen);
  int n = 0;
  for (int i = 0; seen && i < g->n_nodes; i++) {
    if (strcmp(g->nodes[i].op->name, "QuantizeLinear")) continue;
    int a = g->values[g->nodes[i].in[0]].producer;
    if (a < 0 || (strcmp(g->nodes[a].op->name, "Relu") && strcmp(g->nodes[a].op->name, "Clip")))
      continue;
    int c = g->values[g->nodes[a].in[0]].producer;
    if (c >= 0 && !strcmp(g->nodes[c].op->name, "Conv") && !seen[c]) seen[c] = true, n++;
  }
  free(seen);
  return n;
}

void cx_pipeline_quantize_note(const cx_pipeline *p, const cx_pipeline_stage *s,
                               const char *path, char *buf, size_t size) {
  const cx_quant_config *c = &p->quant.c;
  cx_graph *g = NULL;
  int dq = 0, float_in_ort = 0;
  if (cx_onnx_import(path, &g, NULL) == CX_OK) {
    for (int i = 0; i < g->n_nodes; i++) dq += !strcmp(g->nodes[i].op->name, "DequantizeLinear");
    if (c->activations == CX_QUANT_INT8) float_in_ort = act_before_quantize(g);
  }
  cx_graph_free(g);
  cx_error_clear();
  int at = snprintf(buf, size, "Quantization (stage %s): %s, %s activations, weights "
                    "per-channel INT8, %s calibration on %lld batches%s; %d DequantizeLinear "
                    "nodes in the file.",
                    s->name,
                    c->method == CX_QUANT_QAT ? (c->lsq ? "QAT with learned scales (LSQ)" : "QAT")
                                              : "PTQ",
                    c->activations == CX_QUANT_UINT8 ? "UINT8" : "INT8",
                    cx_quant_calibrator_name(c->calibrator), (long long)c->calibration_batches,
                    c->method == CX_QUANT_QAT && cx_pipeline_has_teacher(p)
                        ? ", fine-tuned under distillation" : "",
                    dq);
  if (float_in_ort && at > 0 && (size_t)at < size)
    snprintf(buf + at, size - (size_t)at, " ONNX Runtime runs %d of its convolutions in float "
             "(an activation between the convolution and its QuantizeLinear, which symmetric INT8 "
             "cannot fold into QLinearConv; TensorRT fuses them): its latency columns measure "
             "that, our runtime's (CPU) the INT8 file; activations = \"uint8\" is ONNX "
             "Runtime's own format (docs/quantize.md, \"ONNX Runtime's speed\").", float_in_ort);
}
