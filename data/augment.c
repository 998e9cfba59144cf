/* Per-sample augmentation (crop, flip, cutout, normalisation) fused into one pass from HWC bytes
 * to CHW floats, and batch-level mixup / cutmix. Every random choice is drawn from a counter-based
 * stream at a fixed position, so a sample's augmentation depends on (seed, epoch, sample) only,
 * and turning one option on does not change the draws of another. */
#include <math.h>
#include <string.h>

#include "../core/rng.h"
#include "internal.h"

/* Positions in a sample's stream. */
enum { DRAW_CROP = 0, CROP_ATTEMPTS = 10, DRAW_FLIP = 50, DRAW_CUTOUT = 51 };
/* Positions in a batch's stream. */
enum { DRAW_MIX = 0, DRAW_KIND = 1, DRAW_BOX = 2, DRAW_BETA = 100 };

static float uni(uint64_t key, uint64_t i) { return cx_rng_uniform(key, i); }

bool cx_aug_mixing(const cx_augment *a) { return a->mixup_alpha > 0 || a->cutmix_alpha > 0; }

static cx_status check_crop(const cx_augment *a, int64_t h, int64_t w, int64_t oh, int64_t ow) {
  if (a->crop == CX_CROP_CENTER && (oh > h || ow > w))
    return cx_fail(CX_ERR_ARG, "centre crop %lldx%lld is larger than the %lldx%lld images",
                   (long long)ow, (long long)oh, (long long)w, (long long)h);
  if (a->crop == CX_CROP_PAD && (a->pad < 0 || oh > h + 2 * a->pad || ow > w + 2 * a->pad))
    return cx_fail(CX_ERR_ARG, "crop %lldx%lld does not fit %lldx%lld images padded by %d",
                   (long long)ow, (long long)oh, (long long)w, (long long)h, a->pad);
  if (a->crop == CX_CROP_RESIZED &&
      !(a->scale_min > 0 && a->scale_min <= a->scale_max && a->scale_max <= 1 &&
        a->ratio_min > 0 && a->ratio_min <= a->ratio_max))
    return cx_fail(CX_ERR_ARG, "resized crop needs 0 < scale min <= max <= 1 and 0 < ratio min "
                   "<= max (got scale %g..%g, ratio %g..%g)", a->scale_min, a->scale_max,
                   a->ratio_min, a->ratio_max);
  if ((unsigned)a->crop > CX_CROP_RESIZED)
    return cx_fail(CX_ERR_ARG, "unknown crop mode %d", a->crop);
  return CX_OK;
}

cx_status cx_aug_plan_make(const cx_augment *a, int64_t h, int64_t w, int64_t c, cx_aug_plan *p) {
  *p = (cx_aug_plan){.a = *a, .h = h, .w = w, .c = c};
  cx_augment *q = &p->a;
  p->oh = q->out_h > 0 ? q->out_h : h;
  p->ow = q->out_w > 0 ? q->out_w : w;
  if (q->scale_min <= 0 && q->scale_max <= 0) q->scale_min = 0.08f, q->scale_max = 1;
  if (q->ratio_min <= 0 && q->ratio_max <= 0) q->ratio_min = 0.75f, q->ratio_max = 4.0f / 3;
  CX_TRY(check_crop(q, h, w, p->oh, p->ow));
  if (q->cutout_prob < 0 || q->cutout_prob > 1 || q->cutout_size < 0 || q->mixup_alpha < 0 ||
      q->cutmix_alpha < 0 || q->mix_prob < 0 || q->mix_prob > 1 || q->label_smoothing < 0 ||
      q->label_smoothing >= 1)
    return cx_fail(CX_ERR_ARG, "augmentation: probabilities must lie in [0, 1], sizes and "
                   "alphas must not be negative, label smoothing must lie in [0, 1)");
  if (cx_aug_mixing(q) && q->mix_prob == 0) q->mix_prob = 1;
  for (int ch = 0; ch < c; ch++) {
    float sd = q->std[ch] != 0 ? q->std[ch] : 1;
    p->scale[ch] = 1.0f / (255.0f * sd);
    p->bias[ch] = -q->mean[ch] / sd;
  }
  return CX_OK;
}

size_t cx_aug_scratch_floats(const cx_aug_plan *p) { return (size_t)(p->ow * 3 + p->w * p->c); }

/* ---- geometry ---- */

typedef struct box {
  double y, x, h, w; /* source window, in pixels */
} box;

/* torchvision's RandomResizedCrop: ten tries at a random area and aspect ratio, then the largest
 * centred window within the ratio bounds. */
