/* What the trainer does around the optimizer update (docs/training.md).
 * Loss scaling: scaling by a power of two changes no parameter;
 * a forced overflow (the scale started at 2^127 on inputs with large values) skips the step,
 * leaves the parameters alone and halves the scale each time until training proceeds; a run
 * resumed from a checkpoint taken among the skipped steps ends bit for bit as an uninterrupted
 * one.
 * The weight average (EMA): after one step the trained model is decay * w0 + (1 - decay) * w1,
 * w1 being what the same run without the average ends with; a resumed run ends bit for bit as an
 * uninterrupted one (the average and its update count are in the checkpoint).
 * A tiny synthetic data set, so the test is fast. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kernels/cpu/cpu.h"
#include "../data/data.h"
#include "../train/trainer.h"
#include "op_check.h"
#include "tiny_task.h"
#include "check.h"

enum { N = 64, SIDE = 8, K = 4, BATCH = 8 };

static char dir[64], data_path[128];

static void make_data(void) {
  snprintf(data_path, sizeof data_path, "%s/set.h5", dir);
  CHECK(tiny_dataset_write(data_path, N, SIDE, K) == CX_OK, "writing the set: %s",
        cx_last_error());
}

/* conv 3x3 - relu - global pool - linear: no normalisation, so large inputs give large
 * gradients (what makes 2^127 overflow). */
static cx_graph *model(void) {
  return tiny_cnn(SIDE, K);
}

/* Per logged step (every step): the scale and the skipped count. */
typedef struct trace {
  int n;
  double scale[64];
  int64_t skipped[64];
} trace;

static void on_step(void *user, const cx_train_step_info *s) {
  trace *t = user;
  if (t->n < 64) t->scale[t->n] = s->loss_scale, t->skipped[t->n++] = s->skipped_steps;
}

static cx_train_opts opts(cx_loss_scale_mode mode, float scale, float std, trace *t) {
  cx_train_opts o = cx_train_defaults();
  o.train_path = data_path;
  o.batch_size = BATCH;
  o.epochs = 2;
  o.optim = cx_optim_defaults(CX_OPTIM_ADAMW); /* counts its updates: bias correction */
  o.schedule = cx_schedule_defaults(CX_SCHEDULE_COSINE, 1e-2f);
  o.loader.aug.mean[0] = 0.5f;
  o.loader.aug.std[0] = std;
  o.loss_scale_mode = mode;
  o.loss_scaler.scale = scale;
  o.quiet = true;
  o.diagnostics = false;
  o.log_every = 1;
  o.backend = cx_backend_cpu();
  static cx_train_ext ext; /* outlives the returned options; one run at a time */
  ext = (cx_train_ext){.name = "trace", .self = t, .on_step = on_step};
  o.extensions = t ? &ext : NULL;
  o.n_extensions = t ? 1 : 0;
  return o;
}

static cx_status train(cx_graph *g, const cx_train_opts *o, cx_train_result *r) {
  cx_status s = cx_train(g, o, r);
  if (s != CX_OK) printf("train: %s\n", cx_last_error());
  return s;
}

/* Largest relative difference over the parameters of two graphs. */
static double param_diff(const cx_graph *a, const cx_graph *b) {
  double worst = 0;
  for (int v = 0; v < a->n_values; v++) {
    if (a->values[v].kind != CX_VALUE_PARAM) continue;
    const float *x = a->values[v].init, *y = b->values[v].init;
    for (int64_t i = 0; i < cx_shape_numel(&a->values[v].shape); i++) {
      double d = fabs((double)x[i] - y[i]) / fmax(fmax(fabs(x[i]), fabs(y[i])), 1e-6);
      if (!(d <= worst)) worst = d;
    }
  }
  return worst;
}

