#ifndef CX_QUANTIZE_H
#define CX_QUANTIZE_H

/* The quantize stage (docs/quantize.md): observers and calibrators, where FakeQuantize nodes go,
 * post-training calibration (PTQ), quantization-aware training (QAT) as a trainer extension and
 * the per-layer SQNR. The result is always a float graph with FakeQuantize nodes (float weights,
 * final scales as constants), which the QDQ exporter turns into QuantizeLinear/DequantizeLinear.
 * quantize/ depends on core/, data/ and train/ only; the CLI and the pipeline drive it, and it
 * never names a backend: programs run on the `const cx_backend *` given. */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../core/backend.h"
#include "../core/graph.h"
#include "../data/data.h"
#include "../train/extension.h"

typedef enum cx_quant_method {
  CX_QUANT_PTQ, /* calibrate the scales on a few batches, weights unchanged */
  CX_QUANT_QAT, /* calibrate, then fine-tune with FakeQuantize in the training graph */
} cx_quant_method;

/* How an activation's clipping range is chosen from what was observed (weights always use their
 * per-channel max |w|). */
typedef enum cx_quant_calibrator {
  CX_CALIB_MINMAX,     /* the observed min and max: nothing clipped */
  CX_CALIB_PERCENTILE, /* |x| at the `percentile`-th percentile of the histogram */
  CX_CALIB_MSE,        /* the threshold minimising the quantization MSE over the histogram */
  CX_CALIB_ENTROPY,    /* TensorRT's: the threshold minimising KL(P || Q) over 128 levels */
} cx_quant_calibrator;

typedef enum cx_quant_act {
  CX_QUANT_INT8,  /* symmetric, zero point 0, [-128, 127]: what TensorRT requires (default) */
  CX_QUANT_UINT8, /* asymmetric, [0, 255] with a zero point: ONNX Runtime only */
} cx_quant_act;

typedef struct cx_quant_config {
  cx_quant_method method;
  cx_quant_calibrator calibrator;
  double percentile;           /* CX_CALIB_PERCENTILE: in (0, 100]; 99.99 */
  int64_t calibration_batches; /* batches of the calibration data observed (>= 1); 16 */
  cx_quant_act activations;    /* weights are always symmetric per-channel INT8 in [-127, 127] */
  /* Node-name globs (fnmatch, as `compress inspect` names nodes) of Conv, Gemm, MatMul, residual
   * Add and Concat nodes left in floating point: neither their weights nor their inputs get a
   * FakeQuantize for them. A glob that matches no such node is an error. */
  const char *const *keep_fp32;
  int n_keep_fp32;
  /* QAT (docs/quantize.md, "QAT"): BatchNorm is folded into its convolution before training,
   * so its statistics are frozen from the start: freeze_bn_after must be 0 (the key exists so
   * that a pipeline file states it). Observers follow the activations (an exponential moving
   * average of each batch's min and max, every observe_every steps) until the end of epoch
   * freeze_observers_after (0: frozen from the start at the calibrated scales); with lsq the
   * scales are trained parameters instead (LSQ, Esser et al. 2020) and observers do not run. */
  int64_t freeze_bn_after;        /* epochs; 0 */
  int64_t freeze_observers_after; /* epochs; 1 */
  int64_t observe_every;          /* optimizer steps between observer updates; 10 */
  double observer_momentum;       /* EMA weight of a new batch's min/max, in (0, 1]; 0.01 */
  bool lsq;
  /* Weights in [-63, 63] (7 bits) instead of [-127, 127]: ONNX Runtime's reduce_range. Its
   * integer kernels on x86 without VNNI add pairs of u8·s8 products in int16 with saturation
   * (2·255·127 > 32767), so full-range weights come out wrong there; TensorRT and VNNI CPUs do
   * not need it (docs/quantize.md, "Export"). */
  bool reduce_range;
} cx_quant_config;

