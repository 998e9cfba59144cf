/* The TOML parser: documents using every feature of TOML 1.0 (values compared exactly, floats
 * bit for bit where it matters, unicode escapes as UTF-8 bytes), the typed getters and the key
 * schema check, and invalid documents, each checked for the exact file:line:column and the words
 * of its message. The official toml-test suite runs in test_toml_suite.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/toml.h"
#include "check.h"

/* ---- helpers ---- */

static cx_toml *parse(const char *text) {
  cx_toml *doc = NULL;
  cx_status s = cx_toml_parse_string(text, "t.toml", &doc);
  CHECK(s == CX_OK, "parse failed: %s\n--- document:\n%s", cx_last_error(), text);
  return s == CX_OK ? doc : NULL;
}

/* The message must start with where ("t.toml:3:5: ") and contain every one of the words. */
static void check_message(int line, const char *where, const char *words) {
  const char *msg = cx_last_error();
  if (strncmp(msg, where, strlen(where)) != 0) {
    fails++;
    printf("FAIL %s:%d: expected the message to start with \"%s\", got \"%s\"\n", __FILE__, line,
           where, msg);
  } else if (words && !strstr(msg, words)) {
    fails++;
    printf("FAIL %s:%d: expected \"%s\" in \"%s\"\n", __FILE__, line, words, msg);
  }
}

static void bad_doc(int line, const char *text, cx_status want, const char *where,
                    const char *words) {
  cx_toml *doc = NULL;
  cx_status s = cx_toml_parse_string(text, "t.toml", &doc);
  if (s == CX_OK) {
    fails++;
    printf("FAIL %s:%d: parsed, but should fail at %s\n", __FILE__, line, where);
    cx_toml_free(doc);
    return;
  }
  if (s != want) {
    fails++;
    printf("FAIL %s:%d: status %s, expected %s (%s)\n", __FILE__, line, cx_status_name(s),
           cx_status_name(want), cx_last_error());
  }
  CHECK(doc == NULL, "a failed parse must leave *out NULL");
  check_message(line, where, words);
}
#define BAD(text, where, words) bad_doc(__LINE__, text, CX_ERR_FORMAT, where, words)

static int64_t int_at(const cx_toml *t, const char *key) {
  int64_t v = -12345;
  cx_status s = cx_toml_int(t, key, -12345, &v);
  CHECK(s == CX_OK && cx_toml_get(t, key), "int '%s': %s", key, cx_last_error());
  return v;
}

static double float_at(const cx_toml *t, const char *key) {
  double v = -12345;
  cx_status s = cx_toml_float(t, key, -12345, &v);
  CHECK(s == CX_OK && cx_toml_get(t, key), "float '%s': %s", key, cx_last_error());
  return v;
}

/* A string's bytes, compared with their length (strings may hold NULs). */
static void check_string(int line, const cx_toml *t, const char *key, const char *want,
                         size_t len) {
  const cx_toml *n = cx_toml_get(t, key);
  if (!n || cx_toml_type_of(n) != CX_TOML_STRING || cx_toml_len(n) != len ||
      memcmp(cx_toml_bytes(n), want, len) != 0) {
    fails++;
    printf("FAIL %s:%d: string '%s' is \"%s\" (%zu bytes), expected \"%s\" (%zu bytes)\n",
           __FILE__, line, key, n ? cx_toml_bytes(n) : "(missing)", cx_toml_len(n), want, len);
  }
}
#define STR(t, key, want) check_string(__LINE__, t, key, want, sizeof(want) - 1)

static void check_pos(int line, cx_toml_pos p, int want_line, int want_col) {
  if (p.line != want_line || p.col != want_col || strcmp(p.file, "t.toml") != 0) {
    fails++;
    printf("FAIL %s:%d: position %s:%d:%d, expected t.toml:%d:%d\n", __FILE__, line, p.file,
           p.line, p.col, want_line, want_col);
  }
}

/* ---- valid documents ---- */

