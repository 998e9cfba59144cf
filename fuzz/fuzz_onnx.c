/* libFuzzer target: ONNX import of a byte buffer (parse, validation, folding, canonical form,
 * shape inference). Any crash, sanitizer report, leak, hang or runaway allocation is a finding;
 * a refusal with a message is the expected answer to a malformed model. */
#include <stddef.h>
#include <stdint.h>

#include "../import/onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cx_graph *g = NULL;
  cx_onnx_info info;
  cx_onnx_import_bytes(data, size, "fuzz input", &g, &info);
  cx_graph_free(g);
  return 0;
}
