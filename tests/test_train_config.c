/* `compress train` configs (train/train_config.h): what each key sets, paths relative to the
 * config, every error with its exact file:line:col, the config hash (blind to comments, key
 * order, [run] and epochs; sensitive to anything a step computes with); threads = "auto"
 * (train/cpu_free.h) on /proc/stat texts and beside a busy child; the gradient and loss
 * diagnostics (train/diagnose.h) on synthetic norms; and the preprocessing metadata helpers. */
#define _GNU_SOURCE
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../kernels/cpu/cpu.h"
#include "../train/cpu_free.h"
#include "../train/diagnose.h"
#include "../train/train_config.h"
#include "check.h"

static char dir[64];

static const char *base =
    "[model]\n"                                   /* 1 */
    "spec = \"resnet20:classes=10\"\n"            /* 2 */
    "[data]\n"                                    /* 3 */
    "train = \"d/train.h5\"\n"                    /* 4 */
    "val = \"/abs/val.h5\"\n"                     /* 5 */
    "batch = 64\n"                                /* 6 */
    "crop = \"pad\"\n"                            /* 7 */
    "mean = [0.5, 0.4, 0.3]\n"                    /* 8 */
    "std = [0.2, 0.2, 0.25]\n"                    /* 9 */
    "[train]\n"                                   /* 10 */
    "epochs = 3\n"                                /* 11 */
    "optimizer = \"sgd\"\n"                       /* 12 */
    "lr = 0.05\n"                                 /* 13 */
    "nesterov = true\n"                           /* 14 */
    "schedule = \"multistep\"\n"                  /* 15 */
    "milestones = [100, 200]\n"                   /* 16 */
    "accum_steps = 2\n"                           /* 17 */
    "[run]\n"                                     /* 18 */
    "out_dir = \"out\"\n"                         /* 19 */
    "threads = 2\n";                              /* 20 */

static const char *write_config(const char *name, const char *text) {
  static char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (f) fputs(text, f), fclose(f);
  return path;
}

/* base with line `line` (from 1) replaced by `with` ("" removes it; a line may hold "\n"). */
static char *edit(int line, const char *with) {
  static char out[4096];
  const char *p = base;
  out[0] = 0;
  for (int l = 1; *p; l++) {
    const char *nl = strchr(p, '\n');
    size_t len = (size_t)(nl - p) + 1;
    if (l == line) {
      strcat(out, with);
      if (*with) strcat(out, "\n");
    } else {
      strncat(out, p, len);
    }
    p += len;
  }
  return out;
}

