#include <stdlib.h>
#include <string.h>

#include "conv_depthwise.h"
#include "cpu.h"
#include "dnnl_util.h"

/* Conv and ConvGrad on the CPU: oneDNN primitives on plain NCHW / (g)OIHW memory, built once in
 * prepare, except depthwise 3x3 which takes the hand-written path in conv_depthwise.c.
 * CX_CONV_DEPTHWISE=dnnl (or =c) in the environment sends depthwise convolutions to oneDNN (or to
 * the portable C loops) instead, for benchmarks and for testing the fallback. */

/* ---- one oneDNN primitive with its arguments --------------------------------------------------- */

enum { MAX_ARGS = 6 };
typedef enum { FROM_IN, FROM_OUT, FROM_SCRATCH } arg_source;

typedef struct conv_exec {
  dnnl_primitive_t prim;
  int n;
  dnnl_exec_arg_t args[MAX_ARGS];
  arg_source from[MAX_ARGS];
  int index[MAX_ARGS]; /* input or output number */
  size_t scratch;
} conv_exec;

static void exec_release(conv_exec *e) {
  for (int k = 0; k < e->n; k++) dnnl_memory_destroy(e->args[k].memory);
  if (e->prim) dnnl_primitive_destroy(e->prim);
  memset(e, 0, sizeof *e);
}

static cx_status exec_arg(conv_exec *e, const cx_node *node, int arg, const dnnl_memory_desc_t *md,
                          arg_source from, int index) {
  dnnl_engine_t eng = cx_dnnl_engine();
  if (!eng) return CX_ERR_BACKEND;
  CX_DNNL(dnnl_memory_create(&e->args[e->n].memory, md, eng, DNNL_MEMORY_NONE), node);
  e->args[e->n].arg = arg;
  e->from[e->n] = from;
  e->index[e->n] = index;
  e->n++;
  return CX_OK;
}

/* Makes the primitive descriptor (scratchpad owned by us) and the primitive; the caller adds the
 * tensor arguments and destroys *pd. */
static cx_status exec_create(conv_exec *e, const cx_node *node, const dnnl_convolution_desc_t *cd,
                             const_dnnl_primitive_desc_t hint, dnnl_primitive_desc_t *pd) {
  dnnl_engine_t eng = cx_dnnl_engine();
  dnnl_primitive_attr_t attr;
  if (!eng) return CX_ERR_BACKEND;
  CX_DNNL(dnnl_primitive_attr_create(&attr), node);
  dnnl_status_t s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (s == dnnl_success) s = dnnl_primitive_desc_create(pd, cd, attr, eng, hint);
  dnnl_primitive_attr_destroy(attr);
  CX_DNNL(s, node);
  const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(*pd, dnnl_query_scratchpad_md, 0);
  e->scratch = smd ? dnnl_memory_desc_get_size(smd) : 0;
  cx_status st = e->scratch ? exec_arg(e, node, DNNL_ARG_SCRATCHPAD, smd, FROM_SCRATCH, 0) : CX_OK;
  if (st == CX_OK && (s = dnnl_primitive_create(&e->prim, *pd)) != dnnl_success)
    st = cx_fail(CX_ERR_BACKEND, "dnnl_primitive_create failed (status %d) in node '%s'", (int)s,
                 node->name);
  if (st != CX_OK) {
    dnnl_primitive_desc_destroy(*pd);
    *pd = NULL;
  }
  return st;
}

static cx_status exec_run(const conv_exec *e, const cx_kernel_args *a) {
  dnnl_stream_t st = cx_dnnl_stream();
  if (!st) return CX_ERR_BACKEND;
  for (int k = 0; k < e->n; k++) {
    void *p = e->from[k] == FROM_IN    ? a->in[e->index[k]].data
              : e->from[k] == FROM_OUT ? a->out[e->index[k]].data
                                       : a->scratch;
    CX_DNNL(dnnl_memory_set_data_handle(e->args[k].memory, p), a->node);
  }
  CX_DNNL(dnnl_primitive_execute(e->prim, st, e->n, e->args), a->node);
  CX_DNNL(dnnl_stream_wait(st), a->node);
  return CX_OK;
}

/* ---- descriptors ------------------------------------------------------------------------------- */

