/* Malformed ONNX files: each must give an error that names the problem, never a crash (CI runs
 * this under AddressSanitizer + UBSan). The files are made here with protobuf-c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../import/onnx.h"
#include "../import/onnx_internal.h"

static int fails;

/* A two-node model: y = Relu(Relu(x)), x [-1, 4]; `mutate` may change it before packing. */
static size_t make_model(uint8_t **out, void (*mutate)(Onnx__ModelProto *)) {
  char *in1[] = {"x"}, *out1[] = {"h"}, *in2[] = {"h"}, *out2[] = {"y"};
  Onnx__NodeProto n1 = ONNX__NODE_PROTO__INIT, n2 = ONNX__NODE_PROTO__INIT;
  n1.op_type = "Relu", n1.name = "relu1", n1.n_input = 1, n1.input = in1, n1.n_output = 1, n1.output = out1;
  n2.op_type = "Relu", n2.name = "relu2", n2.n_input = 1, n2.input = in2, n2.n_output = 1, n2.output = out2;
  Onnx__NodeProto *nodes[] = {&n1, &n2};
  Onnx__TensorShapeProto__Dimension d0 = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT,
                                    d1 = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
  d0.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM, d0.dim_param = "N";
  d1.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE, d1.dim_value = 4;
  Onnx__TensorShapeProto__Dimension *dims[] = {&d0, &d1};
  Onnx__TensorShapeProto shape = ONNX__TENSOR_SHAPE_PROTO__INIT;
  shape.n_dim = 2, shape.dim = dims;
  Onnx__TypeProto__Tensor tt = ONNX__TYPE_PROTO__TENSOR__INIT;
  tt.has_elem_type = 1, tt.elem_type = 1, tt.shape = &shape;
  Onnx__TypeProto type = ONNX__TYPE_PROTO__INIT;
  type.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE, type.tensor_type = &tt;
  Onnx__ValueInfoProto vin = ONNX__VALUE_INFO_PROTO__INIT, vout = ONNX__VALUE_INFO_PROTO__INIT;
  vin.name = "x", vin.type = &type, vout.name = "y", vout.type = &type;
  Onnx__ValueInfoProto *ins[] = {&vin}, *outs[] = {&vout};
  Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
  g.name = "bad", g.n_node = 2, g.node = nodes, g.n_input = 1, g.input = ins, g.n_output = 1, g.output = outs;
  Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT;
  opset.domain = "", opset.has_version = 1, opset.version = 13;
  Onnx__OperatorSetIdProto *opsets[] = {&opset};
  Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
  m.has_ir_version = 1, m.ir_version = 7, m.graph = &g, m.n_opset_import = 1, m.opset_import = opsets;
  m.producer_name = "test";
  if (mutate) mutate(&m);
  size_t n = onnx__model_proto__get_packed_size(&m);
  *out = malloc(n);
  onnx__model_proto__pack(&m, *out);
  return n;
}

static void write_file(const char *path, const uint8_t *data, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(data, 1, n, f);
  fclose(f);
}

static void expect(const char *what, const char *path, cx_status want, const char *needle) {
  cx_graph *g = NULL;
  cx_status s = cx_onnx_import(path, &g, NULL);
  bool ok = (want == CX_OK) ? s == CX_OK : s != CX_OK && strstr(cx_last_error(), needle);
  printf("%s %s: %s\n", ok ? "ok  " : "FAIL", what, s == CX_OK ? "imported" : cx_last_error());
  fails += !ok;
  cx_graph_free(g);
}

static void missing_input(Onnx__ModelProto *m) { m->graph->node[1]->input[0] = "nowhere"; }
static void cycle(Onnx__ModelProto *m) { m->graph->node[0]->input[0] = "y"; }
static void unsupported(Onnx__ModelProto *m) {
  m->graph->node[0]->op_type = "NonMaxSuppression";
  m->graph->node[1]->op_type = "TopK";
}
static void huge_shape(Onnx__ModelProto *m) {
  static int64_t dims[] = {2000000000};
  static Onnx__TensorProto t = ONNX__TENSOR_PROTO__INIT;
  static Onnx__TensorProto *inits[] = {&t};
  t.name = "w", t.n_dims = 1, t.dims = dims, t.has_data_type = 1, t.data_type = 1;
  m->graph->n_initializer = 1, m->graph->initializer = inits;
  m->graph->node[1]->op_type = "Add";
  static char *in2[] = {"h", "w"};
  m->graph->node[1]->n_input = 2, m->graph->node[1]->input = in2;
}
static void old_opset(Onnx__ModelProto *m) { m->opset_import[0]->version = 3; }

int main(void) {
  char dir[] = "/tmp/cx_onnx_bad_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char path[256];
  uint8_t *data;
  size_t n = make_model(&data, NULL);

  snprintf(path, sizeof path, "%s/good.onnx", dir);
  write_file(path, data, n);
  expect("well-formed model", path, CX_OK, "");

  snprintf(path, sizeof path, "%s/truncated.onnx", dir);
  write_file(path, data, n / 2);
  expect("truncated file", path, CX_ERR_FORMAT, "truncated or corrupt");

  snprintf(path, sizeof path, "%s/magic.onnx", dir);
  write_file(path, (const uint8_t *)"\x89PNG\r\n\x1a\n this is not a model", 28);
  expect("wrong magic (a PNG header)", path, CX_ERR_FORMAT, "not an ONNX model");

  /* every single-bit flip either parses into something we check or is refused, without a crash */
  int refused = 0;
  for (size_t bit = 0; bit < n * 8; bit += 3) {
    data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    snprintf(path, sizeof path, "%s/flip.onnx", dir);
    write_file(path, data, n);
    cx_graph *g = NULL;
    refused += cx_onnx_import(path, &g, NULL) != CX_OK;
    cx_graph_free(g);
    data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
  }
  printf("ok   bit flips: %d of %zu refused with a message, none crashed\n", refused, n * 8 / 3);
  free(data);

  struct { const char *what; void (*mutate)(Onnx__ModelProto *); const char *needle; } cases[] = {
      {"node names a missing input", missing_input, "'nowhere'"},
      {"cycle", cycle, "'y'"},
      {"unsupported ops listed together", unsupported, "NonMaxSuppression (opset 13): 'relu1'"},
      {"2-billion-element initializer", huge_shape, "2000000000"},
      {"opset below 7", old_opset, "opset 3"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    n = make_model(&data, cases[k].mutate);
    snprintf(path, sizeof path, "%s/case%zu.onnx", dir, k);
    write_file(path, data, n);
    free(data);
    expect(cases[k].what, path, CX_ERR_FORMAT, cases[k].needle);
  }
  snprintf(path, sizeof path, "%s/missing.onnx", dir);
  expect("missing file", path, CX_ERR_IO, "missing.onnx");
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) printf("warning: could not remove %s\n", dir);
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
