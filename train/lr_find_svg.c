/* The LR range test's chart: a self-contained SVG (no scripts, no external fonts). */
#include <math.h>
#include <stdio.h>

#include "../core/file_replace.h"
#include "lr_find.h"

enum { WIDTH = 720, HEIGHT = 440, LEFT = 72, RIGHT = 24, TOP = 44, BOTTOM = 64 };

typedef struct chart {
  FILE *f;
  double x_lo, x_hi; /* log10 of the rate */
  double y_lo, y_hi; /* loss */
} chart;

static double px(const chart *c, double lr) {
  return LEFT + (log10(lr) - c->x_lo) / (c->x_hi - c->x_lo) * (WIDTH - LEFT - RIGHT);
}

static double py(const chart *c, double loss) {
  double v = loss > c->y_hi ? c->y_hi : loss < c->y_lo ? c->y_lo : loss;
  return HEIGHT - BOTTOM - (v - c->y_lo) / (c->y_hi - c->y_lo) * (HEIGHT - TOP - BOTTOM);
}

/* The axes' ranges: whole decades of the rate; the loss from the lowest point to the highest
 * smoothed one (noisy raw points above it are drawn at the top). */
static void chart_fit(chart *c, const cx_lr_find_result *r) {
  c->x_lo = floor(log10(r->lr[0]) + 1e-9);
  c->x_hi = ceil(log10(r->lr[r->n - 1]) - 1e-9);
  if (c->x_hi <= c->x_lo) c->x_hi = c->x_lo + 1;
  c->y_lo = INFINITY;
  c->y_hi = -INFINITY;
  for (int i = 0; i < r->n; i++) {
    if (isfinite(r->loss[i])) c->y_lo = fmin(c->y_lo, r->loss[i]);
    if (isfinite(r->smooth[i])) {
      c->y_lo = fmin(c->y_lo, r->smooth[i]);
      c->y_hi = fmax(c->y_hi, r->smooth[i]);
    }
  }
  if (!isfinite(c->y_lo) || !isfinite(c->y_hi)) c->y_lo = 0, c->y_hi = 1;
  double pad = fmax((c->y_hi - c->y_lo) * 0.05, 1e-3);
  c->y_lo -= pad;
  c->y_hi += pad;
}

/* The 1, 2 or 5 times a power of ten nearest raw. */
static double nice_step(double raw) {
  double p = pow(10, floor(log10(raw))), f = raw / p;
  return p * (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10);
}

static void draw_axes(const chart *c) {
  FILE *f = c->f;
  int x0 = LEFT, x1 = WIDTH - RIGHT, y0 = TOP, y1 = HEIGHT - BOTTOM;
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
             "stroke=\"#444\"/>\n", x0, y0, x1 - x0, y1 - y0);
  for (int e = (int)c->x_lo; e <= (int)c->x_hi; e++) {
    double x = px(c, pow(10, e));
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>\n", x, y0, x,
            y1);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">1e%d</text>\n", x, y1 + 18, e);
    for (int m = 2; m < 10 && e < (int)c->x_hi; m++) {
      double xm = px(c, m * pow(10, e));
      fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#444\"/>\n", xm, y1,
              xm, y1 - 4);
    }
  }
  double step = nice_step((c->y_hi - c->y_lo) / 5);
  for (double v = ceil(c->y_lo / step) * step; v <= c->y_hi; v += step) {
    double y = py(c, v), label = fabs(v) < step * 1e-6 ? 0 : v;
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#eee\"/>\n", x0, y, x1,
            y);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.4g</text>\n", x0 - 6, y + 4,
            label);
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">learning rate (log scale)</text>\n",
          (x0 + x1) / 2, HEIGHT - 20);
  fprintf(f, "<text x=\"18\" y=\"%d\" text-anchor=\"middle\" transform=\"rotate(-90 18 %d)\">"
             "loss</text>\n", (y0 + y1) / 2, (y0 + y1) / 2);
}

static void draw_curve(const chart *c, const cx_lr_find_result *r, const double *v,
                       const char *style) {
  fprintf(c->f, "<polyline fill=\"none\" %s points=\"", style);
  for (int i = 0; i < r->n; i++)
    if (isfinite(v[i])) fprintf(c->f, "%s%.1f,%.1f", i ? " " : "", px(c, r->lr[i]), py(c, v[i]));
  fputs("\"/>\n", c->f);
}

static void draw_marker(const chart *c, double lr, const char *color, const char *label, int row) {
  double x = px(c, lr);
  if (!(x >= LEFT && x <= WIDTH - RIGHT)) return;
  fprintf(c->f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" "
                "stroke-dasharray=\"5,4\"/>\n", x, TOP, x, HEIGHT - BOTTOM, color);
  const char *anchor = x > WIDTH / 2 ? "end" : "start";
  double tx = x > WIDTH / 2 ? x - 6 : x + 6;
  fprintf(c->f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"%s\" fill=\"%s\">%s %.2e</text>\n", tx,
          TOP + 16 + 16 * row, anchor, color, label, lr);
}

static void draw(chart *c, const cx_lr_find_result *r) {
  FILE *f = c->f;
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
             "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n",
          WIDTH, HEIGHT, WIDTH, HEIGHT);
  fprintf(f, "<title>Learning-rate range test</title>\n"
             "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
             "<text x=\"%d\" y=\"24\" font-size=\"15\">Learning-rate range test: %d steps%s"
             "</text>\n", LEFT, r->n, r->diverged ? ", stopped when the loss diverged" : "");
  draw_axes(c);
  draw_curve(c, r, r->loss, "stroke=\"#a9c4e0\" stroke-width=\"1\"");
  draw_curve(c, r, r->smooth, "stroke=\"#1f5fa8\" stroke-width=\"2\"");
  draw_marker(c, r->min_div10_lr, "#2a8a3a", "min/10:", 1);
  draw_marker(c, r->suggested_lr, "#c0392b", "suggested:", 0);
  if (r->steepest >= 0)
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"#c0392b\"/>\n",
            px(c, r->lr[r->steepest]), py(c, r->smooth[r->steepest]));
  int lx = WIDTH - RIGHT - 150, ly = HEIGHT - BOTTOM - 40;
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"140\" height=\"40\" fill=\"white\" "
             "fill-opacity=\"0.85\" stroke=\"#ccc\"/>\n", lx - 8, ly - 12);
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#a9c4e0\"/>"
             "<text x=\"%d\" y=\"%d\">loss</text>\n", lx, ly, lx + 24, ly, lx + 30, ly + 4);
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#1f5fa8\" "
             "stroke-width=\"2\"/><text x=\"%d\" y=\"%d\">smoothed loss</text>\n", lx, ly + 18,
          lx + 24, ly + 18, lx + 30, ly + 22);
  fputs("</svg>\n", f);
}

cx_status cx_lr_find_svg(const cx_lr_find_result *r, const char *path) {
  if (r->n < 1) return cx_fail(CX_ERR_ARG, "%s: no steps to chart", path);
  cx_file_out o;
  CX_TRY(cx_file_out_open(path, &o));
  chart c = {.f = o.f};
  chart_fit(&c, r);
  draw(&c, r);
  return cx_file_out_commit(&o);
}