/* Defaults: PTQ, MSE calibration, percentile 99.99, 16 calibration batches, INT8
 * activations, no keep_fp32, freeze_bn_after 0, freeze_observers_after 1, observe_every 10,
 * momentum 0.01, no LSQ. */
cx_quant_config cx_quant_defaults(void);
/* Ranges and combinations; the message names the key as the pipeline file spells it. */
cx_status cx_quant_config_check(const cx_quant_config *c);
/* "minmax", "percentile", "mse", "entropy" and back (-1 when unknown): one spelling for the
 * CLI, the pipeline file and the report. */
const char *cx_quant_calibrator_name(cx_quant_calibrator c);
int cx_quant_calibrator_parse(const char *name);

/* ---- observers (quantize/observer.c): host float data in, a clipping range out ---- */

/* Running min and max, and for the histogram calibrators a histogram of CX_QUANT_BINS bins over
 * [0, amax] of |x|: its range doubles (pairs of bins merging exactly) when a batch goes past it,
 * so batches can come in any order of magnitude. */
#define CX_QUANT_BINS 2048
typedef struct cx_quant_observer cx_quant_observer;

cx_status cx_quant_observer_new(cx_quant_calibrator c, cx_quant_observer **out);
void cx_quant_observer_free(cx_quant_observer *o);
/* Adds n values (non-finite values are an error naming `what`). */
cx_status cx_quant_observer_add(cx_quant_observer *o, const float *x, int64_t n, const char *what);
/* The clipping range [*lo, *hi] chosen by the observer's calibrator (c->percentile for the
 * percentile one); lo <= 0 <= hi always (zero must be representable). Symmetric callers use
 * max(-lo, hi). Nothing observed: an error naming `what`. */
cx_status cx_quant_observer_range(const cx_quant_observer *o, const cx_quant_config *c,
                                  const char *what, float *lo, float *hi);

/* Scale and zero point of a range on the grid [qmin, qmax]. Symmetric (qmin < 0):
 * scale = max(|lo|, |hi|) / qmax, zero point 0. Asymmetric: scale = (hi - lo) / (qmax - qmin),
 * zero point = clamp(qmin - round(lo / scale), qmin, qmax). A zero range (an all-zero channel
 * or tensor) or one whose scale would underflow to a denormal gives scale 1 and zero point
 * qmin's symmetric choice (0) and returns false, so that the caller reports it
 * (cx_quant_check_ranges): x = 0 then still quantizes exactly. */
bool cx_quant_scale(float lo, float hi, int64_t qmin, int64_t qmax, float *scale, float *zero);

/* ---- placement (quantize/place.c) ---- */

typedef enum cx_quant_kind {
  CX_QUANT_WEIGHT,     /* an initializer weight: per channel */
  CX_QUANT_ACTIVATION, /* a value computed at run time (or the graph's input): per tensor */
} cx_quant_kind;

/* One node input that reads a site's quantized value. */
typedef struct cx_quant_use {
  char *node; /* node name */
  int input;  /* input index */
} cx_quant_use;

/* One FakeQuantize: a value of the float graph, the nodes that read it quantized, its grid and
 * (once calibrated) its scale and zero point. Names are copies: a plan applies to the model
 * graph, its training graph and its clone alike, which share value and node names. */
typedef struct cx_quant_site {
  cx_quant_kind kind;
  char *value;     /* the quantized value's name */
  char *node;      /* the first weighted (or Add/Concat) node that reads it: messages, SQNR */
  int axis;        /* weights: the channel axis (0: Conv, Gemm transB=1; 1: Gemm transB=0 and
                      MatMul [K, N]); activations: -1 */
  int64_t channels;      /* scale's length: the weight's size along axis; 1 for activations */
  int share;             /* the site whose scale this one uses (Concat inputs: the first);
                            itself otherwise */
  int64_t qmin, qmax;    /* [-127, 127] weights; [-128, 127] INT8, [0, 255] UINT8 activations */
  int n_uses;
  cx_quant_use *uses;
  float *scale, *zero;   /* channels each; zero is 0 except for UINT8 activations */
  int64_t zero_channels; /* channels whose range was zero (scale 1): see cx_quant_scale */
  int64_t first_zero;    /* the first of them */
  bool calibrated;
} cx_quant_site;

