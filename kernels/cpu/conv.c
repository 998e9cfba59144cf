#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/op.h"
#include "conv_depthwise.h"
#include "cpu.h"
#include "dnnl_exec.h"
#include "dnnl_post_ops.h"
#include "dnnl_util.h"
#include "tune.h"

/* Conv and ConvGrad on the CPU: oneDNN primitives built once in prepare, except depthwise 3x3 on
 * plain tensors which takes the hand-written path in conv_depthwise.c.
 *
 * Activations come plain NCHW or channels-last (the layout pass, core/layout.c), each argument on
 * its own (CX_LAYOUT_ANY); weights are plain (g)OIHW. Channels-last activations are handed to an
 * NHWC primitive as they are. On plain layouts oneDNN 2.6 falls back to im2col + GEMM, so where its
 * blocked layouts pay (see choose_fmt) the primitive is built with format `any` and each argument
 * is reordered through a scratch buffer: before the primitive for inputs, after it for outputs.
 * Those buffers and oneDNN's own scratchpad are the kernel's scratch.
 *
 * bf16 autocast (precision BF16) rides on the same reorders: the primitive reads bf16 and writes
 * f32 (see conv_types_for), so the reorder into scratch also rounds. Activations the dtype pass
 * stored in bf16 (core/act_dtype.h) are described as bf16: read as they are, and written in bf16
 * by a bf16 primitive (or reordered into bf16 after an f32 one). The hand-written depthwise paths
 * stay f32; they never see bf16, which comes channels-last only.
 *
 * Environment knobs, for benchmarks and for testing the other paths:
 *   CX_CONV_DEPTHWISE=dnnl | c    depthwise 3x3 through oneDNN / through the portable C loops
 *   CX_CONV_LAYOUT=plain | blocked   oneDNN on the buffers' layouts / always through blocked ones
 *   CX_CONV_NHWC=blocked | nhwc   channels-last activations through blocked layouts always / never
 *                                 (default: blocked only for inference's ungrouped kxk, k > 1)
 *   CX_CONV_DW_NHWC=c | dnnl      channels-last depthwise 3x3 weight gradients always / never
 *                                 through conv_depthwise_nhwc.c (default: where oneDNN has no
 *                                 depthwise kernel for the shape)
 *   CX_CONV_WINOGRAD=on | off | data | weights   nothing measured: Winograd's algorithm wherever
 *                                 it fits / nowhere / for the forward pass and dX only / for dW
 *                                 only; bf16 programs in bf16 (conv_tuned)
 *   CX_CONV_NO_CROP=1             every kernel tap computed, also those that only meet padding
 *                                 (crop_of)
 *
 * ConvFused (core/ops/fused.c, made by the inference pass core/infer_fuse.c) is the forward
 * primitive with post-ops: sum (the residual S, input 3, copied into the destination before the
 * primitive runs unless the memory planner gave the output S's buffer) and the fused activation
 * as eltwise. It always goes through oneDNN, depthwise 3x3 on plain tensors included: the
 * hand-written paths have no post-ops. */

/* ---- descriptors ------------------------------------------------------------------------------- */

/* The program's layouts (u_*: plain NCHW / (g)OIHW, or channels-last for activations the layout
 * pass made so) and what the primitive is asked for. */
typedef struct conv_mds {
  dnnl_memory_desc_t src, wei, dst, u_src, u_wei, u_dst, bias;
  dnnl_alg_kind_t alg;
  dnnl_dims_t strides, dilates, pad_l, pad_r;
} conv_mds;

/* How the primitive's src / dst / weights are laid out:
 *   PLAIN    as the program's buffers (plain NCHW: im2col + GEMM, fine for wide 1x1)
 *   BLOCKED  `any` for all three (oneDNN picks nChw16c...), reordered through scratch
 *   NHWC     nhwc src and dst, `any` weights: channels-last activations are read and written in
 *            place (only the small weights are reordered), as PyTorch's channels_last does */
typedef enum { FMT_PLAIN, FMT_BLOCKED, FMT_NHWC } conv_fmt;

/* Data types of a primitive's src, weights and dst (or their diffs); the bias is always f32.
 * plain: plain layouts where blocked ones would be chosen. */
typedef struct conv_types {
  dnnl_data_type_t src, wei, dst;
  bool plain;
  bool inference; /* an inference program's forward convolution (see choose_fmt) */
  bool winograd;  /* Winograd's algorithm on blocked layouts (see winograd_fits) */
  bool blocked;   /* the direct algorithm on blocked layouts where NHWC would be chosen */
} conv_types;

typedef enum { CONV_WRITES_DST, CONV_WRITES_SRC, CONV_WRITES_WEI } conv_dir;

typedef struct conv_state conv_state;
static conv_types conv_types_for(const conv_state *s, const cx_kernel_args *a, conv_dir dir,
                                 const cx_tensor *written, bool winograd);
/* The activation tensors one primitive reads or writes in src and dst roles (X or dX, Y or dY). */
typedef struct conv_io {
  const cx_tensor *src, *dst, *wei;
} conv_io;

/* 3x3 stride-1 f32 convolutions with 16 or more channels both ways may run Winograd's algorithm
 * (oneDNN's jit_wino_4x3 / jit_fp32_wino_2x3, AVX-512 only, on blocked layouts): 2.25-4x fewer
 * multiplications, more memory traffic in its transforms. Whether it pays depends on the machine
 * and the shape (docs/ARCHITECTURE.md "Winograd"), so prepare measures both algorithms where it
 * fits (see conv_tuned), also under bf16, where Winograd computes in f32 (conv_types_for).
 * Its rounding differs from the direct algorithm's by a few ulps of each sum. */
