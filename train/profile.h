#ifndef CX_PROFILE_H
#define CX_PROFILE_H

#include <stdint.h>
#include <stdio.h>

#include "../core/program.h"

/* Where a step's time goes, from the per-node timings a program keeps while profiling is on
 * (cx_program_set_profiling): a table by op type and by forward node, and a Chrome trace
 * (chrome://tracing, https://ui.perfetto.dev) of a few steps.
 *
 * Backward nodes (schedule index >= cx_program_forward_nodes) are charged to the forward node
 * whose gradient rule made them: autodiff names them "<forward node>/grad/<op>", and the Sum of a
 * value's gradient contributions "<value>@gradsum", which goes to the value's producer. What
 * matches neither (the Sum of a parameter shared by several nodes) is shown as "(other)". */

typedef struct cx_profile_entry {
  const char *name;     /* op type or forward node name; valid while the program lives */
  const char *op;       /* op type (the same as name in the op-type table) */
  int nodes;            /* forward nodes in an op-type row; 1 in a node row */
  double forward_ms;    /* per step */
  double backward_ms;   /* per step: the backward nodes charged to it */
  double host_ms;       /* per step: time the caller measured around the program (optimizer) */
} cx_profile_entry;

typedef struct cx_profile {
  int64_t steps;                  /* profiled steps the figures are averaged over */
  double forward_ms, backward_ms; /* per step, all nodes */
  double host_ms;                 /* per step, all cx_profile_add_host phases */
  cx_profile_entry *ops;          /* by op type, the most time first */
  int n_ops;
  cx_profile_entry *nodes;        /* by forward node, the most time first */
  int n_nodes;
} cx_profile;

/* Summarises the program's timings since profiling was switched on; fails when it is off or no
 * step ran. The names point into the program. */
cx_status cx_profile_collect(const cx_program *p, cx_profile *out);
/* Adds a phase the caller timed around the program (name a static string, e.g. "optimizer"),
 * as its own op-type row; seconds is the total over the profiled steps. */
cx_status cx_profile_add_host(cx_profile *pr, const char *name, double seconds);
void cx_profile_free(cx_profile *pr);
/* The step's time (forward + backward + host), ms. */
double cx_profile_step_ms(const cx_profile *pr);

/* The two tables as text: every op type, and the top_nodes slowest nodes (0: all). */
void cx_profile_print(const cx_profile *pr, FILE *f, int top_nodes);
/* One JSON object: {"steps", "step_ms", "forward_ms", "backward_ms", "host_ms", "ops": [...],
 * "nodes": [...]} with each entry's name, op, nodes, forward_ms, backward_ms, host_ms, share. */
void cx_profile_print_json(const cx_profile *pr, FILE *f);

/* ---- Chrome trace ---- */

/* Tracks (Chrome trace "tid"s): the forward nodes, the backward nodes, and the caller's own
 * phases (optimizer step, data loading). */
typedef enum cx_trace_track {
  CX_TRACE_FORWARD = 1,
  CX_TRACE_BACKWARD = 2,
  CX_TRACE_HOST = 3,
} cx_trace_track;

typedef struct cx_trace cx_trace;

cx_status cx_trace_create(cx_trace **out);
void cx_trace_free(cx_trace *t);
/* Records every node the program ran since the last call (its last run: profiling must be on) as
 * one complete event, on the forward or backward track, with `step` in its args. Always pass the
 * same program. */
cx_status cx_trace_add_step(cx_trace *t, const cx_program *p, int64_t step);
/* An event the caller timed: start is CLOCK_MONOTONIC seconds, as cx_node_timing's last_start. */
cx_status cx_trace_add_event(cx_trace *t, const char *name, cx_trace_track track, double start_s,
                             double seconds, int64_t step);
/* Writes {"traceEvents": [...], "displayTimeUnit": "ms"}: "X" events with ts and dur in
 * microseconds from the first event, and "M" events naming the process and tracks. The file is
 * written to a temporary name and renamed. */
cx_status cx_trace_write(const cx_trace *t, const char *path);
int64_t cx_trace_events(const cx_trace *t);

/* Seconds on CLOCK_MONOTONIC, the clock of the program's timings. */
double cx_profile_now(void);

#endif
