/* A profiled window of a training run (train_profile.h), built on train/profile.h's tables and
 * trace, which `compress profile` prints and writes the same way. */
#include "train_profile.h"

#include <omp.h>
#include <stdlib.h>

/* table rows (in parentheses: not ops) and trace events */
static const char *const phase_names[] = {"(data)", "(optimizer)"};
static const char *const phase_events[] = {"data", "optimizer"};

void cx_train_profiler_init(cx_train_profiler *tp, int64_t after, int64_t steps, int64_t start,
                            int64_t total) {
  int64_t left = total - start;
  if (steps <= 0 || left <= 0) {
    tp->first = tp->last = 0;
    return;
  }
  if (after + 1 > left) after = left / 2; /* a short run: its second half */
  tp->first = start + after + 1;
  tp->last = tp->first + steps - 1 < total ? tp->first + steps - 1 : total;
}

cx_status cx_train_profiler_begin(cx_train_profiler *tp, cx_program *p, int64_t step) {
  if (!tp->first || step != tp->first) return CX_OK;
  CX_TRY(cx_program_set_profiling(p, true));
  tp->on = true;
  tp->data_s = tp->optim_s = 0;
  return tp->trace_path ? cx_trace_create(&tp->trace) : CX_OK;
}

cx_status cx_train_profiler_micro(cx_train_profiler *tp, const cx_program *p, int64_t step) {
  return tp->on && tp->trace ? cx_trace_add_step(tp->trace, p, step) : CX_OK;
}

cx_status cx_train_profiler_host(cx_train_profiler *tp, int phase, double start, double seconds,
                                 int64_t step) {
  if (!tp->on) return CX_OK;
  *(phase == CX_TRAIN_PROFILE_DATA ? &tp->data_s : &tp->optim_s) += seconds;
  if (!tp->trace) return CX_OK;
  return cx_trace_add_event(tp->trace, phase_events[phase], CX_TRACE_HOST, start, seconds, step);
}

static cx_status write_json(const cx_profile *pr, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return cx_fail(CX_ERR_IO, "%s: cannot write the profile", path);
  cx_profile_print_json(pr, f);
  return fclose(f) == 0 ? CX_OK : cx_fail(CX_ERR_IO, "%s: cannot write the profile", path);
}

static cx_status report(cx_train_profiler *tp, const cx_program *p, int64_t step, FILE *f) {
  cx_profile pr = {0};
  cx_status s = cx_profile_collect(p, &pr);
  if (s == CX_OK) s = cx_profile_add_host(&pr, phase_names[0], tp->data_s);
  if (s == CX_OK) s = cx_profile_add_host(&pr, phase_names[1], tp->optim_s);
  if (s == CX_OK) {
    fprintf(f, "\nprofile of training steps %lld to %lld, %d threads: ", (long long)tp->first,
            (long long)step, omp_get_max_threads());
    cx_profile_print(&pr, f, tp->top);
  }
  if (s == CX_OK && tp->json_path) s = write_json(&pr, tp->json_path);
  if (s == CX_OK && tp->trace) s = cx_trace_write(tp->trace, tp->trace_path);
  if (s == CX_OK && tp->trace)
    fprintf(f, "\nChrome trace (%lld events, open in ui.perfetto.dev): %s\n",
            (long long)cx_trace_events(tp->trace), tp->trace_path);
  if (s == CX_OK && tp->json_path) fprintf(f, "profile as JSON: %s\n", tp->json_path);
  fputc('\n', f);
  fflush(f);
  cx_profile_free(&pr);
  return s;
}

cx_status cx_train_profiler_end(cx_train_profiler *tp, cx_program *p, int64_t step, bool final,
                                FILE *f) {
  if (!tp->on || (step < tp->last && !final)) return CX_OK;
  cx_status s = report(tp, p, step, f);
  cx_program_set_profiling(p, false);
  tp->on = false;
  tp->first = 0; /* once */
  return s;
}

void cx_train_profiler_free(cx_train_profiler *tp) {
  cx_trace_free(tp->trace);
  tp->trace = NULL;
}
