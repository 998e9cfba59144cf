#ifndef CX_NODE_TIMER_H
#define CX_NODE_TIMER_H

/* Per-node timings of a program while profiling is on (cx_program_set_profiling).
 *
 * On a backend whose kernels are done when they return (the CPU) the host clock is read around
 * each node. On a stream backend (the event hooks of core/backend.h) a kernel returns once
 * queued, so the timer queues an event on the program's stream before and after each node and
 * turns them into times in one go (cx_node_timer_resolve, at the end of a step): profiling waits
 * once a step, not once a node, and the GPU runs the step as it would unprofiled. A node's time
 * there is from the GPU reaching its first event to reaching its second: its kernels, and any
 * wait for the host to queue them when the GPU is ahead. */

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

/* Seconds; last_start on CLOCK_MONOTONIC, the clock of cx_profile_now (train/profile.h). */
typedef struct cx_node_timing {
  double total, last, last_start;
  int64_t calls;
} cx_node_timing;

typedef struct cx_node_timer cx_node_timer;

/* n_nodes timings, all zero; on a backend with events (and a stream s), two events per node. */
cx_status cx_node_timer_create(const cx_backend *b, cx_stream *s, int n_nodes,
                               cx_node_timer **out);
void cx_node_timer_free(cx_node_timer *t);

/* Around one run of node i (one node at a time). ran: whether its kernel succeeded; the host
 * clock counts every run as before, a stream counts only the runs that were queued whole. A
 * node begun again before its last run was resolved is resolved first. */
cx_status cx_node_timer_begin(cx_node_timer *t, int i);
cx_status cx_node_timer_end(cx_node_timer *t, int i, bool ran);

/* Stream backends: waits for the last event queued, then adds every node run since the last
 * resolve to the table. The GPU's clock is placed on the host's by that wait: the last event
 * is taken to have been reached when the wait returns, so call it right after the step's last
 * node for start times that line up with host events in a trace. Nothing to do on the CPU. */
cx_status cx_node_timer_resolve(cx_node_timer *t);

/* By node; complete up to the last resolve. */
const cx_node_timing *cx_node_timer_table(const cx_node_timer *t);

#endif