static void test_values(void) {
  cx_train_config c;
  cx_status s = cx_train_config_load(write_config("a.toml", base), &c);
  CHECK(s == CX_OK, "%s", cx_last_error());
  if (s != CX_OK) return;
  char want[128];
  snprintf(want, sizeof want, "%s/d/train.h5", dir);
  CHECK(!strcmp(c.train_path, want), "train path %s", c.train_path);
  CHECK(!strcmp(c.val_path, "/abs/val.h5"), "val path %s", c.val_path);
  snprintf(want, sizeof want, "%s/out", dir);
  CHECK(!strcmp(c.out_dir, want), "out_dir %s", c.out_dir);
  const cx_train_opts *o = &c.opts;
  CHECK(o->batch_size == 64 && o->accum_steps == 2 && o->epochs == 3, "batch/accum/epochs");
  CHECK(o->optim.kind == CX_OPTIM_SGD && o->optim.lr == 0.05f && o->optim.nesterov &&
        o->optim.momentum == 0.9f, "optimizer");
  CHECK(o->schedule.kind == CX_SCHEDULE_MULTISTEP && o->schedule.n_milestones == 2 &&
        o->schedule.milestones[1] == 200 && o->schedule.lr == 0.05f, "schedule");
  CHECK(o->loader.aug.crop == CX_CROP_PAD && o->loader.aug.pad == 4, "crop pad defaults to 4");
  CHECK(c.n_mean == 3 && o->val_aug.mean[2] == 0.3f && o->loader.aug.std[2] == 0.25f, "mean/std");
  CHECK(o->threads == 2 && o->log_every == 50 && o->diagnostics, "run and defaults");
  CHECK(!strncmp(c.hash, "fnv1a64:", 8) && strlen(c.hash) == 24, "hash %s", c.hash);
  CHECK(o->precision == CX_PRECISION_F32, "precision defaults to fp32");
  CHECK(o->loss_scale_mode == CX_LOSS_SCALE_NONE && o->n_checkpoint_segments == 0,
        "no loss scaling and no recompute by default");
  cx_train_config_free(&c);
  /* bf16 where the CPU has it; elsewhere refused at the key */
  const cx_backend *cpu = cx_backend_cpu();
  bool have_bf16 = cpu->check_precision(cpu, CX_PRECISION_BF16) == CX_OK;
  s = cx_train_config_load(write_config("b.toml", edit(17, "accum_steps = 2\nprecision = \"bf16\"")), &c);
  CHECK(s == CX_OK && c.opts.precision == CX_PRECISION_BF16, "precision = \"bf16\": %s",
        s == CX_OK ? "not read" : cx_last_error());
  if (s != CX_OK) return;
  /* the backend says whether it can, once one is chosen */
  s = cx_train_config_check_precision(&c, cpu);
  if (have_bf16) CHECK(s == CX_OK, "bf16 refused on a CPU that has it: %s", cx_last_error());
  else
    CHECK(s == CX_ERR_UNSUPPORTED && strstr(cx_last_error(), ":18:13: "), "bf16 without "
          "AVX512-BF16 not refused at the key: %s", cx_last_error());
  cx_train_config_free(&c);
  s = cx_train_config_load(write_config("h.toml", edit(17, "accum_steps = 2\nprecision = \"fp16\"")), &c);
  CHECK(s == CX_OK, "precision = \"fp16\" not read: %s", cx_last_error());
  if (s != CX_OK) return;
  s = cx_train_config_check_precision(&c, cpu);
  CHECK(s == CX_ERR_UNSUPPORTED && strstr(cx_last_error(), ":18:13: ") &&
        strstr(cx_last_error(), "fp16 needs a CUDA device"), "fp16 on the CPU: %s",
        cx_last_error());
  cx_train_config_free(&c);
}

/* [train] loss_scale, checkpoint_segments, ema_decay and sync_bn. */
static void test_memory_keys(void) {
  static const char *const texts[] = {
      "loss_scale = \"dynamic\"\ncheckpoint_segments = \"blocks\"",
      "loss_scale = 1024\ncheckpoint_segments = [\"layer1\", \"layer2.0\"]",
      "loss_scale = \"none\"\ncheckpoint_segments = []",
      "ema_decay = 0.999\nema_warmup = true", "sync_bn = true"};
  for (int i = 0; i < 5; i++) {
    char line[200];
    snprintf(line, sizeof line, "epochs = 3\n%s", texts[i]);
    cx_train_config c;
    cx_status s = cx_train_config_load(write_config("m.toml", edit(11, line)), &c);
    CHECK(s == CX_OK, "%s", cx_last_error());
    if (s != CX_OK) continue;
    const cx_train_opts *o = &c.opts;
    if (i == 0)
      CHECK(o->loss_scale_mode == CX_LOSS_SCALE_DYNAMIC && o->loss_scaler.scale == 65536 &&
            o->n_checkpoint_segments == 1 && !strcmp(o->checkpoint_segments[0], "blocks"),
            "dynamic, blocks");
    if (i == 1)
      CHECK(o->loss_scale_mode == CX_LOSS_SCALE_STATIC && o->loss_scaler.scale == 1024 &&
            o->n_checkpoint_segments == 2 && !strcmp(o->checkpoint_segments[1], "layer2.0"),
            "static 1024, two prefixes");
    if (i == 2)
      CHECK(o->loss_scale_mode == CX_LOSS_SCALE_NONE && o->n_checkpoint_segments == 0 &&
            !o->use_ema, "none");
    if (i == 3)
      CHECK(o->use_ema && o->ema.decay == 0.999f && o->ema.warmup, "ema_decay, ema_warmup");
    CHECK(c.sync_bn == (i == 4), "sync_bn %d in case %d", c.sync_bn, i);
    cx_train_config_free(&c);
  }
}

