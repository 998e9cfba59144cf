#ifndef CX_QUANTIZE_INTERNAL_H
#define CX_QUANTIZE_INTERNAL_H

/* What quantize/'s files share and its users do not need. */

#include "../core/program.h"
#include "quantize.h"

/* A deep copy of a plan (names, uses, scales). */
cx_status cx_quant_plan_copy(const cx_quant_plan *from, cx_quant_plan *to);

/* cx_quant_insert, also giving each site's scale and zero-point value ids in g (a shared site:
 * its leader's; zero -1 without one). Either array may be NULL; else p->n entries. */
cx_status cx_quant_insert_ids(cx_graph *g, const cx_quant_plan *p, cx_value_kind scale_kind,
                              int *scale_id, int *zero_id);

/* Every Conv and Gemm of g (FakeQuantize nodes in place, final scales as constants) whose
 * activation input and weight are quantized gets its f32 bias b rounded in place onto the grid
 * an integer kernel adds it on: b[c] = round_half_even(b[c] / S[c]) * S[c], S[c] = s_x * s_w[c],
 * in f32 (quantize/bias_grid.c says why). */
void cx_quant_snap_bias(cx_graph *g);

/* Each site's weight scales from g's weight initializers (max |w| per channel / 127). */
cx_status cx_quant_weight_scales(const cx_graph *g, cx_quant_plan *p);

/* Sets a leader site's scale and zero point from a range (zero_channels counts a zero range). */
void cx_quant_site_set_range(cx_quant_site *s, float lo, float hi);

/* Copies each leader's scale and zero point to the sites that share it. */
void cx_quant_share_scales(cx_quant_plan *p);

/* The inference program of g with the named values also outputs, compiled for d->batch on b,
 * and a loader over d's data (in order); the first batch is checked against g's input. */
typedef struct cx_quant_runner {
  cx_program *p;
  cx_loader *l;
  const char *path;
  int64_t batches; /* at most this many */
} cx_quant_runner;
cx_status cx_quant_runner_open(const cx_graph *g, const char *const *outputs, int n_outputs,
                               const cx_backend *b, const cx_quant_data *d, int64_t batches,
                               cx_quant_runner *r);
/* The next batch (into *b) run through the program; *done when the data or the batch count ran
 * out. */
cx_status cx_quant_runner_next(cx_quant_runner *r, cx_batch *b, bool *done);
/* Value `name` of the last run into *buf (grown to *cap bytes as needed): *n elements, the
 * batch's real rows only (a short last batch is padded). */
cx_status cx_quant_runner_rows(cx_quant_runner *r, const char *name, const cx_batch *b,
                               float **buf, size_t *cap, int64_t *n);
void cx_quant_runner_close(cx_quant_runner *r);

#endif
