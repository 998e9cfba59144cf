/* .npy reading and writing: round trips of every dtype, files written by numpy, files numpy must
 * read back, and malformed files that must fail with a message naming the file, never crash.
 * numpy is required (scripts/install-deps.sh installs python3-numpy): without it the test fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/npy.h"
#include "check.h"

static char dir[64];

static const char *path_of(const char *name) {
  static char buf[4][256];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

static const cx_dtype all_types[] = {CX_F32, CX_F16, CX_S8, CX_U8, CX_S32, CX_S64, CX_BOOL, CX_F64};
static const char *const descrs[] = {"<f4", "<f2", "|i1", "|u1", "<i4", "<i8", "|b1", "<f8"};
enum { N_TYPES = sizeof all_types / sizeof *all_types };

/* The values both sides generate for element i: representable exactly in every dtype. */
static double value_of(cx_dtype t, int64_t i) {
  switch (t) {
  case CX_U8: return (double)(i * 3 % 256);
  case CX_BOOL: return i % 3 == 0;
  case CX_S8: case CX_S32: case CX_S64: return (double)(i - 7);
  default: return (double)i * 0.5 - 4.0;
  }
}

static int run_python(const char *script) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, CX_PYTHON " -c \"%s\" '%s'", script, dir);
  int rc = system(cmd);
  CHECK(rc == 0, "python3 with numpy failed (exit %d) - numpy is required: run "
        "scripts/install-deps.sh (python3-numpy)", rc);
  return rc;
}

/* ---- round trips ---- */

static void roundtrip(cx_dtype t, const cx_shape *shape) {
  int64_t n = cx_shape_numel(shape);
  size_t es = cx_dtype_size(t);
  unsigned char *buf = calloc((size_t)(n ? n : 1), es);
  for (int64_t i = 0; i < n; i++) cx_dtype_store(t, buf, (size_t)i, value_of(t, i));
  char name[64], sb[CX_SHAPE_STR];
  snprintf(name, sizeof name, "rt_%s_%d.npy", cx_dtype_name(t), shape->ndim);
  const char *p = path_of(name);
  cx_status s = cx_npy_write(p, t, shape, buf);
  CHECK(s == CX_OK, "write %s %s: %s", cx_dtype_name(t), cx_shape_str(shape, sb), cx_last_error());
  char tmp[300];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());
  CHECK(access(tmp, F_OK) != 0, "temporary file %s left behind", tmp);
  cx_dtype rt;
  cx_shape rs;
  void *data = NULL;
  s = cx_npy_read(p, &rt, &rs, &data);
  CHECK(s == CX_OK, "read %s: %s", p, cx_last_error());
  if (s == CX_OK) {
    CHECK(rt == t, "%s: dtype %s read back as %s", p, cx_dtype_name(t), cx_dtype_name(rt));
    CHECK(cx_shape_equal(&rs, shape), "%s: shape %s read back differently", p,
          cx_shape_str(shape, sb));
    CHECK(memcmp(data, buf, (size_t)n * es) == 0, "%s: data differs", p);
  }
  free(data);
  free(buf);
}

