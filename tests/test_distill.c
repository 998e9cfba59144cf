/* Distillation on real data (Fashion-MNIST from Debian's dataset-fashion-mnist), on a small
 * budget: a small CNN teacher is trained on 12000 images; a tiny student trained on 3000 of them
 * with the teacher's soft targets (T = 4, alpha = 0.9) must beat the same student trained from
 * scratch with the same steps, by half a point in the mean top-1 over 5 seeds (on 5000 test images). A second distillation run reads every teacher output from
 * the cache written by the first and must give the very same student. Bad teachers (classes,
 * input size) are refused before training.
 *
 * `test_distill --bench` instead measures a KD step's throughput for a ResNet-20 teacher and a
 * MobileNetV2-0.5 student on 1x28x28: student alone, teacher running, cache being filled, cache
 * read, and (on a CPU with AVX512-BF16) the teacher running in bf16; then, as `--latency` does alone, both models' latency on our runtime and in ONNX Runtime,
 * printed as the report writer's Markdown. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../kernels/cpu/cpu.h"
#include "../cli/report.h"
#include "../distill/distill.h"
#include "../export/onnx_export.h"
#include "../models/layers.h"
#include "../models/zoo.h"
#include "../train/trainer.h"
#include "check.h"
#include "fmnist.h"


/* ---- data ---- */

/* ---- models ---- */

/* 3 conv-BN-ReLU blocks (16, 32, 64 channels) with max-pooling, ~25k parameters */
static cx_graph *teacher_cnn(int64_t classes, uint64_t seed) {
  cx_graph *g = cx_graph_new();
  cx_net n;
  cx_feat x;
  cx_net_begin(&n, g, seed, true, 1, 28, 28, &x);
  x = cx_net_conv_bn_act(&n, "block1", x, 12, 3, 1, 1, CX_NL_RELU);
  x = cx_net_maxpool(&n, "pool1", x, 2, 2);
  x = cx_net_conv_bn_act(&n, "block2", x, 24, 3, 1, 1, CX_NL_RELU);
  x = cx_net_maxpool(&n, "pool2", x, 2, 2);
  x = cx_net_conv_bn_act(&n, "block3", x, 48, 3, 1, 1, CX_NL_RELU);
  x = cx_net_pool_flatten(&n, "pool", x);
  x = cx_net_linear(&n, "fc", "logits", x, classes, CX_LINEAR_TORCH_DEFAULT);
  cx_graph_mark_output(g, x.v);
  return g;
}


static cx_train_opts recipe(const char *train, const char *val, int64_t batch, int64_t epochs) {
  cx_train_opts o = cx_train_defaults();
  o.train_path = train;
  o.val_path = val;
  o.batch_size = batch;
  o.epochs = epochs;
  o.optim.lr = 0.1f;
  o.optim.momentum = 0.9f;
  o.optim.weight_decay = 5e-4f;
  o.schedule = cx_schedule_defaults(CX_SCHEDULE_COSINE, 0.1f);
  o.log_every = 1000;
  o.quiet = true;
  o.seed = 7;
  o.backend = cx_backend_cpu();
  float mean = 0.286f, std = 0.353f; /* Fashion-MNIST pixel statistics */
  o.loader.aug.mean[0] = o.val_aug.mean[0] = mean;
  o.loader.aug.std[0] = o.val_aug.std[0] = std;
  o.loader.aug.crop = CX_CROP_PAD;
  o.loader.aug.pad = 2;
  o.loader.aug.flip = true;
  return o;
}

/* ---- the test ---- */

typedef struct paths {
  char dir[64], train[96], test[96], teach[96], stud[96], val[96], cache[96];
} paths;

