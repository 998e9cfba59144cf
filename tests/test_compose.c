/* The engine composes (docs/ARCHITECTURE.md, "Training"): trainer extensions run together, in
 * order, each with its own checkpointed state. On real data (Fashion-MNIST subsets):
 *   - distillation (an extension that builds the loss and feeds the teacher) plus a test
 *     extension that zeroes a fixed half of one layer's weights after every update: both take
 *     effect (the teacher ran for every micro-batch, the loss is not the plain cross-entropy's,
 *     the half is exactly zero at the end and the other half is not);
 *   - the test extension's state (its update count) survives a resume, and a run stopped and
 *     resumed ends bit-identical to one that never stopped, with EMA, clipping, accumulation 2
 *     and dynamic loss scaling on.
 * `test_compose guard` runs ResNet-20 and MobileNetV2 through the guard backend (kernels/guard/:
 * memory host code cannot touch) the same way — KD, the test extension, EMA, clipping,
 * accumulation 2, loss scaling, a checkpoint, a resume and the evaluations — and requires the
 * result bit-identical to the same run on the CPU backend: any host access to backend memory
 * is a crash there, not a silent bug on a GPU later.
 * `test_compose cuda` runs the same two trainings on the CUDA backend (resumed at step 3 too) and
 * requires them close to the CPU's: f32 on both, but reductions in another order, so within
 * tolerances rather than bit for bit. Without a GPU it exits 77 (ctest's skip). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/program.h"
#include "../distill/distill.h"
#include "../kernels/cpu/cpu.h"
#include "../kernels/cuda/cuda_backend.h"
#include "../kernels/guard/guard.h"
#include "../models/layers.h"
#include "../models/zoo.h"
#include "../train/trainer.h"
#include "check.h"
#include "fmnist.h"

typedef struct paths {
  char dir[64], train[96], test[96], small[96], val[96];
} paths;

/* ---- the test extension: zero the first half of one weight after every update ---- */

typedef struct zero_half {
  const char *param;
  int index;           /* of the parameter in the training program */
  float *host;         /* its values, read back and written */
  double updates[2];   /* checkpointed: updates seen (updated ones), steps seen */
  cx_tensor state;
} zero_half;

static cx_status zh_opened(void *self, cx_program *p) {
  zero_half *z = self;
  z->index = -1;
  for (int k = 0; k < cx_program_param_count(p); k++)
    if (!strcmp(cx_program_param_name(p, k), z->param)) z->index = k;
  if (z->index < 0) return cx_fail(CX_ERR_ARG, "zero_half: no parameter '%s'", z->param);
  z->host = malloc(cx_tensor_nbytes(cx_program_param(p, z->index)));
  return z->host ? CX_OK : cx_fail(CX_ERR_NOMEM, "out of memory");
}

static cx_status zh_after_update(void *self, cx_program *p, int64_t step, bool updated) {
  zero_half *z = self;
  cx_tensor *w = cx_program_param(p, z->index);
  if ((double)step != z->updates[1] + 1)
    return cx_fail(CX_ERR_ARG, "zero_half: step %lld after %g steps", (long long)step,
                   z->updates[1]);
  CX_TRY(cx_program_read(p, w, z->host));
  for (int64_t i = 0; i < cx_tensor_numel(w) / 2; i++) z->host[i] = 0;
  z->updates[0] += updated;
  z->updates[1] += 1;
  return cx_program_write(p, w, z->host);
}

static cx_status zh_state(void *self, cx_train_ext_state *out) {
  zero_half *z = self;
  static const char *const names[] = {"updates"};
  static cx_tensor *tensors[1];
  cx_shape two = {1, {2}};
  z->state = cx_tensor_view(CX_F64, &two, z->updates);
  tensors[0] = &z->state;
  *out = (cx_train_ext_state){.n = 1, .names = names, .tensors = tensors};
  return CX_OK;
}

static cx_train_ext zero_half_extension(zero_half *z) {
  return (cx_train_ext){.name = "zero_half", .self = z, .opened = zh_opened,
                        .after_update = zh_after_update, .state = zh_state};
}

/* ---- one run ---- */

typedef struct outcome {
  cx_status status;
  cx_train_result r;
  cx_kd_stats kd;
  double updates[2];
  cx_graph *model; /* trained */
} outcome;

static bool use_ema;