static void test_roundtrip(void) {
  const cx_shape shapes[] = {{0, {0}}, {1, {7}}, {3, {2, 3, 5}}, {3, {1, 0, 3}},
                             {8, {1, 2, 1, 3, 1, 1, 2, 1}}};
  for (int k = 0; k < N_TYPES; k++)
    for (size_t j = 0; j < sizeof shapes / sizeof *shapes; j++) roundtrip(all_types[k], &shapes[j]);
  /* overwriting an existing file replaces it whole */
  float a[3] = {1, 2, 3};
  cx_shape s3 = {1, {3}};
  CHECK(cx_npy_write(path_of("rt_f32_1.npy"), CX_F32, &s3, a) == CX_OK, "%s", cx_last_error());
  cx_dtype t;
  cx_shape sh;
  void *d = NULL;
  CHECK(cx_npy_read(path_of("rt_f32_1.npy"), &t, &sh, &d) == CX_OK && sh.d[0] == 3 &&
        memcmp(d, a, sizeof a) == 0, "overwrite: %s", cx_last_error());
  free(d);
  uint16_t h[2] = {0};
  cx_shape s2 = {1, {2}};
  CHECK(cx_npy_write(path_of("bf16.npy"), CX_BF16, &s2, h) == CX_ERR_UNSUPPORTED,
        "bf16 has no .npy dtype and must be refused");
  CHECK(access(path_of("bf16.npy"), F_OK) != 0, "refused write left a file");
  CHECK(cx_npy_write("/nonexistent-dir/x.npy", CX_F32, &s3, a) == CX_ERR_IO,
        "writing into a missing directory must fail with CX_ERR_IO");
  cx_shape bad = {1, {-2}};
  CHECK(cx_npy_write(path_of("neg.npy"), CX_F32, &bad, a) == CX_ERR_ARG, "negative dimension");
}

/* ---- files written by numpy ---- */

#define PY_VALUES                                                                                  \
  "import sys, numpy as np\n"                                                                      \
  "d = sys.argv[1]\n"                                                                              \
  "i = np.arange(30).reshape(2, 3, 5)\n"                                                           \
  "vals = {'<f4': i*0.5-4, '<f2': i*0.5-4, '<f8': i*0.5-4, '|i1': i-7, '<i4': i-7, '<i8': i-7,"    \
  " '|u1': i*3%256, '|b1': i%3==0}\n"

static const char py_write[] =
    PY_VALUES
    "[np.save(d+'/np_'+k[1:]+'.npy', np.asarray(v).astype(k)) for k, v in vals.items()]\n"
    "for ver in (2, 3):\n"
    "  with open(d+'/np_v%d.npy' % ver, 'wb') as f:\n"
    "    np.lib.format.write_array(f, (i*0.5-4).astype('<f4'), version=(ver, 0))\n"
    "np.save(d+'/np_scalar.npy', np.float32(2.5))\n"
    "np.save(d+'/np_empty.npy', np.zeros((0, 4), np.int64))\n"
    "np.save(d+'/np_fortran.npy', np.asfortranarray(np.ones((3, 4), np.float32)))\n"
    "np.save(d+'/np_big.npy', np.arange(4, dtype='>f4'))\n"
    "np.save(d+'/np_c8.npy', np.ones(3, np.complex64))\n"
    "np.save(d+'/np_obj.npy', np.array([1, 'a'], dtype=object), allow_pickle=True)\n"
    "np.save(d+'/np_u5.npy', np.array(['abc'], dtype='<U5'))\n"
    "np.save(d+'/np_rec.npy', np.zeros(2, dtype=[('a', '<f4'), ('b', '<i4')]))\n";

static void check_contents(const char *name, cx_dtype want_t, const cx_shape *want_s,
                           cx_dtype gen_t) {
  const char *p = path_of(name);
  cx_dtype t;
  cx_shape sh;
  void *data = NULL;
  char sa[CX_SHAPE_STR], sb[CX_SHAPE_STR];
  cx_status s = cx_npy_read(p, &t, &sh, &data);
  CHECK(s == CX_OK, "reading numpy's %s: %s", name, cx_last_error());
  if (s != CX_OK) return;
  CHECK(t == want_t, "%s: dtype %s, expected %s", name, cx_dtype_name(t), cx_dtype_name(want_t));
  CHECK(cx_shape_equal(&sh, want_s), "%s: shape %s, expected %s", name, cx_shape_str(&sh, sa),
        cx_shape_str(want_s, sb));
  if (t == want_t && cx_shape_equal(&sh, want_s))
    for (int64_t i = 0; i < cx_shape_numel(&sh); i++) {
      double got = cx_dtype_load(t, data, (size_t)i), want = value_of(gen_t, i);
      if (got != want) {
        CHECK(0, "%s: element %lld is %g, expected %g", name, (long long)i, got, want);
        break;
      }
    }
  free(data);
}

