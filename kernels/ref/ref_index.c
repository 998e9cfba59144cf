#include "ref_index.h"

void cx_ref_unravel(const cx_shape *s, int64_t i, int64_t *idx) {
  for (int d = s->ndim - 1; d >= 0; d--) {
    idx[d] = s->d[d] ? i % s->d[d] : 0;
    i = s->d[d] ? i / s->d[d] : 0;
  }
}

int64_t cx_ref_broadcast_offset(const cx_shape *ys, const int64_t *idx, const cx_shape *s) {
  int64_t off = 0;
  for (int d = 0; d < s->ndim; d++) {
    int64_t j = idx[d + ys->ndim - s->ndim];
    off = off * s->d[d] + (s->d[d] == 1 ? 0 : j);
  }
  return off;
}