static double train_student(const paths *p, const cx_graph *teacher, cx_kd_stats *stats,
                            uint64_t seed) {
  cx_graph *s = fmnist_small_cnn(3);
  cx_train_opts o = recipe(p->stud, p->val, 64, 4);
  o.seed = seed;
  cx_kd *kd = NULL;
  cx_train_result r = {0};
  cx_status st = CX_OK;
  if (teacher) {
    cx_kd_teacher_spec t = {.graph = teacher, .name = "cnn"};
    cx_kd_opts ko = {.kd = cx_kd_config_defaults(), .n_teachers = 1, .teachers = &t,
                     .cache_dir = p->cache};
    st = cx_kd_open(&ko, &o, &kd);
    CHECK(st == CX_OK, "kd open: %s", cx_last_error());
  }
  cx_train_ext ext = kd ? cx_kd_extension(kd) : (cx_train_ext){0};
  o.extensions = &ext;
  o.n_extensions = kd ? 1 : 0;
  if (st == CX_OK) st = cx_train(s, &o, &r);
  CHECK(st == CX_OK, "student: %s", cx_last_error());
  if (kd && stats) *stats = cx_kd_get_stats(kd);
  CHECK(cx_kd_close(kd) == CX_OK, "kd close: %s", cx_last_error());
  printf("student (%s, seed %llu): top-1 %.2f%%, loss %.4f, %lld steps, %.0f img/s, %.1f s\n",
         teacher ? "distilled" : "scratch", (unsigned long long)seed, r.val.top1, r.final_loss, (long long)r.steps,
         r.images_per_s, r.seconds);
  cx_graph_free(s);
  return st == CX_OK ? r.val.top1 : NAN;
}

/* Feature distillation trains end to end: a FitNets hint (adapter kept in the student while it
 * trains, stripped after) and attention transfer, between 7x7 feature maps, for one epoch. */
static void test_hints(const paths *p, const cx_graph *teacher) {
  cx_graph *s = fmnist_small_cnn(3);
  int values = s->n_values;
  cx_train_opts o = recipe(p->stud, p->val, 64, 1);
  cx_kd_hint hints[2] = {{.kind = CX_HINT_FITNET, .student = "block2.2", .teacher = "block3.2",
                          .weight = 0.5f},
                         {.kind = CX_HINT_ATTENTION, .student = "block2.1",
                          .teacher = "block3.1", .weight = 50}};
  cx_kd_teacher_spec t = {.graph = teacher, .name = "cnn"};
  cx_kd_opts ko = {.kd = cx_kd_config_defaults(), .n_teachers = 1, .teachers = &t};
  ko.kd.hints = hints;
  ko.kd.n_hints = 2;
  cx_kd *kd = NULL;
  cx_train_result r = {0};
  cx_status st = cx_kd_open(&ko, &o, &kd);
  if (st == CX_OK) st = cx_kd_adapters_add(s, cx_kd_get_config(kd));
  if (st == CX_OK) {
    cx_train_ext ext = cx_kd_extension(kd);
    o.extensions = &ext;
    o.n_extensions = 1;
    st = cx_train(s, &o, &r);
  }
  CHECK(st == CX_OK, "hints: %s", cx_last_error());
  CHECK(cx_kd_close(kd) == CX_OK, "%s", cx_last_error());
  CHECK(cx_kd_adapters_strip(s) == CX_OK && s->n_values == values, "strip: %s", cx_last_error());
  printf("student (FitNets + attention hints, 1 epoch): top-1 %.2f%%, loss %.4f\n", r.val.top1,
         r.final_loss);
  /* chance is 10%; one epoch of the scratch student gives 32%, of KD without hints 26% */
  CHECK(st != CX_OK || (r.val.top1 > 20 && isfinite(r.final_loss)), "hints did not train");
  cx_graph_free(s);
}

