/* Data parallelism in the commands that train: the shard, rank 0's outputs, the extension. */
#include <string.h>

#include "dist_cli.h"

void cx_cli_dist_train_opts(cx_train_opts *o) {
  o->loader.rank = cx_dist_rank();
  o->loader.world = cx_dist_world();
  if (cx_dist_is_root()) return;
  o->checkpoint_dir = NULL;
  o->val_path = NULL;
  o->quiet = true;
  o->progress_bar = false;
  o->profile_steps = 0;
}

cx_status cx_cli_ddp_open(cx_cli_ddp *c, bool sync_bn) {
  c->d = NULL;
  c->sync_bn = sync_bn;
  if (cx_dist_world() < 2) return CX_OK;
  cx_ddp_config dc = cx_ddp_defaults();
  dc.sync_bn = sync_bn;
  return cx_ddp_create(&dc, &c->d);
}

cx_status cx_cli_ddp_add(cx_cli_ddp *c, cx_train_ext *ext, int cap, int *n) {
  if (!c->d) return CX_OK;
  if (*n >= cap) return cx_fail(CX_ERR_ARG, "more than %d trainer extensions", cap);
  ext[(*n)++] = cx_ddp_extension(c->d);
  return CX_OK;
}

static double wait_fraction(const cx_train_result *r) {
  return r->step_seconds > 0 ? r->sync_wait_s / r->step_seconds : 0;
}

void cx_cli_ddp_print(const cx_cli_ddp *c, const cx_train_result *r, FILE *f) {
  if (!c->d) return;
  cx_ddp_stats s;
  cx_ddp_get_stats(c->d, &s);
  fprintf(f, "data parallel: %d ranks (%s), %.2f MB of gradients all-reduced per step in %d "
          "bucket(s); waiting for them took %.1f%% of the step time (%.0f%% of the buckets were "
          "done before the update)\n", r->world, s.transport, (double)s.bytes_per_step / 1e6,
          s.buckets, 100 * wait_fraction(r), 100 * s.hidden_frac);
  if (s.pool_calls && s.reductions)
    fprintf(f, "data parallel: %s%.1f reductions of %.1f KB in all per step inside forward and "
            "backward, %.1f%% of the step time\n", c->sync_bn ? "synchronised BatchNorm: " : "",
            (double)s.pool_calls / (double)s.reductions,
            (double)s.pool_bytes / (double)s.reductions / 1e3,
            r->step_seconds > 0 ? 100 * s.pool_s / r->step_seconds : 0);
}

void cx_cli_ddp_json(const cx_cli_ddp *c, const cx_train_result *r, FILE *f) {
  if (!c->d) return;
  cx_ddp_stats s;
  cx_ddp_get_stats(c->d, &s);
  fprintf(f, ",\"ranks\":%d,\"transport\":\"%s\",\"reduced_bytes_per_step\":%lld,\"buckets\":%d,"
          "\"comm_wait_fraction\":%.6f,\"replica_checks\":%lld,\"sync_bn\":%s,"
          "\"stat_reductions\":%lld,\"stat_reduced_bytes\":%lld,\"stat_wait_s\":%.6f",
          r->world, strncmp(s.transport, "NCCL", 4) ? "mpi" : "nccl", (long long)s.bytes_per_step,
          s.buckets, wait_fraction(r), (long long)s.checks,
          c->sync_bn ? "true" : "false", (long long)s.pool_calls, (long long)s.pool_bytes,
          s.pool_s);
}

void cx_cli_ddp_close(cx_cli_ddp *c) {
  cx_ddp_free(c->d);
  c->d = NULL;
}
