/* The per-layer error table: each weighted op's output in the quantized graph against the FP32
 * graph's, over the same calibration batches, as a signal-to-quantization-noise ratio. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "internal.h"

static cx_status nomem(void) { return cx_fail(CX_ERR_NOMEM, "out of memory"); }

static bool weighted(const cx_node *n) {
  return !strcmp(n->op->name, "Conv") || !strcmp(n->op->name, "Gemm") ||
         !strcmp(n->op->name, "MatMul");
}

/* The layers: weighted nodes of fp32 whose output the quantized graph also has. */
static cx_status list_layers(const cx_graph *fp32, const cx_graph *q, cx_quant_sqnr_table *t,
                             const char **names) {
  t->l = calloc((size_t)fp32->n_nodes + 1, sizeof *t->l);
  if (!t->l) return nomem();
  for (int k = 0; k < fp32->n_nodes; k++) {
    const cx_node *n = &fp32->nodes[k];
    const char *out = fp32->values[n->out[0]].name;
    if (!weighted(n) || cx_graph_find_value(q, out) < 0) continue;
    cx_quant_layer *l = &t->l[t->n];
    l->node = strdup(n->name ? n->name : out);
    l->op = strdup(n->op->name);
    names[t->n++] = out;
    if (!l->node || !l->op) return nomem();
  }
  if (t->n == 0)
    return cx_fail(CX_ERR_ARG, "quantize: no Conv, Gemm or MatMul output of the FP32 graph is in "
                   "the quantized graph");
  return CX_OK;
}

typedef struct sums {
  double *signal, *noise;
  float *a, *b;
  size_t cap_a, cap_b;
} sums;

static cx_status compare_batch(cx_quant_runner *r32, cx_quant_runner *rq, const cx_batch *b,
                               const char **names, cx_quant_sqnr_table *t, sums *s) {
  for (int i = 0; i < t->n; i++) {
    int64_t n, m;
    CX_TRY(cx_quant_runner_rows(r32, names[i], b, &s->a, &s->cap_a, &n));
    CX_TRY(cx_quant_runner_rows(rq, names[i], b, &s->b, &s->cap_b, &m));
    if (n != m)
      return cx_fail(CX_ERR_SHAPE, "quantize: '%s' has %lld elements in the FP32 graph and %lld "
                     "in the quantized one", names[i], (long long)n, (long long)m);
    for (int64_t e = 0; e < n; e++) {
      double x = s->a[e], d = x - s->b[e];
      s->signal[i] += x * x, s->noise[i] += d * d;
    }
    t->l[i].elements += n;
  }
  return CX_OK;
}

static cx_status run_both(const cx_graph *fp32, const cx_graph *q, const cx_quant_config *c,
                          const cx_backend *be, const cx_quant_data *d, const char **names,
                          cx_quant_sqnr_table *t, sums *s) {
  cx_quant_runner r32 = {0}, rq = {0};
  cx_status st = cx_quant_runner_open(fp32, names, t->n, be, d, c->calibration_batches, &r32);
  if (st == CX_OK) st = cx_quant_runner_open(q, names, t->n, be, d, c->calibration_batches, &rq);
  while (st == CX_OK) {
    cx_batch b32, bq;
    bool done32, doneq;
    if ((st = cx_quant_runner_next(&r32, &b32, &done32)) != CX_OK) break;
    if ((st = cx_quant_runner_next(&rq, &bq, &doneq)) != CX_OK || done32 || doneq) break;
    st = compare_batch(&r32, &rq, &b32, names, t, s);
  }
  cx_quant_runner_close(&r32);
  cx_quant_runner_close(&rq);
  return st;
}

cx_status cx_quant_sqnr(const cx_graph *fp32, const cx_graph *quantized,
                        const cx_quant_config *c, const cx_backend *b, const cx_quant_data *d,
                        cx_quant_sqnr_table *out) {
  *out = (cx_quant_sqnr_table){0};
  const char **names = calloc((size_t)fp32->n_nodes + 1, sizeof *names);
  sums s = {.signal = calloc((size_t)fp32->n_nodes + 1, sizeof(double)),
            .noise = calloc((size_t)fp32->n_nodes + 1, sizeof(double))};
  cx_status st = names && s.signal && s.noise ? list_layers(fp32, quantized, out, names) : nomem();
  if (st == CX_OK) st = run_both(fp32, quantized, c, b, d, names, out, &s);
  for (int i = 0; st == CX_OK && i < out->n; i++)
    out->l[i].sqnr_db = s.noise[i] > 0 ? 10 * log10(s.signal[i] / s.noise[i]) : INFINITY;
  free(names), free(s.signal), free(s.noise), free(s.a), free(s.b);
  if (st != CX_OK) cx_quant_sqnr_free(out);
  return st;
}

void cx_quant_sqnr_free(cx_quant_sqnr_table *t) {
  for (int i = 0; t->l && i < t->n; i++) free(t->l[i].node), free(t->l[i].op);
  free(t->l);
  *t = (cx_quant_sqnr_table){0};
}

void cx_quant_sqnr_print(const cx_quant_sqnr_table *t, FILE *f) {
  int w = 4;
  for (int i = 0; i < t->n; i++)
    if ((int)strlen(t->l[i].node) > w) w = (int)strlen(t->l[i].node);
  fprintf(f, "%-*s  %-6s  %9s\n", w, "node", "op", "SQNR dB");
  for (int i = 0; i < t->n; i++) fprintf(f, "%-*s  %-6s  %9.2f\n", w, t->l[i].node, t->l[i].op,
                                         t->l[i].sqnr_db);
}
