#ifndef CX_ONNX_H
#define CX_ONNX_H

#include "../core/graph.h"

/* ONNX → graph. Reads the model (and external-data files beside it), converts every op of the
 * engine's op set from opsets 7 to 21 into its canonical form, folds shape arithmetic whose
 * inputs are known (Shape, Gather, Unsqueeze, Concat, ... — with a symbolic batch dimension kept
 * symbolic), and drops Identity and inference-mode Dropout. A model with ops we do not support
 * fails before anything runs, with one message listing every op type, opset and node. */

typedef struct cx_onnx_info {
  int64_t ir_version;
  int64_t opset;          /* of the default (ai.onnx) domain */
  char producer[128];
  char producer_version[64];
  int n_metadata;
  char metadata[32][2][256]; /* metadata_props key/value pairs, first 32 */
} cx_onnx_info;

/* Every part of the file is checked before any of it is used (docs/onnx.md says what). */
cx_status cx_onnx_import(const char *path, cx_graph **out, cx_onnx_info *info);
/* The same from len bytes in memory; `name` stands for the model in messages. External data is
 * refused: there is no folder to look for it in. */
cx_status cx_onnx_import_bytes(const void *data, size_t len, const char *name, cx_graph **out,
                               cx_onnx_info *info);

#endif