static void expect_error(const char *text, const char *where, const char *what) {
  cx_train_config c;
  const char *path = write_config("e.toml", text);
  cx_status s = cx_train_config_load(path, &c);
  char want[256];
  snprintf(want, sizeof want, "%s:%s: ", path, where);
  const char *m = cx_last_error();
  CHECK(s != CX_OK, "accepted, expected an error at %s (%s)", where, what);
  CHECK(s == CX_OK || (!strncmp(m, want, strlen(want)) && strstr(m, what)),
        "got \"%s\", expected \"%s...%s\"", m, want, what);
  if (s == CX_OK) cx_train_config_free(&c);
}

static void test_errors(void) {
  expect_error(edit(11, "epoch = 3"), "11:1", "did you mean 'epochs'?");
  expect_error(edit(13, "lr = \"fast\""), "13:6", "'train.lr': must be a float");
  expect_error(edit(13, "lr = -1"), "13:6", "out of range");
  expect_error(edit(6, "batch = 0"), "6:9", "out of range");
  expect_error(edit(7, "crop = \"center\""), "7:8", "one of \"none\", \"pad\", \"resized\"");
  expect_error(edit(7, "crop = \"none\"\npad = 2"), "8:7", "applies to crop \"pad\"");
  expect_error(edit(12, "optimizer = \"adamw\""), "14:12", "applies to optimizer \"sgd\"");
  expect_error(edit(12, "optimizer = \"sgd\"\nbeta2 = 0.99"), "13:9", "\"adamw\" or \"lamb\"");
  expect_error(edit(14, "nesterov = true\nmomentum = 0"), "14:12", "needs momentum above 0");
  expect_error(edit(16, "milestones = [200, 100]"), "16:20", "increasing");
  expect_error(edit(16, ""), "10:1", "needs milestones");
  expect_error(edit(15, "schedule = \"cosine\""), "16:14", "applies to schedule \"multistep\"");
  expect_error(edit(16, "milestones = [100, 200]\ngamma = 0"), "17:9", "out of range");
  expect_error(edit(17, "accum_steps = 3"), "17:15", "must divide [data] batch");
  expect_error(edit(17, "accum_steps = 2\nema_decay = 1.5"), "18:13", "out of range");
  expect_error(edit(17, "accum_steps = 2\nema_warmup = true"), "18:14", "needs ema_decay");
  expect_error(edit(17, "accum_steps = 2\nsync_bn = 1"), "18:11", "'train.sync_bn'");
  expect_error(edit(17, "accum_steps = 2\nsyncbn = true"), "18:1", "did you mean 'sync_bn'?");
  expect_error(edit(17, "accum_steps = 2\nprecision = \"bf61\""), "18:13",
               "one of \"fp32\", \"bf16\", \"fp16\"");
  expect_error(edit(8, "mean = 0.5"), "8:8", "an array of numbers");
  expect_error(edit(9, "std = [0.2, 0, 0.2]"), "9:13", "above 0");
  expect_error(edit(2, "onnx = \"m.onnx\"\nspec = \"resnet20\""), "2:8", "not both");
  expect_error(edit(2, ""), "1:1", "needs spec");
  expect_error(edit(4, ""), "3:1", "missing key 'train'");
  expect_error(edit(11, ""), "10:1", "missing key 'epochs'");
  expect_error(edit(20, "threads = 2\nthread = 1"), "21:1", "did you mean 'threads'?");
  expect_error(edit(20, "threads = \"many\""), "20:11", "give a count (0 to 1024) or \"auto\"");
  expect_error(edit(20, "threads = -1"), "20:11", "out of range");
  expect_error(edit(1, "[modle]"), "1:2", "did you mean 'model'?");
  expect_error(edit(11, "epochs = 3\nloss_scal = 8"), "12:1", "did you mean 'loss_scale'?");
  expect_error(edit(11, "epochs = 3\nloss_scale = \"dynamc\""), "12:14", "\"none\", \"dynamic\"");
  expect_error(edit(11, "epochs = 3\nloss_scale = 0"), "12:14", "out of range");
  expect_error(edit(11, "epochs = 3\nloss_scale = true"), "12:14", "or a number");
  expect_error(edit(11, "epochs = 3\ncheckpoint_segment = \"blocks\""), "12:1",
               "did you mean 'checkpoint_segments'?");
  expect_error(edit(11, "epochs = 3\ncheckpoint_segments = \"layer1\""), "12:23",
               "must be \"blocks\"");
  expect_error(edit(11, "epochs = 3\ncheckpoint_segments = [\"a\", 3]"), "12:29", "string");
  expect_error("run = 3\n[model]\nspec = \"x\"\n[data]\ntrain = \"t.h5\"\n[train]\nepochs = 1\n",
               "1:7", "must be a table");
}

