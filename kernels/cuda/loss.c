/* SoftmaxCrossEntropyLoss, KLDivTemperature and their gradient ops on the GPU, as
 * kernels/cpu/loss.c. One difference: the labels live on the device, so a label that is neither
 * a class nor ignore_index is not reported here (that would need a sync per step); its
 * position's loss and gradient become NaN instead, which the run's finiteness checks catch. */
#include <string.h>

#include "cuda.h"
#include "loss_launch.h"

static int64_t inner_of(const cx_shape *xs) {
  return xs->d[0] && xs->d[1] ? cx_shape_numel(xs) / (xs->d[0] * xs->d[1]) : 0;
}

/* scores at input `first`, labels and optional weights after it */
static cx_sce_args sce_of(const cx_kernel_args *a, int first) {
  const cx_shape *xs = &a->in[first].shape;
  const char *r = cx_node_string(a->node, "reduction", "mean");
  const cx_tensor *lab = &a->in[first + 1];
  cx_sce_args s = {
      .x = cx_cuda_f32(&a->in[first]),
      .labels = lab->data,
      .labels64 = lab->dtype == CX_S64,
      .w = a->n_in > first + 2 && a->in[first + 2].data ? cx_cuda_f32(&a->in[first + 2]) : NULL,
      .c = xs->d[1],
      .inner = inner_of(xs),
      .has_ignore = cx_node_attr(a->node, "ignore_index") != NULL,
      .ignore = cx_node_int(a->node, "ignore_index", 0),
      .eps = cx_node_float(a->node, "label_smoothing", 0),
      .mode = strcmp(r, "none") == 0  ? CX_CUDA_RED_NONE
              : strcmp(r, "sum") == 0 ? CX_CUDA_RED_SUM
                                      : CX_CUDA_RED_MEAN,
  };
  s.positions = xs->d[0] * s.inner;
  return s;
}

static cx_status prepare_sce(const cx_kernel_args *a, void **state, size_t *scratch) {
  (void)state;
  *scratch = (2 * (size_t)sce_of(a, 0).positions + 1) * sizeof(double);
  return CX_OK;
}

/* (scores, labels[, weights]) -> (loss[, log_prob]) */
static cx_status run_sce(const cx_kernel_args *a) {
  cx_sce_args s = sce_of(a, 0);
  float *lp = a->n_out > 1 && a->out[1].data ? cx_cuda_f32(&a->out[1]) : NULL;
  cx_cuda_sce(&s, cx_cuda_f32(&a->out[0]), lp, a->scratch, cx_cuda_stream(a->stream)->s);
  CX_CUDA_LAUNCHED();
  return CX_OK;
}

static cx_status prepare_one_double(const cx_kernel_args *a, void **state, size_t *scratch) {
  (void)a;
  (void)state;
  *scratch = sizeof(double);
  return CX_OK;
}

/* (dLoss, scores, labels[, weights]) -> dScores */
static cx_status run_sce_grad(const cx_kernel_args *a) {
  cx_sce_args s = sce_of(a, 1);
  cx_cuda_sce_grad(&s, cx_cuda_f32(&a->in[0]), cx_cuda_f32(&a->out[0]), a->scratch,
                   cx_cuda_stream(a->stream)->s);
  CX_CUDA_LAUNCHED();
  return CX_OK;
}

static double temperature_of(const cx_kernel_args *a) {
  return cx_node_float(a->node, "temperature", 1.0f);
}

static cx_status prepare_kd(const cx_kernel_args *a, void **state, size_t *scratch) {
  (void)state;
  const cx_shape *xs = &a->in[0].shape;
  *scratch = ((size_t)(xs->d[0] * inner_of(xs)) + 1) * sizeof(double);
  return CX_OK;
}

/* (student, teacher) -> T^2 / N * sum KL(softmax(teacher/T) || softmax(student/T)) */
static cx_status run_kd(const cx_kernel_args *a) {
  const cx_shape *xs = &a->in[0].shape;
  cx_cuda_kd(cx_cuda_f32(&a->in[0]), cx_cuda_f32(&a->in[1]), xs->d[0], xs->d[1], inner_of(xs),
             temperature_of(a), cx_cuda_f32(&a->out[0]), a->scratch,
             cx_cuda_stream(a->stream)->s);
  CX_CUDA_LAUNCHED();
  return CX_OK;
}

/* (dLoss, student, teacher) -> dStudent */
static cx_status run_kd_grad(const cx_kernel_args *a) {
  const cx_shape *xs = &a->in[1].shape;
  cx_cuda_kd_grad(cx_cuda_f32(&a->in[0]), cx_cuda_f32(&a->in[1]), cx_cuda_f32(&a->in[2]),
                  xs->d[0], xs->d[1], inner_of(xs), temperature_of(a), cx_cuda_f32(&a->out[0]),
                  cx_cuda_stream(a->stream)->s);
  CX_CUDA_LAUNCHED();
  return CX_OK;
}

const cx_kernel cx_cuda_loss[] = {
    {"SoftmaxCrossEntropyLoss", prepare_sce, run_sce, NULL, 0, NULL, 0},
    {"SoftmaxCrossEntropyLossGrad", prepare_one_double, run_sce_grad, NULL, 0, NULL, 0},
    {"KLDivTemperature", prepare_kd, run_kd, NULL, 0, NULL, 0},
    {"KLDivTemperatureGrad", NULL, run_kd_grad, NULL, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