static void test_strings(void) {
  cx_toml *d = parse("basic = \"tab\\tnl\\nq\\\"bs\\\\b\\bf\\fr\\r\"\n"
                     "uni = \"\\u00e9\\u4E2D\\U0001F600\"\n"
                     "raw_utf8 = \"é中😀\"\n"
                     "nul = \"a\\u0000b\"\n"
                     "literal = 'C:\\path\\no \"escapes\"'\n"
                     "ml = \"\"\"\nfirst\n  second\"\"\"\n"
                     "ml_cont = \"\"\"\\\n    one \\\n  \n    two \\   \n  \"\"\"\n"
                     "ml_quotes = \"\"\"a\"\"b\"\"\"\"\"\n"
                     "ml_escapes = \"\"\"\\u0041\\t\\\"\"\"\"\n"
                     "ml_lit = '''\nraw \\n line\n'''\n"
                     "ml_lit_quotes = '''x'''''\n"
                     "ml_crlf = \"\"\"\r\na\r\nb\"\"\"\n"
                     "empty = \"\"\n"
                     "empty_lit = ''\n"
                     "empty_ml = \"\"\"\"\"\"\n"
                     "tab = \"a\tb\"\n");
  if (!d) return;
  STR(d, "basic", "tab\tnl\nq\"bs\\b\bf\fr\r");
  STR(d, "uni", "\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80");
  STR(d, "raw_utf8", "\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80");
  STR(d, "nul", "a\0b");
  STR(d, "literal", "C:\\path\\no \"escapes\"");
  STR(d, "ml", "first\n  second");
  STR(d, "ml_cont", "one two ");
  STR(d, "ml_quotes", "a\"\"b\"\"");
  STR(d, "ml_escapes", "A\t\"");
  STR(d, "ml_lit", "raw \\n line\n");
  STR(d, "ml_lit_quotes", "x''");
  STR(d, "ml_crlf", "a\nb");
  STR(d, "empty", "");
  STR(d, "empty_lit", "");
  STR(d, "empty_ml", "");
  STR(d, "tab", "a\tb");
  /* A string setting never holds a NUL: as_string refuses, naming the key. */
  const char *s;
  CHECK(cx_toml_string(d, "nul", NULL, &s) == CX_ERR_FORMAT, "a NUL must be refused");
  check_message(__LINE__, "t.toml:4:7: 'nul': ", "NUL");
  CHECK(cx_toml_string(d, "literal", NULL, &s) == CX_OK && !strcmp(s, "C:\\path\\no \"escapes\""),
        "literal via cx_toml_string");
  cx_toml_free(d);
}

static void test_integers(void) {
  cx_toml *d = parse("dec = 1_000_000\nneg = -17\npos = +42\nzero = 0\nnegz = -0\npz = +0\n"
                     "hex = 0xDEAD_beef\nhex0 = 0x0\noct = 0o755\nbin = 0b1101_0110\n"
                     "max = 9223372036854775807\nmin = -9223372036854775808\n"
                     "hexmax = 0x7FFFFFFFFFFFFFFF\n");
  if (!d) return;
  CHECK(int_at(d, "dec") == 1000000, "dec");
  CHECK(int_at(d, "neg") == -17, "neg");
  CHECK(int_at(d, "pos") == 42, "pos");
  CHECK(int_at(d, "zero") == 0 && int_at(d, "negz") == 0 && int_at(d, "pz") == 0, "zeros");
  CHECK(int_at(d, "hex") == 0xDEADBEEF, "hex");
  CHECK(int_at(d, "hex0") == 0, "hex0");
  CHECK(int_at(d, "oct") == 0755, "oct");
  CHECK(int_at(d, "bin") == 0xD6, "bin");
  CHECK(int_at(d, "max") == INT64_MAX, "max");
  CHECK(int_at(d, "min") == INT64_MIN, "min");
  CHECK(int_at(d, "hexmax") == INT64_MAX, "hexmax");
  CHECK(cx_toml_type_of(cx_toml_get(d, "dec")) == CX_TOML_INT, "type");
  cx_toml_free(d);
}

static void test_floats(void) {
  cx_toml *d = parse("f1 = 3.14\nf2 = -0.5e-3\nf3 = 1e10\nf4 = 6.626_070e-34\nf5 = 1E+2\n"
                     "f6 = 1_2.3_4\nf7 = 5e+0_2\nf8 = 0.1\nf9 = 1e-320\nf10 = 0e0\n"
                     "pinf = inf\nninf = -inf\nplusinf = +inf\nqnan = nan\nnnan = -nan\n"
                     "pnan = +nan\nnzero = -0.0\npzero = +0.0\nexp_lead0 = 1e007\n");
  if (!d) return;
  CHECK(float_at(d, "f1") == 3.14, "f1");
  CHECK(float_at(d, "f2") == -0.5e-3, "f2");
  CHECK(float_at(d, "f3") == 1e10, "f3");
  CHECK(float_at(d, "f4") == 6.626070e-34, "f4");
  CHECK(float_at(d, "f5") == 100.0, "f5");
  CHECK(float_at(d, "f6") == 12.34, "f6");
  CHECK(float_at(d, "f7") == 500.0, "f7");
  CHECK(float_at(d, "f8") == 0.1, "f8");
  CHECK(float_at(d, "f9") == 1e-320, "f9 (subnormal)");
  CHECK(float_at(d, "f10") == 0.0, "f10");
  CHECK(isinf(float_at(d, "pinf")) && float_at(d, "pinf") > 0, "inf");
  CHECK(isinf(float_at(d, "ninf")) && float_at(d, "ninf") < 0, "-inf");
  CHECK(isinf(float_at(d, "plusinf")) && float_at(d, "plusinf") > 0, "+inf");
  CHECK(isnan(float_at(d, "qnan")) && !signbit(float_at(d, "qnan")), "nan");
  CHECK(isnan(float_at(d, "nnan")) && signbit(float_at(d, "nnan")), "-nan");
  CHECK(isnan(float_at(d, "pnan")), "+nan");
  CHECK(float_at(d, "nzero") == 0.0 && signbit(float_at(d, "nzero")), "-0.0 keeps its sign");
  CHECK(float_at(d, "pzero") == 0.0 && !signbit(float_at(d, "pzero")), "+0.0");
  CHECK(float_at(d, "exp_lead0") == 1e7, "exponent with leading zeros");
  CHECK(cx_toml_type_of(cx_toml_get(d, "f1")) == CX_TOML_FLOAT, "type");
  cx_toml_free(d);
}