static cx_train_opts recipe(const paths *p, const cx_backend *b, const char *ckdir) {
  cx_train_opts o = cx_train_defaults();
  o.backend = b;
  o.train_path = p->small;
  o.val_path = p->val;
  o.batch_size = 64;
  o.accum_steps = 2;
  o.epochs = 2;
  o.optim.lr = 0.05f;
  o.schedule = cx_schedule_defaults(CX_SCHEDULE_COSINE, 0.05f);
  o.clip_norm = 1.0f;
  o.use_ema = use_ema;
  o.loss_scale_mode = CX_LOSS_SCALE_DYNAMIC;
  o.loss_scaler.scale = 1024;
  o.log_every = 2;
  o.quiet = true;
  o.seed = 11;
  o.checkpoint_dir = ckdir;
  o.loader.aug.mean[0] = o.val_aug.mean[0] = 0.286f;
  o.loader.aug.std[0] = o.val_aug.std[0] = 0.353f;
  o.loader.aug.flip = true;
  return o;
}

/* Trains model_of() with KD from teacher (NULL: plain cross-entropy) and the zero-half
 * extension on w; stop > 0: stops at that step, then resumes from the checkpoint with fresh
 * extension state. */
static outcome train_run(const paths *p, const cx_backend *b, cx_graph *(*model_of)(void),
                         const cx_graph *teacher, const char *w, int64_t stop) {
  outcome out = {.model = model_of()};
  char ckdir[128];
  snprintf(ckdir, sizeof ckdir, "%s/ck-%d", p->dir, rand());
  for (int leg = 0; leg < (stop ? 2 : 1); leg++) {
    cx_train_opts o = recipe(p, b, ckdir);
    char last[4200];
    if (leg == 1) {
      CHECK(cx_checkpoint_find_last(ckdir, last, sizeof last) == CX_OK, "%s", cx_last_error());
      o.resume_from = last;
    }
    o.stop_after = leg == 0 ? stop : 0;
    zero_half z = {.param = w};
    cx_kd *kd = NULL;
    cx_train_ext ext[2];
    int n = 0;
    if (teacher) {
      cx_kd_teacher_spec t = {.graph = teacher, .name = "teacher"};
      cx_kd_opts ko = {.kd = cx_kd_config_defaults(), .n_teachers = 1, .teachers = &t};
      out.status = cx_kd_open(&ko, &o, &kd);
      if (out.status != CX_OK) break;
      ext[n++] = cx_kd_extension(kd);
    }
    ext[n++] = zero_half_extension(&z);
    o.extensions = ext;
    o.n_extensions = n;
    out.status = cx_train(out.model, &o, &out.r);
    if (kd) out.kd = cx_kd_get_stats(kd);
    cx_kd_close(kd);
    free(z.host);
    memcpy(out.updates, z.updates, sizeof out.updates);
    if (out.status != CX_OK) break;
  }
  CHECK(out.status == CX_OK, "train: %s", cx_last_error());
  return out;
}

static const float *weights(const cx_graph *g, const char *name, int64_t *n) {
  int v = cx_graph_find_value(g, name);
  *n = v >= 0 ? cx_shape_numel(&g->values[v].shape) : 0;
  return v >= 0 ? g->values[v].init : NULL;
}

/* Every parameter and statistic of a and b, bit for bit. */
static bool same_model(const cx_graph *a, const cx_graph *b) {
  for (int v = 0; v < a->n_values; v++) {
    const cx_value *x = &a->values[v];
    if (x->kind != CX_VALUE_PARAM && x->kind != CX_VALUE_STATE) continue;
    int64_t n;
    const float *y = weights(b, x->name, &n);
    if (!y || n != cx_shape_numel(&x->shape) || memcmp(x->init, y, sizeof(float) * (size_t)n))
      return printf("  differs: %s\n", x->name), false;
  }
  return true;
}

static void free_outcome(outcome *o) { cx_graph_free(o->model); }

static cx_graph *teacher_graph;
static cx_graph *small_student(void) { return fmnist_small_cnn(5); }

static const char *W = "block2.0.weight";