static box resized_crop(const cx_aug_plan *p, uint64_t key) {
  const cx_augment *a = &p->a;
  double area = (double)(p->h * p->w), lr0 = log(a->ratio_min), lr1 = log(a->ratio_max);
  for (int t = 0; t < CROP_ATTEMPTS; t++) {
    uint64_t i = DRAW_CROP + 4 * (uint64_t)t;
    double target = area * (a->scale_min + (a->scale_max - a->scale_min) * uni(key, i));
    double ratio = exp(lr0 + (lr1 - lr0) * uni(key, i + 1));
    int64_t w = llround(sqrt(target * ratio)), h = llround(sqrt(target / ratio));
    if (w > 0 && h > 0 && w <= p->w && h <= p->h) {
      int64_t y = (int64_t)cx_data_rand_below(key, i + 2, (uint64_t)(p->h - h + 1));
      int64_t x = (int64_t)cx_data_rand_below(key, i + 3, (uint64_t)(p->w - w + 1));
      return (box){(double)y, (double)x, (double)h, (double)w};
    }
  }
  double in = (double)p->w / (double)p->h, w = (double)p->w, h = (double)p->h;
  if (in < a->ratio_min) h = round(w / a->ratio_min);
  else if (in > a->ratio_max) w = round(h * a->ratio_max);
  return (box){floor((p->h - h) / 2), floor((p->w - w) / 2), h, w};
}

/* One output row of every channel from source row `row` (already offset by x0): output x takes
 * column x' = x or ow-1-x, and columns [a, b) of x' lie inside the image. Three channels, the
 * common case, are read in one pass rather than three strided ones. */
static void window_row(const cx_aug_plan *p, const uint8_t *row, int64_t a, int64_t b, bool flip,
                       float *const *o) {
  const int64_t C = p->c, ow = p->ow;
  for (int64_t ch = 0; ch < C; ch++) {
    for (int64_t x = 0; x < a; x++) o[ch][flip ? ow - 1 - x : x] = p->bias[ch];
    for (int64_t x = b; x < ow; x++) o[ch][flip ? ow - 1 - x : x] = p->bias[ch];
  }
  if (C == 3) {
    const float s0 = p->scale[0], s1 = p->scale[1], s2 = p->scale[2];
    const float b0 = p->bias[0], b1 = p->bias[1], b2 = p->bias[2];
    float *o0 = o[0], *o1 = o[1], *o2 = o[2];
    for (int64_t x = a; x < b; x++) {
      int64_t t = flip ? ow - 1 - x : x;
      o0[t] = (float)row[3 * x] * s0 + b0;
      o1[t] = (float)row[3 * x + 1] * s1 + b1;
      o2[t] = (float)row[3 * x + 2] * s2 + b2;
    }
    return;
  }
  for (int64_t ch = 0; ch < C; ch++) {
    const float s = p->scale[ch], bi = p->bias[ch];
    for (int64_t x = a; x < b; x++) o[ch][flip ? ow - 1 - x : x] = (float)row[x * C + ch] * s + bi;
  }
}

/* out[c][y][x] = byte at (y0 + y, x0 + x') * scale + bias, x' = x or mirrored; outside the
 * image the byte is 0 (zero padding before normalisation, as torchvision pads). */
static void copy_window(const cx_aug_plan *p, const uint8_t *src, int64_t y0, int64_t x0,
                        bool flip, float *out) {
  const int64_t C = p->c, oh = p->oh, ow = p->ow, plane = oh * ow;
  int64_t a = x0 < 0 ? -x0 : 0, b = p->w - x0 < ow ? p->w - x0 : ow; /* valid x' in [a, b) */
  for (int64_t y = 0; y < oh; y++) {
    int64_t sy = y0 + y;
    float *o[4];
    for (int64_t ch = 0; ch < C; ch++) o[ch] = out + ch * plane + y * ow;
    if (sy < 0 || sy >= p->h || a >= b) {
      for (int64_t ch = 0; ch < C; ch++)
        for (int64_t x = 0; x < ow; x++) o[ch][x] = p->bias[ch];
      continue;
    }
    window_row(p, src + (sy * p->w + x0) * C, a, b, flip, o);
  }
}

/* Bilinear resampling of window `r` to oh x ow (pixel centres aligned, edges clamped): each
 * output row first blends two source rows over the columns the window uses (contiguous, so it
 * vectorises), then interpolates along x from that blended row. */