static void test_arrays(void) {
  cx_toml *d = parse("mixed = [1, \"two\", 3.0, [4, 5], {six = 6}, true]\n"
                     "multi = [  # comment after the bracket\n"
                     "  1,\n  # a comment line\n\n  2,  # trailing comma next\n]\n"
                     "empty = []\nempty_ws = [ \n ]\n"
                     "nested = [[1, 2], [\"a\"], [[]]]\n"
                     "tables = [{a = 1}, {a = 2, b = {c = 3}}]\n"
                     "bools = [true,false]\n");
  if (!d) return;
  const cx_toml *m = cx_toml_get(d, "mixed");
  CHECK(m && cx_toml_type_of(m) == CX_TOML_ARRAY && cx_toml_len(m) == 6, "mixed length");
  int64_t i = 0;
  double f = 0;
  bool b = false;
  const char *s = NULL;
  CHECK(cx_toml_as_int(cx_toml_at(m, 0), &i) == CX_OK && i == 1, "mixed[0]");
  CHECK(cx_toml_as_string(cx_toml_at(m, 1), &s) == CX_OK && !strcmp(s, "two"), "mixed[1]");
  CHECK(cx_toml_as_float(cx_toml_at(m, 2), &f) == CX_OK && f == 3.0, "mixed[2]");
  CHECK(cx_toml_len(cx_toml_at(m, 3)) == 2, "mixed[3]");
  CHECK(int_at(cx_toml_at(m, 4), "six") == 6, "mixed[4].six");
  CHECK(cx_toml_as_bool(cx_toml_at(m, 5), &b) == CX_OK && b, "mixed[5]");
  CHECK(cx_toml_at(m, 6) == NULL, "past the end");
  const cx_toml *mu = cx_toml_get(d, "multi");
  CHECK(cx_toml_len(mu) == 2 && cx_toml_as_int(cx_toml_at(mu, 1), &i) == CX_OK && i == 2,
        "multi-line array with comments and a trailing comma");
  CHECK(cx_toml_len(cx_toml_get(d, "empty")) == 0 && cx_toml_len(cx_toml_get(d, "empty_ws")) == 0,
        "empty arrays");
  const cx_toml *n = cx_toml_get(d, "nested");
  CHECK(cx_toml_len(n) == 3 && cx_toml_len(cx_toml_at(cx_toml_at(n, 2), 0)) == 0, "nested");
  const cx_toml *t = cx_toml_get(d, "tables");
  CHECK(int_at(cx_toml_at(t, 1), "b.c") == 3, "array of inline tables");
  const cx_toml *bs = cx_toml_get(d, "bools");
  CHECK(cx_toml_as_bool(cx_toml_at(bs, 1), &b) == CX_OK && !b, "bools[1]");
  cx_toml_free(d);
}

static const char *const PIPELINE =
    "# a pipeline file\n"
    "title = \"kd\"  # trailing comment\n"
    "\n"
    "[teacher]\n"
    "onnx = \"resnet20.onnx\"\n"
    "train.epochs = 20\n"
    "train.lr = 0.1\n"
    "\"quoted key\" = true\n"
    "\n"
    "[ student . arch ]\n"
    "name = 'mobilenetv2'\n"
    "width = 0.5\n"
    "\n"
    "[student]\n"
    "classes = 10\n"
    "\n"
    "[[stage]]\n"
    "name = \"a\"\n"
    "[stage.opts]\n"
    "x = 1\n"
    "[[stage]]\n"
    "name = \"b\"\n"
    "[[stage.hooks]]\n"
    "at = 3\n"
    "\n"
    "[data]\n"
    "mean = [0.5, 0.25]\n"
    "aug = { crop = { pad = 2 }, flip = true }\n"
    "site.\"example.com\".port = 80\n";