/* Two /proc/stat texts 100 ticks apart a CPU: cpu0 90 user, cpu1 95 at nice (not busy: the
 * scheduler favours us over it), cpu2 30 steal + 10 system, cpu3 idle. */
static void test_threads_between(void) {
  const char *a = "cpu  1 2 3 4 5 6 7 8 0 0\n"
                  "cpu0 100 0 0 900 0 0 0 0 0 0\ncpu1 0 100 0 900 0 0 0 0 0 0\n"
                  "cpu2 0 0 10 900 0 0 0 0 0 0\ncpu3 0 0 0 1000 0 0 0 0 0 0\nintr 5\n";
  const char *b = "cpu  9 9 9 9 9 9 9 9 0 0\n"
                  "cpu0 190 0 0 910 0 0 0 0 0 0\ncpu1 0 195 0 905 0 0 0 0 0 0\n"
                  "cpu2 0 0 20 960 0 0 0 30 0 0\ncpu3 0 0 0 1100 0 0 0 0 0 0\nintr 9\n";
  int all[4] = {0, 1, 2, 3}, one[1] = {1}, busy[2] = {0, 2};
  cx_cpu_free f = cx_cpu_free_between(a, b, all, 4, 1, 4);
  CHECK(f.sampled && fabs(f.busy - 1.3) < 1e-9 && f.threads == 3 && f.allowed == 4,
        "4 CPUs: busy %.3f (want 1.3), threads %d (want 3)", f.busy, f.threads);
  f = cx_cpu_free_between(a, b, all, 4, 2, 4); /* two unbound ranks share the free CPUs */
  CHECK(f.threads == 1, "2 unbound ranks: %d threads each (want 1)", f.threads);
  f = cx_cpu_free_between(a, a, all, 4, 2, 4); /* no time passed: nothing counts */
  CHECK(f.busy == 0 && f.threads == 2, "2 ranks, 4 idle CPUs: %d threads (want 2)", f.threads);
  f = cx_cpu_free_between(a, b, one, 1, 2, 4); /* bound to the niced CPU */
  CHECK(f.busy == 0 && f.threads == 1 && f.allowed == 1, "bound rank: busy %.2f", f.busy);
  f = cx_cpu_free_between(a, b, busy, 2, 1, 4); /* both CPUs taken: still one thread */
  CHECK(f.threads == 1, "2 busy CPUs: %d threads (want 1)", f.threads);
  f = cx_cpu_free_between(a, NULL, all, 4, 1, 4);
  CHECK(!f.sampled && f.threads == 4, "unread: %d threads (want the mask's 4)", f.threads);
}

/* Live: the key loads, and a busy child on one of our CPUs leaves it out of the count (other
 * load on the machine can only add to the busy figure, so the bound holds on a shared one). */
static void test_threads_live(void) {
  cx_train_config c;
  cx_status s = cx_train_config_load(write_config("a.toml", edit(20, "threads = \"auto\"")), &c);
  cpu_set_t mask;
  CHECK(sched_getaffinity(0, sizeof mask, &mask) == 0, "sched_getaffinity");
  int allowed = CPU_COUNT(&mask);
  CHECK(s == CX_OK, "threads = \"auto\": %s", cx_last_error());
  if (s == CX_OK) {
    CHECK(c.threads >= 1 && c.threads <= allowed && c.opts.threads == c.threads,
          "auto: %d threads of %d CPUs", c.threads, allowed);
    cx_train_config_free(&c);
  }
  if (allowed < 2) return;
  int first = 0;
  while (!CPU_ISSET(first, &mask)) first++;
  pid_t child = fork();
  if (child == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    sched_setaffinity(0, sizeof one, &one);
    alarm(20); /* never outlives a crashed parent for long */
    for (volatile unsigned long i = 0;; i++) {
    }
  }
  usleep(50000);
  cx_cpu_free f = cx_cpu_free_count(300);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  CHECK(f.sampled && f.busy >= 0.7 && f.threads <= allowed - 1,
        "a busy child on CPU %d: busy %.2f, %d threads of %d", first, f.busy, f.threads, allowed);
}

