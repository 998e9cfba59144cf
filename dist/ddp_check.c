/* Replica checks: a CRC-32C of every parameter's bytes and of the STATE values that must agree
 * (observer scales; BatchNorm running statistics with sync_bn), rank 0's broadcast, the first
 * one that differs anywhere agreed with one all-reduce, so every rank stops together. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "../core/program.h"
#include "../train/crc32c.h"
#include "ddp_internal.h"

/* What the checks compare: the parameters, then the STATE values of cx_ddp_find_states. */
static int n_items(const cx_ddp *d) { return d->n_params + d->n_states; }

static const cx_tensor *item(cx_ddp *d, int k) {
  return k < d->n_params ? cx_program_param(d->train, k) : d->state[k - d->n_params];
}

static const char *item_name(const cx_ddp *d, int k) {
  return k < d->n_params ? cx_program_param_name(d->train, k) : d->state_name[k - d->n_params];
}

static bool bn_running_stat(const cx_graph *g, int v) {
  for (int i = 0; i < g->n_nodes; i++) {
    const cx_node *n = &g->nodes[i];
    if (!strcmp(n->op->name, "BatchNormTrain") && n->n_in >= 5 && (n->in[3] == v || n->in[4] == v))
      return true;
  }
  return false;
}

cx_status cx_ddp_find_states(cx_ddp *d) {
  const cx_graph *g = cx_program_graph(d->train);
  free(d->state), free(d->state_name);
  d->state = calloc((size_t)g->n_values + 1, sizeof *d->state);
  d->state_name = calloc((size_t)g->n_values + 1, sizeof *d->state_name);
  if (!d->state || !d->state_name) return cx_fail(CX_ERR_NOMEM, "out of memory");
  d->n_states = 0;
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].kind != CX_VALUE_STATE || (!d->c.sync_bn && bn_running_stat(g, v))) continue;
    d->state[d->n_states] = cx_program_value_tensor(d->train, v);
    d->state_name[d->n_states++] = g->values[v].name;
  }
  return CX_OK;
}

static cx_status alloc_room(cx_ddp *d) {
  if (d->crc) return CX_OK;
  int64_t largest = 1;
  for (int k = 0; k < n_items(d); k++) {
    int64_t n = (int64_t)cx_tensor_nbytes(item(d, k));
    if (n > largest) largest = n;
  }
  d->crc = calloc((size_t)n_items(d) + 1, sizeof *d->crc);
  d->crc_root = calloc((size_t)n_items(d) + 1, sizeof *d->crc_root);
  d->host = malloc((size_t)largest);
  if (!d->crc || !d->crc_root || !d->host) return cx_fail(CX_ERR_NOMEM, "out of memory");
  return CX_OK;
}

/* The same parameter count and gradient floats everywhere, before any list or bucket is
 * exchanged: a rank that built another model would otherwise corrupt the reductions. */
static cx_status check_shapes(cx_ddp *d) {
  int64_t floats = 0;
  for (int i = 0; i < d->n_buckets; i++) floats += d->buckets[i].n;
  int64_t items = n_items(d);
  /* min and max at once */
  int64_t v[6] = {d->n_params, -(int64_t)d->n_params, floats, -floats, items, -items};
  CX_TRY(cx_comm_allreduce_i64(v, 6, CX_COMM_MIN));
  if (v[0] == -v[1] && v[2] == -v[3] && v[4] == -v[5]) return CX_OK;
  return cx_fail(CX_ERR_ARG, "ddp: the ranks built different models: %lld to %lld parameters, "
                 "%lld to %lld gradient values, %lld to %lld parameters and statistics (this "
                 "rank: %d, %lld, %lld); every rank must train the same model", (long long)v[0],
                 (long long)-v[1], (long long)v[2], (long long)-v[3], (long long)v[4],
                 (long long)-v[5], d->n_params, (long long)floats, (long long)items);
}

cx_status cx_ddp_check_replicas(cx_ddp *d, const char *when) {
  if (d->world < 2) return CX_OK;
  CX_TRY(check_shapes(d));
  CX_TRY(alloc_room(d));
  int n = n_items(d);
  for (int k = 0; k < n; k++) {
    const cx_tensor *p = item(d, k);
    CX_TRY(cx_program_read(d->train, p, d->host));
    d->crc[k] = d->crc_root[k] = cx_crc32c(d->host, cx_tensor_nbytes(p));
  }
  int64_t bytes = (int64_t)n * (int64_t)sizeof *d->crc_root;
  CX_TRY(cx_comm_bcast(d->crc_root, bytes, 0));
  int first = n;
  for (int k = 0; k < n && first == n; k++)
    if (d->crc[k] != d->crc_root[k]) first = k;
  int64_t key = (int64_t)first * d->world + d->rank; /* the first item, then the rank */
  CX_TRY(cx_comm_allreduce_i64(&key, 1, CX_COMM_MIN));
  d->checks++;
  int at = (int)(key / d->world), rank = (int)(key % d->world);
  if (at == n) return CX_OK;
  return cx_fail(CX_ERR_NUMERIC, "ddp: the replicas differ %s (after %lld reduced steps): "
                 "%s '%s' on rank %d is not rank 0's (CRC-32C %08x on rank 0): the ranks "
                 "no longer train the same model; stopping every rank", when,
                 (long long)d->reductions, at < d->n_params ? "parameter" : "statistic",
                 item_name(d, at), rank, (unsigned)d->crc_root[at]);
}

void cx_ddp_test_perturb(cx_ddp *d, int64_t step) {
  const char *e = getenv("CX_TEST_DDP_PERTURB");
  int rank, param;
  long long at;
  if (!e || sscanf(e, "%d:%lld:%d", &rank, &at, &param) != 3 || rank != d->rank || at != step ||
      param < 0 || param >= d->n_params || alloc_room(d) != CX_OK)
    return;
  const cx_tensor *p = cx_program_param(d->train, param);
  if (p->dtype != CX_F32 || cx_program_read(d->train, p, d->host) != CX_OK) return;
  d->host[0] += 1.0f;
  cx_program_write(d->train, p, d->host);
}
