/* The training-step ops (core/ops/optim.c) run through core/op_call.h on the CPU backend (or
 * the one CX_TEST_BACKEND names: test_ops_optim_cuda) against their references
 * (kernels/ref/optim.c) in double: a few runs in a row, so that state
 * written in place by one run feeds the next (and the step input counts up, for the bias
 * corrections), on a small tensor, a matrix and one large enough for the threaded path, on the
 * AVX-512 and the portable paths. Then the scans on inf and NaN, Mul and Add in place (how
 * train/ scales and accumulates), and op_call's own checks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op_call.h"
#include "../core/rng.h"
#include "../kernels/cpu/cpu.h"
#include "../kernels/cpu/eltwise_engine.h"
#include "../kernels/ref/ref.h"
#include "check.h"
#include "op_check.h"

enum { MAX_IN = 6, RUNS = 3 };

/* How an input starts: normal, positive (second moments), zero, or a fixed scalar. */
typedef enum fill { NORMAL, POSITIVE, ZERO, SCALAR } fill;

typedef struct arg {
  cx_dtype dtype;
  bool scalar; /* shape [] */
  fill fill;
  double value; /* SCALAR */
} arg;

typedef struct op_case {
  const char *label, *op;
  const cx_attr *attrs;
  int n_attrs, n_in, n_out;
  cx_dtype out_dtype;
  arg in[MAX_IN];
} op_case;

static const cx_backend *be; /* the backend under test (op_check.h: oc_backend) */

static cx_tensor backend_tensor(cx_dtype t, const cx_shape *s) {
  cx_tensor x = cx_tensor_view(t, s, NULL);
  x.data = be->alloc(cx_tensor_nbytes(&x));
  return x;
}

/* Host values of the tensor (any dtype), as double. */
static void download(const cx_tensor *t, double *v) {
  size_t n = (size_t)cx_tensor_numel(t);
  void *host = malloc(cx_tensor_nbytes(t));
  CHECK(cx_backend_download(be, host, t, NULL) == CX_OK, "download: %s", cx_last_error());
  for (size_t i = 0; i < n; i++) v[i] = cx_dtype_load(t->dtype, host, i);
  free(host);
}

static void upload(const cx_tensor *t, const double *v) {
  size_t n = (size_t)cx_tensor_numel(t);
  void *host = malloc(cx_tensor_nbytes(t));
  for (size_t i = 0; i < n; i++) cx_dtype_store(t->dtype, host, i, v[i]);
  CHECK(cx_backend_upload(be, t, host, NULL) == CX_OK, "upload: %s", cx_last_error());
  free(host);
}

static void start_values(const arg *a, int k, double *v, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double x = cx_rng_normal(cx_rng_key(9, (uint64_t)k, 0), (uint64_t)i);
    v[i] = a->fill == NORMAL     ? x
           : a->fill == POSITIVE ? 0.01 * x * x
           : a->fill == ZERO     ? 0
                                 : a->value;
    v[i] = (float)v[i]; /* the kernel and the reference start from the same numbers */
  }
}

/* max |kernel - ref| / max(max |ref|, 1e-2), per tensor, over every input and output after
 * each run. */
