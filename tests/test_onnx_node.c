/* ONNX's own node tests (Debian's libonnx-testdata): import each model, run it on the CPU backend
 * with the test's inputs and compare with its expected outputs (|ours - ref| <= 1e-4 + 1e-3|ref|).
 *
 *   test_onnx_node LIST          runs every "run" line of LIST (tests/onnx_node_tests.txt)
 *   test_onnx_node --discover    tries every test and prints a new list: "run NAME" or
 *                                "skip NAME  reason" — how the committed list is made. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/program.h"
#include "../import/onnx.h"
#include "../import/onnx_internal.h"
#include "../kernels/cpu/cpu.h"

#define NODE_DIR "/usr/share/libonnx-testdata/data/node"

static cx_status read_pb(const char *path, Onnx__TensorProto **t) {
  FILE *f = fopen(path, "rb");
  if (!f) return cx_fail(CX_ERR_IO, "%s: cannot open", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc((size_t)n + 1);
  size_t got = fread(buf, 1, (size_t)n, f);
  fclose(f);
  *t = onnx__tensor_proto__unpack(NULL, got, buf);
  free(buf);
  return *t ? CX_OK : cx_fail(CX_ERR_FORMAT, "%s: not a TensorProto", path);
}

static cx_status feed(cx_program *p, const cx_graph *g, const char *dir) {
  int k = 0;
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].kind != CX_VALUE_INPUT) continue;
    char path[4200];
    snprintf(path, sizeof path, "%s/test_data_set_0/input_%d.pb", dir, k++);
    Onnx__TensorProto *t;
    CX_TRY(read_pb(path, &t));
    cx_dtype dt;
    cx_shape s;
    void *data;
    cx_status st = cx_onnx_tensor_bytes(t, dir, path, &dt, &s, &data);
    onnx__tensor_proto__free_unpacked(t, NULL);
    CX_TRY(st);
    cx_tensor *dst = cx_program_tensor(p, g->values[v].name);
    if (dt != dst->dtype || !cx_shape_equal(&s, &dst->shape)) {
      free(data);
      return cx_fail(CX_ERR_SHAPE, "input %s does not match the model's input", path);
    }
    memcpy(dst->data, data, cx_tensor_nbytes(dst));
    free(data);
  }
  return CX_OK;
}

static cx_status compare(cx_program *p, const cx_graph *g, const char *dir, double *worst) {
  *worst = 0;
  for (int k = 0; k < g->n_outputs; k++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/test_data_set_0/output_%d.pb", dir, k);
    Onnx__TensorProto *t;
    CX_TRY(read_pb(path, &t));
    cx_dtype dt;
    cx_shape s;
    void *ref;
    cx_status st = cx_onnx_tensor_bytes(t, dir, path, &dt, &s, &ref);
    onnx__tensor_proto__free_unpacked(t, NULL);
    CX_TRY(st);
    const cx_tensor *ours = cx_program_value_tensor(p, g->outputs[k]);
    if (cx_shape_numel(&s) != cx_tensor_numel(ours)) {
      free(ref);
      char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
      return cx_fail(CX_ERR_SHAPE, "output %d: shape %s, expected %s", k,
                     cx_shape_str(&ours->shape, a), cx_shape_str(&s, b));
    }
    for (int64_t i = 0; i < cx_shape_numel(&s); i++) {
      double r = cx_dtype_load(dt, ref, (size_t)i), o = cx_dtype_load(ours->dtype, ours->data, (size_t)i);
      double e = fabs(o - r) / (1e-4 + 1e-3 * fabs(r));
      if (isnan(r) && isnan(o)) continue;
      if (!(e <= *worst)) *worst = e;
    }
    free(ref);
  }
  return *worst <= 1 ? CX_OK : cx_fail(CX_ERR_NUMERIC, "outputs differ (worst %.3g of tolerance)", *worst);
}

/* Imports, compiles, runs and compares one test. */
static cx_status run_one(const char *name) {
  char dir[4096], model[4200];
  snprintf(dir, sizeof dir, "%s/%s", NODE_DIR, name);
  snprintf(model, sizeof model, "%s/model.onnx", dir);
  cx_graph *g = NULL;
  CX_TRY(cx_onnx_import(model, &g, NULL));
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = 1, .backend = cx_backend_cpu()};
  cx_status s = cx_program_compile(g, &o, &p);
  double worst = 0;
  if (s == CX_OK) s = feed(p, g, dir);
  if (s == CX_OK) s = cx_program_forward(p);
  if (s == CX_OK) s = compare(p, g, dir, &worst);
  cx_program_free(p);
  cx_graph_free(g);
  return s;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int discover(void) {
  DIR *d = opendir(NODE_DIR);
  if (!d) return fprintf(stderr, "%s: missing (install libonnx-testdata)\n", NODE_DIR), 1;
  char **names = NULL;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    names = realloc(names, sizeof(char *) * (size_t)(n + 1));
    names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, cmp_str);
  for (int k = 0; k < n; k++) {
    cx_status s = run_one(names[k]);
    if (s == CX_OK) printf("run %s\n", names[k]);
    else {
      char reason[300];
      snprintf(reason, sizeof reason, "%s", cx_last_error());
      for (char *c = reason; *c; c++)
        if (*c == '\n') *c = ' ';
      const char *why = s == CX_ERR_UNSUPPORTED ? "unsupported"
                        : s == CX_ERR_NUMERIC   ? "WRONG OUTPUT"
                                                : "refused";
      printf("skip %s  %s: %s\n", names[k], why, reason);
    }
    fflush(stdout);
    free(names[k]);
  }
  free(names);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--discover")) return discover();
  const char *list = argc > 1 ? argv[1] : "onnx_node_tests.txt";
  FILE *f = fopen(list, "r");
  if (!f) return fprintf(stderr, "%s: cannot open the test list\n", list), 1;
  char line[2048];
  int run = 0, failed = 0, skipped = 0;
  while (fgets(line, sizeof line, f)) {
    char name[1024];
    if (sscanf(line, "skip %1023s", name) == 1) skipped++;
    if (sscanf(line, "run %1023s", name) != 1) continue;
    run++;
    if (run_one(name) != CX_OK) {
      failed++;
      printf("FAIL %s: %s\n", name, cx_last_error());
    }
  }
  fclose(f);
  printf("%d ONNX node tests run, %d failed, %d skipped (reasons in %s)\n", run, failed, skipped, list);
  return failed || run == 0;
}
