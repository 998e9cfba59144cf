#include <math.h>
#include <stdlib.h>

#include "../core/program_input.h"
#include "train_graph.h"
#include "trainer.h"

void cx_logits_score(const float *logits, int64_t n, int64_t classes, const int64_t *labels,
                     cx_eval_sums *s) {
  for (int64_t i = 0; i < n; i++) {
    const float *z = logits + i * classes;
    float top = z[labels[i]], max = z[0];
    int64_t above = 0;
    for (int64_t c = 0; c < classes; c++) {
      above += z[c] > top || (z[c] == top && c < labels[i]);
      if (z[c] > max) max = z[c];
    }
    double sum = 0;
    for (int64_t c = 0; c < classes; c++) sum += exp((double)z[c] - max);
    s->loss += log(sum) + max - top;
    s->top1 += above < 1;
    s->top5 += above < 5;
    s->n++;
  }
}

cx_eval_result cx_eval_sums_result(const cx_eval_sums *s) {
  double n = s->n ? (double)s->n : 1;
  return (cx_eval_result){.n = s->n, .loss = s->loss / n, .top1 = 100 * s->top1 / n,
                          .top5 = 100 * s->top5 / n};
}

cx_status cx_check_model_input(const cx_graph *model, const cx_batch *b, const char *path) {
  int v = cx_graph_find_value(model, "input");
  if (v < 0) return cx_fail(CX_ERR_ARG, "the model has no input named 'input'");
  const cx_shape *s = &model->values[v].shape;
  if (s->ndim != 4 || s->d[1] != b->c || s->d[2] != b->h || s->d[3] != b->w)
    return cx_fail(CX_ERR_SHAPE, "%s gives images of %lldx%lldx%lld (CxHxW), but the model's input "
                   "takes [N,%lld,%lld,%lld]", path, (long long)b->c, (long long)b->h,
                   (long long)b->w, (long long)s->d[1], (long long)(s->ndim > 2 ? s->d[2] : 0),
                   (long long)(s->ndim > 3 ? s->d[3] : 0));
  return CX_OK;
}

static cx_status eval_loop(cx_program *p, cx_loader *l, const char *path, float *logits,
                           cx_eval_sums *sums) {
  const cx_graph *model = cx_program_graph(p);
  const cx_tensor *out = cx_program_value_tensor(p, cx_model_logits(cx_program_graph(p)));
  int64_t classes = out->shape.d[out->shape.ndim - 1];
  CX_TRY(cx_loader_epoch_begin(l, 0));
  for (;;) {
    cx_batch b;
    CX_TRY(cx_loader_next(l, &b));
    if (b.size == 0) return CX_OK;
    if (b.index == 0) CX_TRY(cx_check_model_input(model, &b, path));
    /* a short last batch is padded with zeros; inference is per sample, so they change nothing */
    size_t per = (size_t)(b.c * b.h * b.w) * sizeof(float);
    CX_TRY(cx_program_write_input(p, "input", b.images, per * (size_t)b.size));
    CX_TRY(cx_program_forward(p));
    for (int64_t i = 0; i < b.size; i++)
      if (b.labels[i] >= classes)
        return cx_fail(CX_ERR_ARG, "%s: label %lld, but the model has %lld classes", path,
                       (long long)b.labels[i], (long long)classes);
    CX_TRY(cx_program_read(p, out, logits));
    cx_logits_score(logits, b.size, classes, b.labels, sums);
  }
}

cx_status cx_evaluate_program(cx_program *p, const char *path, const char *part,
                              const cx_augment *pre, cx_eval_result *r) {
  const cx_tensor *in = cx_program_tensor(p, "input");
  if (!in) return cx_fail(CX_ERR_ARG, "the model has no input named 'input'");
  int64_t batch = in->shape.d[0];
  cx_loader_opts lo = cx_loader_defaults();
  lo.part = part;
  lo.batch_size = batch;
  lo.shuffle = false;
  if (pre) lo.aug = *pre;
  cx_loader *l = NULL;
  CX_TRY(cx_loader_open(path, &lo, &l));
  const cx_tensor *out = cx_program_value_tensor(p, cx_model_logits(cx_program_graph(p)));
  float *logits = malloc(cx_tensor_nbytes(out));
  cx_eval_sums sums = {0};
  cx_status s = logits ? eval_loop(p, l, path, logits, &sums)
                       : cx_fail(CX_ERR_NOMEM, "out of memory");
  if (s == CX_OK) *r = cx_eval_sums_result(&sums);
  free(logits);
  cx_loader_close(l);
  return s;
}

cx_status cx_evaluate(const cx_graph *model, const cx_backend *backend, const char *path,
                      const char *part, const cx_augment *pre, int64_t batch, cx_eval_result *r) {
  cx_program *p = NULL;
  cx_compile_opts co = {.batch = batch, .backend = backend};
  CX_TRY(cx_program_compile(model, &co, &p));
  cx_status s = cx_evaluate_program(p, path, part, pre, r);
  cx_program_free(p);
  return s;
}
