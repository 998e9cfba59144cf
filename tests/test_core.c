/* Core pieces without ops: dtype conversions, shapes, the RNG, the arena planner, graph checks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/graph.h"
#include "../core/plan.h"
#include "../core/rng.h"
#include "check.h"

static void test_half_floats(void) {
  /* every f16 bit pattern survives f16 -> f32 -> f16 (NaNs stay NaN) */
  for (uint32_t h = 0; h < 65536; h++) {
    float f = cx_f16_to_f32((uint16_t)h);
    uint16_t back = cx_f32_to_f16(f);
    if (isnan(f)) CHECK(isnan(cx_f16_to_f32(back)), "f16 NaN %04x", h);
    else CHECK(back == h, "f16 %04x -> %g -> %04x", h, f, back);
  }
  CHECK(cx_f16_to_f32(0x3c00) == 1.0f && cx_f16_to_f32(0xc000) == -2.0f, "f16 constants");
  CHECK(cx_f32_to_f16(1e6f) == 0x7c00, "f16 overflow gives inf");
  CHECK(cx_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00, "f16 ties to even (down)");
  CHECK(cx_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02, "f16 ties to even (up)");
  CHECK(cx_bf16_to_f32(cx_f32_to_bf16(3.0f)) == 3.0f, "bf16 exact");
  CHECK(cx_f32_to_bf16(1.0f + 1.0f / 256) == 0x3f80, "bf16 ties to even");
  CHECK(fabsf(cx_bf16_to_f32(cx_f32_to_bf16(3.14159f)) - 3.14159f) < 0.01f, "bf16 rounding");
}

static void test_shapes(void) {
  cx_shape a = {3, {2, 1, 4}}, b = {2, {3, 1}}, c;
  CHECK(cx_shape_broadcast(&a, &b, &c) == CX_OK && c.ndim == 3 && c.d[0] == 2 && c.d[1] == 3 &&
            c.d[2] == 4, "broadcast [2,1,4] [3,1]");
  cx_shape d = {1, {5}};
  CHECK(cx_shape_broadcast(&a, &d, &c) == CX_ERR_SHAPE, "broadcast [2,1,4] [5] must fail");
  CHECK(strstr(cx_last_error(), "[2,1,4]") && strstr(cx_last_error(), "[5]"),
        "message names shapes: %s", cx_last_error());
  cx_tensor t = cx_tensor_view(CX_F32, &a, NULL);
  CHECK(t.strides[0] == 16 && t.strides[2] == 4 && cx_tensor_is_contiguous(&t), "strides");
}

static void test_rng(void) {
  /* Philox4x32-10 known-answer test from the Random123 paper's test vectors. */
  cx_philox r = cx_philox4x32(0, 0, 0);
  CHECK(r.v[0] == 0x6627e8d5u && r.v[1] == 0xe169c58du && r.v[2] == 0xbc57ac4cu &&
            r.v[3] == 0x9b00dbd8u, "philox zero vector: %08x %08x %08x %08x", r.v[0], r.v[1],
        r.v[2], r.v[3]);
  double sum = 0, sq = 0;
  enum { N = 200000 };
  for (int i = 0; i < N; i++) {
    float u = cx_rng_uniform(42, (uint64_t)i);
    CHECK(u >= 0 && u < 1, "uniform range");
    sum += u;
    float z = cx_rng_normal(42, (uint64_t)i);
    sq += (double)z * z;
  }
  CHECK(fabs(sum / N - 0.5) < 0.005, "uniform mean %g", sum / N);
  CHECK(fabs(sq / N - 1.0) < 0.02, "normal variance %g", sq / N);
  CHECK(cx_rng_uniform(7, 123) == cx_rng_uniform(7, 123), "pure function of (key, index)");
  CHECK(cx_rng_key(1, 2, 3) != cx_rng_key(1, 2, 4), "keys differ");
}

static void test_planner(void) {
  enum { N = 300 };
  cx_plan_request r[N];
  size_t sum = 0;
  for (int i = 0; i < N; i++) {
    int first = (int)(cx_rng_uniform(9, (uint64_t)i) * 200);
    int len = (int)(cx_rng_uniform(10, (uint64_t)i) * 20);
    r[i] = (cx_plan_request){.value = i, .bytes = 64 * (1 + (size_t)(cx_rng_uniform(11, (uint64_t)i) * 1000)),
                             .first = first, .last = first + len};
    sum += r[i].bytes;
  }
  size_t arena = cx_plan_place(r, N, 64);
  CHECK(cx_plan_check(r, N) == 0, "live buffers overlap (buffer %d)", cx_plan_check(r, N));
  for (int i = 0; i < N; i++) CHECK(r[i].offset % 64 == 0 && r[i].offset + r[i].bytes <= arena, "bounds");
  CHECK(arena < sum / 3, "arena %zu should be well below the sum %zu", arena, sum);
  /* a deliberately overlapping placement is detected */
  r[1] = r[0];
  CHECK(cx_plan_check(r, N) != 0, "overlap not detected");
}

static void test_graph_errors(void) {
  cx_graph *g = cx_graph_new();
  cx_shape s = {1, {4}};
  cx_graph_input(g, "x", CX_F32, &s);
  CHECK(cx_graph_input(g, "x", CX_F32, &s) < 0, "duplicate name accepted");
  CHECK(cx_graph_status(g) == CX_ERR_ARG && strstr(cx_last_error(), "'x'"), "duplicate: %s",
        cx_last_error());
  cx_graph_free(g);
  g = cx_graph_new();
  CHECK(cx_graph_node(g, "NoSuchOp", "n1", NULL, 0, 1) < 0, "unknown op accepted");
  CHECK(strstr(cx_last_error(), "") && cx_graph_status(g) != CX_OK &&
            strstr(cx_last_error(), "NoSuchOp") && strstr(cx_last_error(), "n1"),
        "unknown op: %s", cx_last_error());
  cx_graph_free(g);
}

int main(void) {
  test_half_floats();
  test_shapes();
  test_rng();
  test_planner();
  test_graph_errors();
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
