/* Line and point charts as inline SVG: no scripts, no external files, so report.html stays one file that
 * any browser (and any XML parser) reads. */
#include <math.h>
#include <stdbool.h>

#include "report.h"

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                      "#9467bd", "#8c564b", "#e377c2", "#17becf"};

void cx_xml_text(FILE *f, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    case '\'': fputs("&#39;", f); break;
    default:
      /* control characters are not allowed in XML 1.0 */
      if ((unsigned char)*s >= 0x20 || *s == '\n' || *s == '\t') fputc(*s, f);
    }
  }
}

typedef struct range {
  double lo, hi;
} range;

/* The data's extent over every finite point; a flat or empty range is widened. */
static void extent(const cx_svg_chart *c, bool ys, range *r) {
  r->lo = INFINITY, r->hi = -INFINITY;
  for (int s = 0; s < c->n_series; s++) {
    const cx_report_series *se = &c->series[s];
    for (int i = 0; i < se->n; i++) {
      double v = ys ? se->y[i] : se->x[i];
      if (!isfinite(se->x[i]) || !isfinite(se->y[i])) continue;
      r->lo = fmin(r->lo, v), r->hi = fmax(r->hi, v);
    }
  }
  if (!isfinite(r->lo)) r->lo = 0, r->hi = 1;
  if (r->hi - r->lo < 1e-12 * fmax(1, fabs(r->hi))) r->lo -= 0.5, r->hi += 0.5;
}

/* A tick step of 1, 2 or 5 times a power of ten giving about 5 ticks. */
static double tick_step(const range *r) {
  double raw = (r->hi - r->lo) / 5, p = pow(10, floor(log10(raw))), m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

typedef struct frame {
  double x0, y0, w, h; /* plot area in pixels */
  range xr, yr;
} frame;

static double px(const frame *fr, double x) {
  return fr->x0 + (x - fr->xr.lo) / (fr->xr.hi - fr->xr.lo) * fr->w;
}

static double py(const frame *fr, double y) {
  return fr->y0 + fr->h - (y - fr->yr.lo) / (fr->yr.hi - fr->yr.lo) * fr->h;
}

static void axes(FILE *f, const frame *fr) {
  double sx = tick_step(&fr->xr), sy = tick_step(&fr->yr);
  fprintf(f, "<g font-size=\"11\" fill=\"#444\">\n");
  for (double t = ceil(fr->yr.lo / sy) * sy; t <= fr->yr.hi + 1e-9 * sy; t += sy) {
    double y = py(fr, t);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n",
            fr->x0, y, fr->x0 + fr->w, y);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", fr->x0 - 6, y + 4,
            fabs(t) < 1e-12 * sy ? 0.0 : t);
  }
  for (double t = ceil(fr->xr.lo / sx) * sx; t <= fr->xr.hi + 1e-9 * sx; t += sx) {
    double x = px(fr, t);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", x,
            fr->y0, x, fr->y0 + fr->h);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", x,
            fr->y0 + fr->h + 16, fabs(t) < 1e-12 * sx ? 0.0 : t);
  }
  fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
          "stroke=\"#888\"/>\n</g>\n", fr->x0, fr->y0, fr->w, fr->h);
}

/* One path; a non-finite point lifts the pen. Single points get a dot. */
static void line(FILE *f, const frame *fr, const cx_report_series *s, const char *color) {
  fprintf(f, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" d=\"", color);
  bool pen = false;
  for (int i = 0; i < s->n; i++) {
    if (!isfinite(s->x[i]) || !isfinite(s->y[i])) {
      pen = false;
      continue;
    }
    fprintf(f, "%s%.1f %.1f ", pen ? "L" : "M", px(fr, s->x[i]), py(fr, s->y[i]));
    pen = true;
  }
  fprintf(f, "\"/>\n");
  if (s->n <= 30)
    for (int i = 0; i < s->n; i++)
      if (isfinite(s->x[i]) && isfinite(s->y[i]))
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n", px(fr, s->x[i]),
                py(fr, s->y[i]), color);
}

static void legend(FILE *f, const cx_svg_chart *c, const frame *fr) {
  for (int s = 0; s < c->n_series; s++) {
    double y = fr->y0 + 8 + 16 * s, x = fr->x0 + fr->w - 150;
    const char *color = palette[s % 8];
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
            "stroke-width=\"3\"/>\n", x, y, x + 18, y, color);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">", x + 24, y + 4);
    cx_xml_text(f, c->series[s].name);
    fprintf(f, "</text>\n");
  }
}