static void test_tables(void) {
  cx_toml *d = parse(PIPELINE);
  if (!d) return;
  const char *s = NULL;
  CHECK(cx_toml_string(d, "title", NULL, &s) == CX_OK && !strcmp(s, "kd"), "title");
  CHECK(int_at(d, "teacher.train.epochs") == 20, "dotted keys under a header");
  CHECK(float_at(d, "teacher.train.lr") == 0.1, "teacher.train.lr");
  const cx_toml *teacher = cx_toml_get(d, "teacher");
  CHECK(cx_toml_get(teacher, "quoted key") != NULL, "quoted key");
  CHECK(cx_toml_string(d, "student.arch.name", NULL, &s) == CX_OK && !strcmp(s, "mobilenetv2"),
        "header with spaces around the dots");
  CHECK(int_at(d, "student.classes") == 10, "implicit table defined later by its header");
  const cx_toml *stage = cx_toml_get(d, "stage");
  CHECK(stage && cx_toml_type_of(stage) == CX_TOML_ARRAY && cx_toml_len(stage) == 2, "[[stage]]");
  CHECK(int_at(cx_toml_at(stage, 0), "opts.x") == 1, "[stage.opts] goes into the first element");
  const cx_toml *hooks = cx_toml_get(cx_toml_at(stage, 1), "hooks");
  CHECK(cx_toml_len(hooks) == 1 && int_at(cx_toml_at(hooks, 0), "at") == 3, "nested [[...]]");
  CHECK(int_at(d, "data.aug.crop.pad") == 2, "nested inline tables");
  /* A dotted path cannot name a key holding a dot: such a key is reached by iteration. */
  CHECK(cx_toml_get(d, "data.site.example.com.port") == NULL, "a path splits at every dot");
  const cx_toml *site = cx_toml_get(d, "data.site");
  const cx_toml *ex = cx_toml_at(site, 0);
  CHECK(ex && !strcmp(cx_toml_key(ex), "example.com") && int_at(ex, "port") == 80,
        "quoted key with a dot, reached by iteration");

  /* Keys in file order. */
  const char *order[] = {"title", "teacher", "student", "stage", "data"};
  CHECK(cx_toml_len(d) == 5, "top-level keys: %zu", cx_toml_len(d));
  for (size_t i = 0; i < 5 && i < cx_toml_len(d); i++)
    CHECK(!strcmp(cx_toml_key(cx_toml_at(d, i)), order[i]), "key %zu is %s", i,
          cx_toml_key(cx_toml_at(d, i)));
  const char *torder[] = {"onnx", "train", "quoted key"};
  for (size_t i = 0; i < 3; i++)
    CHECK(!strcmp(cx_toml_key(cx_toml_at(teacher, i)), torder[i]), "teacher key %zu", i);

  /* Positions: of values, of keys, of tables defined by a header (the header's '['). */
  check_pos(__LINE__, cx_toml_where(cx_toml_get(d, "teacher.train.epochs")), 6, 16);
  check_pos(__LINE__, cx_toml_key_where(cx_toml_get(d, "teacher.train.epochs")), 6, 7);
  check_pos(__LINE__, cx_toml_where(teacher), 4, 1);
  check_pos(__LINE__, cx_toml_where(cx_toml_get(d, "student")), 14, 1);
  check_pos(__LINE__, cx_toml_where(cx_toml_at(stage, 1)), 21, 1);
  check_pos(__LINE__, cx_toml_where(cx_toml_get(d, "data.mean")), 27, 8);

  char path[128];
  CHECK(!strcmp(cx_toml_path(cx_toml_get(d, "teacher.train.lr"), path, sizeof path),
                "teacher.train.lr"), "path %s", path);
  CHECK(!strcmp(cx_toml_path(cx_toml_at(hooks, 0), path, sizeof path), "stage[1].hooks[0]"),
        "path %s", path);
  CHECK(!strcmp(cx_toml_path(cx_toml_get(teacher, "quoted key"), path, sizeof path),
                "teacher.\"quoted key\""), "path %s", path);
  CHECK(!strcmp(cx_toml_path(d, path, sizeof path), ""), "root path");
  cx_toml_free(d);
}

static void test_layout(void) {
  /* Empty documents, comments only, a byte order mark, CRLF line endings, no final newline. */
  const char *docs[] = {"", "\n\n", "# only a comment", "  \t\n# c\n   # d\n",
                        "\xEF\xBB\xBF" "a = 1",
                        "a = 1\r\n[b]\r\nc = 2\r\n", "a=1", "a = 1 # no newline"};
  for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
    cx_toml *d = parse(docs[i]);
    cx_toml_free(d);
  }
  cx_toml *d = parse("a = 1\r\n[b]\r\nc = 2\r\n");
  if (d) check_pos(__LINE__, cx_toml_where(cx_toml_get(d, "b.c")), 3, 5);
  cx_toml_free(d);
  /* Table rules that are allowed: a sub-table under dotted keys, a super-table defined after its
   * sub-table, dotted keys into a table named only on the way to a header. */
  d = parse("[fruit]\napple.color = 'red'\n[fruit.apple.texture]\nsmooth = true\n"
            "[x.y.z]\n[x]\nq = 1\n[a.b.c]\n[a]\nb.d = 1\n"
            "inl = { p.q = 1, p.r = 2 }\n");
  if (d) {
    CHECK(cx_toml_get(d, "fruit.apple.texture.smooth") != NULL, "sub-table of dotted keys");
    CHECK(int_at(d, "x.q") == 1, "super-table after sub-table");
    CHECK(int_at(d, "a.b.d") == 1, "dotted key into an implicit table");
    CHECK(int_at(d, "a.inl.p.r") == 2, "dotted keys inside an inline table");
  }
  cx_toml_free(d);
}

/* ---- getters and schema ---- */

