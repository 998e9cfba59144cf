/* The report: its cost function (dense and effective MACs, non-zero parameters), measuring
 * models from their ONNX files (also those that one runtime cannot take), the summary line,
 * and the files it writes, checked by tests/check_report.py (the JSON parses, the HTML and its
 * SVG are well-formed, and every measured number agrees with onnx + numpy + gzip's own count). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../cli/report.h"
#include "../core/graph_cost.h"
#include "../export/onnx_export.h"
#include "../train/metrics.h"
#include "check.h"
#include "op_check.h"

/* input [N,2,4,4] -> Conv (channels, 3x3, pad 1) -> Relu -> GlobalAveragePool -> Flatten ->
 * MatMul [channels,5]: 288·channels + 5·channels MACs, 23·channels parameters. half_zero:
 * every other weight element is exactly zero. */
static cx_graph *conv_model(int64_t channels, bool half_zero) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "input", CX_F32, &S(-1, 2, 4, 4));
  int w = oc_param(g, "conv.weight", &S(channels, 2, 3, 3), 0.1f, 0.5f, 3);
  int node = cx_graph_node(g, "Conv", "feat", (int[]){x, w}, 2, 1);
  cx_node_set_ints(g, node, "kernel_shape", (int64_t[]){3, 3}, 2);
  cx_node_set_ints(g, node, "pads", (int64_t[]){1, 1, 1, 1}, 4);
  int r = cx_graph_op(g, "Relu", "relu", (int[]){cx_node_output(g, node, 0)}, 1);
  int p = cx_graph_op(g, "GlobalAveragePool", "pool", &r, 1);
  node = cx_graph_node(g, "Flatten", "flat", &p, 1, 1);
  cx_node_set_int(g, node, "axis", 1);
  int w2 = oc_param(g, "fc.weight", &S(channels, 5), 0.1f, 1, 4);
  cx_graph_mark_output(g, cx_graph_op(g, "MatMul", "logits",
                                      (int[]){cx_node_output(g, node, 0), w2}, 2));
  for (int k = 0; half_zero && k < 2; k++) {
    cx_value *v = &g->values[k ? w2 : w];
    for (int64_t i = 0; i < cx_shape_numel(&v->shape); i += 2) ((float *)v->init)[i] = 0;
  }
  return g;
}

/* ---- the cost function ---- */

