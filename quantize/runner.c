/* Running a float graph over calibration batches with chosen values kept as outputs (so the
 * memory plan leaves them readable after the run): what calibration and the SQNR table read. */
#include <stdlib.h>
#include <string.h>

#include "../core/program_input.h"
#include "../train/trainer.h"
#include "internal.h"

static bool is_output(const cx_graph *g, int v) {
  for (int k = 0; k < g->n_outputs; k++)
    if (g->outputs[k] == v) return true;
  return false;
}

static cx_status with_outputs(const cx_graph *from, const char *const *names, int n,
                              cx_graph **out) {
  cx_graph *g = cx_graph_clone(from);
  if (!g) return cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int i = 0; i < n; i++) {
    int v = cx_graph_find_value(g, names[i]);
    if (v < 0) {
      cx_graph_free(g);
      return cx_fail(CX_ERR_ARG, "quantize: the graph has no value '%s'", names[i]);
    }
    if (g->values[v].kind == CX_VALUE_ACT && !is_output(g, v)) cx_graph_mark_output(g, v);
  }
  *out = g;
  return cx_graph_status(g);
}

cx_status cx_quant_runner_open(const cx_graph *g, const char *const *outputs, int n_outputs,
                               const cx_backend *b, const cx_quant_data *d, int64_t batches,
                               cx_quant_runner *r) {
  *r = (cx_quant_runner){.path = d->path, .batches = batches};
  if (!b) return cx_fail(CX_ERR_ARG, "quantize: no backend given");
  if (d->batch < 1) return cx_fail(CX_ERR_ARG, "quantize: batch %lld < 1", (long long)d->batch);
  cx_graph *kept = NULL;
  CX_TRY(with_outputs(g, outputs, n_outputs, &kept));
  cx_compile_opts co = {.batch = d->batch, .backend = b};
  cx_status s = cx_program_compile(kept, &co, &r->p);
  cx_graph_free(kept);
  if (s != CX_OK) return s;
  cx_loader_opts lo = cx_loader_defaults();
  lo.part = d->part;
  lo.batch_size = d->batch;
  lo.shuffle = false;
  if (d->pre) lo.aug = *d->pre;
  s = cx_loader_open(d->path, &lo, &r->l);
  if (s == CX_OK) s = cx_loader_epoch_begin(r->l, 0);
  if (s != CX_OK) cx_quant_runner_close(r);
  return s;
}

cx_status cx_quant_runner_next(cx_quant_runner *r, cx_batch *b, bool *done) {
  *done = true;
  if (r->batches <= 0) return CX_OK;
  CX_TRY(cx_loader_next(r->l, b));
  if (b->size == 0) return CX_OK;
  if (b->index == 0) CX_TRY(cx_check_model_input(cx_program_graph(r->p), b, r->path));
  size_t per = (size_t)(b->c * b->h * b->w) * sizeof(float);
  CX_TRY(cx_program_write_input(r->p, "input", b->images, per * (size_t)b->size));
  CX_TRY(cx_program_forward(r->p));
  r->batches--;
  *done = false;
  return CX_OK;
}

cx_status cx_quant_runner_rows(cx_quant_runner *r, const char *name, const cx_batch *b,
                               float **buf, size_t *cap, int64_t *n) {
  const cx_tensor *t = cx_program_tensor(r->p, name);
  if (!t) return cx_fail(CX_ERR_ARG, "quantize: the program has no value '%s'", name);
  size_t bytes = cx_tensor_nbytes(t);
  if (bytes > *cap) {
    float *f = realloc(*buf, bytes);
    if (!f) return cx_fail(CX_ERR_NOMEM, "out of memory");
    *buf = f, *cap = bytes;
  }
  CX_TRY(cx_program_read(r->p, t, *buf));
  int64_t all = cx_tensor_numel(t), batch = cx_program_tensor(r->p, "input")->shape.d[0];
  /* a short last batch is padded with zero images: only its real rows count */
  *n = t->shape.ndim > 0 && t->shape.d[0] == batch ? all / batch * b->size : all;
  return CX_OK;
}

void cx_quant_runner_close(cx_quant_runner *r) {
  cx_program_free(r->p);
  cx_loader_close(r->l);
  r->p = NULL, r->l = NULL;
}