static void resample(const cx_aug_plan *p, const uint8_t *src, box r, bool flip, float *out,
                     float *scratch) {
  const int64_t C = p->c, oh = p->oh, ow = p->ow, plane = oh * ow;
  float *fx = scratch, *blend = scratch + 3 * ow;
  int32_t *x0 = (int32_t *)(scratch + ow), *x1 = (int32_t *)(scratch + 2 * ow);
  for (int64_t x = 0; x < ow; x++) {
    int64_t xx = flip ? ow - 1 - x : x;
    double sx = r.x + ((double)xx + 0.5) * r.w / (double)ow - 0.5;
    sx = sx < 0 ? 0 : sx > (double)(p->w - 1) ? (double)(p->w - 1) : sx;
    x0[x] = (int32_t)sx;
    x1[x] = x0[x] + 1 < p->w ? x0[x] + 1 : x0[x];
    fx[x] = (float)(sx - x0[x]);
  }
  int64_t lo = x0[0] < x0[ow - 1] ? x0[0] : x0[ow - 1]; /* flipped taps run backwards */
  int64_t hi = x1[0] > x1[ow - 1] ? x1[0] : x1[ow - 1];
  for (int64_t y = 0; y < oh; y++) {
    double sy = r.y + ((double)y + 0.5) * r.h / (double)oh - 0.5;
    sy = sy < 0 ? 0 : sy > (double)(p->h - 1) ? (double)(p->h - 1) : sy;
    int64_t y0 = (int64_t)sy, y1 = y0 + 1 < p->h ? y0 + 1 : y0;
    float fy = (float)(sy - (double)y0);
    const uint8_t *r0 = src + y0 * p->w * C, *r1 = src + y1 * p->w * C;
    for (int64_t k = lo * C; k < (hi + 1) * C; k++)
      blend[k] = (float)r0[k] + fy * (float)(r1[k] - r0[k]);
    for (int64_t ch = 0; ch < C; ch++) {
      float *o = out + ch * plane + y * ow;
      const float s = p->scale[ch], bi = p->bias[ch];
      for (int64_t x = 0; x < ow; x++) {
        float v0 = blend[x0[x] * C + ch], v1 = blend[x1[x] * C + ch];
        o[x] = (v0 + fx[x] * (v1 - v0)) * s + bi;
      }
    }
  }
}

static void cutout(const cx_aug_plan *p, uint64_t key, float *out) {
  const cx_augment *a = &p->a;
  if (a->cutout_size <= 0 || a->cutout_prob <= 0 || uni(key, DRAW_CUTOUT) >= a->cutout_prob)
    return;
  int64_t cy = (int64_t)cx_data_rand_below(key, DRAW_CUTOUT + 1, (uint64_t)p->oh);
  int64_t cx = (int64_t)cx_data_rand_below(key, DRAW_CUTOUT + 2, (uint64_t)p->ow);
  int64_t y0 = cy - a->cutout_size / 2, x0 = cx - a->cutout_size / 2;
  int64_t y1 = y0 + a->cutout_size, x1 = x0 + a->cutout_size;
  y0 = y0 < 0 ? 0 : y0, x0 = x0 < 0 ? 0 : x0;
  y1 = y1 > p->oh ? p->oh : y1, x1 = x1 > p->ow ? p->ow : x1;
  for (int64_t ch = 0; ch < p->c; ch++)
    for (int64_t y = y0; y < y1; y++)
      memset(out + (ch * p->oh + y) * p->ow + x0, 0, (size_t)(x1 - x0) * sizeof *out);
}

void cx_aug_sample(const cx_aug_plan *p, const uint8_t *src, uint64_t key, float *out,
                   float *scratch) {
  const cx_augment *a = &p->a;
  bool flip = a->flip && uni(key, DRAW_FLIP) < 0.5f;
  switch (a->crop) {
  case CX_CROP_RESIZED: resample(p, src, resized_crop(p, key), flip, out, scratch); break;
  case CX_CROP_PAD: {
    uint64_t ny = (uint64_t)(p->h + 2 * a->pad - p->oh + 1);
    uint64_t nx = (uint64_t)(p->w + 2 * a->pad - p->ow + 1);
    int64_t y = (int64_t)cx_data_rand_below(key, DRAW_CROP, ny);
    int64_t x = (int64_t)cx_data_rand_below(key, DRAW_CROP + 1, nx);
    copy_window(p, src, y - a->pad, x - a->pad, flip, out);
    break;
  }
  case CX_CROP_CENTER:
    copy_window(p, src, (p->h - p->oh) / 2, (p->w - p->ow) / 2, flip, out);
    break;
  case CX_CROP_NONE:
    if (p->oh == p->h && p->ow == p->w) copy_window(p, src, 0, 0, flip, out);
    else resample(p, src, (box){0, 0, (double)p->h, (double)p->w}, flip, out, scratch);
    break;
  }
  cutout(p, key, out);
}