static void test_cost(void) {
  cx_graph *dense = conv_model(4, false), *sparse = conv_model(4, true);
  cx_graph_cost c;
  CHECK(cx_graph_measure_cost(dense, &c) == CX_OK, "%s", cx_last_error());
  CHECK(c.macs == 293 * 4 && c.macs_effective == c.macs && c.params == 23 * 4 &&
        c.params_nonzero == c.params, "dense: %lld (%lld effective) MACs, %lld (%lld) params",
        (long long)c.macs, (long long)c.macs_effective, (long long)c.params,
        (long long)c.params_nonzero);
  /* half of every weight zero: half the MACs and half the parameters are left */
  CHECK(cx_graph_measure_cost(sparse, &c) == CX_OK, "%s", cx_last_error());
  CHECK(c.macs == 293 * 4 && c.macs_effective == 293 * 2 && c.params == 23 * 4 &&
        c.params_nonzero == 23 * 2, "half zero: %lld (%lld effective) MACs, %lld (%lld) params",
        (long long)c.macs, (long long)c.macs_effective, (long long)c.params,
        (long long)c.params_nonzero);
  /* -0.0 is zero too */
  for (int v = 0; v < sparse->n_values; v++)
    if (!strcmp(sparse->values[v].name, "conv.weight")) ((float *)sparse->values[v].init)[0] = -0.0f;
  CHECK(cx_graph_measure_cost(sparse, &c) == CX_OK && c.params_nonzero == 23 * 2,
        "-0.0 counted as non-zero: %lld", (long long)c.params_nonzero);
  cx_graph_free(dense);
  cx_graph_free(sparse);
  /* a weight that nodes compute (Relu of a half-zero parameter) is counted dense: its zeros
   * are not known before the model runs */
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "x", CX_F32, &S(-1, 4));
  int p = oc_param(g, "p", &S(4, 3), 0.1f, 1, 5);
  for (int i = 0; i < 12; i += 2) ((float *)g->values[p].init)[i] = 0;
  int w = cx_graph_op(g, "Relu", "w", &p, 1);
  cx_graph_mark_output(g, cx_graph_op(g, "MatMul", "y", (int[]){x, w}, 2));
  CHECK(cx_graph_measure_cost(g, &c) == CX_OK && c.macs == 12 && c.macs_effective == 12 &&
        c.params == 12 && c.params_nonzero == 6, "computed weight: %lld (%lld) MACs, %lld "
        "non-zero params", (long long)c.macs, (long long)c.macs_effective,
        (long long)c.params_nonzero);
  cx_graph_free(g);
  /* an INT8 file's weight: an int8 initializer, half of it zero, behind a DequantizeLinear
   * whose scale and zero point are not parameters: 12 parameters, 6 non-zero, half the MACs */
  g = cx_graph_new();
  x = cx_graph_input(g, "x", CX_F32, &S(-1, 4));
  signed char q[12] = {0, 3, 0, -5, 0, 7, 0, 1, 0, -2, 0, 9}, zero = 0;
  float scale = 0.1f;
  int wq = cx_graph_init(g, CX_VALUE_CONST, "w_q", CX_S8, &S(4, 3), q);
  int sc = cx_graph_init(g, CX_VALUE_PARAM, "w_scale", CX_F32, &(cx_shape){0}, &scale);
  int zp = cx_graph_init(g, CX_VALUE_CONST, "w_zero", CX_S8, &(cx_shape){0}, &zero);
  w = cx_graph_op(g, "DequantizeLinear", "w", (int[]){wq, sc, zp}, 3);
  int y = cx_graph_op(g, "MatMul", "y", (int[]){x, w}, 2);
  cx_graph_mark_output(g, y);
  CHECK(cx_graph_measure_cost(g, &c) == CX_OK && c.macs == 12 && c.macs_effective == 6 &&
        c.params == 12 && c.params_nonzero == 6, "quantized weight: %lld (%lld) MACs, %lld "
        "(%lld non-zero) params", (long long)c.macs, (long long)c.macs_effective,
        (long long)c.params, (long long)c.params_nonzero);
  CHECK(cx_graph_node_params(g, &g->nodes[g->values[y].producer]) == 12 &&
        cx_graph_node_params(g, &g->nodes[g->values[w].producer]) == 0,
        "quantized weight: counted at the MatMul, not at its DequantizeLinear");
  cx_graph_free(g);
}

/* ---- measuring ONNX files ---- */

/* The exported model with its one op_type "Relu" renamed (same length: the protobuf stays
 * valid): "Sinh" is an op ONNX Runtime has and we lack, "Rxlu" one nobody has. */
static void write_renamed(const char *from, const char *to, const char *op) {
  FILE *f = fopen(from, "rb");
  char buf[1 << 16];
  size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
  if (f) fclose(f);
  int found = 0;
  for (size_t i = 0; i + 4 <= n; i++)
    if (!memcmp(buf + i, "Relu", 4)) memcpy(buf + i, op, 4), found++;
  CHECK(found == 1, "%s: %d times \"Relu\"", from, found);
  f = fopen(to, "wb");
  CHECK(f && fwrite(buf, 1, n, f) == n && fclose(f) == 0, "cannot write %s", to);
}

static void export_model(cx_graph *g, const char *path) {
  CHECK(cx_onnx_export(g, path, NULL) == CX_OK, "export %s: %s", path, cx_last_error());
  cx_graph_free(g);
}