static void test_getters(void) {
  cx_toml *d = parse("[train]\nepochs = \"ten\"\nlr = 1\nmomentum = 0.9\nnesterov = 1\n"
                     "name = 3.5\nbad.x = 1\nflag = true\n[model]\nscalar = 5\n");
  if (!d) return;
  const cx_toml *train = cx_toml_get(d, "train");
  int64_t i = 0;
  double f = 0;
  bool b = false;
  const char *s = NULL;
  /* Defaults for absent keys, and for a NULL table. */
  CHECK(cx_toml_int(train, "batch", 128, &i) == CX_OK && i == 128, "int default");
  CHECK(cx_toml_float(train, "wd", 5e-4, &f) == CX_OK && f == 5e-4, "float default");
  CHECK(cx_toml_bool(train, "amp", true, &b) == CX_OK && b, "bool default");
  CHECK(cx_toml_string(train, "opt", "sgd", &s) == CX_OK && !strcmp(s, "sgd"), "string default");
  CHECK(cx_toml_int(cx_toml_get(d, "nope"), "x", 7, &i) == CX_OK && i == 7, "NULL table");
  CHECK(cx_toml_get(NULL, "x") == NULL, "get on NULL");
  /* A float accepts an integer; the other types accept only themselves. */
  CHECK(cx_toml_float(train, "lr", 0, &f) == CX_OK && f == 1.0, "float from integer");
  CHECK(cx_toml_float(train, "momentum", 0, &f) == CX_OK && f == 0.9, "float");
  CHECK(cx_toml_bool(train, "flag", false, &b) == CX_OK && b, "bool");

  CHECK(cx_toml_int(train, "epochs", 1, &i) == CX_ERR_FORMAT, "string for int");
  check_message(__LINE__, "t.toml:2:10: 'train.epochs': ",
                "must be an integer, found string \"ten\"");
  CHECK(cx_toml_int(d, "train.momentum", 1, &i) == CX_ERR_FORMAT, "float for int");
  check_message(__LINE__, "t.toml:4:12: 'train.momentum': ", "must be an integer, found float 0.9");
  CHECK(cx_toml_bool(train, "nesterov", false, &b) == CX_ERR_FORMAT, "int for bool");
  check_message(__LINE__, "t.toml:5:12: 'train.nesterov': ", "must be a boolean, found integer 1");
  CHECK(cx_toml_string(train, "name", NULL, &s) == CX_ERR_FORMAT, "float for string");
  check_message(__LINE__, "t.toml:6:8: 'train.name': ", "must be a string, found float 3.5");
  CHECK(cx_toml_float(train, "flag", 0, &f) == CX_ERR_FORMAT, "bool for float");
  check_message(__LINE__, "t.toml:8:8: 'train.flag': ", "must be a float, found boolean true");
  CHECK(cx_toml_int(d, "train", 0, &i) == CX_ERR_FORMAT, "table for int");
  check_message(__LINE__, "t.toml:1:1: 'train': ", "must be an integer, found a table");
  /* A path through a value that is not a table. */
  CHECK(cx_toml_int(d, "model.scalar.deep", 0, &i) == CX_ERR_FORMAT, "path through a value");
  check_message(__LINE__, "t.toml:10:10: 'model.scalar': ", "must be a table, found integer 5");

  CHECK(cx_toml_as_int(NULL, &i) == CX_ERR_ARG, "as_int of NULL");

  /* Required keys. */
  const cx_toml *n = NULL;
  CHECK(cx_toml_need(train, "lr", CX_TOML_FLOAT, &n) == CX_OK && n, "need float (integer)");
  CHECK(cx_toml_need(train, "batch", CX_TOML_INT, &n) == CX_ERR_FORMAT, "need missing");
  check_message(__LINE__, "t.toml:1:1: ", "missing key 'batch' in [train] (an integer)");
  CHECK(cx_toml_need(d, "seed", CX_TOML_INT, &n) == CX_ERR_FORMAT, "need missing at top");
  check_message(__LINE__, "t.toml:1:1: ", "missing key 'seed' at the top level");
  CHECK(cx_toml_need(train, "flag", CX_TOML_STRING, &n) == CX_ERR_FORMAT, "need wrong type");
  check_message(__LINE__, "t.toml:8:8: 'train.flag': ", "must be a string, found boolean true");

  /* A caller's own check. */
  CHECK(cx_toml_fail(cx_toml_get(d, "train.lr"), CX_ERR_FORMAT, "must be below %d", 1) ==
            CX_ERR_FORMAT, "fail status");
  check_message(__LINE__, "t.toml:3:6: 'train.lr': must be below 1", NULL);
  cx_toml_free(d);
}