static void expect_reject(const char *name, cx_status want, const char *must_mention) {
  const char *p = path_of(name);
  cx_dtype t;
  cx_shape sh;
  void *data = (void *)&t;
  cx_status s = cx_npy_read(p, &t, &sh, &data);
  const char *msg = cx_last_error();
  CHECK(s == want, "%s: status '%s', expected '%s' (%s)", name, cx_status_name(s),
        cx_status_name(want), msg);
  CHECK(data == NULL, "%s: failed read left data", name);
  CHECK(strncmp(msg, p, strlen(p)) == 0, "%s: message does not start with the path: %s", name, msg);
  if (must_mention)
    CHECK(strstr(msg, must_mention) != NULL, "%s: message does not mention \"%s\": %s", name,
          must_mention, msg);
  if (s != CX_OK) printf("ok: %s rejected: %s\n", name, msg);
  if (s == CX_OK) free(data);
}

static void test_numpy_files(void) {
  if (run_python(py_write) != 0) return;
  cx_shape s235 = {3, {2, 3, 5}};
  for (int k = 0; k < N_TYPES; k++) {
    char name[32];
    snprintf(name, sizeof name, "np_%s.npy", descrs[k] + 1);
    check_contents(name, all_types[k], &s235, all_types[k]);
  }
  check_contents("np_v2.npy", CX_F32, &s235, CX_F32);
  check_contents("np_v3.npy", CX_F32, &s235, CX_F32);
  cx_shape s0 = {0, {0}}, e = {2, {0, 4}};
  check_contents("np_empty.npy", CX_S64, &e, CX_S64);
  cx_dtype t;
  cx_shape sh;
  void *data = NULL;
  CHECK(cx_npy_read(path_of("np_scalar.npy"), &t, &sh, &data) == CX_OK && t == CX_F32 &&
        cx_shape_equal(&sh, &s0) && *(float *)data == 2.5f, "np_scalar.npy: %s", cx_last_error());
  free(data);
  expect_reject("np_fortran.npy", CX_ERR_FORMAT, "Fortran");
  expect_reject("np_big.npy", CX_ERR_FORMAT, "'>f4'");
  expect_reject("np_c8.npy", CX_ERR_FORMAT, "'<c8'");
  expect_reject("np_obj.npy", CX_ERR_FORMAT, "'|O'");
  expect_reject("np_u5.npy", CX_ERR_FORMAT, "'<U5'");
  expect_reject("np_rec.npy", CX_ERR_FORMAT, "[('a', '<f4'), ('b', '<i4')]");
  expect_reject("np_c8.npy", CX_ERR_FORMAT, "'<f4' (f32)"); /* lists what is supported */
}

/* ---- files we write, read by numpy ---- */

static const char py_read[] =
    PY_VALUES
    "bad = [k for k, v in vals.items() if not (lambda a: a.dtype == np.dtype(k) and"
    " a.shape == (2, 3, 5) and np.array_equal(a, np.asarray(v).astype(k)))"
    "(np.load(d+'/ours_'+k[1:]+'.npy'))]\n"
    "a = np.load(d+'/ours_scalar.npy')\n"
    "bad += [] if a.shape == () and a.dtype == np.float64 and a == -1.25 else ['scalar']\n"
    "sys.exit('numpy reads these differently: %r' % bad if bad else 0)\n";