static bool winograd_fits(const cx_conv_geom *g) {
  const char *force = getenv("CX_CONV_LAYOUT");
  unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), avx512 = dnnl_cpu_isa_avx512_core;
  if (force && strcmp(force, "plain") == 0) return false;
  return (isa & avx512) == avx512 && g->group == 1 &&
         g->kh == 3 && g->kw == 3 && g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1 &&
         g->c_in >= 16 && g->c_out >= 16;
}

/* Blocked layouts win where im2col + GEMM is poor: kernels larger than 1x1, and 1x1 kernels on few
 * channels both ways. A 1x1 convolution with 64 or more channels on either side is a good GEMM
 * already, and the reorders would only add traffic (measured with bench/bench_conv). Channels-last
 * activations go NHWC: oneDNN 2.6 has jit kernels for it, and no reorders are needed; except in
 * an inference program's forward pass, where ungrouped convolutions larger than 1x1 go blocked
 * even with the reorders: oneDNN 2.6's avx2 forward kernel on nhwc is 20-30% slower than on
 * nChw8c there (torchvision ResNet-18 at 224 px, one thread on this AVX2 EPYC: 398 -> 280 ms at
 * batch 1, 15.8 -> 11.6 s at batch 32; ResNet-50 934 -> 712 ms at batch 1; medians of
 * alternating runs on a loaded machine), while training measured the other way (Layouts in
 * docs/ARCHITECTURE.md). CX_CONV_NHWC=blocked sends every channels-last convolution through
 * blocked layouts, CX_CONV_NHWC=nhwc none (to measure). */
static conv_fmt choose_fmt(const cx_conv_geom *g, const conv_io *io, bool inference) {
  const char *force = getenv("CX_CONV_LAYOUT"), *nhwc_as = getenv("CX_CONV_NHWC");
  if (force && strcmp(force, "plain") == 0) return FMT_PLAIN;
  if (force && strcmp(force, "blocked") == 0) return FMT_BLOCKED;
  if (cx_tensor_nhwc(io->src) || cx_tensor_nhwc(io->dst)) {
    if (nhwc_as) return strcmp(nhwc_as, "blocked") == 0 ? FMT_BLOCKED : FMT_NHWC;
    return inference && g->group == 1 && g->kh * g->kw > 1 ? FMT_BLOCKED : FMT_NHWC;
  }
  return g->kh * g->kw > 1 || (g->c_in / g->group < 64 && g->c_out / g->group < 64) ? FMT_BLOCKED
                                                                                    : FMT_PLAIN;
}

/* An activation's tag. Under NHWC a tensor whose layout is moot (one channel, one pixel) is
 * described as nhwc too, so that it needs no reorder. Under BLOCKED a channels-last tensor of 16
 * channels is described as nChw16c, the same bytes, so that it needs none where oneDNN blocks by
 * 16 (AVX-512). */
static dnnl_format_tag_t act_tag(const cx_tensor *t, conv_fmt f) {
  bool cl = f == FMT_NHWC ? cx_tensor_is_channels_last(t) : cx_tensor_nhwc(t);
  if (cl && f == FMT_BLOCKED && t->shape.d[1] == 16) return dnnl_aBcd16b;
  return cl ? dnnl_nhwc : dnnl_nchw;
}

static dnnl_format_tag_t prim_tag(conv_fmt f, dnnl_format_tag_t user, bool act) {
  if (f == FMT_BLOCKED || (f == FMT_NHWC && !act)) return dnnl_format_tag_any;
  return f == FMT_NHWC ? dnnl_nhwc : user;
}

/* The data type of an activation as the program holds it. */
static dnnl_data_type_t act_type(const cx_tensor *t) {
  return t->dtype == CX_BF16 ? dnnl_bf16 : dnnl_f32;
}

/* user: the program's buffer (of type held); prim: what the primitive is asked for (of type dt) */
static cx_status md_init(dnnl_memory_desc_t *user, dnnl_memory_desc_t *prim, const cx_node *node,
                         int nd, const dnnl_dims_t dims, dnnl_format_tag_t tag, conv_fmt f,
                         bool act, dnnl_data_type_t held, dnnl_data_type_t dt) {
  CX_DNNL(dnnl_memory_desc_init_by_tag(user, nd, dims, held, tag), node);
  CX_DNNL(dnnl_memory_desc_init_by_tag(prim, nd, dims, dt, prim_tag(f, tag, act)), node);
  return CX_OK;
}

/* ---- kernel taps that only ever meet padding ----------------------------------------------------
 * On small maps a large kernel's outer taps multiply padding alone (EfficientNet's 5x5 depthwise
 * layers at 1x1 and 2x2 in 32-pixel inputs: one tap of 25, or 9). The primitive is then built for
 * the taps that meet the input, with the padding shrunk to match: same output, a 1x1 or 3x3 kernel
 * for which oneDNN has fast kernels (its 5x5 depthwise at 1x1 went to im2col + GEMM, 40 ms a
 * layer at batch 128). The weights are read as a sub-block of W, and dW's other taps are zero. */
typedef struct conv_crop {
  bool on;
  int64_t ky, kx;  /* the first kept tap */
  cx_conv_geom g;  /* the primitive's geometry: kh, kw and the pads shrunk */
} conv_crop;

/* The first and last tap along one axis that meets the input at some output position. */
static void live_taps(int64_t in, int64_t out, int64_t k, int64_t s, int64_t d, int64_t pad,
                      int64_t *lo, int64_t *hi) {
  *lo = k, *hi = -1;
  for (int64_t t = 0; t < k; t++) {
    int64_t first = t * d - pad, o = first >= 0 ? 0 : (-first + s - 1) / s;
    if (o < out && first + o * s < in) {
      if (*lo == k) *lo = t;
      *hi = t;
    }
  }
}

