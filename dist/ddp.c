/* The "ddp" trainer extension: gradients averaged over the ranks before every update.
 *
 * Buckets: the parameters, in reverse order (the order backward finishes them), are cut into
 * buckets of about first_bucket_mb (the first) and bucket_mb (the others), as PyTorch DDP does.
 * As each gradient the update will read is final (grad_final: on the last micro-batch only), it
 * is copied into its bucket; a bucket whose gradients are all in starts its reduction, in bucket
 * order (every rank must start them in the same order). before_update waits for all and writes
 * the averages back into the tensors it was handed.
 *
 * Two transports. A program on the CPU, or on GPUs that cannot all use NCCL, keeps its buckets
 * in host memory and reduces them with MPI_Iallreduce; MPI makes progress only inside MPI
 * calls, so every grad_final also tests the started buckets, and the reductions go on between
 * the backward nodes that follow. A program on a GPU whose ranks each have one (nccl.h) keeps its
 * buckets in device memory: device-to-device copies on the program's stream, and NCCL's average
 * on a stream of its own, overlapping the backward kernels queued after it.
 *
 * The replicas are compared (ddp_check.c) at the start, every check_every steps and at every
 * checkpoint. The training program is told it is one of `world` replicas (cx_replicas): what it
 * reduces itself — synchronised BatchNorm's sums (sync_bn), quantization's observer ranges —
 * goes through replica_reduce, blocking all-reduces of doubles over MPI. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/program.h"
#include "comm.h"
#include "ddp_internal.h"
#include "nccl.h"

cx_ddp_config cx_ddp_defaults(void) {
  return (cx_ddp_config){.bucket_mb = 25, .first_bucket_mb = 1, .check_every = 100};
}

double cx_ddp_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The first failure inside grad_final (which returns nothing), reported by before_update. */
static void fail_later(cx_ddp *d, cx_status s) {
  if (d->status != CX_OK) return;
  d->status = s;
  snprintf(d->error, sizeof d->error, "%s", cx_last_error());
}

static cx_status plan_buckets(cx_ddp *d) {
  int n = d->n_params;
  d->bucket_of = calloc((size_t)n + 1, sizeof *d->bucket_of);
  d->offset = calloc((size_t)n + 1, sizeof *d->offset);
  d->target = calloc((size_t)n + 1, sizeof *d->target);
  d->buckets = calloc((size_t)n + 1, sizeof *d->buckets);
  if (!d->bucket_of || !d->offset || !d->target || !d->buckets)
    return cx_fail(CX_ERR_NOMEM, "out of memory");
  double cap = d->c.first_bucket_mb * 1e6;
  ddp_bucket *b = NULL;
  for (int k = n - 1; k >= 0; k--) {
    const cx_tensor *g = cx_program_param_grad(d->train, k);
    d->bucket_of[k] = -1;
    if (!g) continue;
    if (g->dtype != CX_F32)
      return cx_fail(CX_ERR_UNSUPPORTED, "ddp: the gradient of '%s' is %s; gradients are "
                     "reduced in f32 only", cx_program_param_name(d->train, k),
                     cx_dtype_name(g->dtype));
    if (!b || (double)b->n * 4 >= cap) {
      if (b) cap = d->c.bucket_mb * 1e6;
      b = &d->buckets[d->n_buckets++];
    }
    d->bucket_of[k] = (int)(b - d->buckets);
    d->offset[k] = b->n;
    b->n += cx_tensor_numel(g);
    b->params++;
  }
  for (int i = 0; i < d->n_buckets; i++) {
    ddp_bucket *x = &d->buckets[i];
    size_t bytes = (size_t)x->n * sizeof(float) + 1;
    x->buf = d->on_device ? d->be->alloc(bytes) : malloc(bytes);
    if (!x->buf) return cx_fail(CX_ERR_NOMEM, "ddp: out of %s memory for a bucket of %lld floats",
                                d->on_device ? "device" : "host", (long long)x->n);
    CX_TRY(cx_comm_req_new(&x->req));
    x->pending = x->params;
    d->bytes_per_step += x->n * (int64_t)sizeof(float);
  }
  return CX_OK;
}