static void test_numpy_reads_ours(void) {
  cx_shape s235 = {3, {2, 3, 5}}, s0 = {0, {0}};
  for (int k = 0; k < N_TYPES; k++) {
    size_t es = cx_dtype_size(all_types[k]);
    unsigned char *buf = malloc(30 * es);
    for (int i = 0; i < 30; i++) cx_dtype_store(all_types[k], buf, (size_t)i, value_of(all_types[k], i));
    char name[32];
    snprintf(name, sizeof name, "ours_%s.npy", descrs[k] + 1);
    CHECK(cx_npy_write(path_of(name), all_types[k], &s235, buf) == CX_OK, "%s", cx_last_error());
    free(buf);
  }
  double scalar = -1.25;
  CHECK(cx_npy_write(path_of("ours_scalar.npy"), CX_F64, &s0, &scalar) == CX_OK, "%s",
        cx_last_error());
  run_python(py_read);
}

/* ---- malformed files, written here ---- */

static void write_bytes(const char *name, const void *p, size_t n) {
  FILE *f = fopen(path_of(name), "wb");
  if (!f || fwrite(p, 1, n, f) != n) CHECK(0, "cannot write test file %s", name);
  if (f) fclose(f);
}

/* A file with the given version and header text (padded as numpy does) and `payload` zero bytes. */
static void write_npy(const char *name, int major, const char *dict, size_t payload) {
  size_t dl = strlen(dict), pre = major == 1 ? 10 : 12;
  size_t total = (pre + dl + 1 + 63) / 64 * 64, len = total - pre;
  unsigned char *b = calloc(total + payload + 1, 1);
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (unsigned char)major;
  for (size_t i = 0; i < pre - 8; i++) b[8 + i] = (unsigned char)(len >> (8 * i));
  memcpy(b + pre, dict, dl);
  memset(b + pre + dl, ' ', len - dl - 1);
  b[total - 1] = '\n';
  write_bytes(name, b, total + payload);
  free(b);
}

#define DICT(descr, fortran, shape)                                                                \
  "{'descr': '" descr "', 'fortran_order': " fortran ", 'shape': " shape ", }"

