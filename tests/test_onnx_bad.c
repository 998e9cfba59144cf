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
  for (const char *c = cx_last_error(); *c; c++) ok &= (unsigned char)*c >= 0x20 || *c == '\n';
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

/* node 1 becomes Add(h, w) with w the first of `n` initializers */
static Onnx__TensorProto *add_weight(Onnx__ModelProto *m, int n) {
  static int64_t dims[] = {1};
  static float one[] = {1};
  static Onnx__TensorProto t[2];
  static Onnx__TensorProto *inits[] = {&t[0], &t[1]};
  for (int k = 0; k < 2; k++) {
    t[k] = (Onnx__TensorProto)ONNX__TENSOR_PROTO__INIT;
    t[k].name = "w", t[k].n_dims = 1, t[k].dims = dims, t[k].has_data_type = 1, t[k].data_type = 1;
    t[k].n_float_data = 1, t[k].float_data = one;
  }
  m->graph->n_initializer = (size_t)n, m->graph->initializer = inits;
  static char *in2[] = {"h", "w"};
  m->graph->node[1]->op_type = "Add", m->graph->node[1]->n_input = 2, m->graph->node[1]->input = in2;
  return &t[0];
}
static void dup_initializer(Onnx__ModelProto *m) { add_weight(m, 2); }
static void raw_and_float(Onnx__ModelProto *m) {
  Onnx__TensorProto *t = add_weight(m, 1);
  static uint8_t raw[4] = {0, 0, 128, 63};
  t->has_raw_data = 1, t->raw_data.len = 4, t->raw_data.data = raw;
}
/* the output gets a type of its own, so that only it changes */
static Onnx__TypeProto__Tensor *output_type(Onnx__ModelProto *m) {
  static Onnx__TypeProto__Tensor tt;
  static Onnx__TypeProto type;
  tt = *m->graph->output[0]->type->tensor_type;
  type = *m->graph->output[0]->type;
  type.tensor_type = &tt;
  m->graph->output[0]->type = &type;
  return &tt;
}
static void output_undefined(Onnx__ModelProto *m) { output_type(m)->elem_type = 0; }
static void output_negative(Onnx__ModelProto *m) { output_type(m)->elem_type = -3; }
static void output_huge_dim(Onnx__ModelProto *m) {
  static Onnx__TensorShapeProto shape;
  static Onnx__TensorShapeProto__Dimension d = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
  static Onnx__TensorShapeProto__Dimension *dims[] = {&d};
  Onnx__TypeProto__Tensor *tt = output_type(m);
  shape = *tt->shape;
  shape.n_dim = 1, shape.dim = dims;
  d.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE, d.dim_value = INT64_MAX;
  tt->shape = &shape;
}
static void set_attrs(Onnx__ModelProto *m, Onnx__AttributeProto **a, size_t n) {
  m->graph->node[0]->n_attribute = n, m->graph->node[0]->attribute = a;
}
static void trans_b_100(Onnx__ModelProto *m) {
  static Onnx__AttributeProto a = ONNX__ATTRIBUTE_PROTO__INIT;
  static Onnx__AttributeProto *as[] = {&a};
  a.name = "transB", a.has_type = 1, a.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  a.has_i = 1, a.i = 100;
  add_weight(m, 1);
  m->graph->node[1]->op_type = "Gemm";
  m->graph->node[1]->n_attribute = 1, m->graph->node[1]->attribute = as;
}
static void ir_negative(Onnx__ModelProto *m) { m->ir_version = -1; }
static void ir_huge(Onnx__ModelProto *m) { m->ir_version = (int64_t)1 << 40; }
static void dup_attribute(Onnx__ModelProto *m) {
  static Onnx__AttributeProto a = ONNX__ATTRIBUTE_PROTO__INIT;
  static Onnx__AttributeProto *as[] = {&a, &a};
  a.name = "alpha", a.has_type = 1, a.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
  a.has_f = 1, a.f = 0.5f;
  m->graph->node[0]->op_type = "LeakyRelu";
  set_attrs(m, as, 2);
}
static void graph_attribute(Onnx__ModelProto *m) {
  static Onnx__AttributeProto a = ONNX__ATTRIBUTE_PROTO__INIT;
  static Onnx__AttributeProto *as[] = {&a};
  a.name = "body", a.has_type = 1, a.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
  static Onnx__GraphProto body = ONNX__GRAPH_PROTO__INIT;
  a.g = &body;
  set_attrs(m, as, 1);
}
static void wrong_attr_type(Onnx__ModelProto *m) {
  static Onnx__AttributeProto a = ONNX__ATTRIBUTE_PROTO__INIT;
  static Onnx__AttributeProto *as[] = {&a};
  a.name = "alpha", a.has_type = 1, a.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  a.has_i = 1, a.i = 2;
  m->graph->node[0]->op_type = "LeakyRelu";
  set_attrs(m, as, 1);
}
static void control_chars(Onnx__ModelProto *m) { m->graph->node[1]->input[0] = "no\x1b[31mwhere"; }
static void empty_required(Onnx__ModelProto *m) { m->graph->node[1]->input[0] = ""; }
static void two_producers(Onnx__ModelProto *m) { m->graph->node[1]->output[0] = "h"; }

/* What the fuzz target (fuzz/fuzz_onnx.c) found, in fixtures/bad_onnx/fuzz/: each must import
 * or be refused with a message; under CI's AddressSanitizer + UBSan run any undefined behaviour
 * on the way aborts the test. */
static const struct { const char *file, *needle; } fuzz_found[] = {
    /* a STRING attribute with no bytes: memcpy from NULL */
    {"empty_string_attribute.onnx", "only 2-D convolutions are supported"},
};

