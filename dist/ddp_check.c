/* Replica checks: a CRC-32C of every parameter's bytes, rank 0's broadcast, the first
 * parameter that differs anywhere agreed with one all-reduce, so every rank stops together. */
#include <stdio.h>
#include <stdlib.h>

#include "../core/program.h"
#include "../train/crc32c.h"
#include "ddp_internal.h"

static cx_status alloc_room(cx_ddp *d) {
  if (d->crc) return CX_OK;
  int64_t largest = 1;
  for (int k = 0; k < d->n_params; k++) {
    int64_t n = (int64_t)cx_tensor_nbytes(cx_program_param(d->train, k));
    if (n > largest) largest = n;
  }
  d->crc = calloc((size_t)d->n_params + 1, sizeof *d->crc);
  d->crc_root = calloc((size_t)d->n_params + 1, sizeof *d->crc_root);
  d->host = malloc((size_t)largest);
  if (!d->crc || !d->crc_root || !d->host) return cx_fail(CX_ERR_NOMEM, "out of memory");
  return CX_OK;
}

/* The same parameter count and gradient floats everywhere, before any list or bucket is
 * exchanged: a rank that built another model would otherwise corrupt the reductions. */
static cx_status check_shapes(cx_ddp *d) {
  int64_t floats = 0;
  for (int i = 0; i < d->n_buckets; i++) floats += d->buckets[i].n;
  int64_t v[4] = {d->n_params, -(int64_t)d->n_params, floats, -floats}; /* min and max at once */
  CX_TRY(cx_comm_allreduce_i64(v, 4, CX_COMM_MIN));
  if (v[0] == -v[1] && v[2] == -v[3]) return CX_OK;
  return cx_fail(CX_ERR_ARG, "ddp: the ranks built different models: %lld to %lld parameters, "
                 "%lld to %lld gradient values (this rank: %d, %lld); every rank must train the "
                 "same model", (long long)v[0], (long long)-v[1], (long long)v[2],
                 (long long)-v[3], d->n_params, (long long)floats);
}

cx_status cx_ddp_check_replicas(cx_ddp *d, const char *when) {
  if (d->world < 2) return CX_OK;
  CX_TRY(check_shapes(d));
  CX_TRY(alloc_room(d));
  for (int k = 0; k < d->n_params; k++) {
    const cx_tensor *p = cx_program_param(d->train, k);
    CX_TRY(cx_program_read(d->train, p, d->host));
    d->crc[k] = d->crc_root[k] = cx_crc32c(d->host, cx_tensor_nbytes(p));
  }
  int64_t bytes = (int64_t)d->n_params * (int64_t)sizeof *d->crc_root;
  CX_TRY(cx_comm_bcast(d->crc_root, bytes, 0));
  int first = d->n_params;
  for (int k = 0; k < d->n_params && first == d->n_params; k++)
    if (d->crc[k] != d->crc_root[k]) first = k;
  int64_t key = (int64_t)first * d->world + d->rank; /* the first parameter, then the rank */
  CX_TRY(cx_comm_allreduce_i64(&key, 1, CX_COMM_MIN));
  d->checks++;
  int param = (int)(key / d->world), rank = (int)(key % d->world);
  if (param == d->n_params) return CX_OK;
  return cx_fail(CX_ERR_NUMERIC, "ddp: the replicas differ %s (after %lld reduced steps): "
                 "parameter '%s' on rank %d is not rank 0's (CRC-32C %08x on rank 0): the ranks "
                 "no longer train the same model; stopping every rank", when,
                 (long long)d->reductions, cx_program_param_name(d->train, param), rank,
                 (unsigned)d->crc_root[param]);
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