static double run_case(const op_case *c, const cx_shape *shape) {
  cx_tensor in[MAX_IN], out[1];
  cx_ref_tensor rin[MAX_IN], rout[1];
  double *got[MAX_IN + 1];
  for (int k = 0; k < c->n_in; k++) {
    cx_shape s = c->in[k].scalar ? (cx_shape){0} : *shape;
    in[k] = backend_tensor(c->in[k].dtype, &s);
    rin[k] = (cx_ref_tensor){s, calloc((size_t)cx_shape_numel(&s), sizeof(double)), c->in[k].dtype};
    got[k] = calloc((size_t)cx_shape_numel(&s), sizeof(double));
    start_values(&c->in[k], k, rin[k].data, cx_shape_numel(&s));
    upload(&in[k], rin[k].data);
  }
  if (c->n_out) {
    out[0] = backend_tensor(c->out_dtype, &(cx_shape){0});
    rout[0] = (cx_ref_tensor){{0}, calloc(1, sizeof(double)), c->out_dtype};
    got[c->n_in] = calloc(1, sizeof(double));
  }
  cx_op_call *call = NULL;
  cx_op_call_desc d = {.op = c->op, .name = c->label, .attrs = c->attrs, .n_attrs = c->n_attrs,
                       .in = in, .n_in = c->n_in, .out = out, .n_out = c->n_out};
  CHECK(cx_op_call_create(be, NULL, &d, &call) == CX_OK, "%s: create: %s", c->label,
        cx_last_error());
  /* the reference reads the same attributes */
  cx_node node = {.name = (char *)c->label, .n_attrs = c->n_attrs, .attrs = (cx_attr *)c->attrs};
  cx_ref_args ra = {.node = &node, .in = rin, .n_in = c->n_in, .out = rout, .n_out = c->n_out};
  double worst = 0;
  for (int run = 0; call && run < RUNS; run++) {
    for (int k = 0; k < c->n_in; k++) /* the step input: 1, 2, 3 */
      if (c->in[k].dtype == CX_S64) rin[k].data[0] = run + 1, upload(&in[k], rin[k].data);
    CHECK(cx_op_call_run(call, in, out) == CX_OK, "%s: run: %s", c->label, cx_last_error());
    CHECK(cx_ref_find(c->op)(&ra) == CX_OK, "%s: ref: %s", c->label, cx_last_error());
    for (int k = 0; k <= c->n_in; k++) {
      if (k == c->n_in && !c->n_out) break;
      const cx_tensor *t = k < c->n_in ? &in[k] : &out[0];
      const double *r = k < c->n_in ? rin[k].data : rout[0].data;
      download(t, got[k]);
      double diff = 0, scale = 1e-2;
      for (int64_t i = 0; i < cx_tensor_numel(t); i++) {
        diff = fmax(diff, fabs(got[k][i] - r[i]));
        scale = fmax(scale, fabs(r[i]));
      }
      worst = fmax(worst, diff / scale);
      /* each run is compared from the same start: the reference goes on from the kernel's */
      for (int64_t i = 0; k < c->n_in && i < cx_tensor_numel(t); i++) rin[k].data[i] = got[k][i];
    }
  }
  cx_op_call_free(call);
  for (int k = 0; k < c->n_in + c->n_out; k++) {
    be->free(k < c->n_in ? in[k].data : out[0].data);
    free(k < c->n_in ? rin[k].data : rout[0].data);
    free(got[k]);
  }
  return worst;
}

/* On the CPU both its paths (AVX-512 and portable); on another backend its one. */
static void check_case(const op_case *c, double tol) {
  static const cx_shape shapes[] = {{1, {37}}, {2, {6, 5}}, {2, {203, 201}}};
  bool on_cpu = be == cx_backend_cpu();
  for (int portable = 0; portable < (on_cpu ? 2 : 1); portable++) {
    cx_cpu_force_portable(portable);
    double worst = 0;
    for (int s = 0; s < 3; s++) worst = fmax(worst, run_case(c, &shapes[s]));
    const char *path = !on_cpu ? be->name : portable ? "portable" : "AVX-512";
    printf("%-40s %-8s %d runs: max error %.2e\n", c->label, path, RUNS, worst);
    CHECK(worst <= tol, "%s (%s): differs from the reference by %.3e", c->label, path, worst);
  }
  cx_cpu_force_portable(false);
}

#define F(n, v) {.name = n, .type = CX_ATTR_FLOAT, .f = v}
#define I(n, v) {.name = n, .type = CX_ATTR_INT, .i = v}
#define LR(v) {CX_F32, true, SCALAR, v}
#define STEP {CX_S64, true, SCALAR, 1}
#define T(fill) {CX_F32, false, fill, 0}