static conv_crop crop_of(const cx_conv_geom *g) {
  conv_crop c = {.g = *g};
  int64_t y0, y1, x0, x1;
  live_taps(g->h, g->oh, g->kh, g->sh, g->dh, g->pt, &y0, &y1);
  live_taps(g->w, g->ow, g->kw, g->sw, g->dw, g->pl, &x0, &x1);
  if (y1 < 0 || x1 < 0 || (y1 - y0 + 1 == g->kh && x1 - x0 + 1 == g->kw)) return c;
  c.g.kh = y1 - y0 + 1, c.g.kw = x1 - x0 + 1;
  c.g.pt -= y0 * g->dh, c.g.pb -= (g->kh - 1 - y1) * g->dh;
  c.g.pl -= x0 * g->dw, c.g.pr -= (g->kw - 1 - x1) * g->dw;
  c.on = c.g.pt >= 0 && c.g.pb >= 0 && c.g.pl >= 0 && c.g.pr >= 0 && !getenv("CX_CONV_NO_CROP");
  c.ky = y0, c.kx = x0;
  if (!c.on) c.g = *g;
  return c;
}

/* The crop's sub-block of the weights W [O, I/group, kh, kw] as the program holds them (tag). */
static cx_status wei_crop_md(dnnl_memory_desc_t *md, const cx_node *node, const cx_conv_geom *g,
                             const conv_crop *c, dnnl_format_tag_t tag) {
  int64_t gr = g->group, o = g->c_out, i = g->c_in;
  dnnl_dims_t full = {o, i, g->kh, g->kw}, part = {o, i, c->g.kh, c->g.kw};
  dnnl_dims_t at = {0, 0, c->ky, c->kx};
  if (gr > 1) { /* grouped: [G, O/G, I/G, kh, kw] */
    int64_t f5[5] = {gr, o / gr, i / gr, g->kh, g->kw};
    int64_t p5[5] = {gr, o / gr, i / gr, c->g.kh, c->g.kw}, a5[5] = {0, 0, 0, c->ky, c->kx};
    memcpy(full, f5, sizeof f5), memcpy(part, p5, sizeof p5), memcpy(at, a5, sizeof a5);
  }
  dnnl_memory_desc_t whole;
  CX_DNNL(dnnl_memory_desc_init_by_tag(&whole, gr == 1 ? 4 : 5, full, dnnl_f32, tag), node);
  CX_DNNL(dnnl_memory_desc_init_submemory(md, &whole, part, at), node);
  return CX_OK;
}

static cx_status mds_init(conv_mds *m, const cx_node *node, const cx_conv_geom *full,
                          const conv_crop *crop, const conv_io *io, conv_types t) {
  const cx_conv_geom *g = &crop->g;
  conv_fmt f = t.winograd || t.blocked ? FMT_BLOCKED : choose_fmt(g, io, t.inference);
  m->alg = t.winograd ? dnnl_convolution_winograd : dnnl_convolution_direct;
  if (t.plain && f == FMT_BLOCKED) f = FMT_PLAIN;
  int64_t gr = g->group;
  bool w_cl = io->wei && cx_tensor_nhwc(io->wei); /* OHWI: weights computed by channels-last ops */
  CX_TRY(md_init(&m->u_src, &m->src, node, 4, (dnnl_dims_t){g->n, g->c_in, g->h, g->w},
                 act_tag(io->src, f), f, true, act_type(io->src), t.src));
  CX_TRY(md_init(&m->u_dst, &m->dst, node, 4, (dnnl_dims_t){g->n, g->c_out, g->oh, g->ow},
                 act_tag(io->dst, f), f, true, act_type(io->dst), t.dst));
  dnnl_format_tag_t wtag = gr > 1 ? (w_cl ? dnnl_gohwi : dnnl_goihw) : w_cl ? dnnl_ohwi : dnnl_oihw;
  if (gr == 1)
    CX_TRY(md_init(&m->u_wei, &m->wei, node, 4, (dnnl_dims_t){g->c_out, g->c_in, g->kh, g->kw},
                   wtag, f, false, dnnl_f32, t.wei));
  else
    CX_TRY(md_init(&m->u_wei, &m->wei, node, 5,
                   (dnnl_dims_t){gr, g->c_out / gr, g->c_in / gr, g->kh, g->kw}, wtag, f, false,
                   dnnl_f32, t.wei));
  if (crop->on) CX_TRY(wei_crop_md(&m->u_wei, node, full, crop, wtag));
  CX_DNNL(dnnl_memory_desc_init_by_tag(&m->bias, 1, (dnnl_dims_t){g->c_out}, dnnl_f32, dnnl_x), node);
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
              m->alg, &m->src, &m->wei, bias ? &m->bias : NULL, &m->dst,
              m->strides, m->dilates, m->pad_l, m->pad_r),
          node);
  return CX_OK;
}

/* ---- state shared by Conv and ConvGrad --------------------------------------------------------- */

typedef enum { PATH_DNNL, PATH_DW_AVX512, PATH_DW_C } conv_path;

struct conv_state {
  cx_conv_geom g;
  conv_path path;
  bool want[3];            /* ConvGrad: dX, dW, dB */
  cx_dnnl_exec fwd, bwd_data, bwd_weights;
  bool winograd;           /* forward and dX by Winograd's algorithm (see winograd_fits) */
  bool winograd_weights;   /* dW by Winograd's algorithm */
  bool f32;                /* in a bf16 program, computed in f32: measured faster (conv_tuned) */
  bool blocked;            /* channels-last, through blocked layouts: measured faster */
  conv_crop crop;          /* the oneDNN primitives' kernel taps (see crop_of) */
  bool own_wgrad;          /* channels-last depthwise dW/dB through conv_depthwise_nhwc.c */
  int threads;             /* its scratch is sized for this many */
};

/* Under BF16 a primitive reads bf16 and writes f32 (oneDNN's mixed bf16 convolutions on
 * avx512_core_bf16): operands are rounded on the way in, results and gradients stay f32 for the
 * f32 ops around and the f32 master weights; an activation held in bf16 (`written`, the tensor
 * the primitive writes: Y or dX) is written in bf16 directly. */