static void hash_of(const char *text, char *out) {
  cx_train_config c;
  out[0] = 0;
  if (cx_train_config_load(write_config("h.toml", text), &c) != CX_OK) {
    CHECK(false, "%s", cx_last_error());
    return;
  }
  strcpy(out, c.hash);
  cx_train_config_free(&c);
}

static void test_hash(void) {
  char a[64], b[64], text[4096];
  hash_of(base, a);
  /* the same config: comments, blank lines, another key order, [run] and the epochs changed */
  snprintf(text, sizeof text, "# a comment\n\n%s", edit(11, "epochs = 30  # longer"));
  hash_of(text, b);
  CHECK(!strcmp(a, b), "comments and epochs changed the hash: %s %s", a, b);
  hash_of(edit(20, "threads = 8\nkeep_checkpoints = 5"), b);
  CHECK(!strcmp(a, b), "[run] changed the hash");
  hash_of(edit(13, "log_every = 7\nlr = 0.05\ncheckpoint_every = 100\ndiagnostics = false"), b);
  CHECK(!strcmp(a, b), "key order and logging keys changed the hash");
  hash_of(edit(13, "lr = 0.05\ncheckpoint_segments = \"blocks\""), b);
  CHECK(!strcmp(a, b), "checkpoint_segments (same numbers) changed the hash");
  hash_of(edit(13, "lr = 0.05\nloss_scale = \"dynamic\""), b);
  CHECK(strcmp(a, b), "loss_scale changed, hash did not");
  hash_of(edit(6, "batch = 64\nworkers = 3"), b);
  CHECK(!strcmp(a, b), "data.workers changed the hash");
  /* anything a step computes with changes it */
  hash_of(edit(13, "lr = 0.05000001"), b);
  CHECK(strcmp(a, b), "lr changed, hash did not");
  hash_of(edit(16, "milestones = [100, 201]"), b);
  CHECK(strcmp(a, b), "milestones changed, hash did not");
  hash_of(edit(4, "train = \"d/other.h5\""), b);
  CHECK(strcmp(a, b), "data file changed, hash did not");
  hash_of(edit(13, "lr = 0.05\nseed = 2"), b);
  CHECK(strcmp(a, b), "seed changed, hash did not");
}

static cx_layer_norm layer(const char *name, double g, double w) {
  return (cx_layer_norm){name, g, w};
}