static void test_check_keys(void) {
  cx_toml *d = parse("seed = 1\n[teacher.train]\nepochs = 3\nlr = 0.1\n"
                     "[student]\nwidht = 0.5\n[data]\naugmentation = true\n[run]\nthreads = 2\n"
                     "zzz = 1\n[export]\n\"odd key\" = 1\n[[stage]]\nnmae = 'x'\n");
  if (!d) return;
  const char *const train_keys[] = {"epochs", "lr", "batch", NULL};
  const char *const student_keys[] = {"width", "arch", NULL};
  const char *const data_keys[] = {"augment", "train", "val", NULL};
  const char *const run_keys[] = {"threads", "seed", "out_dir", NULL};
  const char *const top_keys[] = {"seed", "teacher", "student", "data", "run", "export", "stage",
                                  NULL};
  const char *const none[] = {NULL};
  const char *const stage_keys[] = {"name", NULL};
  CHECK(cx_toml_check_keys(d, top_keys) == CX_OK, "top-level keys: %s", cx_last_error());
  CHECK(cx_toml_check_keys(cx_toml_get(d, "teacher.train"), train_keys) == CX_OK, "train keys");
  CHECK(cx_toml_check_keys(cx_toml_get(d, "absent"), train_keys) == CX_OK, "NULL table");

  CHECK(cx_toml_check_keys(cx_toml_get(d, "student"), student_keys) == CX_ERR_FORMAT, "swap");
  check_message(__LINE__, "t.toml:6:1: ",
                "unknown key 'widht' in [student]; did you mean 'width'?");
  CHECK(cx_toml_check_keys(cx_toml_get(d, "data"), data_keys) == CX_ERR_FORMAT, "prefix");
  check_message(__LINE__, "t.toml:8:1: ",
                "unknown key 'augmentation' in [data]; did you mean 'augment'?");
  CHECK(cx_toml_check_keys(cx_toml_get(d, "run"), run_keys) == CX_ERR_FORMAT, "no close key");
  check_message(__LINE__, "t.toml:11:1: ",
                "unknown key 'zzz' in [run]; valid keys: threads, seed, out_dir");
  CHECK(cx_toml_check_keys(cx_toml_get(d, "export"), none) == CX_ERR_FORMAT, "no keys allowed");
  check_message(__LINE__, "t.toml:13:1: ",
                "unknown key '\"odd key\"' in [export]; this table takes no keys");
  CHECK(cx_toml_check_keys(cx_toml_at(cx_toml_get(d, "stage"), 0), stage_keys) == CX_ERR_FORMAT,
        "array element");
  check_message(__LINE__, "t.toml:15:1: ",
                "unknown key 'nmae' in stage[0]; did you mean 'name'?");
  const char *const few_top[] = {"sed", "teacher", NULL};
  CHECK(cx_toml_check_keys(d, few_top) == CX_ERR_FORMAT, "top level");
  check_message(__LINE__, "t.toml:1:1: ",
                "unknown key 'seed' at the top level; did you mean 'sed'?");
  /* Two edits at most: 'epchs' -> 'epochs' (one), 'epoc' (two), 'xyzchs' (too far). */
  cx_toml *e = parse("epchs = 1\n");
  CHECK(e && cx_toml_check_keys(e, train_keys) == CX_ERR_FORMAT, "one edit");
  check_message(__LINE__, "t.toml:1:1: ", "did you mean 'epochs'?");
  cx_toml_free(e);
  e = parse("  epoc = 1\n");
  CHECK(e && cx_toml_check_keys(e, train_keys) == CX_ERR_FORMAT, "two edits");
  check_message(__LINE__, "t.toml:1:3: ",
                "unknown key 'epoc' at the top level; did you mean 'epochs'?");
  cx_toml_free(e);
  e = parse("xyzchs = 1\n");
  CHECK(e && cx_toml_check_keys(e, train_keys) == CX_ERR_FORMAT, "far");
  check_message(__LINE__, "t.toml:1:1: ", "valid keys: epochs, lr, batch");
  cx_toml_free(e);
  /* A short key is not "close" to everything two edits away. */
  e = parse("x = 1\n");
  CHECK(e && cx_toml_check_keys(e, train_keys) == CX_ERR_FORMAT, "short");
  check_message(__LINE__, "t.toml:1:1: ", "valid keys:");
  cx_toml_free(e);
  cx_toml_free(d);
}

static void test_file(void) {
  char path[] = "/tmp/cx_toml_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  if (fd < 0) return;
  const char *text = "[a]\nb = 2\nc = @\n";
  CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write");
  close(fd);
  cx_toml *d = NULL;
  CHECK(cx_toml_parse_file(path, &d) == CX_ERR_FORMAT && !d, "bad file");
  char where[64];
  snprintf(where, sizeof where, "%s:3:5: ", path);
  check_message(__LINE__, where, "expected a value");
  FILE *f = fopen(path, "w");
  fputs("[a]\nb = 2\n", f);
  fclose(f);
  CHECK(cx_toml_parse_file(path, &d) == CX_OK && int_at(d, "a.b") == 2, "good file");
  if (d) CHECK(!strcmp(cx_toml_where(cx_toml_get(d, "a.b")).file, path), "file name");
  cx_toml_free(d);
  unlink(path);
  CHECK(cx_toml_parse_file(path, &d) == CX_ERR_IO && !d, "missing file");
  check_message(__LINE__, path, "cannot open");
}

/* ---- invalid documents ---- */