static conv_types conv_types_for(const conv_state *s, const cx_kernel_args *a, conv_dir dir,
                                 const cx_tensor *written, bool winograd) {
  const cx_conv_geom *g = &s->g;
  dnnl_data_type_t in = a->precision == CX_PRECISION_BF16 && !s->f32 ? dnnl_bf16 : dnnl_f32;
  /* oneDNN 2.6's blocked jit_bf16 backward-weights kernel is pathological on strided
   * convolutions: 1.9 s against f32's 64 ms for ResNet-20's 3x3 stride-2 layers (batch 128,
   * 2 threads); its bf16 GEMM path on plain layouts takes 36-47 ms. */
  bool strided = g->sh > 1 || g->sw > 1;
  /* nor has it a bf16 depthwise backward-weights kernel for most shapes: its grouped jit_bf16 one
   * computes a 16x16 block per group (EfficientNet-B0 at 32 px: 15-23 ms a layer, f32 < 1 ms) */
  if (dir == CONV_WRITES_WEI && g->group > 1 && g->c_in == g->group) in = dnnl_f32;
  /* oneDNN's Winograd is f32 only: where it is measured faster than the bf16 direct primitive
   * (conv_tuned), a bf16 program computes that convolution in f32, more exactly */
  if (winograd) in = dnnl_f32;
  dnnl_data_type_t out = in == dnnl_bf16 && written && written->dtype == CX_BF16 ? dnnl_bf16
                                                                                 : dnnl_f32;
  return (conv_types){.src = dir == CONV_WRITES_SRC ? out : in,
                      .wei = dir == CONV_WRITES_WEI ? dnnl_f32 : in,
                      .dst = dir == CONV_WRITES_DST ? out : in,
                      .plain = in == dnnl_bf16 && dir == CONV_WRITES_WEI && strided,
                      .winograd = winograd, .blocked = s->blocked};
}


static void conv_release(void *p) {
  conv_state *s = p;
  if (!s) return;
  cx_dnnl_exec_release(&s->fwd);
  cx_dnnl_exec_release(&s->bwd_data);
  cx_dnnl_exec_release(&s->bwd_weights);
  free(s);
}

/* The hand-written depthwise path reads and writes plain NCHW; channels-last activations go to
 * oneDNN's nhwc depthwise kernel. */
static conv_path choose_path(const cx_conv_geom *g, bool nhwc, bool fused) {
  const char *force = getenv("CX_CONV_DEPTHWISE");
  if (!cx_conv_geom_is_dw3x3(g) || nhwc || fused || (force && strcmp(force, "dnnl") == 0))
    return PATH_DNNL;
  if (force && strcmp(force, "c") == 0) return PATH_DW_C;
  return cx_conv_dw_have_avx512() ? PATH_DW_AVX512 : PATH_DW_C;
}

/* Does any activation argument of the node come channels-last? */
static bool any_nhwc(const cx_kernel_args *a) {
  for (int k = 0; k < a->n_in + a->n_out; k++) {
    const cx_tensor *t = k < a->n_in ? &a->in[k] : &a->out[k - a->n_in];
    if (t->data && cx_tensor_nhwc(t)) return true;
  }
  return false;
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
  s->path = choose_path(&s->g, any_nhwc(a), !strcmp(a->node->op->name, "ConvFused"));
  s->crop = crop_of(&s->g);
  s->winograd = s->winograd_weights = s->path == PATH_DNNL && winograd_fits(&s->crop.g);
  return s;
}

/* Builds the primitives; where oneDNN declines Winograd for a shape, with the direct algorithm. */
static cx_status build_or_direct(conv_state *s, const cx_kernel_args *a,
                                 cx_status (*build)(conv_state *, const cx_kernel_args *)) {
  cx_status st = build(s, a);
  if (st == CX_OK || !(s->winograd || s->winograd_weights)) return st;
  cx_dnnl_exec_release(&s->fwd);
  cx_dnnl_exec_release(&s->bwd_data);
  cx_dnnl_exec_release(&s->bwd_weights);
  s->winograd = s->winograd_weights = false;
  return build(s, a);
}

/* ---- Conv -------------------------------------------------------------------------------------- */

static bool has_bias(const cx_kernel_args *a) { return a->n_in > 2 && a->node->in[2] >= 0; }

/* ConvFused's residual S (input 3), when it has one. */
static bool has_sum(const cx_kernel_args *a) { return a->n_in > 3 && a->node->in[3] >= 0; }

/* ConvFused's post-ops: sum of S, then the activation; NULL attributes for a plain Conv. */
static cx_status fused_attr(const cx_kernel_args *a, dnnl_primitive_attr_t *attr) {
  *attr = NULL;
  if (strcmp(a->node->op->name, "ConvFused") != 0) return CX_OK;
  dnnl_post_ops_t po;
  CX_DNNL(dnnl_post_ops_create(&po), a->node);
  cx_status st = CX_OK;
  if (has_sum(a) && dnnl_post_ops_append_sum(po, 1.0f) != dnnl_success)
    st = cx_fail(CX_ERR_BACKEND, "node '%s': oneDNN refused the sum post-op", a->node->name);
  if (st == CX_OK) st = cx_dnnl_append_activation(a->node, po);
  if (st == CX_OK && (dnnl_primitive_attr_create(attr) != dnnl_success ||
                      dnnl_primitive_attr_set_post_ops(*attr, po) != dnnl_success))
    st = cx_fail(CX_ERR_BACKEND, "node '%s': oneDNN refused the post-ops", a->node->name);
  dnnl_post_ops_destroy(po);
  return st;
}

/* The summed input's layout. S has the output's shape; where its layout is moot (one pixel or
 * one channel: plain and channels-last at once), or channels-last as the output is, it is
 * described as the output is (act_tag may name channels-last nChw16c), so that a shared buffer
 * needs no reorder. */
