/* Per-node timings: the host clock on the CPU, events on a stream elsewhere (node_timer.h). */
#include "node_timer.h"

#include <stdlib.h>
#include <time.h>

struct cx_node_timer {
  const cx_backend *be;
  cx_stream *stream;
  int n;
  cx_node_timing *table;
  double t0; /* host clock: when the node running began */
  /* stream backends: events 2i and 2i + 1 around node i; the nodes queued since the last
   * resolve, in the order they ran */
  cx_event **ev;
  int *pending, n_pending;
  bool *is_pending;
};

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static bool on_stream(const cx_node_timer *t) { return t->ev != NULL; }

void cx_node_timer_free(cx_node_timer *t) {
  if (!t) return;
  for (int k = 0; t->ev && k < 2 * t->n; k++)
    if (t->ev[k]) t->be->event_free(t->ev[k]);
  free(t->ev);
  free(t->pending);
  free(t->is_pending);
  free(t->table);
  free(t);
}

cx_status cx_node_timer_create(const cx_backend *b, cx_stream *s, int n_nodes,
                               cx_node_timer **out) {
  *out = NULL;
  cx_node_timer *t = calloc(1, sizeof *t);
  if (!t) return cx_fail(CX_ERR_NOMEM, "profiling: out of memory");
  t->be = b;
  t->stream = s;
  t->n = n_nodes;
  t->table = calloc((size_t)n_nodes + 1, sizeof *t->table);
  cx_status st = t->table ? CX_OK : cx_fail(CX_ERR_NOMEM, "profiling: out of memory");
  if (st == CX_OK && b->event_create) {
    t->ev = calloc(2 * (size_t)n_nodes + 1, sizeof *t->ev);
    t->pending = malloc(sizeof(int) * ((size_t)n_nodes + 1));
    t->is_pending = calloc((size_t)n_nodes + 1, sizeof *t->is_pending);
    if (!t->ev || !t->pending || !t->is_pending)
      st = cx_fail(CX_ERR_NOMEM, "profiling: out of memory");
    for (int k = 0; st == CX_OK && k < 2 * n_nodes; k++) st = b->event_create(&t->ev[k]);
  }
  if (st != CX_OK) {
    cx_node_timer_free(t);
    return st;
  }
  *out = t;
  return CX_OK;
}

cx_status cx_node_timer_resolve(cx_node_timer *t) {
  if (!on_stream(t) || t->n_pending == 0) return CX_OK;
  cx_event *first = t->ev[2 * t->pending[0]];
  cx_event *last = t->ev[2 * t->pending[t->n_pending - 1] + 1];
  double span;
  cx_status s = t->be->event_elapsed(first, last, &span); /* waits for the last event */
  /* the host clock when the GPU reached the last event, so the first was reached span before */
  double anchor = now_seconds() - span;
  for (int k = 0; s == CX_OK && k < t->n_pending; k++) {
    int i = t->pending[k];
    double offset, dur;
    s = t->be->event_elapsed(first, t->ev[2 * i], &offset);
    if (s == CX_OK) s = t->be->event_elapsed(t->ev[2 * i], t->ev[2 * i + 1], &dur);
    if (s != CX_OK) break;
    cx_node_timing *r = &t->table[i];
    r->last_start = anchor + offset;
    r->last = dur;
    r->total += dur;
    r->calls++;
  }
  /* what could not be read is dropped: those runs go uncounted rather than counted wrong */
  for (int k = 0; k < t->n_pending; k++) t->is_pending[t->pending[k]] = false;
  t->n_pending = 0;
  return s;
}

cx_status cx_node_timer_begin(cx_node_timer *t, int i) {
  if (!on_stream(t)) {
    t->t0 = now_seconds();
    return CX_OK;
  }
  /* its events are about to be queued again: what they hold now is read first */
  if (t->is_pending[i]) CX_TRY(cx_node_timer_resolve(t));
  return t->be->event_record(t->ev[2 * i], t->stream);
}

cx_status cx_node_timer_end(cx_node_timer *t, int i, bool ran) {
  if (!on_stream(t)) {
    cx_node_timing *r = &t->table[i];
    r->last_start = t->t0;
    r->last = now_seconds() - t->t0;
    r->total += r->last;
    r->calls++;
    return CX_OK;
  }
  if (!ran) return CX_OK; /* its start event stays unread */
  CX_TRY(t->be->event_record(t->ev[2 * i + 1], t->stream));
  t->is_pending[i] = true;
  t->pending[t->n_pending++] = i;
  return CX_OK;
}

const cx_node_timing *cx_node_timer_table(const cx_node_timer *t) { return t->table; }