typedef struct cx_quant_plan {
  int n;
  cx_quant_site *s; /* weights and activations in graph node order */
} cx_quant_plan;

/* Where FakeQuantize goes in g (BatchNorm already folded: cx_quant_fold_bn): the weight (input
 * 1) of every Conv (grouped and depthwise too), Gemm and MatMul whose weight is an f32
 * initializer, per channel; their activation input (input 0), per tensor; both inputs of a
 * residual Add (two run-time values), so that ONNX Runtime fuses QLinearAdd and TensorRT fuses
 * the Add into the convolution. A value to quantize that a Concat produces is quantized on the
 * Concat's inputs instead, all sharing one scale. Relu, Clip, MaxPool, Reshape and Flatten are
 * never separated from their producer: the value is quantized where the next weighted op reads
 * it (after the activation). A value read quantized by several nodes has one site. The graph's
 * input is quantized like any other activation. keep_fp32 nodes are left out. Errors: a
 * keep_fp32 glob matching nothing, no quantizable op (naming `model`). Free with
 * cx_quant_plan_free. */
cx_status cx_quant_plan_make(const cx_graph *g, const cx_quant_config *c, const char *model,
                             cx_quant_plan *out);
void cx_quant_plan_free(cx_quant_plan *p);
/* Inserts one FakeQuantize per site into g in place (a training graph or a clone of the model):
 * node "<value>.fq" reading the value and the scale initializer "<value>.scale" (and
 * "<value>.zero_point" for UINT8 activations; shared sites read their leader's), rewiring each
 * use to its output. Scales are initializers of kind `scale_kind` (CONST for inference graphs,
 * STATE for observer-driven QAT, PARAM for LSQ) holding the site's scale (1 if not calibrated).
 * Fails naming a site whose value or use is not in g. */
cx_status cx_quant_insert(cx_graph *g, const cx_quant_plan *p, cx_value_kind scale_kind);
/* Every activation's scale is usable: CX_ERR_ARG naming the first activation whose range was
 * zero (0 on every calibration batch), for the CLI's "bad input" rule; the quantized graph
 * itself stays valid (scale 1). All-zero weight channels pass: at scale 1 they are exact. */
cx_status cx_quant_check_ranges(const cx_quant_plan *p, const char *model);

/* g with its inference BatchNormalization folded into the Conv or Gemm before it, as a new
 * graph (*folded counts them; may be NULL): the one entry point quantize/ folds through, core's
 * cx_graph_fold_bn with constant channels (a channel whose running variance is 0 becomes zero
 * weights and its constant bias). */
cx_status cx_quant_fold_bn(const cx_graph *g, cx_graph **out, int *folded);

/* ---- calibration data (quantize/calibrate.c) ---- */

/* Where calibration batches come from: a data set part, read in order (no shuffling), with the
 * training's evaluation preprocessing (normalisation), batch images at a time. */
typedef struct cx_quant_data {
  const char *path, *part; /* part "" or NULL: the main part */
  const cx_augment *pre;   /* NULL: none */
  int64_t batch;
} cx_quant_data;

/* Weights' scales from the weights (per-channel max |w| / 127), and activations' by running an
 * inference program of g (the float, folded graph, with every site's value made an output) on
 * backend b over c->calibration_batches batches (fewer if the data has fewer), feeding one
 * observer per leader site. Sets every site's scale, zero point and zero_channels. Errors: data
 * whose images do not fit g's input, a non-finite activation (naming the value). */
cx_status cx_quant_calibrate(const cx_graph *g, cx_quant_plan *p, const cx_quant_config *c,
                             const cx_backend *b, const cx_quant_data *d, const char *model);