static cx_status sum_md(const cx_kernel_args *a, const conv_mds *m, dnnl_memory_desc_t *md) {
  const cx_tensor *t = &a->in[3];
  const int64_t *d = t->shape.d;
  if (cx_tensor_is_channels_last(t) && (!cx_tensor_nhwc(t) || cx_tensor_nhwc(&a->out[0]))) {
    *md = m->u_dst;
    return CX_OK;
  }
  CX_DNNL(dnnl_memory_desc_init_by_tag(md, 4, (dnnl_dims_t){d[0], d[1], d[2], d[3]}, dnnl_f32,
                                       cx_tensor_nhwc(t) ? dnnl_nhwc : dnnl_nchw),
          a->node);
  return CX_OK;
}

static cx_status conv_build_fwd(conv_state *s, const cx_kernel_args *a) {
  conv_mds m;
  dnnl_convolution_desc_t cd;
  dnnl_primitive_desc_t pd;
  bool bias = has_bias(a);
  cx_dnnl_exec *e = &s->fwd;
  conv_io io = {&a->in[0], &a->out[0], &a->in[1]};
  conv_types t = conv_types_for(s, a, CONV_WRITES_DST, &a->out[0], s->winograd);
  t.inference = !a->training;
  CX_TRY(mds_init(&m, a->node, &s->g, &s->crop, &io, t));
  CX_TRY(fwd_desc(&cd, a->node, &m, a->training, bias));
  dnnl_primitive_attr_t attr;
  CX_TRY(fused_attr(a, &attr));
  cx_status st = cx_dnnl_exec_create(e, a->node, &cd, attr, NULL, &pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  CX_TRY(st);
  st = cx_dnnl_exec_arg(e, a->node, pd, DNNL_ARG_SRC, &m.u_src, false, 0);
  if (st == CX_OK) st = cx_dnnl_exec_arg(e, a->node, pd, DNNL_ARG_WEIGHTS, &m.u_wei, false, 1);
  /* an inference program's weights: reordered once (core/infer_fuse.h), right after they are
   * added so that their scratch slot, the last one, goes back */
  if (st == CX_OK && cx_node_int(a->node, "frozen_weights", 0))
    st = cx_dnnl_exec_freeze(e, a->node, DNNL_ARG_WEIGHTS);
  if (st == CX_OK && bias) st = cx_dnnl_exec_arg(e, a->node, pd, DNNL_ARG_BIAS, &m.bias, false, 2);
  if (st == CX_OK) st = cx_dnnl_exec_arg(e, a->node, pd, DNNL_ARG_DST, &m.u_dst, true, 0);
  dnnl_memory_desc_t smd;
  if (st == CX_OK && has_sum(a)) st = sum_md(a, &m, &smd);
  if (st == CX_OK && has_sum(a)) st = cx_dnnl_exec_accumulate(e, a->node, &smd, 3);
  dnnl_primitive_desc_destroy(pd);
  return st;
}

static size_t conv_scratch(const conv_state *s) { return s->fwd.scratch; }
static cx_status conv_run(const cx_kernel_args *a) {
  conv_state *s = a->state;
  if (s->path == PATH_DNNL) return cx_dnnl_exec_run(&s->fwd, a);
  cx_conv_dw3x3_forward(&s->g, cx_f32(&a->in[0]), cx_f32(&a->in[1]),
                        has_bias(a) ? cx_f32(&a->in[2]) : NULL, cx_f32(&a->out[0]),
                        s->path == PATH_DW_AVX512);
  return CX_OK;
}

/* ---- ConvGrad: inputs (dY, X, W), outputs (dX, dW, dB) ----------------------------------------- */

/* Backward primitives need a forward primitive descriptor of the same layouts as a hint (in the
 * forward's data types), with the backward one's algorithm (a ConvGrad's two may differ). */
static cx_status grad_hint(dnnl_primitive_desc_t *hint, const cx_kernel_args *a,
                           const conv_state *s, const conv_io *io, bool bias, bool winograd) {
  conv_mds m;
  dnnl_convolution_desc_t cd;
  dnnl_engine_t eng = cx_dnnl_engine();
  if (!eng) return CX_ERR_BACKEND;
  CX_TRY(mds_init(&m, a->node, &s->g, &s->crop, io,
                  conv_types_for(s, a, CONV_WRITES_DST, NULL, winograd)));
  CX_TRY(fwd_desc(&cd, a->node, &m, true, bias));
  CX_DNNL(dnnl_primitive_desc_create(hint, &cd, NULL, eng, NULL), a->node);
  return CX_OK;
}

/* dX from dY (input 0) and W (input 2) into output 0. */
static cx_status grad_build_data(conv_state *s, const cx_kernel_args *a) {
  conv_mds mds, *m = &mds;
  dnnl_convolution_desc_t cd;
  dnnl_primitive_desc_t pd, hint;
  cx_dnnl_exec *e = &s->bwd_data;
  conv_io io = {&a->out[0], &a->in[0], &a->in[2]};
  CX_TRY(mds_init(m, a->node, &s->g, &s->crop, &io,
                  conv_types_for(s, a, CONV_WRITES_SRC, &a->out[0], s->winograd)));
  CX_DNNL(dnnl_dilated_convolution_backward_data_desc_init(&cd, m->alg, &m->src,
                                                           &m->wei, &m->dst, m->strides,
                                                           m->dilates, m->pad_l, m->pad_r),
          a->node);
  CX_TRY(grad_hint(&hint, a, s, &io, false, s->winograd));
  cx_status st = cx_dnnl_exec_create(e, a->node, &cd, NULL, hint, &pd);
  dnnl_primitive_desc_destroy(hint);
  CX_TRY(st);
  st = cx_dnnl_exec_arg(e, a->node, pd, DNNL_ARG_DIFF_DST, &m->u_dst, false, 0);
  if (st == CX_OK) st = cx_dnnl_exec_arg(e, a->node, pd, DNNL_ARG_WEIGHTS, &m->u_wei, false, 2);
  if (st == CX_OK) st = cx_dnnl_exec_arg(e, a->node, pd, DNNL_ARG_DIFF_SRC, &m->u_src, true, 0);
  dnnl_primitive_desc_destroy(pd);
  return st;
}

/* dW (output 1) and dB (output 2) from X (input 1) and dY (input 0). */
static cx_status grad_build_weights(conv_state *s, const cx_kernel_args *a) {
  conv_mds mds, *m = &mds;
  dnnl_convolution_desc_t cd;
  dnnl_primitive_desc_t pd, hint;
  bool db = s->want[2];
  cx_dnnl_exec *e = &s->bwd_weights;
  conv_io io = {&a->in[1], &a->in[0], &a->out[1]};
  CX_TRY(mds_init(m, a->node, &s->g, &s->crop, &io,
                  conv_types_for(s, a, CONV_WRITES_WEI, NULL, s->winograd_weights)));
  CX_DNNL(dnnl_dilated_convolution_backward_weights_desc_init(
              &cd, m->alg, &m->src, &m->wei, db ? &m->bias : NULL, &m->dst,
              m->strides, m->dilates, m->pad_l, m->pad_r),
          a->node);
  CX_TRY(grad_hint(&hint, a, s, &io, db, s->winograd_weights));
  cx_status st = cx_dnnl_exec_create(e, a->node, &cd, NULL, hint, &pd);
  dnnl_primitive_desc_destroy(hint);
  CX_TRY(st);
  st = cx_dnnl_exec_arg(e, a->node, pd, DNNL_ARG_SRC, &m->u_src, false, 1);
  if (st == CX_OK) st = cx_dnnl_exec_arg(e, a->node, pd, DNNL_ARG_DIFF_DST, &m->u_dst, false, 0);
  if (st == CX_OK) st = cx_dnnl_exec_arg(e, a->node, pd, DNNL_ARG_DIFF_WEIGHTS, &m->u_wei, true, 1);
  if (st == CX_OK && db) st = cx_dnnl_exec_arg(e, a->node, pd, DNNL_ARG_DIFF_BIAS, &m->bias, true, 2);
  dnnl_primitive_desc_destroy(pd);
  return st;
}

/* Channels-last depthwise 3x3 whose weight gradient oneDNN runs through a generic kernel (no
 * "dw" in its implementation name): ours is several times faster there. */
static bool want_own_wgrad(const conv_state *s, const cx_kernel_args *a) {
  if (!cx_conv_geom_is_dw3x3(&s->g) || !cx_tensor_nhwc(&a->in[0]) || !cx_tensor_nhwc(&a->in[1]) ||
      a->in[0].dtype != CX_F32 || a->in[1].dtype != CX_F32)
    return false;
  const char *force = getenv("CX_CONV_DW_NHWC"), *impl = NULL;
  if (force && strcmp(force, "c") == 0) return true;
  if (force && strcmp(force, "dnnl") == 0) return false;
  if (!s->bwd_weights.prim) return false;
  const_dnnl_primitive_desc_t pd = NULL;
  if (dnnl_primitive_get_primitive_desc(s->bwd_weights.prim, &pd) != dnnl_success ||
      dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success)
    return false;
  return !impl || !strstr(impl, "dw");
}

static cx_status grad_build(conv_state *s, const cx_kernel_args *a) {
  cx_status st = s->want[0] ? grad_build_data(s, a) : CX_OK;
  if (st == CX_OK && s->want[1]) st = grad_build_weights(s, a);
  /* dY reordered once for both (bf16, blocked layouts) */
  if (st == CX_OK && s->want[0] && s->want[1])
    st = cx_dnnl_exec_reuse(&s->bwd_weights, a->node, DNNL_ARG_DIFF_DST, &s->bwd_data,
                            DNNL_ARG_DIFF_DST);
  if (st == CX_OK && s->want[1] && want_own_wgrad(s, a)) {
    cx_dnnl_exec_release(&s->bwd_weights);
    s->own_wgrad = true;
    s->threads = omp_get_max_threads();
    s->bwd_weights.scratch = cx_conv_dw3x3_nhwc_wgrad_scratch(&s->g, s->threads);
  }
  return st;
}

/* The two primitives run one after the other on one scratch; dW's part starts past dX's where it
 * reads dX's copy of dY (cx_dnnl_exec_reuse). */
static size_t grad_scratch(const conv_state *s) {
  size_t w = s->bwd_weights.base + s->bwd_weights.scratch;
  return s->bwd_data.scratch > w ? s->bwd_data.scratch : w;
}

/* dB = dY summed over batch and pixels; for the rare ConvGrad that wants dB without dW. Pixels are
 * one W-stride apart in both layouts (NCHW: 1, NHWC: C); dY is f32 or bf16. */
static void bias_grad(const cx_conv_geom *g, const cx_tensor *dyt, float *db) {
  int64_t e = (int64_t)cx_dtype_size(dyt->dtype), plane = g->oh * g->ow;
  int64_t sn = dyt->strides[0] / e, sc = dyt->strides[1] / e, sp = dyt->strides[3] / e;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < g->c_out; c++) {
    double s = 0;
    for (int64_t n = 0; n < g->n; n++)
      for (int64_t i = 0; i < plane; i++)
        s += cx_dtype_load(dyt->dtype, dyt->data, (size_t)(n * sn + c * sc + i * sp));
    db[c] = (float)s;
  }
}