static void check_zero_half(const outcome *o, int64_t steps) {
  int64_t n;
  const float *w = weights(o->model, W, &n);
  CHECK(w != NULL, "no %s in the trained model", W);
  if (!w) return;
  int64_t zeros_first = 0, nonzero_second = 0;
  for (int64_t i = 0; i < n; i++) {
    if (i < n / 2) zeros_first += w[i] == 0.0f;
    else nonzero_second += w[i] != 0.0f;
  }
  CHECK(zeros_first == n / 2, "%lld of the first %lld weights are zero", (long long)zeros_first,
        (long long)(n / 2));
  CHECK(nonzero_second > (n - n / 2) / 2, "only %lld of the second half are non-zero",
        (long long)nonzero_second);
  CHECK(o->updates[1] == (double)steps, "the extension saw %g steps of %lld", o->updates[1],
        (long long)steps);
  CHECK(o->updates[0] == (double)(steps - o->r.skipped_steps), "%g updates, %lld steps, %lld "
        "skipped", o->updates[0], (long long)steps, (long long)o->r.skipped_steps);
}

static void test_kd_and_zero_half(const paths *p) {
  const cx_backend *cpu = cx_backend_cpu();
  /* the live weights are the trained model without an average (with one, the average of the
   * zeroed half only tends to zero: pruning must mask the average too) */
  use_ema = false;
  outcome kd = train_run(p, cpu, small_student, teacher_graph, W, 0);
  outcome ce = train_run(p, cpu, small_student, NULL, W, 0);
  use_ema = true;
  outcome straight = train_run(p, cpu, small_student, teacher_graph, W, 0);
  outcome resumed = train_run(p, cpu, small_student, teacher_graph, W, 3);
  if (kd.status == CX_OK && ce.status == CX_OK && resumed.status == CX_OK &&
      straight.status == CX_OK) {
    int64_t steps = kd.r.total_steps;
    printf("KD + zero_half: %lld steps, loss %.4f (cross-entropy alone %.4f, top-1 %.2f%%), "
           "teacher ran for %lld batches\n", (long long)steps, kd.r.final_loss,
           ce.r.final_loss, ce.r.val.top1, (long long)kd.kd.teacher_batches);
    check_zero_half(&kd, steps);
    check_zero_half(&ce, steps);
    /* the teacher fed every micro-batch, and its term changed the loss */
    CHECK(kd.kd.teacher_batches == steps * 2, "teacher ran for %lld micro-batches of %lld",
          (long long)kd.kd.teacher_batches, (long long)(steps * 2));
    CHECK(kd.r.final_loss != ce.r.final_loss, "KD did not change the loss (%g)", kd.r.final_loss);
    /* stopped at step 3 and resumed: the extension's count went on from the checkpoint's */
    CHECK(resumed.r.resumed_step == 3, "resumed at step %lld", (long long)resumed.r.resumed_step);
    CHECK(resumed.updates[1] == (double)steps && straight.updates[1] == (double)steps,
          "the extension counted %g and %g steps of %lld", resumed.updates[1],
          straight.updates[1], (long long)steps);
    CHECK(same_model(straight.model, resumed.model), "%s", "a resumed run differs from an "
          "uninterrupted one");
    CHECK(resumed.r.final_loss == straight.r.final_loss, "final loss %.9g resumed, %.9g "
          "straight", resumed.r.final_loss, straight.r.final_loss);
  }
  free_outcome(&straight);
  free_outcome(&kd);
  free_outcome(&ce);
  free_outcome(&resumed);
}

static void test_two_builders_refused(const paths *p) {
  cx_train_ext ext[2];
  cx_kd_teacher_spec t = {.graph = teacher_graph, .name = "teacher"};
  cx_kd_opts ko = {.kd = cx_kd_config_defaults(), .n_teachers = 1, .teachers = &t};
  cx_train_opts o = recipe(p, cx_backend_cpu(), NULL);
  cx_kd *k1 = NULL, *k2 = NULL;
  CHECK(cx_kd_open(&ko, &o, &k1) == CX_OK && cx_kd_open(&ko, &o, &k2) == CX_OK, "%s",
        cx_last_error());
  ext[0] = cx_kd_extension(k1), ext[1] = cx_kd_extension(k2);
  ext[1].name = "distill2";
  o.extensions = ext;
  o.n_extensions = 2;
  cx_graph *g = fmnist_small_cnn(1);
  cx_train_result r;
  cx_status s = cx_train(g, &o, &r);
  CHECK(s == CX_ERR_ARG && strstr(cx_last_error(), "both build the training graph"),
        "two loss builders: %d %s", s, cx_last_error());
  cx_graph_free(g);
  cx_kd_close(k1);
  cx_kd_close(k2);
}