static void test_updates(void) {
  const cx_attr plain[] = {F("weight_decay", 0.01f)};
  const cx_attr momentum[] = {F("momentum", 0.9f), F("weight_decay", 0.01f)};
  const cx_attr nesterov[] = {F("momentum", 0.9f), I("nesterov", 1), F("weight_decay", 5e-3f)};
  const cx_attr adamw[] = {F("beta1", 0.9f), F("beta2", 0.999f), F("epsilon", 1e-8f),
                           F("weight_decay", 0.05f)};
  const cx_attr lamb[] = {F("beta1", 0.9f), F("beta2", 0.999f), F("epsilon", 1e-6f),
                          F("weight_decay", 0.01f)};
  const cx_attr lamb_adapt[] = {F("beta1", 0.8f), F("beta2", 0.99f), F("epsilon", 1e-6f),
                                I("always_adapt", 1)};
  const op_case cases[] = {
      {"SGDUpdate, wd 1e-2", "SGDUpdate", plain, 1, 3, 0, CX_F32, {LR(0.1), T(NORMAL), T(NORMAL)}},
      {"SGDUpdate, momentum 0.9", "SGDUpdate", momentum, 2, 4, 0, CX_F32,
       {LR(0.1), T(NORMAL), T(NORMAL), T(ZERO)}},
      {"SGDUpdate, nesterov 0.9", "SGDUpdate", nesterov, 3, 4, 0, CX_F32,
       {LR(0.05), T(NORMAL), T(NORMAL), T(NORMAL)}},
      {"AdamWUpdate, wd 0.05", "AdamWUpdate", adamw, 4, 6, 0, CX_F32,
       {LR(0.01), STEP, T(NORMAL), T(NORMAL), T(ZERO), T(ZERO)}},
      {"AdamWUpdate, from nonzero moments", "AdamWUpdate", adamw, 4, 6, 0, CX_F32,
       {LR(0.01), STEP, T(NORMAL), T(NORMAL), T(NORMAL), T(POSITIVE)}},
      {"LAMBUpdate, wd 1e-2", "LAMBUpdate", lamb, 4, 6, 0, CX_F32,
       {LR(0.01), STEP, T(NORMAL), T(NORMAL), T(ZERO), T(ZERO)}},
      {"LAMBUpdate, wd 0, always adapt", "LAMBUpdate", lamb_adapt, 4, 6, 0, CX_F32,
       {LR(0.02), STEP, T(NORMAL), T(NORMAL), T(NORMAL), T(POSITIVE)}},
      {"EMAUpdate, decay 0.9", "EMAUpdate", NULL, 0, 3, 0, CX_F32, {LR(0.9), T(NORMAL), T(NORMAL)}},
      {"SquaredNorm", "SquaredNorm", NULL, 0, 1, 1, CX_F64, {T(NORMAL)}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(&cases[i], 1e-6);
}

/* AllFinite on finite data, then with inf, -inf or NaN in the first or the last element of a
 * tensor large enough to be scanned by several threads. */
static void test_all_finite(void) {
  cx_shape s = {1, {70001}};
  cx_tensor x = backend_tensor(CX_F32, &s), flag = backend_tensor(CX_BOOL, &(cx_shape){0});
  float *host = calloc(70001, sizeof(float));
  for (int i = 0; i < 70001; i++) host[i] = cx_rng_normal(3, (uint64_t)i) * 1e30f;
  cx_op_call *call = NULL;
  cx_op_call_desc d = {.op = "AllFinite", .in = &x, .n_in = 1, .out = &flag, .n_out = 1};
  CHECK(cx_op_call_create(be, NULL, &d, &call) == CX_OK, "create: %s", cx_last_error());
  const float bad[] = {INFINITY, -INFINITY, NAN};
  for (int k = -1; call && k < 6; k++) {
    int at = k % 2 ? 70000 : 0;
    float keep = host[at];
    if (k >= 0) host[at] = bad[k / 2];
    bool got = true;
    cx_backend_upload(be, &x, host, NULL);
    CHECK(cx_op_call_run(call, &x, &flag) == CX_OK, "run: %s", cx_last_error());
    cx_backend_download(be, &got, &flag, NULL);
    CHECK(got == (k < 0), "AllFinite says %d with %s at element %d", got,
          k < 0 ? "nothing" : k / 2 == 0 ? "inf" : k / 2 == 1 ? "-inf" : "NaN", at);
    host[at] = keep;
  }
  printf("AllFinite: finds inf, -inf and NaN at either end of 70001 elements\n");
  cx_op_call_free(call);
  be->free(x.data);
  be->free(flag.data);
  free(host);
}

/* Scaling and accumulation as train/ does them: Mul by a scalar tensor and Add, each writing
 * over its first input, give g * f and a + g exactly. */
static void test_in_place_eltwise(void) {
  cx_shape s = {2, {300, 131}}, one = {0};
  cx_tensor g = backend_tensor(CX_F32, &s), a = backend_tensor(CX_F32, &s);
  cx_tensor f = backend_tensor(CX_F32, &one);
  int64_t n = cx_shape_numel(&s);
  float *hg = calloc((size_t)n, sizeof(float)), *ha = calloc((size_t)n, sizeof(float));
  float *back = calloc((size_t)n, sizeof(float)), factor = 0.3f;
  for (int64_t i = 0; i < n; i++) hg[i] = cx_rng_normal(5, (uint64_t)i), ha[i] = cx_rng_normal(6,
      (uint64_t)i);
  cx_backend_upload(be, &g, hg, NULL);
  cx_backend_upload(be, &a, ha, NULL);
  cx_backend_upload(be, &f, &factor, NULL);
  cx_op_call *mul = NULL, *add = NULL;
  cx_tensor mul_in[2] = {g, f}, add_in[2] = {a, g};
  cx_op_call_desc dm = {.op = "Mul", .in = mul_in, .n_in = 2, .out = &g, .n_out = 1};
  cx_op_call_desc da = {.op = "Add", .in = add_in, .n_in = 2, .out = &a, .n_out = 1};
  CHECK(cx_op_call_create(be, NULL, &dm, &mul) == CX_OK &&
            cx_op_call_create(be, NULL, &da, &add) == CX_OK, "create: %s", cx_last_error());
  CHECK(mul && cx_op_call_run(mul, mul_in, &g) == CX_OK, "Mul: %s", cx_last_error());
  CHECK(add && cx_op_call_run(add, add_in, &a) == CX_OK, "Add: %s", cx_last_error());
  int64_t wrong = 0;
  cx_backend_download(be, back, &g, NULL);
  for (int64_t i = 0; i < n; i++) wrong += back[i] != hg[i] * factor;
  cx_backend_download(be, back, &a, NULL);
  for (int64_t i = 0; i < n; i++) wrong += back[i] != ha[i] + hg[i] * factor;
  CHECK(wrong == 0, "%lld elements differ from g * f and a + g * f", (long long)wrong);
  cx_op_call_free(mul);
  cx_op_call_free(add);
  be->free(g.data);
  be->free(a.data);
  be->free(f.data);
  free(hg);
  free(ha);
  free(back);
}

static void expect_error(const char *label, cx_status got, cx_status want, const char *word) {
  CHECK(got == want && strstr(cx_last_error(), word), "%s: want %s naming '%s', got %s: %s",
        label, cx_status_name(want), word, cx_status_name(got), cx_last_error());
}

static void test_call_errors(void) {
  cx_shape s = {1, {5}}, t = {1, {4}};
  cx_tensor r = backend_tensor(CX_F32, &(cx_shape){0}), x = backend_tensor(CX_F32, &s);
  cx_tensor g = backend_tensor(CX_F32, &s), small = backend_tensor(CX_F32, &t);
  cx_tensor y = backend_tensor(CX_F32, &(cx_shape){0});
  cx_op_call *c = NULL;
  cx_tensor in[4] = {r, x, g, x};
  const cx_attr mom[] = {F("momentum", 0.9f)}, bad[] = {F("momentum_typo", 0.9f)};
  cx_op_call_desc d = {.op = "SGDUpdate", .name = "sgd(w)", .attrs = mom, .n_attrs = 1,
                       .in = in, .n_in = 3};
  expect_error("momentum without a buffer", cx_op_call_create(be, NULL, &d, &c), CX_ERR_ARG,
               "buffer");
  d.attrs = bad;
  expect_error("unknown attribute", cx_op_call_create(be, NULL, &d, &c), CX_ERR_ARG,
               "momentum_typo");
  d.op = "SGDUpdat";
  expect_error("unknown op", cx_op_call_create(be, NULL, &d, &c), CX_ERR_ARG, "SGDUpdat");
  in[2] = small;
  d = (cx_op_call_desc){.op = "SGDUpdate", .name = "sgd(w)", .in = in, .n_in = 3};
  expect_error("gradient of another shape", cx_op_call_create(be, NULL, &d, &c), CX_ERR_SHAPE,
               "sgd(w)");
  in[2] = g;
  CHECK(cx_op_call_create(be, NULL, &d, &c) == CX_OK, "create: %s", cx_last_error());
  in[2] = small;
  expect_error("run on another shape", cx_op_call_run(c, in, NULL), CX_ERR_SHAPE, "[4]");
  in[1].device.kind = be->device == CX_DEVICE_CPU ? CX_DEVICE_CUDA : CX_DEVICE_CPU;
  in[2] = g;
  expect_error("a tensor of another backend", cx_op_call_run(c, in, NULL), CX_ERR_ARG, "backend");
  cx_op_call_free(c);
  d = (cx_op_call_desc){.op = "SquaredNorm", .in = &x, .n_in = 1, .out = &y, .n_out = 1};
  expect_error("f32 norm output", cx_op_call_create(be, NULL, &d, &c), CX_ERR_SHAPE, "f64");
  be->free(r.data);
  be->free(x.data);
  be->free(g.data);
  be->free(small.data);
  be->free(y.data);
}

int main(void) {
  be = oc_backend();
  test_updates();
  test_all_finite();
  test_in_place_eltwise();
  test_call_errors();
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