static cx_status grad_run_dnnl(conv_state *s, const cx_kernel_args *a) {
  if (s->want[0]) CX_TRY(cx_dnnl_exec_run(&s->bwd_data, a));
  if (s->own_wgrad)
    cx_conv_dw3x3_nhwc_backward_weights(&s->g, cx_f32(&a->in[1]), cx_f32(&a->in[0]),
                                        cx_f32(&a->out[1]), s->want[2] ? cx_f32(&a->out[2]) : NULL,
                                        a->scratch, s->threads);
  else if (s->want[1]) {
    if (s->crop.on) /* the primitive writes the kept taps only */
      memset(cx_f32(&a->out[1]), 0, sizeof(float) * (size_t)cx_shape_numel(&a->out[1].shape));
    CX_TRY(cx_dnnl_exec_run(&s->bwd_weights, a));
  }
  else if (s->want[2]) bias_grad(&s->g, &a->in[0], cx_f32(&a->out[2]));
  return CX_OK;
}

static cx_status grad_run(const cx_kernel_args *a) {
  conv_state *s = a->state;
  if (s->path == PATH_DNNL) return grad_run_dnnl(s, a);
  bool v = s->path == PATH_DW_AVX512;
  const float *dy = cx_f32(&a->in[0]), *x = cx_f32(&a->in[1]), *w = cx_f32(&a->in[2]);
  if (s->want[0]) cx_conv_dw3x3_backward_data(&s->g, dy, w, cx_f32(&a->out[0]), v);
  if (s->want[1] || s->want[2])
    cx_conv_dw3x3_backward_weights(&s->g, x, dy, s->want[1] ? cx_f32(&a->out[1]) : NULL,
                                   s->want[2] ? cx_f32(&a->out[2]) : NULL, v);
  return CX_OK;
}