static void test_power_of_two(void) {
  cx_graph *plain = model(), *fixed = model(), *dyn = model(), *init = model();
  cx_train_result r;
  cx_train_opts o = opts(CX_LOSS_SCALE_NONE, 1, 0.3f, NULL);
  bool ok = train(plain, &o, &r) == CX_OK;
  o = opts(CX_LOSS_SCALE_STATIC, 1024, 0.3f, NULL);
  ok = ok && train(fixed, &o, &r) == CX_OK;
  o = opts(CX_LOSS_SCALE_DYNAMIC, 65536, 0.3f, NULL);
  ok = ok && train(dyn, &o, &r) == CX_OK;
  CHECK(ok && r.skipped_steps == 0 && r.loss_scale == 65536, "dynamic: %lld skipped, scale %g",
        (long long)r.skipped_steps, r.loss_scale);
  CHECK(ok && param_diff(plain, init) > 1e-3, "training changed nothing");
  double d1 = param_diff(plain, fixed), d2 = param_diff(plain, dyn);
  printf("power-of-two scales: parameters differ by %g (static 1024), %g (dynamic 2^16)\n", d1,
         d2);
  CHECK(ok && d1 <= 1e-6 && d2 <= 1e-6, "scaled runs differ from the plain one");
  cx_graph_free(plain);
  cx_graph_free(fixed);
  cx_graph_free(dyn);
  cx_graph_free(init);
}

static void test_overflow_skips(void) {
  const float start = ldexpf(1, 127);
  cx_graph *g = model(), *init = model();
  cx_train_result r;
  cx_train_opts o = opts(CX_LOSS_SCALE_DYNAMIC, start, 1e-3f, NULL);
  o.stop_after = 1;
  bool ok = train(g, &o, &r) == CX_OK;
  CHECK(ok && r.steps == 1 && r.skipped_steps == 1 && r.loss_scale == ldexp(1, 126),
        "first step: %lld steps, %lld skipped, scale %g", (long long)r.steps,
        (long long)r.skipped_steps, r.loss_scale);
  CHECK(ok && param_diff(g, init) == 0, "a skipped step changed the parameters");
  cx_graph_free(g);

  trace t = {0};
  g = model();
  o = opts(CX_LOSS_SCALE_DYNAMIC, start, 1e-3f, &t);
  ok = train(g, &o, &r) == CX_OK;
  int64_t k = r.skipped_steps;
  printf("from 2^127: %lld of %lld steps skipped, final scale 2^%d\n", (long long)k,
         (long long)r.steps, ilogb(r.loss_scale));
  CHECK(ok && k >= 2 && r.steps - k >= 4, "%lld of %lld steps skipped", (long long)k,
        (long long)r.steps);
  CHECK(ok && r.loss_scale == ldexp(1, 127 - (int)k), "scale %g after %lld skips", r.loss_scale,
        (long long)k);
  for (int i = 0; ok && i < t.n; i++) { /* halving while skipping, then steady */
    int64_t want = i < k ? i + 1 : k;
    CHECK(t.skipped[i] == want && t.scale[i] == ldexp(1, 127 - (int)want),
          "step %d: %lld skipped, scale %g", i + 1, (long long)t.skipped[i], t.scale[i]);
  }
  CHECK(ok && param_diff(g, init) > 1e-3, "training did not proceed after the skips");
  cx_graph_free(g);
  cx_graph_free(init);
}

/* Stopped after 2 steps (both skipped) and resumed: the scaler and the optimizer's update count
 * come back, so the end is the same bit for bit. */