static void labels(FILE *f, const cx_svg_chart *c, const frame *fr, int width, int height) {
  fprintf(f, "<text x=\"%d\" y=\"18\" text-anchor=\"middle\" font-size=\"14\" "
          "font-weight=\"bold\">", width / 2);
  cx_xml_text(f, c->title);
  fprintf(f, "</text>\n<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"12\">",
          fr->x0 + fr->w / 2, height - 6);
  cx_xml_text(f, c->x_label);
  fprintf(f, "</text>\n<text transform=\"translate(14 %.1f) rotate(-90)\" text-anchor=\"middle\" "
          "font-size=\"12\">", fr->y0 + fr->h / 2);
  cx_xml_text(f, c->y_label);
  fprintf(f, "</text>\n");
}

void cx_svg_line_chart(FILE *f, const cx_svg_chart *c) {
  int width = c->width > 0 ? c->width : 560, height = c->height > 0 ? c->height : 320;
  frame fr = {.x0 = 64, .y0 = 30, .w = width - 84, .h = height - 80};
  extent(c, false, &fr.xr);
  extent(c, true, &fr.yr);
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" role=\"img\">\n", width, height,
          width, height);
  labels(f, c, &fr, width, height);
  axes(f, &fr);
  for (int s = 0; s < c->n_series; s++) line(f, &fr, &c->series[s], palette[s % 8]);
  legend(f, c, &fr);
  fprintf(f, "</svg>\n");
}

/* Room around the points for their dots and labels: latency from 0, so the distances read as
 * ratios, and a margin on the other sides. */
static void pad(range *r, bool from_zero) {
  double m = 0.08 * (r->hi - r->lo);
  r->lo = from_zero && r->lo >= 0 ? 0 : r->lo - m;
  r->hi += 2 * m; /* the labels stand above their dots */
}

void cx_svg_point_chart(FILE *f, const cx_svg_chart *c, const char *const *names) {
  int width = c->width > 0 ? c->width : 560, height = c->height > 0 ? c->height : 320;
  frame fr = {.x0 = 64, .y0 = 30, .w = width - 84, .h = height - 80};
  cx_svg_chart one = *c;
  one.n_series = c->n_series > 0 ? 1 : 0;
  extent(&one, false, &fr.xr);
  extent(&one, true, &fr.yr);
  pad(&fr.xr, true);
  pad(&fr.yr, false);
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" role=\"img\">\n", width, height,
          width, height);
  labels(f, c, &fr, width, height);
  axes(f, &fr);
  for (int i = 0; one.n_series && i < c->series[0].n; i++) {
    double x = c->series[0].x[i], y = c->series[0].y[i];
    if (!isfinite(x) || !isfinite(y)) continue;
    const char *color = palette[i % 8];
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/>\n", px(&fr, x),
            py(&fr, y), color);
    /* labels of points on the right run leftwards, so they stay inside the chart */
    bool left = px(&fr, x) > fr.x0 + 0.6 * fr.w;
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\"%s>", px(&fr, x) + (left ? -7 : 7),
            py(&fr, y) - 6, left ? " text-anchor=\"end\"" : "");
    cx_xml_text(f, names ? names[i] : "");
    fprintf(f, "</text>\n");
  }
  fprintf(f, "</svg>\n");
}

void cx_svg_scatter_chart(FILE *f, const cx_svg_chart *c, const char *const *names) {
  int width = c->width > 0 ? c->width : 560, height = c->height > 0 ? c->height : 320;
  frame fr = {.x0 = 64, .y0 = 30, .w = width - 84, .h = height - 80};
  extent(c, false, &fr.xr);
  extent(c, true, &fr.yr);
  pad(&fr.xr, true);
  pad(&fr.yr, false);
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" role=\"img\">\n", width, height,
          width, height);
  labels(f, c, &fr, width, height);
  axes(f, &fr);
  for (int i = 0; c->n_series && i < c->series[0].n; i++) {
    double x = c->series[0].x[i], y = c->series[0].y[i];
    if (!isfinite(x) || !isfinite(y)) continue;
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", px(&fr, x),
            py(&fr, y), palette[0]);
    if (names && names[i]) {
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#555\">",
              px(&fr, x) + 5, py(&fr, y) - 5);
      cx_xml_text(f, names[i]);
      fprintf(f, "</text>\n");
    }
  }
  for (int s = 1; s < c->n_series; s++) line(f, &fr, &c->series[s], palette[s % 8]);
  legend(f, c, &fr);
  fprintf(f, "</svg>\n");
}