static cx_graph *model_spec;
static cx_graph *from_spec(void) { return cx_graph_clone(model_spec); }

/* A zoo model through the guard, stopped at step 3 and resumed, against the CPU straight. */
static void test_guard(const paths *p, const char *spec, const char *weight) {
  CHECK(cx_model_build(spec, &model_spec, NULL) == CX_OK, "%s: %s", spec, cx_last_error());
  if (!model_spec) return;
  use_ema = true;
  outcome cpu = train_run(p, cx_backend_cpu(), from_spec, teacher_graph, weight, 0);
  outcome guard = train_run(p, cx_backend_guard(), from_spec, teacher_graph, weight, 3);
  if (cpu.status == CX_OK && guard.status == CX_OK) {
    printf("%s through the guard: %lld steps (resumed at %lld), top-1 %.2f%% (CPU %.2f%%), "
           "loss %.6f (CPU %.6f)\n", spec, (long long)guard.r.steps,
           (long long)guard.r.resumed_step, guard.r.val.top1, cpu.r.val.top1,
           guard.r.final_loss, cpu.r.final_loss);
    CHECK(guard.r.resumed_step == 3, "resumed at %lld", (long long)guard.r.resumed_step);
    CHECK(same_model(cpu.model, guard.model), "%s: the guard's model differs from the CPU's",
          spec);
    CHECK(guard.r.final_loss == cpu.r.final_loss && guard.r.val.top1 == cpu.r.val.top1 &&
          guard.r.val.loss == cpu.r.val.loss, "%s: loss %.9g / %.9g, top-1 %g / %g", spec,
          guard.r.final_loss, cpu.r.final_loss, guard.r.val.top1, cpu.r.val.top1);
    CHECK(guard.kd.teacher_batches > 0 && guard.updates[1] == (double)guard.r.steps,
          "%s: teacher batches %lld, extension steps %g", spec,
          (long long)guard.kd.teacher_batches, guard.updates[1]);
    cx_eval_result e;
    cx_train_opts o = recipe(p, NULL, NULL);
    CHECK(cx_evaluate(guard.model, cx_backend_guard(), p->val, NULL, &o.val_aug, 64, &e) ==
          CX_OK && e.top1 == cpu.r.val.top1,
          "%s: evaluated through the guard: %s, top-1 %g", spec, cx_last_error(), e.top1);
  }
  CHECK(cx_guard_live_regions() == 0, "%d guard regions left", cx_guard_live_regions());
  free_outcome(&cpu);
  free_outcome(&guard);
  cx_graph_free(model_spec);
  model_spec = NULL;
}

#ifdef CX_HAVE_CUDA
/* The largest difference between a's and b's parameters and statistics, each relative to that
 * tensor's largest magnitude (at least 1e-3); its name in worst. */
static double model_distance(const cx_graph *a, const cx_graph *b, const char **worst) {
  double d = 0;
  *worst = "";
  for (int v = 0; v < a->n_values; v++) {
    const cx_value *x = &a->values[v];
    if (x->kind != CX_VALUE_PARAM && x->kind != CX_VALUE_STATE) continue;
    int64_t n;
    const float *y = weights(b, x->name, &n);
    if (!y || n != cx_shape_numel(&x->shape)) return *worst = x->name, INFINITY;
    const float *ax = x->init;
    double scale = 1e-3, e = 0;
    for (int64_t i = 0; i < n; i++) {
      scale = fmax(scale, fabs(ax[i]));
      e = fmax(e, fabs((double)ax[i] - y[i]));
      if (isnan(y[i]) || isnan(ax[i])) e = INFINITY;
    }
    if (!(e / scale <= d)) d = e / scale, *worst = x->name;
  }
  return d;
}

/* The guard's run on the GPU: KD, EMA, clipping, accumulation, dynamic loss scaling, a
 * checkpoint and a resume, against the CPU. */