/* ---- prepare: the algorithm, then the primitives ------------------------------------------------ */

/* What Conv and ConvGrad prepare differently. */
typedef struct conv_kind {
  int x_in; /* X's input: 0 for Conv, 1 for ConvGrad */
  cx_status (*build)(conv_state *, const cx_kernel_args *);
  cx_status (*run)(const cx_kernel_args *);
  size_t (*scratch)(const conv_state *);
} conv_kind;

static const conv_kind conv_fwd = {0, conv_build_fwd, conv_run, conv_scratch},
                       conv_grad = {1, grad_build, grad_run, grad_scratch};

static conv_state *state_for(const cx_kernel_args *a, const conv_kind *k, cx_status *st) {
  conv_state *s = state_new(a, k->x_in, st);
  if (s && k->x_in == 1) cx_conv_grad_wanted(a->node, s->want);
  return s;
}

/* An algorithm: Winograd's where it fits (else direct) for the forward convolution and dX
 * (ALGO_WINOGRAD) and for dW (ALGO_WINOGRAD_WEIGHTS), and, in a bf16 program, f32 operands;
 * channels-last activations through blocked layouts (ALGO_BLOCKED, see blocked_fits). */
enum { ALGO_WINOGRAD = 1, ALGO_F32 = 2, ALGO_WINOGRAD_WEIGHTS = 4, ALGO_BLOCKED = 8 };

/* The node's primitives with algorithm `algo`; NULL after an error, which is in *st. */
static conv_state *state_built(const cx_kernel_args *a, const conv_kind *k, int algo,
                               cx_status *st) {
  conv_state *s = state_for(a, k, st);
  if (!s) return NULL;
  s->winograd_weights = s->winograd_weights && (algo & ALGO_WINOGRAD_WEIGHTS);
  s->winograd = s->winograd && (algo & ALGO_WINOGRAD);
  s->f32 = (algo & ALGO_F32) != 0;
  s->blocked = (algo & ALGO_BLOCKED) != 0;
  *st = s->path == PATH_DNNL ? build_or_direct(s, a, k->build) : CX_OK;
  if (*st == CX_OK) return s;
  conv_release(s);
  return NULL;
}

/* The timing cache's key: the op and its outputs, precision, threads, each tensor's layout (n:
 * channels-last, b: channels-last bf16, p: plain, -: absent) and the geometry. */
static void conv_key(const cx_kernel_args *a, const conv_state *s, char *key, size_t n) {
  char lay[16] = {0};
  for (int k = 0; k < a->n_in + a->n_out && k < 15; k++) {
    const cx_tensor *t = k < a->n_in ? &a->in[k] : &a->out[k - a->n_in];
    lay[k] = !t->data ? '-' : !cx_tensor_nhwc(t) ? 'p' : t->dtype == CX_BF16 ? 'b' : 'n';
  }
  const cx_conv_geom *g = &s->g;
  snprintf(key, n,
           "conv-algorithm-v3:%s,want=%d%d%d,train=%d,prec=%d,threads=%d,layouts=%s,"
           "x=%ldx%ldx%ldx%ld,w=%ldx%ldx%ld,group=%ld,strides=%ld.%ld,dil=%ld.%ld,"
           "pads=%ld.%ld.%ld.%ld",
           a->node->op->name, s->want[0], s->want[1], s->want[2], a->training, (int)a->precision,
           omp_get_max_threads(), lay, (long)g->n, (long)g->c_in, (long)g->h, (long)g->w,
           (long)g->c_out, (long)g->kh, (long)g->kw, (long)g->group, (long)g->sh, (long)g->sw,
           (long)g->dh, (long)g->dw, (long)g->pt, (long)g->pl, (long)g->pb, (long)g->pr);
}

/* A bf16 training program's channels-last kxk convolution runs on NHWC memory as it is
 * (choose_fmt); through blocked layouts it pays reorders of its activations, except at 16
 * channels, where nChw16c is NHWC's bytes (act_tag). oneDNN 2.6's blocked bf16 kernels are the
 * faster ones for some shapes (ResNet-20 at 28 px on a Zen 5: the 16-channel layers' forward 1.24
 * ms against 1.60, dW 1.50 against 1.78), so it is a measured candidate. f32 programs have
 * Winograd's candidates on blocked layouts already (offering the direct one too made the
 * measured choices noisier and the step slower). Not strided: a bf16 dW there goes plain
 * (conv_types_for), which on channels-last memory is oneDNN's reference loop. */