static void test_refusals(const paths *p) {
  cx_train_opts o = recipe(p->stud, p->val, 64, 1);
  cx_graph *wrong = teacher_cnn(7, 1);
  cx_kd_teacher_spec t = {.graph = wrong, .name = "seven"};
  cx_kd_opts ko = {.kd = cx_kd_config_defaults(), .n_teachers = 1, .teachers = &t};
  cx_kd *kd = NULL;
  cx_status s = cx_kd_open(&ko, &o, &kd);
  printf("wrong classes: %s\n", cx_last_error());
  CHECK(s == CX_ERR_SHAPE && strstr(cx_last_error(), "7 classes") && !kd, "classes not checked");
  cx_graph_free(wrong);
  CHECK(cx_model_build("resnet20:classes=10,input=1x32x32", &wrong, NULL) == CX_OK, "%s",
        cx_last_error());
  t.graph = wrong;
  s = cx_kd_open(&ko, &o, &kd);
  printf("wrong input: %s\n", cx_last_error());
  CHECK(s == CX_ERR_SHAPE && strstr(cx_last_error(), "1x32x32") && !kd, "input not checked");
  cx_graph_free(wrong);
}

static void test_distillation(const paths *p) {
  cx_graph *teacher = teacher_cnn(10, 1);
  cx_train_opts o = recipe(p->teach, p->val, 128, 2);
  cx_train_result r;
  cx_status s = cx_train(teacher, &o, &r);
  CHECK(s == CX_OK, "teacher: %s", cx_last_error());
  printf("teacher: top-1 %.2f%%, %.0f img/s, %.1f s\n", r.val.top1, r.images_per_s, r.seconds);
  /* One run of each differs by a few points from seed to seed: the bar is on means over seeds. */
  enum { SEEDS = 5 };
  cx_kd_stats first = {0}, second = {0};
  double scratch = 0, kd = 0, kd_first = 0;
  for (int k = 0; k < SEEDS; k++) {
    scratch += train_student(p, NULL, NULL, 7 + k) / SEEDS;
    double top1 = train_student(p, teacher, k ? NULL : &first, 7 + k);
    if (k == 0) kd_first = top1;
    kd += top1 / SEEDS;
  }
  double again = train_student(p, teacher, &second, 7);
  printf("distilled %.2f%% vs scratch %.2f%% (+%.2f points; means over %d seeds); teacher ran "
         "on %lld of %lld batches (%.1f s), then on %lld of %lld\n", kd, scratch, kd - scratch,
         SEEDS,
         (long long)first.teacher_batches, (long long)first.batches, first.teacher_seconds,
         (long long)second.teacher_batches, (long long)second.batches);
  CHECK(kd > scratch + 0.5, "distillation %.2f%% does not beat the scratch student %.2f%% by "
        "half a point (means over %d seeds)", kd, scratch, SEEDS);
  CHECK(first.teacher_batches == first.batches && first.cached_batches == 0,
        "the first run should run the teacher on every batch");
  CHECK(second.teacher_batches == 0 && second.cached_batches == second.batches,
        "the second run ran the teacher on %lld batches", (long long)second.teacher_batches);
  CHECK(again == kd_first, "the cached run gave %.4f%%, the first %.4f%%", again, kd_first);
  test_hints(p, teacher);
  cx_graph_free(teacher);
}

/* ---- the benchmark ---- */

typedef struct rate {
  double images_per_s, teacher_share; /* share of the training time in the teacher's forward */
  double images_per_cpu_s;            /* after the first step, per second of process CPU time */
  int64_t teacher_batches;
} rate;

/* Process CPU time at the first and the last step: on a shared machine, images per CPU second
 * of a one-thread run measure the work, where wall-clock rates measure the neighbours too. */
static double cpu_first, cpu_last;
static int64_t step_first, step_last;

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void on_step(void *user, const cx_train_step_info *s) {
  (void)user;
  if (s->step == 1) cpu_first = cpu_now(), step_first = 1;
  cpu_last = cpu_now(), step_last = s->step;
}