typedef struct conv_mds {
  dnnl_memory_desc_t src, wei, bias, dst;
  dnnl_dims_t strides, dilates, pad_l, pad_r;
} conv_mds;

static cx_status mds_init(conv_mds *m, const cx_node *node, const cx_conv_geom *g) {
  const dnnl_data_type_t f = dnnl_f32;
  CX_DNNL(dnnl_memory_desc_init_by_tag(&m->src, 4, (dnnl_dims_t){g->n, g->c_in, g->h, g->w}, f,
                                       dnnl_nchw), node);
  CX_DNNL(dnnl_memory_desc_init_by_tag(&m->dst, 4, (dnnl_dims_t){g->n, g->c_out, g->oh, g->ow}, f,
                                       dnnl_nchw), node);
  CX_DNNL(dnnl_memory_desc_init_by_tag(&m->bias, 1, (dnnl_dims_t){g->c_out}, f, dnnl_x), node);
  int64_t gr = g->group;
  if (gr == 1)
    CX_DNNL(dnnl_memory_desc_init_by_tag(&m->wei, 4, (dnnl_dims_t){g->c_out, g->c_in, g->kh, g->kw},
                                         f, dnnl_oihw), node);
  else
    CX_DNNL(dnnl_memory_desc_init_by_tag(
                &m->wei, 5, (dnnl_dims_t){gr, g->c_out / gr, g->c_in / gr, g->kh, g->kw}, f,
                dnnl_goihw), node);
  memcpy(m->strides, (dnnl_dims_t){g->sh, g->sw}, sizeof(dnnl_dims_t));
  memcpy(m->dilates, (dnnl_dims_t){g->dh - 1, g->dw - 1}, sizeof(dnnl_dims_t));
  memcpy(m->pad_l, (dnnl_dims_t){g->pt, g->pl}, sizeof(dnnl_dims_t));
  memcpy(m->pad_r, (dnnl_dims_t){g->pb, g->pr}, sizeof(dnnl_dims_t));
  return CX_OK;
}

static cx_status fwd_desc(dnnl_convolution_desc_t *cd, const cx_node *node, const conv_mds *m,
                          bool training, bool bias) {
  CX_DNNL(dnnl_dilated_convolution_forward_desc_init(
              cd, training ? dnnl_forward_training : dnnl_forward_inference,
              dnnl_convolution_direct, &m->src, &m->wei, bias ? &m->bias : NULL, &m->dst,
              m->strides, m->dilates, m->pad_l, m->pad_r),
          node);
  return CX_OK;
}

/* ---- state shared by Conv and ConvGrad --------------------------------------------------------- */

typedef enum { PATH_DNNL, PATH_DW_AVX512, PATH_DW_C } conv_path;

typedef struct conv_state {
  cx_conv_geom g;
  conv_path path;
  bool want[3];            /* ConvGrad: dX, dW, dB */
  conv_exec fwd, bwd_data, bwd_weights;
} conv_state;

static void conv_release(void *p) {
  conv_state *s = p;
  if (!s) return;
  exec_release(&s->fwd);
  exec_release(&s->bwd_data);
  exec_release(&s->bwd_weights);
  free(s);
}

static conv_path choose_path(const cx_conv_geom *g) {
  const char *force = getenv("CX_CONV_DEPTHWISE");
  if (!cx_conv_geom_is_dw3x3(g) || (force && strcmp(force, "dnnl") == 0)) return PATH_DNNL;
  if (force && strcmp(force, "c") == 0) return PATH_DW_C;
  return cx_conv_dw_have_avx512() ? PATH_DW_AVX512 : PATH_DW_C;
}

/* X and W are inputs x_in and x_in + 1 (Conv: 0 and 1; ConvGrad: 1 and 2). NULL after an error,
 * which is in *st. */
static conv_state *state_new(const cx_kernel_args *a, int x_in, cx_status *st) {
  conv_state *s = calloc(1, sizeof *s);
  if (!s) {
    *st = cx_fail(CX_ERR_NOMEM, "node '%s': out of memory", a->node->name);
    return NULL;
  }
  *st = cx_conv_geom_make(a->node, &a->in[x_in].shape, &a->in[x_in + 1].shape, &s->g);
  if (*st != CX_OK) {
    free(s);
    return NULL;
  }
  s->path = choose_path(&s->g);
  return s;
}