static void test_diagnostics(void) {
  cx_layer_norm ok[8], vanish[8], explode[8];
  for (int i = 0; i < 8; i++) {
    ok[i] = layer("conv", 0.05 + 0.01 * i, 1);
    vanish[i] = layer(i < 2 ? "conv1.weight" : "fc", i < 2 ? 1e-7 : 0.05, 1);
    explode[i] = layer("conv", i < 2 ? 50 : 0.01, 1);
  }
  cx_diag d = {.classes = 10};
  int warnings = 0;
  for (int s = 1; s <= 20; s++)
    warnings += cx_diag_gradients(&d, s * 10, 2.0 + 0.1 * s, ok, 8) != NULL;
  CHECK(warnings == 0, "a healthy run warned: %s", d.msg);
  const char *w = cx_diag_gradients(&d, 300, 2.0, vanish, 8);
  CHECK(w && strstr(w, "vanishing") && strstr(w, "conv1.weight") && strstr(w, "BatchNorm"),
        "vanishing: %s", w ? w : "no warning");
  CHECK(!cx_diag_gradients(&d, 310, 2.0, vanish, 8), "warned twice");
  w = cx_diag_gradients(&d, 320, 2.0, explode, 8);
  CHECK(w && strstr(w, "exploding") && strstr(w, "first 2 layers"), "depth: %s", w ? w : "none");
  cx_diag e = {0};
  cx_diag_gradients(&e, 10, 1.5, ok, 8);
  CHECK(!cx_diag_gradients(&e, 20, 100, ok, 8), "66x is not exploding");
  w = cx_diag_gradients(&e, 30, 300, ok, 8);
  CHECK(w && strstr(w, "200x the smallest") && strstr(w, "learning rate"), "growth: %s",
        w ? w : "none");
  CHECK(!cx_diag_gradients(&e, 40, NAN, ok, 8), "a NaN norm is the NaN check's");

  cx_diag l = {.classes = 10, .stall_logs = 5};
  warnings = 0;
  for (int s = 1; s <= 30; s++) warnings += cx_diag_loss(&l, s, 2.0 * pow(0.98, s)) != NULL;
  CHECK(warnings == 0, "a falling loss warned: %s", l.msg);
  cx_diag u = {.classes = 10, .stall_logs = 5};
  const char *got = NULL;
  for (int s = 1; s <= 6 && !got; s++) got = cx_diag_loss(&u, s, 2.30 + 0.001 * (s % 2));
  CHECK(got && strstr(got, "stalled") && strstr(got, "ln(10)"), "uniform: %s",
        got ? got : "none");
}

static void test_preprocess(void) {
  double s;
  CHECK(cx_preprocess_parse_scale("1/255", &s) && fabs(s - 1 / 255.0) < 1e-15, "1/255");
  CHECK(cx_preprocess_parse_scale("1", &s) && s == 1, "1");
  CHECK(!cx_preprocess_parse_scale("1/0", &s) && !cx_preprocess_parse_scale("x", &s) &&
        !cx_preprocess_parse_scale("-1", &s) && !cx_preprocess_parse_scale("1/255x", &s),
        "bad scales accepted");
  float v[4];
  int n;
  CHECK(cx_preprocess_parse_values("0.5,0.25,1e-1", v, &n, true) && n == 3 && v[2] == 0.1f, "3");
  CHECK(!cx_preprocess_parse_values("1,0", v, &n, true), "a zero std accepted");
  CHECK(!cx_preprocess_parse_values("1,2,3,4,5", v, &n, false), "5 values accepted");
  CHECK(!cx_preprocess_parse_values("1,,2", v, &n, false), "an empty value accepted");

  const char *keys[] = {"other", CX_META_LAYOUT, CX_META_SCALE, CX_META_MEAN, CX_META_STD};
  const char *vals[] = {"x", "NCHW", "1", "127.5,127.5,127.5", "51,51,51"};
  cx_preprocess p;
  bool found;
  CHECK(cx_preprocess_from_metadata(5, keys, vals, &p, &found) == CX_OK && found &&
        p.channels == 3 && p.scale == 1, "%s", cx_last_error());
  cx_augment a = {0};
  cx_preprocess_to_augment(&p, &a);
  CHECK(fabsf(a.mean[1] - 0.5f) < 1e-7f && fabsf(a.std[2] - 0.2f) < 1e-7f && a.std[3] == 1,
        "scale 1 as the loader's /255 form: mean %g std %g", a.mean[1], a.std[2]);
  CHECK(cx_preprocess_from_metadata(1, keys, vals, &p, &found) == CX_OK && !found, "none found");
  vals[1] = "NHWC";
  CHECK(cx_preprocess_from_metadata(5, keys, vals, &p, &found) == CX_ERR_FORMAT &&
        strstr(cx_last_error(), CX_META_LAYOUT), "NHWC accepted");
  vals[1] = "NCHW", vals[4] = "51";
  CHECK(cx_preprocess_from_metadata(5, keys, vals, &p, &found) == CX_ERR_FORMAT, "3 means, 1 std");
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/cx_train_config_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  test_values();
  test_memory_keys();
  test_errors();
  test_hash();
  test_threads_between();
  test_threads_live();
  test_diagnostics();
  test_preprocess();
  const char *names[] = {"a.toml", "e.toml", "h.toml", "m.toml"};
  for (int i = 0; i < 4; i++) {
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    unlink(p);
  }
  rmdir(dir);
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
