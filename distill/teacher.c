/* The teacher as an inference program: compiled without backward nodes, so its memory plan
 * reuses every activation buffer once its last reader has run and it holds no gradients. */
#include <stdlib.h>
#include <string.h>

#include "../core/program_input.h"
#include "internal.h"

struct cx_kd_teacher {
  cx_program *p;
  const cx_tensor *input;
  const char *input_name; /* the program graph's own string */
  const cx_tensor *logits;
  int n_features;
  const cx_tensor **features;
  /* the outputs read back after each run: logits, then each feature */
  float **host;
  int64_t batch, classes;
};

/* "input", or the graph's only input */
static cx_status image_input(const cx_graph *g, const char **name) {
  if (cx_graph_find_value(g, "input") >= 0) {
    *name = "input";
    return CX_OK;
  }
  int found = -1, count = 0;
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].kind == CX_VALUE_INPUT) found = v, count++;
  if (count != 1)
    return cx_fail(CX_ERR_ARG, "the teacher has %d inputs and none named 'input'; one image "
                   "input is needed", count);
  *name = g->values[found].name;
  return CX_OK;
}

/* The teacher with its logits and each requested feature as outputs (so the memory plan keeps
 * them readable after the run). */
static cx_status with_outputs(const cx_graph *teacher, const char *const *features, int n,
                              cx_graph **out) {
  if (teacher->n_outputs < 1) return cx_fail(CX_ERR_ARG, "the teacher has no output");
  cx_graph *g = cx_graph_clone(teacher);
  if (!g) return cx_fail(CX_ERR_NOMEM, "out of memory");
  g->n_outputs = 1;
  for (int i = 0; i < n; i++) {
    int v = cx_graph_find_value(g, features[i]);
    if (v < 0) {
      cx_graph_free(g);
      return cx_fail(CX_ERR_ARG, "the teacher has no value named '%s' (names as `compress "
                     "inspect` shows them)", features[i]);
    }
    cx_graph_mark_output(g, v);
  }
  *out = g;
  return cx_graph_status(g);
}

static cx_status check_outputs(cx_kd_teacher *t) {
  const cx_shape *s = &t->logits->shape;
  if (s->ndim != 2 || s->d[0] != t->batch) {
    char b[CX_SHAPE_STR];
    return cx_fail(CX_ERR_SHAPE, "the teacher's first output is %s; logits [N, classes] are "
                   "needed", cx_shape_str(s, b));
  }
  t->classes = s->d[1];
  if (t->input->shape.ndim != 4) {
    char b[CX_SHAPE_STR];
    return cx_fail(CX_ERR_SHAPE, "the teacher's input is %s; images [N,C,H,W] are needed",
                   cx_shape_str(&t->input->shape, b));
  }
  return CX_OK;
}

/* Host room for every output, read back after each run (the cache and the student's inputs
 * are host data). */
static cx_status alloc_outputs(cx_kd_teacher *t) {
  t->host = calloc((size_t)t->n_features + 1, sizeof *t->host);
  if (!t->host) return cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int i = 0; i <= t->n_features; i++) {
    const cx_tensor *o = i ? t->features[i - 1] : t->logits;
    if (!(t->host[i] = malloc(cx_tensor_nbytes(o) + 1)))
      return cx_fail(CX_ERR_NOMEM, "out of memory");
  }
  return CX_OK;
}

static cx_status open_program(cx_kd_teacher *t, const cx_graph *teacher,
                              const cx_backend *backend, cx_precision precision,
                              const char *const *features, int n) {
  const char *in_name = NULL;
  CX_TRY(image_input(teacher, &in_name));
  cx_graph *g = NULL;
  CX_TRY(with_outputs(teacher, features, n, &g));
  cx_compile_opts co = {.batch = t->batch, .backend = backend, .precision = precision};
  cx_status s = cx_program_compile(g, &co, &t->p);
  cx_graph_free(g);
  if (s != CX_OK) {
    cx_error_prefix("teacher");
    return s;
  }
  const cx_graph *pg = cx_program_graph(t->p);
  t->input = cx_program_tensor(t->p, in_name);
  t->input_name = pg->values[cx_graph_find_value(pg, in_name)].name;
  t->logits = cx_program_value_tensor(t->p, pg->outputs[0]);
  t->features = calloc((size_t)n + 1, sizeof *t->features);
  if (!t->features) return cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int i = 0; i < n; i++) t->features[i] = cx_program_value_tensor(t->p, pg->outputs[1 + i]);
  t->n_features = n;
  CX_TRY(check_outputs(t));
  return alloc_outputs(t);
}

cx_status cx_kd_teacher_open(const cx_graph *teacher, const cx_backend *backend,
                             cx_precision precision, int64_t batch, const char *const *features,
                             int n_features, cx_kd_teacher **out) {
  *out = NULL;
  if (batch <= 0) return cx_fail(CX_ERR_ARG, "teacher: batch %lld must be positive", (long long)batch);
  cx_kd_teacher *t = calloc(1, sizeof *t);
  if (!t) return cx_fail(CX_ERR_NOMEM, "out of memory");
  t->batch = batch;
  cx_status s = open_program(t, teacher, backend, precision, features, n_features);
  if (s != CX_OK) {
    cx_kd_teacher_close(t);
    return s;
  }
  *out = t;
  return CX_OK;
}

void cx_kd_teacher_close(cx_kd_teacher *t) {
  if (!t) return;
  cx_program_free(t->p);
  for (int i = 0; t->host && i <= t->n_features; i++) free(t->host[i]);
  free(t->host);
  free(t->features);
  free(t);
}

int64_t cx_kd_teacher_classes(const cx_kd_teacher *t) { return t->classes; }

void cx_kd_teacher_input_shape(const cx_kd_teacher *t, int64_t chw[3]) {
  for (int i = 0; i < 3; i++) chw[i] = t->input->shape.d[1 + i];
}

cx_status cx_kd_teacher_run(cx_kd_teacher *t, const float *images, int64_t n) {
  if (n < 0 || n > t->batch)
    return cx_fail(CX_ERR_ARG, "teacher: %lld images for a program of batch %lld", (long long)n,
                   (long long)t->batch);
  size_t per = cx_tensor_nbytes(t->input) / (size_t)t->batch;
  /* inference is per sample: the padding changes nothing of the first n */
  CX_TRY(cx_program_write_input(t->p, t->input_name, images, per * (size_t)n));
  CX_TRY(cx_program_forward(t->p));
  for (int i = 0; i <= t->n_features; i++)
    CX_TRY(cx_program_read(t->p, i ? t->features[i - 1] : t->logits, t->host[i]));
  return CX_OK;
}

const float *cx_kd_teacher_logits(const cx_kd_teacher *t) { return t->host[0]; }

const float *cx_kd_teacher_feature(const cx_kd_teacher *t, int i, cx_shape *shape) {
  if (i < 0 || i >= t->n_features) return NULL;
  if (shape) *shape = t->features[i]->shape;
  return t->host[1 + i];
}