/* ---- mixup / cutmix ---- */

/* Marsaglia and Tsang's method; alpha < 1 through Gamma(alpha + 1) * U^(1 / alpha). */
static double gamma_draw(uint64_t key, uint64_t *at, double alpha) {
  double boost = 1;
  if (alpha < 1) {
    boost = pow(1.0 - uni(key, (*at)++), 1.0 / alpha);
    alpha += 1;
  }
  double d = alpha - 1.0 / 3, c = 1 / sqrt(9 * d);
  for (int tries = 0; tries < 64; tries++) {
    double x = cx_rng_normal(key, (*at)++), v = 1 + c * x;
    double u = 1.0 - uni(key, (*at)++);
    if (v <= 0) continue;
    v = v * v * v;
    if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) return d * v * boost;
  }
  return d * boost; /* the mode; reached with probability below 1e-80 */
}

static double beta_draw(uint64_t key, double alpha) {
  uint64_t at = DRAW_BETA;
  double g1 = gamma_draw(key, &at, alpha), g2 = gamma_draw(key, &at, alpha);
  return g1 + g2 > 0 ? g1 / (g1 + g2) : 0.5;
}

/* Swaps the box between images i and j; returns the share of the image it covers. */
static double cutmix_box(const cx_aug_plan *p, uint64_t key, double lambda, int64_t *b) {
  double r = sqrt(1 - lambda);
  int64_t ch = (int64_t)(p->oh * r), cw = (int64_t)(p->ow * r);
  int64_t cy = (int64_t)cx_data_rand_below(key, DRAW_BOX, (uint64_t)p->oh);
  int64_t cx = (int64_t)cx_data_rand_below(key, DRAW_BOX + 1, (uint64_t)p->ow);
  b[0] = cy - ch / 2 < 0 ? 0 : cy - ch / 2;
  b[1] = cx - cw / 2 < 0 ? 0 : cx - cw / 2;
  b[2] = cy + ch / 2 > p->oh ? p->oh : cy + ch / 2;
  b[3] = cx + cw / 2 > p->ow ? p->ow : cx + cw / 2;
  return (double)((b[2] - b[0]) * (b[3] - b[1])) / (double)(p->oh * p->ow);
}

static void mix_pair(const cx_aug_plan *p, float *xi, float *xj, bool cut, float lambda,
                     const int64_t *b) {
  int64_t plane = p->oh * p->ow;
  if (!cut) {
    for (int64_t k = 0; k < p->c * plane; k++) {
      float u = xi[k], v = xj[k];
      xi[k] = lambda * u + (1 - lambda) * v;
      xj[k] = lambda * v + (1 - lambda) * u;
    }
    return;
  }
  for (int64_t ch = 0; ch < p->c; ch++)
    for (int64_t y = b[0]; y < b[2]; y++)
      for (int64_t x = b[1]; x < b[3]; x++) {
        int64_t k = ch * plane + y * p->ow + x;
        float t = xi[k];
        xi[k] = xj[k];
        xj[k] = t;
      }
}

/* Sample i is mixed with sample n-1-i: a pairing that needs no draws and no copies. */
void cx_aug_mix(const cx_aug_plan *p, uint64_t key, float *images, const int64_t *labels,
                int64_t n, int64_t classes, float *targets) {
  const cx_augment *a = &p->a;
  double lambda = 1;
  bool cut = false;
  int64_t b[4] = {0};
  if (uni(key, DRAW_MIX) < a->mix_prob && n > 1) {
    cut = a->cutmix_alpha > 0 && (a->mixup_alpha <= 0 || uni(key, DRAW_KIND) < 0.5f);
    lambda = beta_draw(key, cut ? a->cutmix_alpha : a->mixup_alpha);
    if (cut) lambda = 1 - cutmix_box(p, key, lambda, b);
  }
  int64_t size = p->c * p->oh * p->ow;
  for (int64_t i = 0; lambda < 1 && i < n / 2; i++)
    mix_pair(p, images + i * size, images + (n - 1 - i) * size, cut, (float)lambda, b);
  float eps = a->label_smoothing, off = eps / (float)classes;
  for (int64_t i = 0; i < n; i++) {
    float *t = targets + i * classes;
    for (int64_t k = 0; k < classes; k++) t[k] = off;
    bool self = i == n - 1 - i;
    t[labels[i]] += (1 - eps) * (float)(self ? 1 : lambda);
    if (!self) t[labels[n - 1 - i]] += (1 - eps) * (float)(1 - lambda);
  }
}
