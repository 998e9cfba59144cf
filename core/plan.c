#include "plan.h"

#include <stdlib.h>

static int by_size_desc(const void *a, const void *b) {
  const cx_plan_request *x = *(const cx_plan_request *const *)a,
                        *y = *(const cx_plan_request *const *)b;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
  return x->first - y->first;
}

static int by_offset(const void *a, const void *b) {
  const cx_plan_request *x = *(const cx_plan_request *const *)a,
                        *y = *(const cx_plan_request *const *)b;
  return (x->offset > y->offset) - (x->offset < y->offset);
}

static int overlap_in_time(const cx_plan_request *a, const cx_plan_request *b) {
  return a->first <= b->last && b->first <= a->last;
}

size_t cx_plan_place(cx_plan_request *r, int n, size_t align) {
  cx_plan_request **order = malloc(sizeof *order * (size_t)(n + 1));
  cx_plan_request **live = malloc(sizeof *live * (size_t)(n + 1));
  for (int i = 0; i < n; i++) order[i] = &r[i];
  qsort(order, (size_t)n, sizeof *order, by_size_desc);
  size_t arena = 0;
  for (int i = 0; i < n; i++) {
    cx_plan_request *b = order[i];
    int n_live = 0;
    for (int j = 0; j < i; j++)
      if (overlap_in_time(order[j], b)) live[n_live++] = order[j];
    qsort(live, (size_t)n_live, sizeof *live, by_offset);
    size_t at = 0; /* the lowest gap between placed, time-overlapping buffers that fits */
    for (int j = 0; j < n_live; j++) {
      if (live[j]->offset >= at + b->bytes) break;
      size_t end = (live[j]->offset + live[j]->bytes + align - 1) / align * align;
      if (end > at) at = end;
    }
    b->offset = at;
    if (at + b->bytes > arena) arena = at + b->bytes;
  }
  free(order);
  free(live);
  return arena;
}

int cx_plan_check(const cx_plan_request *r, int n) {
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (overlap_in_time(&r[i], &r[j]) && r[i].offset < r[j].offset + r[j].bytes &&
          r[j].offset < r[i].offset + r[i].bytes)
        return i + 1;
  return 0;
}