/* The program's reductions (cx_replicas): blocking all-reduces of doubles. */
static cx_status replica_reduce(void *user, double *buf, int64_t n, cx_reduce_op op) {
  cx_ddp *d = user;
  if (n < 0 || n > (1 << 30))
    return cx_fail(CX_ERR_ARG, "ddp: a reduction of %lld values", (long long)n);
  double t0 = cx_ddp_now();
  cx_comm_op o = op == CX_REDUCE_MIN ? CX_COMM_MIN : op == CX_REDUCE_MAX ? CX_COMM_MAX : CX_COMM_SUM;
  CX_TRY(cx_comm_allreduce_f64(buf, (int)n, o));
  d->pool_s += cx_ddp_now() - t0;
  d->pool_calls++;
  d->pool_bytes += n * (int64_t)sizeof(double);
  return CX_OK;
}

/* What a rank on a GPU tells the others when they choose the transport. */
typedef struct rank_gpu {
  int32_t usable, node; /* node: the machine (cx_comm_node) */
  char gpu[32];         /* PCI bus id */
  char why[160];        /* when not usable */
} rank_gpu;

/* Why NCCL cannot be used by all these ranks, or "" when it can: one cannot, or two share a
 * GPU (more ranks than GPUs on a machine; CUDA_VISIBLE_DEVICES giving each rank its own GPU is
 * fine, whatever number the rank then sees it under). */
static void nccl_refusal(rank_gpu *all, int world, char *why, size_t len) {
  why[0] = 0;
  for (int r = 0; r < world && !why[0]; r++) {
    all[r].gpu[sizeof all[r].gpu - 1] = all[r].why[sizeof all[r].why - 1] = 0;
    if (!all[r].usable) snprintf(why, len, "rank %d: %s", r, all[r].why);
    for (int q = 0; q < r && !why[0]; q++)
      if (all[q].node == all[r].node && !strcmp(all[q].gpu, all[r].gpu))
        snprintf(why, len, "ranks %d and %d share the GPU %s (NCCL needs a GPU per rank)", q, r,
                 all[r].gpu);
  }
}

/* NCCL when the program is on GPUs and every rank can use it, else MPI through host memory;
 * every rank sees every rank's answer, so all take the same transport. */
static cx_status choose_transport(cx_ddp *d) {
  snprintf(d->transport, sizeof d->transport, "MPI");
  if (d->be->device == CX_DEVICE_CPU) return CX_OK;
  rank_gpu me = {.node = cx_comm_node()};
  me.usable = cx_nccl_usable(me.gpu, sizeof me.gpu, me.why, sizeof me.why);
  rank_gpu *all = calloc((size_t)d->world, sizeof *all);
  if (!all) return cx_fail(CX_ERR_NOMEM, "out of memory");
  char why[400];
  cx_status s = cx_comm_allgather(&me, all, (int64_t)sizeof me);
  if (s == CX_OK) nccl_refusal(all, d->world, why, sizeof why);
  free(all);
  CX_TRY(s);
  d->on_device = !why[0];
  if (d->on_device) snprintf(d->transport, sizeof d->transport, "NCCL %s", cx_nccl_version());
  else snprintf(d->transport, sizeof d->transport, "MPI through host memory, not NCCL: %s", why);
  return CX_OK;
}

static cx_status ddp_opened(void *self, cx_program *train) {
  cx_ddp *d = self;
  d->train = train;
  d->be = cx_program_backend(train), d->stream = cx_program_stream(train);
  d->n_params = cx_program_param_count(train);
  d->rank = cx_comm_rank(), d->world = cx_comm_world();
  /* the program learns that it is one of world replicas, and how they reduce */
  cx_replicas r = {.count = d->world, .reduce = replica_reduce, .user = d,
                   .sync_batch_stats = d->c.sync_bn};
  cx_program_set_replicas(train, &r);
  CX_TRY(cx_ddp_find_states(d));
  CX_TRY(choose_transport(d));
  CX_TRY(plan_buckets(d));
  return d->on_device ? cx_nccl_open(d->rank, d->world, d->n_buckets, &d->nccl) : CX_OK;
}

/* Every initial replica must be the same: the models' initialisation is seeded, an imported
 * model is one file; the check proves it (and catches a rank that read another file). */
static cx_status ddp_optimizer_ready(void *self, struct cx_optimizer *o, struct cx_ema *ema) {
  (void)o, (void)ema;
  return cx_ddp_check_replicas(self, "at the start");
}

/* ---- a bucket's gradients in, reduced and out: host memory and MPI, or the device's and NCCL */

