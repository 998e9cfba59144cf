#ifndef CX_ONNX_EXPORT_H
#define CX_ONNX_EXPORT_H

#include "../core/graph.h"

/* graph → ONNX. The graph holds every op in its canonical form (the newest opset's semantics);
 * the exporter writes each node in the form of the target opset (13 to 17): ReduceMean's axes as
 * an attribute, Split's sizes and ReduceSum's axes as inputs, HardSwish as HardSigmoid·x before
 * opset 14, and so on. Initializers are written with raw_data (little-endian), graph inputs keep
 * the symbolic batch dimension as dim_param "N", and output shapes are inferred (a dimension that
 * follows the batch is "N", one that depends on it otherwise is left unknown). Nodes of the
 * com.compress domain (gradient and loss ops) cannot be exported: the error names the node; the
 * one exception is FakeQuantize, written as QDQ (export/export_qdq.c, docs/onnx.md): on a
 * weight, an INT8 (UINT8 when qmin >= 0) initializer rounded here and a DequantizeLinear, per
 * axis when the scale is; on an activation, a QuantizeLinear→DequantizeLinear pair for each
 * reader. Its scale and zero point must be initializers (constants, or the parameters and state
 * of QAT), and a FakeQuantize graph needs opset 13 or later.
 *
 * The file is written as "<path>.tmp.<pid>" and renamed over path when complete, so path never
 * holds a half-written model and a failed export leaves nothing behind. */

typedef struct cx_onnx_metadata {
  const char *key, *value;
} cx_onnx_metadata;

typedef struct cx_onnx_export_opts {
  int opset;                     /* 13 to 17; 0 means 13 */
  bool fold_bn;                  /* fold inference BatchNormalization into a preceding Conv/Gemm
                                    first (cx_graph_fold_bn, core/graph_fold_bn.h) */
  const char *producer_version;  /* written with producer_name "compress"; NULL: "" */
  const char *doc_string;        /* NULL: none */
  const char *graph_name;        /* NULL: "compress" */
  const cx_onnx_metadata *metadata; /* metadata_props, n_metadata pairs */
  int n_metadata;
} cx_onnx_export_opts;

enum { CX_ONNX_EXPORT_MIN_OPSET = 13, CX_ONNX_EXPORT_MAX_OPSET = 17 };

/* o may be NULL (opset 13, no folding). */
cx_status cx_onnx_export(const cx_graph *g, const char *path, const cx_onnx_export_opts *o);

#endif