/* ---- Conv -------------------------------------------------------------------------------------- */

static bool has_bias(const cx_kernel_args *a) { return a->n_in > 2 && a->node->in[2] >= 0; }

static cx_status conv_build_fwd(conv_state *s, const cx_kernel_args *a) {
  conv_mds m;
  dnnl_convolution_desc_t cd;
  dnnl_primitive_desc_t pd;
  bool bias = has_bias(a);
  CX_TRY(mds_init(&m, a->node, &s->g));
  CX_TRY(fwd_desc(&cd, a->node, &m, a->training, bias));
  CX_TRY(exec_create(&s->fwd, a->node, &cd, NULL, &pd));
  cx_status st = exec_arg(&s->fwd, a->node, DNNL_ARG_SRC, &m.src, FROM_IN, 0);
  if (st == CX_OK) st = exec_arg(&s->fwd, a->node, DNNL_ARG_WEIGHTS, &m.wei, FROM_IN, 1);
  if (st == CX_OK && bias) st = exec_arg(&s->fwd, a->node, DNNL_ARG_BIAS, &m.bias, FROM_IN, 2);
  if (st == CX_OK) st = exec_arg(&s->fwd, a->node, DNNL_ARG_DST, &m.dst, FROM_OUT, 0);
  dnnl_primitive_desc_destroy(pd);
  return st;
}

static cx_status conv_prepare(const cx_kernel_args *a, void **state, size_t *scratch) {
  cx_status st;
  conv_state *s = state_new(a, 0, &st);
  if (!s) return st;
  st = s->path == PATH_DNNL ? conv_build_fwd(s, a) : CX_OK;
  if (st != CX_OK) {
    conv_release(s);
    return st;
  }
  *state = s;
  *scratch = s->fwd.scratch;
  return CX_OK;
}

static cx_status conv_run(const cx_kernel_args *a) {
  const conv_state *s = a->state;
  if (s->path == PATH_DNNL) return exec_run(&s->fwd, a);
  cx_conv_dw3x3_forward(&s->g, cx_f32(&a->in[0]), cx_f32(&a->in[1]),
                        has_bias(a) ? cx_f32(&a->in[2]) : NULL, cx_f32(&a->out[0]),
                        s->path == PATH_DW_AVX512);
  return CX_OK;
}

/* ---- ConvGrad: inputs (dY, X, W), outputs (dX, dW, dB) ----------------------------------------- */

static cx_status grad_build_data(conv_state *s, const cx_kernel_args *a, const conv_mds *m,
                                 const_dnnl_primitive_desc_t hint) {
  dnnl_convolution_desc_t cd;
  dnnl_primitive_desc_t pd;
  CX_DNNL(dnnl_dilated_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, &m->src,
                                                           &m->wei, &m->dst, m->strides,
                                                           m->dilates, m->pad_l, m->pad_r),
          a->node);
  CX_TRY(exec_create(&s->bwd_data, a->node, &cd, hint, &pd));
  cx_status st = exec_arg(&s->bwd_data, a->node, DNNL_ARG_DIFF_DST, &m->dst, FROM_IN, 0);
  if (st == CX_OK) st = exec_arg(&s->bwd_data, a->node, DNNL_ARG_WEIGHTS, &m->wei, FROM_IN, 2);
  if (st == CX_OK) st = exec_arg(&s->bwd_data, a->node, DNNL_ARG_DIFF_SRC, &m->src, FROM_OUT, 0);
  dnnl_primitive_desc_destroy(pd);
  return st;
}

static cx_status grad_build_weights(conv_state *s, const cx_kernel_args *a, const conv_mds *m,
                                    const_dnnl_primitive_desc_t hint) {
  dnnl_convolution_desc_t cd;
  dnnl_primitive_desc_t pd;
  bool db = s->want[2];
  CX_DNNL(dnnl_dilated_convolution_backward_weights_desc_init(
              &cd, dnnl_convolution_direct, &m->src, &m->wei, db ? &m->bias : NULL, &m->dst,
              m->strides, m->dilates, m->pad_l, m->pad_r),
          a->node);
  CX_TRY(exec_create(&s->bwd_weights, a->node, &cd, hint, &pd));
  conv_exec *e = &s->bwd_weights;
  cx_status st = exec_arg(e, a->node, DNNL_ARG_SRC, &m->src, FROM_IN, 1);
  if (st == CX_OK) st = exec_arg(e, a->node, DNNL_ARG_DIFF_DST, &m->dst, FROM_IN, 0);
  if (st == CX_OK) st = exec_arg(e, a->node, DNNL_ARG_DIFF_WEIGHTS, &m->wei, FROM_OUT, 1);
  if (st == CX_OK && db) st = exec_arg(e, a->node, DNNL_ARG_DIFF_BIAS, &m->bias, FROM_OUT, 2);
  dnnl_primitive_desc_destroy(pd);
  return st;
}