/* PTQ in one call: clones `model`, folds its BatchNorm (into *folded when not NULL: the FP32
 * reference the SQNR compares against), plans, calibrates and returns the quantized graph
 * (float weights + FakeQuantize with constant scales) and the plan (may be NULL). */
cx_status cx_quant_ptq(const cx_graph *model, const cx_quant_config *c, const cx_backend *b,
                       const cx_quant_data *d, const char *name, cx_graph **quantized,
                       cx_graph **folded, cx_quant_plan *plan);

/* ---- SQNR per quantized layer (quantize/sqnr.c) ---- */

typedef struct cx_quant_layer {
  char *node, *op; /* the weighted node (Conv, Gemm, MatMul) and its op */
  double sqnr_db;  /* 10 log10(Σx² / Σ(x - x_q)²) of its output; +inf when identical */
  int64_t elements;
} cx_quant_layer;

typedef struct cx_quant_sqnr_table {
  int n;
  cx_quant_layer *l; /* in graph node order */
} cx_quant_sqnr_table;

/* The output of each Conv, Gemm and MatMul of `fp32` (the folded float graph) against the
 * same-named value of `quantized`, summed over the calibration batches of d (c's
 * calibration_batches) on backend b. Nodes kept in FP32 are listed too (their error is what
 * reaches them). Free with cx_quant_sqnr_free. */
cx_status cx_quant_sqnr(const cx_graph *fp32, const cx_graph *quantized,
                        const cx_quant_config *c, const cx_backend *b, const cx_quant_data *d,
                        cx_quant_sqnr_table *out);
void cx_quant_sqnr_free(cx_quant_sqnr_table *t);
/* The table as text, one layer a line ("node  op  SQNR dB"), for the CLI and the report. */
void cx_quant_sqnr_print(const cx_quant_sqnr_table *t, FILE *f);

/* ---- QAT (quantize/qat.c): a trainer extension ---- */

typedef struct cx_quant_qat cx_quant_qat;

/* QAT of a folded model (cx_quant_fold_bn) from a calibrated plan (cx_quant_calibrate: QAT
 * starts from PTQ's scales), both copied. The graph to train is cx_quant_qat_graph: the model
 * with the plan's FakeQuantize nodes, whose scales are STATE initializers (PARAM with lsq), so
 * that the trainer's evaluation program, checkpoints and final store carry them as they carry
 * BatchNorm statistics (a FakeQuantize inserted only into the training graph would leave the
 * evaluation float and the trained scales nowhere to go). Pass it to cx_train together with
 * cx_quant_qat_ext; a distillation extension builds its loss on it as on any student.
 * Observers (not with lsq): after every observe_every-th optimizer step, until the first batch
 * of epoch freeze_observers_after is fed, each activation's batch min and max (read with
 * cx_program_read; wrap_graph makes them outputs so they are still readable) move an EMA that
 * starts at the calibrated range, and the new scales are written into the program. The EMA is
 * checkpoint state ("quantize/observer_range", "quantize/observer_flags"); the scales are the
 * graph's STATE values the trainer checkpoints, so a resumed run is bit-identical. log: NULL
 * is quiet. */
cx_status cx_quant_qat_open(const cx_graph *model, const cx_quant_plan *calibrated,
                            const cx_quant_config *c, FILE *log, cx_quant_qat **out);
/* The graph to train (owned by q; cx_train trains it in place). */
cx_graph *cx_quant_qat_graph(cx_quant_qat *q);
cx_train_ext cx_quant_qat_ext(cx_quant_qat *q);
/* After cx_train: a copy of the trained graph (cx_quant_qat_graph) with its scales made
 * constants, the quantized model for the exporter; *plan (may be NULL) gets the plan with the
 * final scales. */
cx_status cx_quant_qat_finish(cx_quant_qat *q, const cx_graph *trained, cx_graph **quantized,
                              cx_quant_plan *plan);
void cx_quant_qat_close(cx_quant_qat *q);

#endif