static rate kd_rate(const char *train, const cx_graph *teacher, const char *cache,
                    cx_precision precision) {
  rate out = {NAN, NAN, NAN, 0};
  cx_graph *s = NULL;
  if (cx_model_build("mobilenet_v2:width=0.5,classes=10,input=1x28x28", &s, NULL) != CX_OK)
    return out;
  cx_train_opts o = recipe(train, NULL, 128, 1);
  o.log_every = 1;
  cx_kd *kd = NULL;
  cx_kd_teacher_spec t = {.graph = teacher, .precision = precision, .name = "resnet20"};
  cx_kd_opts ko = {.kd = cx_kd_config_defaults(), .n_teachers = 1, .teachers = &t,
                   .cache_dir = cache};
  cx_status st = teacher ? cx_kd_open(&ko, &o, &kd) : CX_OK;
  cx_train_ext ext[2] = {{.name = "rate", .on_step = on_step}};
  if (kd) ext[1] = cx_kd_extension(kd);
  o.extensions = ext;
  o.n_extensions = kd ? 2 : 1;
  cx_train_result r = {0};
  if (st == CX_OK) st = cx_train(s, &o, &r);
  if (st != CX_OK) printf("FAIL bench: %s\n", cx_last_error());
  cx_kd_stats ks = kd ? cx_kd_get_stats(kd) : (cx_kd_stats){0};
  cx_kd_close(kd);
  cx_graph_free(s);
  /* the epoch's rate: every step, the first ones included, compilation not */
  out.images_per_s = r.images_per_s;
  out.teacher_share = ks.teacher_seconds / r.seconds;
  out.teacher_batches = ks.teacher_batches;
  out.images_per_cpu_s = (double)((step_last - step_first) * 128) / (cpu_last - cpu_first);
  return out;
}

/* Both models' size, cost and latency (ours and ONNX Runtime's, one thread unless
 * $CX_LATENCY_THREADS says otherwise: a shared machine's other jobs make multi-threaded medians
 * meaningless) in a report whose Markdown is printed: the report writer on real models. */
static int bench_report(const paths *p) {
  const char *specs[2] = {"resnet20:classes=10,input=1x28x28",
                          "mobilenet_v2:width=0.5,classes=10,input=1x28x28"};
  const char *names[2] = {"ResNet-20 (untrained)", "MobileNetV2-0.5 (untrained)"};
  cx_report_model m[2];
  char onnx[2][128], ort[64] = "";
  bool have_ort = true;
  int threads = getenv("CX_LATENCY_THREADS") ? atoi(getenv("CX_LATENCY_THREADS")) : 1;
  for (int i = 0; i < 2; i++) {
    cx_graph *g = NULL;
    cx_model_info info;
    m[i] = cx_report_model_empty(names[i]);
    if (cx_model_build(specs[i], &g, &info) != CX_OK) return 1;
    snprintf(onnx[i], sizeof onnx[i], "%s/model%d.onnx", p->dir, i);
    cx_onnx_export_opts eo = {.fold_bn = true};
    if (cx_onnx_export(g, onnx[i], &eo) != CX_OK) return 1;
    struct stat st;
    m[i].arch = specs[i], m[i].onnx_path = onnx[i], m[i].params = info.params;
    m[i].macs = info.macs, m[i].onnx_bytes = stat(onnx[i], &st) == 0 ? st.st_size : -1;
    for (int b = 0; b < 2; b++) {
      int64_t batch = b ? 32 : 1;
      if (cx_report_cpu_latency(g, batch, 20, threads, &m[i].cpu_ms[b]) != CX_OK) return 1;
      if (have_ort && cx_report_ort_latency(onnx[i], batch, 20, threads, &m[i].ort_ms[b], ort,
                                            sizeof ort) != CX_OK) {
        printf("onnxruntime: %s\n", cx_last_error());
        have_ort = false;
      }
    }
    cx_graph_free(g);
  }
  cx_report r = {.title = "Latency of the example's models", .n_models = 2, .models = m,
                 .latency_runs = 20, .latency_threads = threads,
                 .ort_version = have_ort ? ort : NULL};
  r.pre = (cx_report_preprocess){.layout = "NCHW", .pixel_scale = 1.0 / 255, .channels = 1,
                                 .mean = {0.286}, .std = {0.353}, .height = 28, .width = 28,
                                 .n_classes = 10};
  char dir[128];
  snprintf(dir, sizeof dir, "%s", p->dir);
  if (cx_report_write(&r, dir) != CX_OK) return 1;
  return cx_report_markdown(&r, stdout) != CX_OK;
}