/* Backward primitives need a forward primitive descriptor as a hint; it is dropped afterwards. */
static cx_status grad_build(conv_state *s, const cx_kernel_args *a) {
  conv_mds m;
  dnnl_convolution_desc_t cd;
  dnnl_primitive_desc_t hint;
  dnnl_engine_t eng = cx_dnnl_engine();
  if (!eng) return CX_ERR_BACKEND;
  CX_TRY(mds_init(&m, a->node, &s->g));
  CX_TRY(fwd_desc(&cd, a->node, &m, true, s->want[2]));
  CX_DNNL(dnnl_primitive_desc_create(&hint, &cd, NULL, eng, NULL), a->node);
  cx_status st = s->want[0] ? grad_build_data(s, a, &m, hint) : CX_OK;
  if (st == CX_OK && s->want[1]) st = grad_build_weights(s, a, &m, hint);
  dnnl_primitive_desc_destroy(hint);
  return st;
}

static cx_status grad_prepare(const cx_kernel_args *a, void **state, size_t *scratch) {
  cx_status st;
  conv_state *s = state_new(a, 1, &st);
  if (!s) return st;
  cx_conv_grad_wanted(a->node, s->want);
  st = s->path == PATH_DNNL ? grad_build(s, a) : CX_OK;
  if (st != CX_OK) {
    conv_release(s);
    return st;
  }
  *state = s;
  /* the two primitives run one after the other, so they share one scratchpad */
  *scratch = s->bwd_data.scratch > s->bwd_weights.scratch ? s->bwd_data.scratch
                                                          : s->bwd_weights.scratch;
  return CX_OK;
}

/* dB = dY summed over batch and pixels; for the rare ConvGrad that wants dB without dW. */
static void bias_grad(const cx_conv_geom *g, const float *dy, float *db) {
  int64_t plane = g->oh * g->ow;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < g->c_out; c++) {
    double s = 0;
    for (int64_t n = 0; n < g->n; n++)
      for (int64_t i = 0; i < plane; i++) s += dy[(n * g->c_out + c) * plane + i];
    db[c] = (float)s;
  }
}

static cx_status grad_run_dnnl(const conv_state *s, const cx_kernel_args *a) {
  if (s->want[0]) CX_TRY(exec_run(&s->bwd_data, a));
  if (s->want[1]) CX_TRY(exec_run(&s->bwd_weights, a));
  else if (s->want[2]) bias_grad(&s->g, cx_f32(&a->in[0]), cx_f32(&a->out[2]));
  return CX_OK;
}

static cx_status grad_run(const cx_kernel_args *a) {
  const conv_state *s = a->state;
  if (s->path == PATH_DNNL) return grad_run_dnnl(s, a);
  bool v = s->path == PATH_DW_AVX512;
  const float *dy = cx_f32(&a->in[0]), *x = cx_f32(&a->in[1]), *w = cx_f32(&a->in[2]);
  if (s->want[0]) cx_conv_dw3x3_backward_data(&s->g, dy, w, cx_f32(&a->out[0]), v);
  if (s->want[1] || s->want[2])
    cx_conv_dw3x3_backward_weights(&s->g, x, dy, s->want[1] ? cx_f32(&a->out[1]) : NULL,
                                   s->want[2] ? cx_f32(&a->out[2]) : NULL, v);
  return CX_OK;
}

const cx_kernel cx_cpu_conv[] = {
    {"Conv", conv_prepare, conv_run, conv_release},
    {"ConvGrad", grad_prepare, grad_run, conv_release},
    {NULL, NULL, NULL, NULL},
};