static cx_status bucket_fill(cx_ddp *d, int param, const cx_tensor *grad) {
  float *dst = d->buckets[d->bucket_of[param]].buf + d->offset[param];
  if (!d->on_device) return cx_program_read(d->train, grad, dst);
  /* queued after the kernel that made it; the reduction waits for the copy */
  return d->be->copy_async(dst, d->be->device, grad->data, d->be->device,
                           cx_tensor_nbytes(grad), d->stream);
}

static cx_status bucket_start(cx_ddp *d, ddp_bucket *b) {
  if (!d->on_device) return cx_comm_iallreduce_f32(b->buf, b->n, b->req);
  return cx_nccl_start(d->nccl, (int)(b - d->buckets), b->buf, b->n, d->stream);
}

static cx_status bucket_test(cx_ddp *d, ddp_bucket *b, bool *done) {
  if (!d->on_device) return cx_comm_test(b->req, done);
  return cx_nccl_test(d->nccl, (int)(b - d->buckets), done);
}

/* The averages back into the tensors the update reads. */
static cx_status write_back(cx_ddp *d) {
  if (!d->on_device) { /* MPI summed; NCCL averaged */
    float inv = 1.0f / (float)d->world;
    for (int i = 0; i < d->n_buckets; i++)
      for (int64_t j = 0; j < d->buckets[i].n; j++) d->buckets[i].buf[j] *= inv;
  }
  for (int k = 0; k < d->n_params; k++) {
    if (d->bucket_of[k] < 0) continue;
    const cx_tensor *t = d->target[k];
    const float *src = d->buckets[d->bucket_of[k]].buf + d->offset[k];
    CX_TRY(d->on_device ? d->be->copy_async(t->data, d->be->device, src, d->be->device,
                                            cx_tensor_nbytes(t), d->stream)
                        : cx_program_write(d->train, t, src));
  }
  return CX_OK;
}

/* Starts, in bucket order, every bucket whose gradients are all in. */
static cx_status start_ready(cx_ddp *d) {
  while (d->next_start < d->n_buckets && d->buckets[d->next_start].pending == 0) {
    ddp_bucket *b = &d->buckets[d->next_start++];
    CX_TRY(bucket_start(d, b));
  }
  return CX_OK;
}

/* Notes which started reductions have finished; over MPI this is also what drives them on
 * (MPI progresses only inside its calls). NCCL progresses by itself: it is asked before the
 * update only. */
static cx_status progress(cx_ddp *d) {
  for (int i = d->next_done; i < d->next_start; i++) {
    bool done;
    CX_TRY(bucket_test(d, &d->buckets[i], &done));
    if (!done) break;
    d->buckets[i].done = true;
    d->next_done = i + 1;
  }
  return CX_OK;
}

/* The test hook of tests/test_ddp.c: CX_TEST_DDP_INF=RANK:STEP makes one gradient element of
 * that rank at that optimizer step (1 for the first) infinite before its bucket is reduced. */
static cx_status test_inject_inf(cx_ddp *d) {
  const char *e = getenv("CX_TEST_DDP_INF");
  int rank;
  long long step;
  if (!e || sscanf(e, "%d:%lld", &rank, &step) != 2 || rank != d->rank ||
      step != d->reductions + 1 || !d->n_buckets)
    return CX_OK;
  static const float inf = 1.0f / 0.0f;
  if (!d->on_device) return d->buckets[0].buf[0] = inf, CX_OK;
  CX_TRY(d->be->copy_async(d->buckets[0].buf, d->be->device, &inf, CX_DEVICE_CPU, sizeof inf,
                           d->stream));
  return d->be->sync(d->stream); /* before `inf` may be read: the copy is queued */
}

static void ddp_grad_final(void *self, int param, const cx_tensor *grad) {
  cx_ddp *d = self;
  if (d->status != CX_OK || param < 0 || param >= d->n_params || d->bucket_of[param] < 0) return;
  ddp_bucket *b = &d->buckets[d->bucket_of[param]];
  cx_status s = bucket_fill(d, param, grad);
  if (s != CX_OK) return fail_later(d, s);
  d->target[param] = grad;
  if (--b->pending == 0 && b == d->buckets) s = test_inject_inf(d);
  if (s == CX_OK) s = start_ready(d);
  if (s == CX_OK && !d->on_device) s = progress(d);
  if (s != CX_OK) fail_later(d, s);
}