static bool blocked_fits(const cx_kernel_args *a, const conv_kind *k, const conv_state *s) {
  const cx_conv_geom *g = &s->crop.g;
  return a->training && a->precision == CX_PRECISION_BF16 && s->path == PATH_DNNL &&
         cx_tensor_nhwc(&a->in[k->x_in]) &&
         g->group == 1 && g->kh * g->kw > 1 && g->sh == 1 && g->sw == 1 &&
         !getenv("CX_CONV_NHWC") && !getenv("CX_CONV_LAYOUT");
}

/* The candidates for a node: the direct algorithm; Winograd's where it fits, for a ConvGrad's dX
 * and dW apart and together (on a Zen 5 ResNet-20's 16-channel layers take Winograd's dX and the
 * direct dW: the backward pass 12% faster than either alone); in a bf16 program also the f32
 * direct primitives; blocked layouts where blocked_fits. Returns how many (at most 6). */
static int candidates(const cx_kernel_args *a, const conv_kind *k, const conv_state *s, int *cand) {
  int n = 0;
  cand[n++] = 0;
  if (s->winograd) { /* f32 in any program */
    bool grad = k->x_in == 1, dx = !grad || s->want[0], dw = grad && s->want[1];
    if (dx) cand[n++] = ALGO_WINOGRAD;
    if (dw) cand[n++] = ALGO_WINOGRAD_WEIGHTS;
    if (dx && dw) cand[n++] = ALGO_WINOGRAD | ALGO_WINOGRAD_WEIGHTS;
  }
  if (a->precision == CX_PRECISION_BF16) cand[n++] = ALGO_F32;
  if (blocked_fits(a, k, s)) cand[n++] = ALGO_BLOCKED;
  return n;
}

/* Whether a state built for candidate c is that candidate: where oneDNN declined Winograd for the
 * shape, the build fell back to the direct algorithm, a candidate timed already. */
static bool built_as(const conv_state *s, int c) {
  return (!(c & ALGO_WINOGRAD) || s->winograd) &&
         (!(c & ALGO_WINOGRAD_WEIGHTS) || s->winograd_weights);
}

/* CX_CONV_WINOGRAD's algorithm (forced_algo), -1 when it names none. */
static int forced_algo(void) {
  static const struct {
    const char *name;
    int algo;
  } force[] = {{"on", ALGO_WINOGRAD | ALGO_WINOGRAD_WEIGHTS},
               {"off", 0},
               {"data", ALGO_WINOGRAD},
               {"weights", ALGO_WINOGRAD_WEIGHTS}};
  const char *env = getenv("CX_CONV_WINOGRAD");
  for (size_t i = 0; env && i < sizeof force / sizeof force[0]; i++)
    if (strcmp(env, force[i].name) == 0) return force[i].algo;
  return -1;
}

/* The algorithm of a oneDNN convolution, measured once per shape on this machine
 * (kernels/cpu/tune.h) among its candidates, the fastest kept. In a bf16 program the f32 direct
 * primitive is more exact, and where it is faster, as for 1x1 convolutions whose operands'
 * f32 -> bf16 reorders cost more than bf16 saves, nothing is lost. On the AMD EPYC (Zen 4) these
 * kernels were first measured on, Winograd won on every ResNet layer; on a Zen 5 it loses the
 * 16-channel layers at 32x32 and most weight gradients, and wins the rest (ARCHITECTURE.md).
 * CX_CONV_WINOGRAD measures nothing (forced_algo); a bf16 program's convolutions then run in
 * bf16. */
static cx_status conv_tuned(const cx_kernel_args *a, const conv_kind *k, const conv_state *s,
                            int *algo) {
  int forced = forced_algo();
  if (forced >= 0) {
    *algo = a->precision == CX_PRECISION_BF16 ? 0 : forced;
    return CX_OK;
  }
  int cand[6], n = candidates(a, k, s, cand);
  *algo = 0;
  if (n == 1) return CX_OK;
  char key[400];
  conv_key(a, s, key, sizeof key);
  if (cx_tune_lookup(key, algo)) return CX_OK;
  double best = 1e300;
  for (int i = 0; i < n; i++) {
    cx_status st;
    conv_state *c = state_built(a, k, cand[i], &st);
    if (!c) return st;
    double ms = 1e300;
    if (built_as(c, cand[i])) st = cx_tune_time(a, k->run, c, k->scratch(c), &ms);
    conv_release(c);
    CX_TRY(st);
    if (ms < best) best = ms, *algo = cand[i];
  }
  *algo = cx_tune_record(key, *algo);
  return CX_OK;
}

static cx_status prepare(const cx_kernel_args *a, const conv_kind *k, void **state,
                         size_t *scratch) {
  cx_status st;
  conv_state *probe = state_for(a, k, &st);
  if (!probe) return st;
  int algo = 0;
  st = probe->path == PATH_DNNL ? conv_tuned(a, k, probe, &algo) : CX_OK;
  conv_release(probe);
  CX_TRY(st);
  conv_state *s = state_built(a, k, algo, &st);
  if (!s) return st;
  *state = s;
  *scratch = k->scratch(s);
  return CX_OK;
}

static cx_status conv_prepare(const cx_kernel_args *a, void **state, size_t *scratch) {
  return prepare(a, &conv_fwd, state, scratch);
}

static cx_status grad_prepare(const cx_kernel_args *a, void **state, size_t *scratch) {
  return prepare(a, &conv_grad, state, scratch);
}

const cx_kernel cx_cpu_conv[] = {
    {"Conv", conv_prepare, conv_run, conv_release, CX_LAYOUT_ANY, NULL, CX_ACT_BF16_ANY},
    {"ConvFused", conv_prepare, conv_run, conv_release, CX_LAYOUT_ANY, NULL, 0},
    {"ConvGrad", grad_prepare, grad_run, conv_release, CX_LAYOUT_ANY, NULL, CX_ACT_BF16_ANY},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