static void test_bad_strings(void) {
  BAD("a = \"abc\n", "t.toml:1:5: ",
      "unterminated string: no closing \" before the end of the line");
  BAD("a = \"abc", "t.toml:1:5: ", "before the end of the file");
  BAD("a = 'abc\n", "t.toml:1:5: ", "no closing '");
  BAD("x = 1\na = \"\"\"abc\n\n", "t.toml:2:5: ", "no closing \"\"\" before the end of the file");
  BAD("a = '''abc''", "t.toml:1:5: ", "no closing '''");
  BAD("a = \"x\\qy\"", "t.toml:1:7: ", "invalid escape");
  BAD("a = \"x\\ y\"", "t.toml:1:7: ", "invalid escape");
  BAD("a = \"x\\e\"", "t.toml:1:7: ", "invalid escape"); /* \e is TOML 1.1 */
  BAD("a = \"x\\xAB\"", "t.toml:1:7: ", "invalid escape");
  BAD("a = \"\\u12G4\"", "t.toml:1:10: ", "expected 4 hex digits after \\u, found 'G'");
  BAD("a = \"\\U0001F60\"", "t.toml:1:15: ", "expected 8 hex digits after \\U");
  BAD("a = \"\\uD800\"", "t.toml:1:6: ", "\\uD800 is not a Unicode scalar value");
  BAD("a = \"\\U00110000\"", "t.toml:1:6: ", "not a Unicode scalar value");
  BAD("a = \"\"\"\nok\n\\q\"\"\"", "t.toml:3:1: ", "invalid escape");
  BAD("a = \"x\x01\"", "t.toml:1:7: ", "control character U+0001 is not allowed in a string");
  BAD("a = 'x\x7f'", "t.toml:1:7: ", "control character U+007F");
  BAD("a = \"\xff\"", "t.toml:1:6: ", "invalid UTF-8 (byte 0xFF)");
  BAD("a = \"\xed\xa0\x80\"", "t.toml:1:6: ", "invalid UTF-8"); /* an encoded surrogate */
  BAD("a = \"\xc0\xaf\"", "t.toml:1:6: ", "invalid UTF-8");     /* an overlong form */
  BAD("# \x02\n", "t.toml:1:3: ", "control character U+0002 is not allowed in a comment");
  BAD("a = 1\rb = 2", "t.toml:1:6: ", "carriage return");
  BAD("\"\"\"k\"\"\" = 1", "t.toml:1:1: ", "a key cannot be a multi-line string");
  /* Columns count characters, not bytes. */
  BAD("a = \"ééé\" x", "t.toml:1:11: ", "found 'x'");
}

static void test_bad_numbers(void) {
  BAD("a = 01", "t.toml:1:5: ", "invalid number '01': leading zeros are not allowed");
  BAD("a = -01", "t.toml:1:6: ", "leading zeros");
  BAD("a = 00.5", "t.toml:1:5: ", "leading zeros");
  BAD("a = 1__2", "t.toml:1:7: ",
      "invalid number '1__2': an underscore must sit between two digits");
  BAD("a = 1_", "t.toml:1:7: ", "an underscore must sit between two digits");
  BAD("a = _1", "t.toml:1:5: ", "a string needs quotes");
  BAD("a = 0x", "t.toml:1:7: ", "invalid number '0x': expected a hex digit, found end of file");
  BAD("a = 0x\n", "t.toml:1:7: ", "found end of line");
  BAD("a = 0xG1", "t.toml:1:7: ", "expected a hex digit, found 'G'");
  BAD("a = 0o8", "t.toml:1:7: ", "expected an octal digit");
  BAD("a = 0b102", "t.toml:1:9: ", "expected the end of the number, found '2'");
  BAD("a = 0X1F", "t.toml:1:6: ", "expected the end of the number, found 'X'");
  BAD("a = +0x1", "t.toml:1:5: ", "no sign is allowed before 0x");
  BAD("a = 1.", "t.toml:1:7: ", "expected a digit, found end of file");
  BAD("a = .5", "t.toml:1:5: ", "expected a value");
  BAD("a = 1.e5", "t.toml:1:7: ", "expected a digit, found 'e'");
  BAD("a = 1e", "t.toml:1:7: ", "expected a digit");
  BAD("a = 1.2.3", "t.toml:1:8: ", "expected the end of the number, found '.'");
  BAD("a = 1_000_", "t.toml:1:11: ", "underscore");
  BAD("a = --1", "t.toml:1:6: ", "expected a digit, found '-'");
  BAD("a = 9223372036854775808", "t.toml:1:5: ", "does not fit in 64 bits");
  BAD("a = -9223372036854775809", "t.toml:1:5: ", "does not fit in 64 bits");
  BAD("a = 0xFFFFFFFFFFFFFFFF", "t.toml:1:5: ", "does not fit in 64 bits");
  BAD("a = 1e400", "t.toml:1:5: ", "too large");
  BAD("a = infinity", "t.toml:1:5: ", "a string needs quotes");
  BAD("a = Inf", "t.toml:1:5: ", "a string needs quotes");
  BAD("a = nan1", "t.toml:1:5: ", "a string needs quotes");
  BAD("a = [1 2]", "t.toml:1:8: ", "expected ',' or ']' in the array, found '2'");
}

static void test_bad_dates(void) {
  bad_doc(__LINE__, "d = 1979-05-27", CX_ERR_UNSUPPORTED, "t.toml:1:5: ",
          "dates are not supported");
  bad_doc(__LINE__, "d = 1979-05-27T07:32:00Z", CX_ERR_UNSUPPORTED, "t.toml:1:5: ",
          "dates are not supported");
  bad_doc(__LINE__, "d = 1979-05-27 07:32:00", CX_ERR_UNSUPPORTED, "t.toml:1:5: ",
          "dates are not supported");
  bad_doc(__LINE__, "t = 07:32:00", CX_ERR_UNSUPPORTED, "t.toml:1:5: ", "dates are not supported");
  bad_doc(__LINE__, "x = 1\nd = [1, 1979-05-27]", CX_ERR_UNSUPPORTED, "t.toml:2:9: ",
          "dates are not supported");
  bad_doc(__LINE__, "d = {when = 2024-01-01}", CX_ERR_UNSUPPORTED, "t.toml:1:13: ",
          "dates are not supported");
}