static void test_cuda(const paths *p, const char *spec, const char *weight) {
  CHECK(cx_model_build(spec, &model_spec, NULL) == CX_OK, "%s: %s", spec, cx_last_error());
  if (!model_spec) return;
  use_ema = true;
  outcome cpu = train_run(p, cx_backend_cpu(), from_spec, teacher_graph, weight, 0);
  outcome gpu = train_run(p, cx_backend_cuda(), from_spec, teacher_graph, weight, 3);
  if (cpu.status == CX_OK && gpu.status == CX_OK) {
    const char *worst;
    double d = model_distance(cpu.model, gpu.model, &worst);
    double dl = fabs(gpu.r.final_loss - cpu.r.final_loss) / fmax(fabs(cpu.r.final_loss), 1e-3);
    printf("%s on the GPU: %lld steps (resumed at %lld), top-1 %.2f%% (CPU %.2f%%), loss %.6f "
           "(CPU %.6f, relative difference %.2e), parameters within %.2e (worst: %s)\n", spec,
           (long long)gpu.r.steps, (long long)gpu.r.resumed_step, gpu.r.val.top1,
           cpu.r.val.top1, gpu.r.final_loss, cpu.r.final_loss, dl, d, worst);
    CHECK(gpu.r.resumed_step == 3 && gpu.r.steps == cpu.r.steps, "resumed at %lld, %lld steps",
          (long long)gpu.r.resumed_step, (long long)gpu.r.steps);
    CHECK(d <= 2e-3, "%s: parameters differ by %.2e (relative) at %s", spec, d, worst);
    CHECK(dl <= 2e-3, "%s: loss %.9g on the GPU, %.9g on the CPU", spec, gpu.r.final_loss,
          cpu.r.final_loss);
    CHECK(fabs(gpu.r.val.top1 - cpu.r.val.top1) <= 1.0, "%s: top-1 %g on the GPU, %g on the CPU",
          spec, gpu.r.val.top1, cpu.r.val.top1);
    CHECK(gpu.kd.teacher_batches > 0 && gpu.updates[1] == (double)gpu.r.steps,
          "%s: teacher batches %lld, extension steps %g", spec,
          (long long)gpu.kd.teacher_batches, gpu.updates[1]);
  }
  free_outcome(&cpu);
  free_outcome(&gpu);
  cx_graph_free(model_spec);
  model_spec = NULL;
}
#endif

int main(int argc, char **argv) {
  bool guard = argc > 1 && !strcmp(argv[1], "guard");
  bool cuda = argc > 1 && !strcmp(argv[1], "cuda");
#ifdef CX_HAVE_CUDA
  if (cuda && cx_cuda_probe() != CX_OK) {
    printf("skipped: no GPU (%s)\n", cx_last_error());
    return 77;
  }
#else
  if (cuda) {
    printf("skipped: this build has no CUDA backend\n");
    return 77;
  }
#endif
  paths p;
  snprintf(p.dir, sizeof p.dir, "/tmp/cx_compose_XXXXXX");
  CHECK(mkdtemp(p.dir) != NULL, "%s", "mkdtemp");
  snprintf(p.small, sizeof p.small, "%s/small.h5", p.dir);
  snprintf(p.val, sizeof p.val, "%s/val.h5", p.dir);
  cx_status s = fmnist_import(p.dir, p.train, p.test);
  if (s == CX_OK) s = fmnist_subset(p.train, p.small, 0, 512);
  if (s == CX_OK) s = fmnist_subset(p.test, p.val, 0, 256);
  CHECK(s == CX_OK, "data: %s", cx_last_error());
  teacher_graph = fmnist_small_cnn(99); /* an untrained teacher still changes the loss */
#ifdef CX_HAVE_CUDA
  if (s == CX_OK && cuda) {
    test_cuda(&p, "resnet20:classes=10,input=1x28x28", "layer1.0.conv2.weight");
    test_cuda(&p, "mobilenet_v2:width=0.5,classes=10,input=1x28x28", "features.2.conv.1.0.weight");
  } else
#endif
  if (s == CX_OK && guard) {
    test_guard(&p, "resnet20:classes=10,input=1x28x28", "layer1.0.conv2.weight");
    test_guard(&p, "mobilenet_v2:width=0.5,classes=10,input=1x28x28", "features.2.conv.1.0.weight");
  } else if (s == CX_OK) {
    test_kd_and_zero_half(&p);
    test_two_builders_refused(&p);
  }
  cx_graph_free(teacher_graph);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", p.dir);
  if (system(cmd) != 0) printf("could not remove %s\n", p.dir);
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