static void test_measure(const char *dir) {
  char path[4][600], dense[600];
  const char *files[4] = {"teacher.onnx", "sparse.onnx", "refused.onnx", "unknown_op.onnx"};
  for (int i = 0; i < 4; i++) snprintf(path[i], sizeof path[i], "%s/%s", dir, files[i]);
  snprintf(dense, sizeof dense, "%s/dense.onnx", dir);
  export_model(conv_model(8, false), path[0]);
  export_model(conv_model(256, true), path[1]); /* large enough for gzip's levels to differ */
  export_model(conv_model(4, false), dense);
  write_renamed(dense, path[2], "Rxlu");
  write_renamed(dense, path[3], "Sinh");
  unlink(dense);
  cx_report_model m[4] = {cx_report_model_empty("teacher"),
                          cx_report_model_empty("student (sparse)"),
                          cx_report_model_empty("student (nobody runs it)"),
                          cx_report_model_empty("student (not imported)")};
  cx_report_measurer ms = {.runs = 3, .threads = 1};
  const double top1[4] = {90, 88.5, NAN, 87.25};
  for (int i = 0; i < 4; i++) {
    CHECK(cx_report_measure_onnx(&ms, path[i], &m[i]) == CX_OK, "%s", cx_last_error());
    m[i].onnx_path = files[i], m[i].top1 = top1[i];
  }
  bool ort = !ms.ort_missing;
  if (!ort) printf("onnxruntime not installed: its cells are not checked\n");
  /* the sparse model: every number, half the effective MACs */
  CHECK(m[1].n_errors == 0 && m[1].macs == 293 * 256 && m[1].macs_effective == 293 * 128 &&
        m[1].params_nonzero == 23 * 128 && m[1].onnx_gzip_bytes > 0 &&
        m[1].onnx_gzip_bytes < m[1].onnx_bytes && isfinite(m[1].cpu_ms[1]) &&
        (!ort || isfinite(m[1].ort_ms[1])), "sparse: %d errors (%s), %lld effective MACs",
        m[1].n_errors, m[1].n_errors ? m[1].errors[0].message : "", (long long)m[1].macs_effective);
  /* an op we lack: its cost and our latency say why, the file and ONNX Runtime are measured */
  const cx_report_error *e = cx_report_model_error(&m[3], "macs");
  CHECK(e && !strcmp(e->reason, "not imported") && strstr(e->message, "Sinh") &&
        cx_report_model_error(&m[3], "cpu_ms_batch32") == e && m[3].macs < 0,
        "unknown op: %s", e ? e->message : "no error");
  CHECK(m[3].onnx_bytes > 0 && m[3].onnx_gzip_bytes > 0 && (!ort || isfinite(m[3].ort_ms[0])),
        "unknown op: file %lld bytes, ORT %g ms", (long long)m[3].onnx_bytes, m[3].ort_ms[0]);
  /* an op nobody has: ONNX Runtime's refusal is in its cells too */
  e = cx_report_model_error(&m[2], "ort_ms_batch1");
  CHECK(!ort || (e && !strcmp(e->reason, "refused") && strstr(e->message, "Rxlu") &&
                 cx_report_model_error(&m[2], "ort_ms_batch32") == e),
        "ORT refusal: %s", e ? e->message : "no error");
  CHECK(cx_report_measure_onnx(&ms, path[0], NULL) == CX_ERR_ARG, "no model accepted");

  /* the report of them all, checked against onnx + numpy + gzip by check_report.py */
  cx_report r = {.title = "measured", .n_models = 4, .models = m, .latency_runs = 3,
                 .latency_threads = 1, .ort_version = ort ? ms.ort_version : NULL,
                 .teacher = "teacher", .baseline = "student (sparse)"};
  r.pre = (cx_report_preprocess){.layout = "NCHW", .pixel_scale = 1.0 / 255, .channels = 2,
                                 .height = 4, .width = 4, .n_classes = 5};
  char summary[1024];
  CHECK(cx_report_summary(&r, summary, sizeof summary) && !strstr(summary, "nan") &&
        !strstr(summary, "MACs") && strstr(summary, "smaller file") &&
        strstr(summary, "-2.75 points top-1 vs teacher; ") &&
        strstr(summary, "-1.25 points top-1 vs student (sparse)"),
        "summary: %s", summary);
  printf("summary: %s\n", summary);
  CHECK(cx_report_write(&r, dir) == CX_OK, "report: %s", cx_last_error());
  char cmd[1200];
  snprintf(cmd, sizeof cmd, CX_PYTHON " %s %s --measured", CX_REPORT_CHECK, dir);
  CHECK(system(cmd) == 0, "%s failed", cmd);
}

/* ---- the summary line ---- */

