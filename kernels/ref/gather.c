/* Gather, GatherND and their gradients' references, from the ONNX definitions (Gather's: output[i..., j..., k...] =
 * data[i..., indices[j...], k...] over flat (outer, index, inner) positions). */

#include "../../core/ops/gather.h"
#include "ref.h"

/* The data element (outer o, axis position at, inner i) for output element e. */
static cx_status source(const cx_ref_args *a, const cx_gather_split *s, const double *ind,
                        int64_t e, int64_t *src) {
  int64_t i = e % s->inner, j = e / s->inner % s->count, o = e / s->inner / s->count, at;
  CX_TRY(cx_gather_index(a->node, s, (int64_t)ind[j], &at));
  *src = (o * s->dim + at) * s->inner + i;
  return CX_OK;
}

static cx_status ref_gather(const cx_ref_args *a) {
  cx_gather_split s;
  CX_TRY(cx_gather_split_make(a->node, &a->in[0].shape, &a->in[1].shape, &s));
  for (int64_t e = 0; e < s.outer * s.count * s.inner; e++) {
    int64_t src;
    CX_TRY(source(a, &s, a->in[1].data, e, &src));
    a->out[0].data[e] = a->in[0].data[src];
  }
  return CX_OK;
}

static cx_status ref_gather_grad(const cx_ref_args *a) {
  cx_gather_split s;
  CX_TRY(cx_gather_split_make(a->node, &a->out[0].shape, &a->in[1].shape, &s));
  for (int64_t e = 0; e < s.outer * s.count * s.inner; e++) {
    int64_t src;
    CX_TRY(source(a, &s, a->in[1].data, e, &src));
    a->out[0].data[src] += a->in[0].data[e];
  }
  return CX_OK;
}

/* GatherND: output element e is element (e mod slice) of the slice its tuple names */
static cx_status nd_source(const cx_ref_args *a, const cx_shape *data, int64_t e, int64_t *src) {
  cx_gather_nd_split s;
  CX_TRY(cx_gather_nd_split_make(a->node, data, &a->in[1].shape, &s));
  int64_t t = e / s.slice, idx[CX_MAX_DIMS], at;
  for (int j = 0; j < s.k; j++) idx[j] = (int64_t)a->in[1].data[t * s.k + j];
  CX_TRY(cx_gather_nd_offset(a->node, data, &s, t, idx, &at));
  *src = at * s.slice + e % s.slice;
  return CX_OK;
}

static cx_status ref_gather_nd(const cx_ref_args *a) {
  for (int64_t e = 0; e < cx_shape_numel(&a->out[0].shape); e++) {
    int64_t src;
    CX_TRY(nd_source(a, &a->in[0].shape, e, &src));
    a->out[0].data[e] = a->in[0].data[src];
  }
  return CX_OK;
}

static cx_status ref_gather_nd_grad(const cx_ref_args *a) {
  for (int64_t e = 0; e < cx_shape_numel(&a->in[0].shape); e++) {
    int64_t src;
    CX_TRY(nd_source(a, &a->out[0].shape, e, &src));
    a->out[0].data[src] += a->in[0].data[e];
  }
  return CX_OK;
}

const cx_ref_entry cx_ref_gather[] = {
    {"GatherND", ref_gather_nd},
    {"GatherNDGrad", ref_gather_nd_grad},
    {"Gather", ref_gather},
    {"GatherGrad", ref_gather_grad},
    {NULL, NULL},
};
