#include "../../core/ops/conv.h"
#include "ref.h"

/* Conv as the ONNX spec writes it: every output pixel sums X over the group's input channels and
 * the (dilated) kernel window, pixels outside X counting as zero. ConvGrad scatters each dY element
 * back along the same index map. */

typedef struct conv_index {
  const cx_conv_geom *g;
  int64_t n, m, oy, ox; /* output element */
} conv_index;

/* The input channel, row and column that kernel tap (ci, ky, kx) reads, or false when the tap falls
 * into the padding. */
static bool conv_tap(const conv_index *o, int64_t ci, int64_t ky, int64_t kx, int64_t *xi,
                     int64_t *wi) {
  const cx_conv_geom *g = o->g;
  int64_t cig = g->c_in / g->group, cog = g->c_out / g->group;
  int64_t c = o->m / cog * cig + ci;
  int64_t iy = o->oy * g->sh - g->pt + ky * g->dh, ix = o->ox * g->sw - g->pl + kx * g->dw;
  if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) return false;
  *xi = ((o->n * g->c_in + c) * g->h + iy) * g->w + ix;
  *wi = ((o->m * cig + ci) * g->kh + ky) * g->kw + kx;
  return true;
}

static int64_t out_index(const conv_index *o) {
  const cx_conv_geom *g = o->g;
  return ((o->n * g->c_out + o->m) * g->oh + o->oy) * g->ow + o->ox;
}

/* Calls visit(o, xi, wi, user) for every tap of every output element. */
typedef void (*tap_fn)(const conv_index *o, int64_t xi, int64_t wi, void *user);

static void conv_visit(const cx_conv_geom *g, tap_fn visit, void *user) {
  conv_index o = {.g = g};
  for (o.n = 0; o.n < g->n; o.n++)
    for (o.m = 0; o.m < g->c_out; o.m++)
      for (o.oy = 0; o.oy < g->oh; o.oy++)
        for (o.ox = 0; o.ox < g->ow; o.ox++)
          for (int64_t ci = 0; ci < g->c_in / g->group; ci++)
            for (int64_t ky = 0; ky < g->kh; ky++)
              for (int64_t kx = 0; kx < g->kw; kx++) {
                int64_t xi, wi;
                if (conv_tap(&o, ci, ky, kx, &xi, &wi)) visit(&o, xi, wi, user);
              }
}

typedef struct conv_data {
  const double *x, *w, *dy;
  double *y, *dx, *dw;
} conv_data;

static void fwd_tap(const conv_index *o, int64_t xi, int64_t wi, void *user) {
  conv_data *d = user;
  d->y[out_index(o)] += d->x[xi] * d->w[wi];
}

static cx_status ref_conv(const cx_ref_args *a) {
  cx_conv_geom g;
  CX_TRY(cx_conv_geom_make(a->node, &a->in[0].shape, &a->in[1].shape, &g));
  conv_data d = {.x = a->in[0].data, .w = a->in[1].data, .y = a->out[0].data};
  conv_visit(&g, fwd_tap, &d);
  const double *b = a->n_in > 2 ? a->in[2].data : NULL;
  if (b) {
    int64_t plane = g.oh * g.ow;
    for (int64_t i = 0; i < g.n * g.c_out * plane; i++) d.y[i] += b[i / plane % g.c_out];
  }
  return CX_OK;
}

static void bwd_tap(const conv_index *o, int64_t xi, int64_t wi, void *user) {
  conv_data *d = user;
  double dy = d->dy[out_index(o)];
  if (d->dx) d->dx[xi] += d->w[wi] * dy;
  if (d->dw) d->dw[wi] += d->x[xi] * dy;
}

/* inputs (dY, X, W); outputs (dX, dW, dB), each possibly of shape [0] when not wanted */
static cx_status ref_conv_grad(const cx_ref_args *a) {
  cx_conv_geom g;
  bool want[3];
  CX_TRY(cx_conv_geom_make(a->node, &a->in[1].shape, &a->in[2].shape, &g));
  cx_conv_grad_wanted(a->node, want);
  conv_data d = {.dy = a->in[0].data, .x = a->in[1].data, .w = a->in[2].data,
                 .dx = want[0] ? a->out[0].data : NULL, .dw = want[1] ? a->out[1].data : NULL};
  conv_visit(&g, bwd_tap, &d);
  if (want[2]) {
    int64_t plane = g.oh * g.ow;
    for (int64_t i = 0; i < g.n * g.c_out * plane; i++) a->out[2].data[i / plane % g.c_out] += d.dy[i];
  }
  return CX_OK;
}

const cx_ref_entry cx_ref_conv[] = {
    {"Conv", ref_conv},
    {"ConvGrad", ref_conv_grad},
    {NULL, NULL},
};
