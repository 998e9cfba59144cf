/* compress quantize: a model quantized to INT8, calibrated on a data set (PTQ) and optionally
 * fine-tuned with fake quantization (QAT), written as QDQ ONNX. The options are written as a
 * [quantize] table (and [data]/[train] tables) and read by the readers the pipeline uses, so the
 * keys, ranges and messages are the pipeline's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../export/onnx_export.h"
#include "commands.h"
#include "onnx_common.h"
#include "quantize_config.h"
#include "quantize_run.h"
#include "stage_args.h"
#include "train_common.h"

static const cx_stage_flag quant_flags[] = {
    {"--calibrator", "calibrator", true, NULL},
    {"--percentile", "percentile", false, NULL},
    {"--calibration-batches", "calibration_batches", false, NULL},
    {"--activations", "activations", true, NULL},
    {"--freeze-observers-after", "freeze_observers_after", false, NULL},
    {"--observe-every", "observe_every", false, NULL},
    {NULL, NULL, false, NULL}};
static const cx_stage_flag quant_lists[] = {{"--keep-fp32", "keep_fp32", true, NULL},
                                            {NULL, NULL, false, NULL}};
static const cx_stage_flag quant_switches[] = {{"--qat", "method", true, "qat"},
                                               {"--lsq", "lsq", false, "true"},
                                               {"--reduce-range", "reduce_range", false, "true"},
                                               {NULL, NULL, false, NULL}};
static const cx_stage_args_spec spec = {.table = "quantize", .flags = quant_flags,
                                        .lists = quant_lists, .switches = quant_switches};

static cx_status quantize_model(cx_stage_args *a) {
  cx_graph *g = NULL, *q = NULL;
  cx_onnx_info info = {0};
  cx_cli_quant qc = {0};
  cx_train_config tc;
  char *old = NULL;
  CX_TRY(cx_cli_load_model(a->model, &g, &info));
  /* --qat is a [quantize] key: the table says whether [train] is read */
  bool qat = false;
  for (int i = 0; i < a->n_stage; i++) qat |= !strcmp(a->stage_lines[i], "method = \"qat\"");
  cx_status st = !qat && a->n_train
                     ? cx_fail(CX_ERR_ARG, "--epochs, --lr and --train are the fine-tune's: add "
                               "--qat, or leave them out for PTQ")
                     : cx_stage_args_read(a, &info, qat, &tc);
  if (st == CX_OK) st = cx_cli_quant_read(cx_toml_get(a->doc, "quantize"), &qc);
  if (st == CX_OK) cx_cli_rename_input(g, &old);
  if (st == CX_OK && qc.c.method == CX_QUANT_QAT) st = cx_train_config_check(&tc, g);
  cx_cli_quant_job job = {.config = &qc.c, .train = &tc, .model_name = a->model,
                          .log = a->quiet ? NULL : stdout};
  if (st == CX_OK) st = cx_cli_quantize(&job, g, &q);
  if (st == CX_OK) cx_cli_train_restore_input(q, old), old = NULL;
  if (st == CX_OK) st = cx_cli_export_trained(&tc, q, a->out, &(cx_cli_export){0});
  if (st == CX_OK) printf("wrote %s\n", a->out);
  free(old);
  cx_graph_free(q);
  cx_graph_free(g);
  cx_cli_quant_free(&qc);
  cx_stage_args_free(a, &tc);
  return st;
}

static int run(int argc, char **argv) {
  cx_stage_args a;
  int rc = cx_stage_args_parse(&cx_cmd_quantize, &spec, argc, argv, true, "CALIB.h5", &a);
  if (rc) return rc;
  if (quantize_model(&a) != CX_OK) return cx_cli_fail(&cx_cmd_quantize);
  return 0;
}

const cx_command cx_cmd_quantize = {
    .name = "quantize",
    .summary = "Quantize a model to INT8 (calibration, optionally QAT) as QDQ ONNX",
    .usage =
        "usage: compress quantize MODEL -o OUT.onnx --data CALIB.h5 [options]\n"
        "       compress quantize MODEL -o OUT.onnx --data TRAIN.h5 --qat --epochs N [...]\n\n"
        "MODEL is an ONNX file or a built-in spec. Its BatchNorm is folded into the convolutions,\n"
        "the weights of every Conv, Gemm and MatMul get symmetric per-channel INT8 scales and\n"
        "their activation inputs per-tensor scales calibrated on the first batches of --data\n"
        "(PTQ); with --qat the model is then fine-tuned with fake quantization (QAT). OUT.onnx is\n"
        "QDQ ONNX (QuantizeLinear/DequantizeLinear, opset 13) that ONNX Runtime and TensorRT\n"
        "run, written under a temporary name and renamed once complete. The per-layer SQNR\n"
        "against the floating-point model is printed. docs/quantize.md explains each key.\n\n"
        "    --calibrator C      minmax, percentile, mse, entropy (default)\n"
        "    --percentile P      percentile: the percentile of |x| kept (default 99.99)\n"
        "    --calibration-batches N  batches of --data observed (default 16)\n"
        "    --activations A     int8 (symmetric, zero point 0: TensorRT; default) or uint8\n"
        "                        (asymmetric: ONNX Runtime only)\n"
        "    --keep-fp32 GLOB    nodes left in floating point (repeatable; compress inspect\n"
        "                        names them)\n"
        "    --reduce-range      7-bit weights, for ONNX Runtime on x86 CPUs without VNNI\n\n"
        "QAT (a [data] and [train] table as in compress train, docs/training.md):\n"
        "    --qat  --epochs N  --lr LR  --val VAL.h5  --batch B\n"
        "    --lsq               learn the scales (LSQ) instead of following observers\n"
        "    --freeze-observers-after E  --observe-every K\n"
        "    --train KEY=VALUE   any other [train] key as TOML, e.g. --train 'optimizer=\"sgd\"'\n"
        "    --threads T|auto  --device cpu|cuda|auto  --quiet\n",
    .run = run,
};