static void test_summary(void) {
  cx_report_model m[3] = {cx_report_model_empty("teacher"), cx_report_model_empty("scratch"),
                          cx_report_model_empty("distilled")};
  m[0].macs = 46000000, m[0].onnx_bytes = 2600000, m[0].ort_ms[0] = 1.9, m[0].top1 = 94.08;
  m[1].macs = m[2].macs = 10000000, m[1].onnx_bytes = m[2].onnx_bytes = 1000000;
  m[1].ort_ms[0] = 0.95, m[2].ort_ms[0] = 1, m[1].top1 = 92.19, m[2].top1 = 92.32;
  cx_report r = {.n_models = 3, .models = m, .teacher = "teacher", .baseline = "scratch"};
  char s[512];
  CHECK(cx_report_summary(&r, s, sizeof s) &&
        !strcmp(s, "distilled: 4.6x fewer MACs, 2.6x smaller file, 1.9x faster in ONNX Runtime "
                   "(batch 1), -1.76 points top-1 vs teacher; +0.13 points top-1 vs scratch"),
        "summary: %s", s);
  /* effective MACs where both have them; our runtime's latency where ONNX Runtime's is missing;
   * a model that is more costly says so */
  m[0].macs_effective = 5000000, m[2].macs_effective = 10000000, m[2].ort_ms[0] = NAN;
  m[0].cpu_ms[0] = 3, m[2].cpu_ms[0] = 2, m[2].top1 = NAN;
  CHECK(cx_report_summary(&r, s, sizeof s) &&
        !strcmp(s, "distilled: 2.0x more MACs, 2.6x smaller file, 1.5x faster in compress "
                   "(batch 1) vs teacher"), "summary: %s", s);
  /* nothing known on both sides: no line, never "nan" */
  for (int i = 0; i < 3; i++) m[i] = cx_report_model_empty(m[i].name);
  CHECK(!cx_report_summary(&r, s, sizeof s) && s[0] == '\0', "summary of nothing: %s", s);
  r.n_models = 1;
  CHECK(!cx_report_summary(&r, s, sizeof s), "summary of the teacher alone: %s", s);
}

static void test_report(const char *dir) {
  static const char *const names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                        "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
  cx_report_model m[2] = {cx_report_model_empty("teacher"),
                          cx_report_model_empty("student <distilled> & \"quoted\"")};
  m[0].top1 = 94.5, m[0].top5 = 99.9, m[0].params = 272474, m[0].macs = 40000000;
  m[0].macs_effective = 20000000, m[0].onnx_bytes = 1100000;
  m[0].cpu_ms[0] = 1.25, m[0].cpu_ms[1] = 14.5;
  m[0].ort_ms[0] = 0.9, m[0].ort_ms[1] = 11, m[0].train_seconds = 1500;
  m[1].top1 = 92.1, m[1].train_seconds = 75;
  cx_report_model_fail(&m[1], "params params_nonzero macs macs_effective", "not imported",
                       "student.onnx: node 'q' (QLinearConv): no such op <here> & 'there'");
  double step[3] = {1, 2, 3}, loss[3] = {2.3, NAN, 0.7}, ep[3] = {0, 1, 2}, acc[3] = {80, 85, 88};
  cx_report_stage st[2] = {
      {.name = "teacher", .seconds = 1500, .images_per_s = 950,
       .loss = {"loss", 3, step, loss}, .accuracy = {"top1", 2, ep, acc}},
      {.name = "distill", .seconds = NAN, .images_per_s = NAN,
       .loss = {"loss", 2, step, acc}, .accuracy = {"top1", 3, ep, acc}},
  };
  cx_report r = {.title = "Fashion-MNIST <test>", .n_models = 2, .models = m, .n_stages = 2,
                 .stages = st, .latency_runs = 20, .ort_version = NULL,
                 .note = "A note with <markup> & \"quotes\".", .teacher = "teacher"};
  r.pre = (cx_report_preprocess){.layout = "NCHW", .pixel_scale = 1.0 / 255, .channels = 1,
                                 .mean = {0.286}, .std = {0.353}, .height = 28, .width = 28,
                                 .n_classes = 10, .class_names = names};
  cx_status s = cx_report_write(&r, dir);
  CHECK(s == CX_OK, "report: %s", cx_last_error());
  char cmd[1200];
  snprintf(cmd, sizeof cmd, CX_PYTHON " %s %s", CX_REPORT_CHECK, dir);
  CHECK(system(cmd) == 0, "%s failed", cmd);
  /* a folder that cannot be written: an error naming the file, nothing left behind */
  s = cx_report_write(&r, "/nonexistent/folder");
  CHECK(s == CX_ERR_IO && strstr(cx_last_error(), "report.md"), "bad folder: %s", cx_last_error());
}