static void test_bad_structure(void) {
  BAD("a = 1\na = 2", "t.toml:2:1: ", "duplicate key: 'a' is already defined at line 1, column 1");
  BAD("a.b = 1\na.b = 2", "t.toml:2:3: ", "duplicate key: 'a.b'");
  BAD("[t]\nx = 1\n\"x\" = 2", "t.toml:3:1: ", "duplicate key: 't.x'");
  BAD("a = {b = 1, b = 2}", "t.toml:1:13: ", "duplicate key: 'b'");
  BAD("[a]\nx = 1\n[a]", "t.toml:3:1: ",
      "table defined twice: 'a' is already defined at line 1, column 1");
  BAD("[a.b]\n[a]\n[a.b]", "t.toml:3:1: ", "table defined twice: 'a.b'");
  BAD("[fruit]\napple.color = 1\n[fruit.apple]", "t.toml:3:1: ",
      "table defined twice: 'fruit.apple' is already defined at line 2, column 1 (by dotted keys)");
  BAD("[a.b.c]\nz = 9\n[a]\nb.c.t = 1", "t.toml:4:3: ",
      "'a.b.c' is already defined at line 1, column 1 (by a [table] header): dotted keys "
      "cannot add");
  BAD("[a]\nb.c = 1\n[x]\n[a.b]", "t.toml:4:1: ", "(by dotted keys)");
  BAD("a = 1\n[a]", "t.toml:2:1: ", "'a' is already defined at line 1, column 1 (as a value)");
  BAD("a = 1\na.b = 2", "t.toml:2:1: ", "'a' is already defined");
  BAD("a = [1]\n[[a]]", "t.toml:2:1: ", "[[...]] can only add to an array of tables");
  BAD("[a]\n[[a]]", "t.toml:2:1: ", "[[...]] can only add to an array of tables");
  BAD("[[a]]\n[a]", "t.toml:2:1: ", "use [[...]] to add a table to it");
  BAD("a = {b = 1}\n[a]", "t.toml:2:1: ", "(as an inline table)");
  BAD("a = {b = 1}\n[a.c]", "t.toml:2:2: ", "(as an inline table): a header cannot add to it");
  BAD("a = {b = 1}\na.c = 2", "t.toml:2:1: ", "(as an inline table): dotted keys cannot add");
  BAD("a = {b = {c = 1}, b.d = 2}", "t.toml:1:19: ", "'b' is already defined");
  BAD("a = [{b = 1}]\n[a.c]", "t.toml:2:2: ", "(as an array): a header cannot add to it");
  BAD("a = {b = 1,\n c = 2}", "t.toml:1:12: ", "an inline table must fit on one line");
  BAD("a = {b = 1,}", "t.toml:1:12: ", "may not end with a comma");
  BAD("a = {b = 1", "t.toml:1:11: ", "expected ',' or '}' in the inline table");
  BAD("a = [1, 2", "t.toml:1:10: ", "expected ',' or ']' in the array, found end of file");
  BAD("a = [1,,2]", "t.toml:1:8: ", "expected a value");
  BAD("a 1", "t.toml:1:3: ", "expected '=' after the key 'a', found '1'");
  BAD("a =", "t.toml:1:4: ", "expected a value (string, number, boolean, array or inline table), "
                              "found end of file");
  BAD("model = resnet20", "t.toml:1:9: ", "found 'resnet20' (a string needs quotes)");
  BAD("a = truee", "t.toml:1:5: ", "found 'truee'");
  BAD("a = 1 2", "t.toml:1:7: ",
      "expected a newline or a comment after a key = value pair, found '2'");
  BAD("[a] b = 1", "t.toml:1:5: ", "after a table header, found 'b'");
  BAD("[a", "t.toml:1:3: ", "expected ']' to close the table header, found end of file");
  BAD("[[a]", "t.toml:1:5: ", "expected ']]' to close the array of tables header");
  BAD("[[a] ]", "t.toml:1:5: ", "expected ']]'");
  BAD("[]", "t.toml:1:2: ", "expected a key, found ']'");
  BAD("[a.]", "t.toml:1:4: ", "expected a key, found ']'");
  BAD("= 1", "t.toml:1:1: ", "expected a key, found '='");
  BAD("a.b. = 1", "t.toml:1:6: ", "expected a key, found '='");
  BAD("x = 1\r\ny = @\r\n", "t.toml:2:5: ", "found '@'");
  BAD("a = \"\"\"\nline\n\"\"\" x", "t.toml:3:5: ", "found 'x'");
  /* Deep nesting is refused, not a stack overflow. */
  char deep[300] = "a = ";
  memset(deep + 4, '[', 200);
  deep[204] = '\0';
  BAD(deep, "t.toml:1:133: ", "nested more than 128 deep");
}

int main(void) {
  test_strings();
  test_integers();
  test_floats();
  test_arrays();
  test_tables();
  test_layout();
  test_getters();
  test_check_keys();
  test_file();
  test_bad_strings();
  test_bad_numbers();
  test_bad_dates();
  test_bad_structure();
  printf("test_toml: %d failures\n", fails);
  return fails != 0;
}