/* Reproducers kept in fixtures/bad_onnx/ (from the bad-input issue): each crashed the importer
 * or was imported although invalid; now each is refused with this message. */
static const struct { const char *file, *needle; } fixtures[] = {
    {"conv_empty_weight.onnx", "node 'conv' (Conv): input 1 is empty, and Conv requires it"},
    {"fold_add_one_const_input.onnx", "(Add) has 1 input(s), Add needs 2"},
    {"fold_cast_no_input.onnx", "(Cast) has 0 input(s), Cast needs 1"},
    {"fold_concat_no_input.onnx", "(Concat) has 0 input(s), Concat needs 1"},
    {"fold_constantofshape_no_input.onnx", "ConstantOfShape needs 1"},
    {"fold_gather_one_input.onnx", "(Gather) has 1 input(s), Gather needs 2"},
    {"fold_neg_no_input.onnx", "(Neg) has 0 input(s), Neg needs 1"},
    {"fold_range_one_input.onnx", "(Range) has 1 input(s), Range needs 3"},
    {"fold_reshape_empty_shape.onnx", "input 1 is empty, and Reshape requires it"},
    {"fold_shape_no_input.onnx", "(Shape) has 0 input(s), Shape needs 1"},
    {"fold_slice_one_input.onnx", "(Slice) has 1 input(s), Slice needs 3"},
    {"fold_unsqueeze_no_input.onnx", "(Unsqueeze) has 0 input(s), Unsqueeze needs 2"},
    {"fold_where_one_input.onnx", "(Where) has 1 input(s), Where needs 3"},
    {"identity_empty_to_conv.onnx", "node 'id' (Identity): input 0 is empty"},
    {"identity_empty_to_output.onnx", "node 'id' (Identity): input 0 is empty"},
    {"identity_no_input_to_conv.onnx", "(Identity) has 0 input(s), Identity needs 1"},
    {"init_dims_overflow.onnx", "[4294967296, 4294967296]"},
    {"mul_empty_input.onnx", "node 'mul' (Mul): input 1 is empty"},
    {"relu_empty_input.onnx", "node 'relu' (Relu): input 0 is empty"},
    {"shapey_add_one_input_fold.onnx", "node '/Add' (Add) has 1 input(s), Add needs 2"},
    {"shapey_mul_empty_input_eltwise.onnx", "attribute 'ceil_mode' is of kind 5"},
    {"shapey_sigmoid_empty_input.onnx", "node '/Sigmoid' (Sigmoid): input 0 is empty"},
    {"sigmoid_empty_input.onnx", "node 'sig' (Sigmoid): input 0 is empty"},
};

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
      {"duplicate initializers", dup_initializer, "initializer 'w' is given twice"},
      {"raw_data and float_data both set", raw_and_float, "more than one place"},
      {"output elem_type 0", output_undefined, "output 'y' has element type UNDEFINED (0)"},
      {"output elem_type -3", output_negative, "output 'y' has element type unknown (-3)"},
      {"output dim 2^63-1", output_huge_dim, "dimension 0 is 9223372036854775807"},
      {"Gemm transB = 100", trans_b_100, "attribute 'transB' is 100 (0 to 1 allowed)"},
      {"ir_version -1", ir_negative, "ir_version -1"},
      {"ir_version 2^40", ir_huge, "ir_version 1099511627776"},
      {"an attribute given twice", dup_attribute, "attribute 'alpha' is given twice"},
      {"a graph-valued attribute", graph_attribute, "attribute 'body' is of kind 5"},
      {"an attribute of the wrong type", wrong_attr_type, "'alpha' is INT, LeakyRelu expects FLOAT"},
      {"control characters are escaped", control_chars, "a node input 'no\\x1b[31mwhere' has control characters"},
      {"empty required input", empty_required, "node 'relu2' (Relu): input 0 is empty"},
      {"two nodes write one value", two_producers, "output 'h' is already defined"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    n = make_model(&data, cases[k].mutate);
    snprintf(path, sizeof path, "%s/case%zu.onnx", dir, k);
    write_file(path, data, n);
    free(data);
    expect(cases[k].what, path, CX_ERR_FORMAT, cases[k].needle);
  }
  for (size_t k = 0; k < sizeof fixtures / sizeof *fixtures; k++) {
    snprintf(path, sizeof path, "fixtures/bad_onnx/%s", fixtures[k].file);
    expect(fixtures[k].file, path, CX_ERR_FORMAT, fixtures[k].needle);
  }
  for (size_t k = 0; k < sizeof fuzz_found / sizeof *fuzz_found; k++) {
    snprintf(path, sizeof path, "fixtures/bad_onnx/fuzz/%s", fuzz_found[k].file);
    expect(fuzz_found[k].file, path, fuzz_found[k].needle ? CX_ERR_FORMAT : CX_OK,
           fuzz_found[k].needle);
  }
  /* the same bytes from memory give the same answer, and external data is refused there */
  n = make_model(&data, NULL);
  cx_graph *g = NULL;
  bool same = cx_onnx_import_bytes(data, n, "in memory", &g, NULL) == CX_OK;
  cx_graph_free(g);
  free(data);
  printf("%s from memory: %s\n", same ? "ok  " : "FAIL", same ? "imported" : cx_last_error());
  fails += !same;
  snprintf(path, sizeof path, "%s/missing.onnx", dir);
  expect("missing file", path, CX_ERR_IO, "missing.onnx");
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) printf("warning: could not remove %s\n", dir);
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