/* Curves read back from metrics.jsonl: lines without the key, or with null, are skipped. */
static void test_metrics_series(const char *dir) {
  char path[600];
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  cx_metrics *m = NULL;
  CHECK(cx_metrics_open(path, false, &m) == CX_OK, "%s", cx_last_error());
  if (!m) return;
  const char *names[2] = {"loss", "lr"}, *val[1] = {"val_top1"};
  double v[3][2] = {{2.5, 0.1}, {NAN, 0.1}, {0.75, 0.05}};
  for (int i = 0; i < 3; i++) cx_metrics_write(m, 10 * (i + 1), i, 2, names, v[i]);
  double top1 = 81.5;
  cx_metrics_write(m, 30, 0, 1, val, &top1);
  /* a second run from step 20 (resumed) replaces the first run's points from there on */
  double again[2] = {0.5, 0.1};
  cx_metrics_write(m, 20, 1, 2, names, again);
  CHECK(cx_metrics_close(m) == CX_OK, "%s", cx_last_error());
  cx_report_series loss, acc;
  CHECK(cx_report_metrics_series(path, NULL, "step", "loss", &loss) == CX_OK, "%s", cx_last_error());
  CHECK(loss.n == 2 && loss.x[0] == 10 && loss.y[0] == 2.5 && loss.x[1] == 20 && loss.y[1] == 0.5,
        "loss series: %d points", loss.n);
  CHECK(cx_report_metrics_series(path, "\"val_top1\"", "epoch", "val_top1", &acc) == CX_OK &&
        acc.n == 1 && acc.y[0] == 81.5, "accuracy series: %d points", acc.n);
  cx_report_series_free(&loss);
  cx_report_series_free(&acc);
  CHECK(cx_report_metrics_series("/nonexistent.jsonl", NULL, "step", "loss", &loss) == CX_ERR_IO,
        "a missing metrics file was read");
}

/* Latency on our runtime and in ONNX Runtime (skipped when it is not installed). */
static void test_latency(const char *dir) {
  cx_graph *g = conv_model(3, false);
  double cpu = NAN, ms = NAN;
  CHECK(cx_report_cpu_latency(g, 4, 5, 0, &cpu) == CX_OK && cpu > 0 && isfinite(cpu),
        "cpu latency %g: %s", cpu, cx_last_error());
  char path[600], version[64] = "";
  snprintf(path, sizeof path, "%s/student's model.onnx", dir); /* a quote for the shell */
  CHECK(cx_onnx_export(g, path, NULL) == CX_OK, "export: %s", cx_last_error());
  cx_status s = cx_report_ort_latency(path, 4, 5, 1, &ms, version, sizeof version);
  if (s == CX_ERR_UNSUPPORTED) printf("onnxruntime latency skipped: %s\n", cx_last_error());
  else CHECK(s == CX_OK && ms > 0 && version[0], "ort latency %g: %s", ms, cx_last_error());
  printf("latency of a tiny CNN at batch 4: ours %.3f ms, onnxruntime %s %.3f ms\n", cpu,
         version, ms);
  s = cx_report_ort_latency("/nonexistent.onnx", 1, 1, 1, &ms, NULL, 0);
  printf("missing model: %s\n", cx_last_error());
  CHECK(s != CX_OK && strstr(cx_last_error(), "/nonexistent.onnx"), "a missing model was timed");
  cx_graph_free(g);
}

int main(void) {
  char dir[] = "/tmp/cx_report_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  test_cost();
  test_summary();
  test_report(dir);
  test_measure(dir);
  test_latency(dir);
  test_metrics_series(dir);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (!getenv("KEEP") && system(cmd) != 0) printf("could not remove %s\n", dir);
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
