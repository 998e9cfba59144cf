#ifndef CX_PLAN_H
#define CX_PLAN_H

#include <stddef.h>

/* Liveness-based placement of buffers in one arena: a buffer is live from the step that writes it
 * to the last step that reads it; two buffers may share bytes only if their live ranges do not
 * overlap. Greedy by size (largest first, lowest offset that fits), as TFLite's arena planner. */

typedef struct cx_plan_request {
  int value;
  size_t bytes;
  int first, last; /* inclusive schedule steps */
  size_t offset;   /* filled by cx_plan_place */
} cx_plan_request;

/* Sets every offset (multiples of align) and returns the arena size. */
size_t cx_plan_place(cx_plan_request *r, int n, size_t align);

/* 0 when no two buffers that are live at the same step overlap in memory; otherwise the index+1
 * of the first offending buffer. For tests. */
int cx_plan_check(const cx_plan_request *r, int n);

#endif