static void test_malformed(void) {
  write_bytes("empty.npy", "", 0);
  expect_reject("empty.npy", CX_ERR_FORMAT, "not a .npy file");
  write_bytes("magic.npy", "\x93NUMPX\x01\x00\x10\x00{}", 12);
  expect_reject("magic.npy", CX_ERR_FORMAT, "not a .npy file");
  write_bytes("preamble.npy", "\x93NUMPY\x01\x00\x10", 9);
  expect_reject("preamble.npy", CX_ERR_FORMAT, "truncated");
  write_bytes("header_short.npy", "\x93NUMPY\x01\x00\x40\x00{'descr'", 18);
  expect_reject("header_short.npy", CX_ERR_FORMAT, "truncated");
  write_npy("v4.npy", 4, DICT("<f4", "False", "(2,)"), 8);
  expect_reject("v4.npy", CX_ERR_FORMAT, "version 4.0");
  write_npy("ok_v2.npy", 2, DICT("<f4", "False", "(2,)"), 8);
  {
    cx_dtype t;
    cx_shape sh;
    void *d = NULL;
    CHECK(cx_npy_read(path_of("ok_v2.npy"), &t, &sh, &d) == CX_OK && t == CX_F32 &&
          sh.ndim == 1 && sh.d[0] == 2 && ((float *)d)[1] == 0.0f, "ok_v2.npy: %s", cx_last_error());
    free(d);
  }
  /* issue 16: bytes after the data were ignored */
  write_npy("extra.npy", 1, DICT("<f4", "False", "(2,)"), 12);
  expect_reject("extra.npy", CX_ERR_FORMAT, "4 byte(s) after the data");
  {
    /* issue 16: a v2 header whose length field stops just after the '}' (the padding then
     * reads as data, and the data runs past the shape) */
    const char *dict = DICT("<f4", "False", "(2,)");
    size_t dl = strlen(dict), total = (12 + dl + 1 + 63) / 64 * 64;
    unsigned char *b = calloc(total + 8, 1);
    memcpy(b, "\x93NUMPY\x02\x00", 8);
    b[8] = (unsigned char)dl;
    memcpy(b + 12, dict, dl);
    memset(b + 12 + dl, ' ', total - 12 - dl - 1);
    b[total - 1] = '\n';
    write_bytes("v2_short_len.npy", b, total + 8);
    free(b);
    expect_reject("v2_short_len.npy", CX_ERR_FORMAT, "after the data");
  }
  write_npy("trunc.npy", 1, DICT("<f4", "False", "(2, 3)"), 23);
  expect_reject("trunc.npy", CX_ERR_FORMAT, "needs 24 bytes");
  write_npy("dims9.npy", 1, DICT("<f4", "False", "(1, 1, 1, 1, 1, 1, 1, 1, 1)"), 4);
  expect_reject("dims9.npy", CX_ERR_FORMAT, "more than 8 dimensions");
  write_npy("fortran.npy", 1, DICT("<f4", "True", "(2, 2)"), 16);
  expect_reject("fortran.npy", CX_ERR_FORMAT, "Fortran");
  write_npy("big.npy", 1, DICT(">i8", "False", "(2,)"), 16);
  expect_reject("big.npy", CX_ERR_FORMAT, "big-endian");
  write_npy("c16.npy", 1, DICT("<c16", "False", "(2,)"), 32);
  expect_reject("c16.npy", CX_ERR_FORMAT, "'<c16'");
  static const struct {
    const char *name, *dict, *mention;
  } bad[] = {
      {"no_brace.npy", "'descr': '<f4', 'fortran_order': False, 'shape': (2,)", "'{'"},
      {"no_close.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", "'}'"},
      {"missing_key.npy", "{'descr': '<f4', 'shape': (2,), }", "fortran_order"},
      {"unknown_key.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", "'x'"},
      {"dup_key.npy", "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
       "twice"},
      {"neg_dim.npy", DICT("<f4", "False", "(-2,)"), "dimension"},
      {"list_shape.npy", DICT("<f4", "False", "[2]"), "'('"},
      {"bad_bool.npy", DICT("<f4", "maybe", "(2,)"), "True or False"},
      {"unquoted.npy", "{descr: '<f4', 'fortran_order': False, 'shape': (2,)}", "quoted"},
      {"open_quote.npy", "{'descr: <f4, fortran_order: False, shape: (2,)}", "closing quote"},
      {"trailing.npy", DICT("<f4", "False", "(2,)") " junk", "padding"},
      {"no_colon.npy", "{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}", "':'"},
      {"bad_tuple.npy", DICT("<f4", "False", "(2; 3)"), "shape tuple"},
      {"huge_dim.npy", DICT("<f4", "False", "(99999999999999999999,)"), "reasonable"},
      {"huge_data.npy", DICT("<f4", "False", "(1000000000000,)"), "truncated"},
      {"huge_numel.npy", DICT("<f4", "False", "(1000000000000000, 1000000000000000)"), "large"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    write_npy(bad[i].name, 1, bad[i].dict, 8);
    expect_reject(bad[i].name, CX_ERR_FORMAT, bad[i].mention);
  }
  write_bytes("nul.npy", "\x93NUMPY\x01\x00\x08\x00{'d\0r'}\n", 18);
  expect_reject("nul.npy", CX_ERR_FORMAT, "NUL");
  write_bytes("huge_header.npy", "\x93NUMPY\x02\x00\xff\xff\xff\x7f{", 13);
  expect_reject("huge_header.npy", CX_ERR_FORMAT, "too long");
  expect_reject("does_not_exist.npy", CX_ERR_IO, NULL);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/cx_npy_XXXXXX");
  if (!mkdtemp(dir)) {
    printf("FAIL: cannot create a temporary directory\n");
    return 1;
  }
  test_roundtrip();
  test_numpy_files();
  test_numpy_reads_ours();
  test_malformed();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
  printf("%s: %d failure(s)\n", fails ? "FAILED" : "passed", fails);
  return fails != 0;
}