/* The trainer has waited for backward (a program on a stream included): what is not done yet
 * is the communication the step waits for. */
static cx_status wait_all(cx_ddp *d) {
  if (d->next_start < d->n_buckets)
    return cx_fail(CX_ERR_ARG, "ddp: %d of %d gradient buckets were never complete before the "
                   "update (a gradient the backward pass did not hand over)",
                   d->n_buckets - d->next_start, d->n_buckets);
  if (d->on_device) CX_TRY(progress(d));
  for (int i = 0; i < d->n_buckets; i++) d->hidden += d->buckets[i].done;
  if (d->on_device) return cx_nccl_wait(d->nccl, d->stream);
  for (int i = 0; i < d->n_buckets; i++) CX_TRY(cx_comm_wait(d->buckets[i].req));
  return CX_OK;
}

static cx_status ddp_before_update(void *self, cx_program *train) {
  (void)train;
  cx_ddp *d = self;
  if (d->status != CX_OK) return cx_fail(d->status, "%s", d->error);
  double t0 = cx_ddp_now();
  CX_TRY(wait_all(d));
  d->wait_s += cx_ddp_now() - t0;
  CX_TRY(write_back(d));
  for (int i = 0; i < d->n_buckets; i++) {
    ddp_bucket *b = &d->buckets[i];
    b->pending = b->params, b->done = false;
  }
  d->next_start = d->next_done = 0;
  d->reductions++;
  return CX_OK;
}

static cx_status ddp_after_update(void *self, cx_program *train, int64_t step, bool updated) {
  (void)train, (void)updated;
  cx_ddp *d = self;
  cx_ddp_test_perturb(d, step);
  if (d->c.check_every > 0 && step % d->c.check_every == 0)
    return cx_ddp_check_replicas(d, "after an update");
  return CX_OK;
}

static cx_status ddp_checkpoint(void *self, cx_program *train, int64_t step) {
  (void)train, (void)step;
  return cx_ddp_check_replicas(self, "at a checkpoint");
}

static cx_status ddp_reduce_metrics(void *self, double *sums, int n) {
  (void)self;
  return cx_comm_allreduce_f64(sums, n, CX_COMM_SUM);
}

cx_status cx_ddp_create(const cx_ddp_config *c, cx_ddp **out) {
  if (c->bucket_mb <= 0 || c->first_bucket_mb <= 0 || c->check_every < 0)
    return cx_fail(CX_ERR_ARG, "ddp: bucket sizes %g and %g MB must be above 0, check_every %lld "
                   "at least 0", c->first_bucket_mb, c->bucket_mb, (long long)c->check_every);
  *out = calloc(1, sizeof **out);
  if (!*out) return cx_fail(CX_ERR_NOMEM, "out of memory");
  (*out)->c = *c;
  return CX_OK;
}

void cx_ddp_free(cx_ddp *d) {
  if (!d) return;
  cx_nccl_close(d->nccl); /* first: it ends any reduction still writing into the buckets */
  for (int i = 0; i < d->n_buckets; i++) {
    if (d->on_device) d->be->free(d->buckets[i].buf);
    else free(d->buckets[i].buf);
    cx_comm_req_free(d->buckets[i].req);
  }
  free(d->buckets), free(d->bucket_of), free(d->offset), free(d->target);
  free(d->crc), free(d->crc_root), free(d->host);
  free(d->state), free(d->state_name);
  free(d);
}

cx_train_ext cx_ddp_extension(cx_ddp *d) {
  return (cx_train_ext){.name = "ddp", .self = d, .opened = ddp_opened,
                        .optimizer_ready = ddp_optimizer_ready, .grad_final = ddp_grad_final,
                        .before_update = ddp_before_update, .after_update = ddp_after_update,
                        .reduce_metrics = ddp_reduce_metrics, .checkpoint = ddp_checkpoint};
}

void cx_ddp_get_stats(const cx_ddp *d, cx_ddp_stats *s) {
  int64_t all = d->reductions * d->n_buckets;
  *s = (cx_ddp_stats){.buckets = d->n_buckets, .bytes_per_step = d->bytes_per_step,
                      .reductions = d->reductions, .checks = d->checks, .wait_s = d->wait_s,
                      .hidden_frac = all ? (double)d->hidden / (double)all : 0,
                      .pool_calls = d->pool_calls, .pool_bytes = d->pool_bytes,
                      .pool_s = d->pool_s, .transport = d->transport};
}