static void test_resume(void) {
  const float start = ldexpf(1, 127);
  cx_graph *whole = model(), *parts = model();
  cx_train_result r1, r2;
  char ck[128], last[4200];
  snprintf(ck, sizeof ck, "%s/ck", dir);
  cx_train_opts o = opts(CX_LOSS_SCALE_DYNAMIC, start, 1e-3f, NULL);
  bool ok = train(whole, &o, &r1) == CX_OK;
  o.checkpoint_dir = ck;
  o.stop_after = 2;
  ok = ok && train(parts, &o, &r2) == CX_OK;
  o.stop_after = 0;
  snprintf(last, sizeof last, "%s", r2.checkpoint); /* cx_train clears r2 first */
  double first_seconds = r2.seconds;
  o.resume_from = last;
  ok = ok && train(parts, &o, &r2) == CX_OK;
  /* the checkpoint carries the first run's time (in ms, stamped just before its end) */
  CHECK(ok && fabs(r2.resumed_seconds - first_seconds) < 1 &&
        r2.resumed_seconds <= first_seconds + 0.001 && r2.seconds >= r2.resumed_seconds,
        "time: first run %g s, resumed from %g s, whole %g s", first_seconds,
        r2.resumed_seconds, r2.seconds);
  CHECK(ok && r2.resumed_step == 2 && r2.skipped_steps == r1.skipped_steps &&
        r2.loss_scale == r1.loss_scale, "resumed: from %lld, %lld skipped, scale %g; whole run: "
        "%lld skipped, scale %g", (long long)r2.resumed_step, (long long)r2.skipped_steps,
        r2.loss_scale, (long long)r1.skipped_steps, r1.loss_scale);
  CHECK(ok && param_diff(whole, parts) == 0, "resumed parameters differ by %g",
        param_diff(whole, parts));
  cx_graph_free(whole);
  cx_graph_free(parts);
}

/* Largest |ema - (d * w0 + (1 - d) * w1)| over the parameters. */
static double ema_error(const cx_graph *ema, const cx_graph *w0, const cx_graph *w1, double d) {
  double worst = 0;
  for (int v = 0; v < ema->n_values; v++) {
    if (ema->values[v].kind != CX_VALUE_PARAM) continue;
    const float *e = ema->values[v].init, *a = w0->values[v].init, *b = w1->values[v].init;
    for (int64_t i = 0; i < cx_shape_numel(&ema->values[v].shape); i++) {
      double err = fabs(e[i] - (d * a[i] + (1 - d) * b[i]));
      if (!(err <= worst)) worst = err;
    }
  }
  return worst;
}

static void test_ema(void) {
  const float d = 0.75f;
  cx_graph *init = model(), *live = model(), *avg = model();
  cx_train_result r;
  cx_train_opts o = opts(CX_LOSS_SCALE_NONE, 1, 0.3f, NULL);
  o.stop_after = 1;
  bool ok = train(live, &o, &r) == CX_OK;
  o.use_ema = true;
  o.ema.decay = d;
  ok = ok && train(avg, &o, &r) == CX_OK;
  double err = ema_error(avg, init, live, d);
  printf("EMA after one step: largest error %g\n", err);
  CHECK(ok && param_diff(live, init) > 1e-3, "the step changed nothing");
  CHECK(ok && err <= 1e-6, "the trained model is not the average (error %g)", err);

  cx_graph *whole = model(), *parts = model();
  char ck[128], last[4200];
  snprintf(ck, sizeof ck, "%s/ck_ema", dir);
  o.stop_after = 0;
  ok = train(whole, &o, &r) == CX_OK;
  o.checkpoint_dir = ck;
  o.stop_after = 3;
  ok = ok && train(parts, &o, &r) == CX_OK;
  snprintf(last, sizeof last, "%s", r.checkpoint);
  o.stop_after = 0;
  o.resume_from = last;
  ok = ok && train(parts, &o, &r) == CX_OK;
  CHECK(ok && r.resumed_step == 3 && param_diff(whole, parts) == 0,
        "EMA resumed from step %lld: parameters differ by %g", (long long)r.resumed_step,
        param_diff(whole, parts));
  CHECK(ok && param_diff(whole, live) > 1e-3, "the average equals the one-step weights");
  cx_graph_free(init);
  cx_graph_free(live);
  cx_graph_free(avg);
  cx_graph_free(whole);
  cx_graph_free(parts);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/cx_scale_XXXXXX");
  if (!mkdtemp(dir)) return printf("mkdtemp failed\n"), 1;
  make_data();
  test_power_of_two();
  test_overflow_skips();
  test_resume();
  test_ema();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("could not remove %s\n", dir);
  if (fails) printf("%d check(s) failed\n", fails);
  else printf("test_train_update: all passed\n");
  return fails ? 1 : 0;
}