/* Each configuration twice, interleaved, the faster kept: the machine is shared. */
static int bench(const paths *p) {
  cx_graph *teacher = NULL;
  if (fmnist_subset(p->train, p->stud, 0, 128 * 24) != CX_OK ||
      cx_model_build("resnet20:classes=10,input=1x28x28", &teacher, NULL) != CX_OK) {
    printf("FAIL %s\n", cx_last_error());
    return 1;
  }
  const char *names[5] = {"student alone", "KD, teacher running", "KD, filling the cache",
                          "KD, from the cache", "KD, teacher in bf16"};
  const cx_backend *cpu = cx_backend_cpu();
  int n = cpu->check_precision(cpu, CX_PRECISION_BF16) == CX_OK ? 5 : 4; /* AVX512-BF16 */
  rate best[5] = {{0}};
  for (int rep = 0; rep < 2; rep++) {
    char fill[128], read[128];
    snprintf(fill, sizeof fill, "%s/fill%d", p->cache, rep);
    snprintf(read, sizeof read, "%s/fill0", p->cache);
    rate r[5] = {kd_rate(p->stud, NULL, NULL, 0), kd_rate(p->stud, teacher, NULL, 0),
                 kd_rate(p->stud, teacher, fill, 0), kd_rate(p->stud, teacher, read, 0)};
    if (n == 5) r[4] = kd_rate(p->stud, teacher, NULL, CX_PRECISION_BF16);
    for (int i = 0; i < n; i++) {
      printf("run %d %-24s %6.0f img/s, %6.0f img per CPU s, teacher %4.1f%% of the time on "
             "%lld batches\n", rep, names[i], r[i].images_per_s, r[i].images_per_cpu_s,
             100 * r[i].teacher_share, (long long)r[i].teacher_batches);
      if (r[i].images_per_s > best[i].images_per_s) best[i].images_per_s = r[i].images_per_s;
      if (r[i].images_per_cpu_s > best[i].images_per_cpu_s)
        best[i].images_per_cpu_s = r[i].images_per_cpu_s;
    }
  }
  for (int i = 0; i < n; i++)
    printf("best: %-24s %6.0f img/s (%3.0f%% of the student alone), %6.0f img per CPU s (%3.0f%%)\n",
           names[i], best[i].images_per_s, 100 * best[i].images_per_s / best[0].images_per_s,
           best[i].images_per_cpu_s, 100 * best[i].images_per_cpu_s / best[0].images_per_cpu_s);
  cx_graph_free(teacher);
  return bench_report(p);
}

int main(int argc, char **argv) {
  paths p;
  strcpy(p.dir, "/tmp/cx_distill_XXXXXX");
  if (!mkdtemp(p.dir)) return 1;
  sprintf(p.teach, "%s/teach.h5", p.dir);
  sprintf(p.stud, "%s/student.h5", p.dir);
  sprintf(p.val, "%s/val.h5", p.dir);
  sprintf(p.cache, "%s/cache", p.dir);
  cx_status s = fmnist_import(p.dir, p.train, p.test);
  if (s == CX_OK && argc > 1 && strcmp(argv[1], "--bench") == 0) {
    fails += bench(&p);
  } else if (s == CX_OK && argc > 1 && strcmp(argv[1], "--latency") == 0) {
    fails += bench_report(&p);
  } else {
    if (s == CX_OK) s = fmnist_subset(p.train, p.teach, 0, 10000);
    if (s == CX_OK) s = fmnist_subset(p.train, p.stud, 0, 3000);
    if (s == CX_OK) s = fmnist_subset(p.test, p.val, 0, 5000);
    if (s == CX_OK) {
      test_refusals(&p);
      test_distillation(&p);
    }
  }
  CHECK(s == CX_OK, "data: %s", cx_last_error());
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", p.dir);
  if (system(cmd) != 0) printf("could not remove %s\n", p.dir);
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
