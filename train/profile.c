#include "profile.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/file_replace.h"
#include "../core/op.h"

#define OTHER "(other)"

double cx_profile_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- charging backward nodes to forward nodes ---- */

typedef struct named {
  const char *name;
  int node;
} named;

typedef struct name_index {
  const cx_graph *g;
  named *sorted; /* forward nodes by name */
  int n;
} name_index;

static int by_name(const void *a, const void *b) {
  return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

static cx_status name_index_init(name_index *x, const cx_graph *g, int n_fwd) {
  x->g = g;
  x->n = n_fwd;
  x->sorted = malloc(sizeof(named) * ((size_t)n_fwd + 1));
  if (!x->sorted) return cx_fail(CX_ERR_NOMEM, "profile: out of memory");
  for (int i = 0; i < n_fwd; i++) x->sorted[i] = (named){g->nodes[i].name, i};
  qsort(x->sorted, (size_t)n_fwd, sizeof(named), by_name);
  return CX_OK;
}

/* The forward node named by the first len bytes of name, or -1. */
static int name_index_find(const name_index *x, const char *name, size_t len) {
  int lo = 0, hi = x->n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    const char *m = x->sorted[mid].name;
    int c = strncmp(m, name, len);
    if (c == 0 && m[len] != '\0') c = 1; /* m is longer: it sorts after the prefix */
    if (c == 0) return x->sorted[mid].node;
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

/* The forward node a backward node belongs to, or -1. */
static int owner_of(const name_index *x, const char *name) {
  for (const char *at = strstr(name, "/grad/"); at; at = strstr(at + 1, "/grad/")) {
    int f = name_index_find(x, name, (size_t)(at - name));
    if (f >= 0) return f;
  }
  const char *sum = strstr(name, "@gradsum");
  if (!sum) return -1;
  char value[1024];
  size_t len = (size_t)(sum - name);
  if (len >= sizeof value) return -1;
  memcpy(value, name, len);
  value[len] = '\0';
  int v = cx_graph_find_value(x->g, value);
  int producer = v >= 0 ? x->g->values[v].producer : -1;
  return producer < x->n ? producer : -1;
}

/* ---- the tables ---- */

static double entry_total(const cx_profile_entry *e) {
  return e->forward_ms + e->backward_ms + e->host_ms;
}

static int by_time(const void *a, const void *b) {
  double ta = entry_total(a), tb = entry_total(b);
  return ta < tb ? 1 : ta > tb ? -1 : strcmp(((const cx_profile_entry *)a)->name,
                                             ((const cx_profile_entry *)b)->name);
}

/* The row of `name` in the op-type table, added when new. */
static cx_profile_entry *op_row(cx_profile *pr, const char *name) {
  for (int k = 0; k < pr->n_ops; k++)
    if (!strcmp(pr->ops[k].name, name)) return &pr->ops[k];
  cx_profile_entry *e = &pr->ops[pr->n_ops++];
  *e = (cx_profile_entry){.name = name, .op = name};
  return e;
}

static void fill_rows(cx_profile *pr, const cx_graph *g, int n_fwd, const cx_node_timing *t,
                      const int *owner) {
  double per_step = 1000.0 / (double)pr->steps;
  for (int i = 0; i < n_fwd; i++)
    pr->nodes[i] = (cx_profile_entry){.name = g->nodes[i].name, .op = g->nodes[i].op->name,
                                      .nodes = 1, .forward_ms = t[i].total * per_step};
  cx_profile_entry *other = &pr->nodes[n_fwd];
  *other = (cx_profile_entry){.name = OTHER, .op = OTHER};
  for (int i = n_fwd; i < g->n_nodes; i++) {
    int f = owner[i - n_fwd];
    (f >= 0 ? &pr->nodes[f] : other)->backward_ms += t[i].total * per_step;
  }
  pr->n_nodes = n_fwd + (other->backward_ms > 0);
  for (int i = 0; i < pr->n_nodes; i++) {
    const cx_profile_entry *e = &pr->nodes[i];
    cx_profile_entry *r = op_row(pr, e->op);
    r->nodes += i < n_fwd;
    r->forward_ms += e->forward_ms;
    r->backward_ms += e->backward_ms;
    pr->forward_ms += e->forward_ms;
    pr->backward_ms += e->backward_ms;
  }
  qsort(pr->nodes, (size_t)pr->n_nodes, sizeof *pr->nodes, by_time);
  qsort(pr->ops, (size_t)pr->n_ops, sizeof *pr->ops, by_time);
}

cx_status cx_profile_collect(const cx_program *p, cx_profile *out) {
  memset(out, 0, sizeof *out);
  const cx_node_timing *t = cx_program_timings(p);
  if (!t) return cx_fail(CX_ERR_ARG, "profile: profiling is off (cx_program_set_profiling)");
  const cx_graph *g = cx_program_graph(p);
  int n_fwd = cx_program_forward_nodes(p), n_bwd = g->n_nodes - n_fwd;
  for (int i = 0; i < g->n_nodes; i++)
    if (t[i].calls > out->steps) out->steps = t[i].calls;
  if (out->steps == 0) return cx_fail(CX_ERR_ARG, "profile: no step ran while profiling");
  name_index x;
  CX_TRY(name_index_init(&x, g, n_fwd));
  int *owner = malloc(sizeof(int) * ((size_t)n_bwd + 1));
  /* room for one host row beside every op type and the "(other)" row */
  out->nodes = calloc((size_t)n_fwd + 2, sizeof *out->nodes);
  out->ops = calloc((size_t)n_fwd + 8, sizeof *out->ops);
  if (!owner || !out->nodes || !out->ops) {
    free(owner);
    free(x.sorted);
    cx_profile_free(out);
    return cx_fail(CX_ERR_NOMEM, "profile: out of memory");
  }
  for (int i = 0; i < n_bwd; i++) owner[i] = owner_of(&x, g->nodes[n_fwd + i].name);
  fill_rows(out, g, n_fwd, t, owner);
  free(owner);
  free(x.sorted);
  return CX_OK;
}

cx_status cx_profile_add_host(cx_profile *pr, const char *name, double seconds) {
  cx_profile_entry *row = NULL;
  for (int k = 0; k < pr->n_ops && !row; k++)
    if (!strcmp(pr->ops[k].name, name)) row = &pr->ops[k];
  if (!row) {
    cx_profile_entry *grown = realloc(pr->ops, sizeof *pr->ops * ((size_t)pr->n_ops + 1));
    if (!grown) return cx_fail(CX_ERR_NOMEM, "profile: out of memory");
    pr->ops = grown;
    row = &pr->ops[pr->n_ops++];
    *row = (cx_profile_entry){.name = name, .op = name};
  }
  double ms = seconds * 1000.0 / (double)(pr->steps > 0 ? pr->steps : 1);
  row->host_ms += ms;
  pr->host_ms += ms;
  qsort(pr->ops, (size_t)pr->n_ops, sizeof *pr->ops, by_time);
  return CX_OK;
}

void cx_profile_free(cx_profile *pr) {
  free(pr->ops);
  free(pr->nodes);
  memset(pr, 0, sizeof *pr);
}

double cx_profile_step_ms(const cx_profile *pr) {
  return pr->forward_ms + pr->backward_ms + pr->host_ms;
}

/* ---- printing ---- */

/* Long names keep their tail, which tells nodes apart ("…/layer3.2/conv2/Conv"). */
static void print_name(FILE *f, const char *name, int width) {
  int len = (int)strlen(name);
  if (len <= width) fprintf(f, "%-*s", width, name);
  else fprintf(f, "...%s", name + len - (width - 3));
}

static void print_row(FILE *f, const cx_profile_entry *e, double step, int width, bool op_col) {
  print_name(f, e->name, width);
  if (op_col) {
    fputs("  ", f);
    print_name(f, e->op, 20);
  } else if (e->nodes > 0) fprintf(f, "  %5d", e->nodes);
  else fprintf(f, "  %5s", "-");
  double total = entry_total(e), share = step > 0 ? 100.0 * total / step : 0;
  if (e->host_ms > 0 && e->forward_ms + e->backward_ms == 0) /* measured outside the program */
    fprintf(f, "  %10s  %11s  %9.3f  %5.1f%%\n", "-", "-", total, share);
  else
    fprintf(f, "  %10.3f  %11.3f  %9.3f  %5.1f%%\n", e->forward_ms, e->backward_ms, total, share);
}

static int name_width(const cx_profile_entry *e, int n, int min, int max) {
  int w = min;
  for (int i = 0; i < n; i++) {
    int len = (int)strlen(e[i].name);
    if (len > w) w = len;
  }
  return w < max ? w : max;
}

void cx_profile_print(const cx_profile *pr, FILE *f, int top_nodes) {
  double step = cx_profile_step_ms(pr);
  fprintf(f, "%lld steps: %.3f ms a step (forward %.3f ms, backward %.3f ms", (long long)pr->steps,
          step, pr->forward_ms, pr->backward_ms);
  if (pr->host_ms > 0) fprintf(f, ", outside the program %.3f ms", pr->host_ms);
  fprintf(f, ")\n\n");
  int w = name_width(pr->ops, pr->n_ops, 7, 32);
  fprintf(f, "%-*s  %5s  %10s  %11s  %9s  %6s\n", w, "op type", "nodes", "forward ms",
          "backward ms", "total ms", "share");
  for (int k = 0; k < pr->n_ops; k++) print_row(f, &pr->ops[k], step, w, false);
  int n = top_nodes > 0 && top_nodes < pr->n_nodes ? top_nodes : pr->n_nodes;
  if (n < pr->n_nodes) fprintf(f, "\nthe %d slowest of %d nodes:\n", n, pr->n_nodes);
  else fprintf(f, "\n");
  w = name_width(pr->nodes, n, 4, 48);
  fprintf(f, "%-*s  %-20s  %10s  %11s  %9s  %6s\n", w, "node", "op", "forward ms", "backward ms",
          "total ms", "share");
  for (int k = 0; k < n; k++) print_row(f, &pr->nodes[k], step, w, true);
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

static void json_entries(FILE *f, const char *key, const cx_profile_entry *e, int n, double step) {
  fprintf(f, ",\"%s\":[", key);
  for (int k = 0; k < n; k++) {
    fputs(k ? ",{\"name\":" : "{\"name\":", f);
    json_string(f, e[k].name);
    fputs(",\"op\":", f);
    json_string(f, e[k].op);
    fprintf(f, ",\"nodes\":%d,\"forward_ms\":%.6f,\"backward_ms\":%.6f,\"host_ms\":%.6f,"
               "\"share\":%.6f}", e[k].nodes, e[k].forward_ms, e[k].backward_ms, e[k].host_ms,
            step > 0 ? entry_total(&e[k]) / step : 0);
  }
  fputc(']', f);
}

void cx_profile_print_json(const cx_profile *pr, FILE *f) {
  double step = cx_profile_step_ms(pr);
  fprintf(f, "{\"steps\":%lld,\"step_ms\":%.6f,\"forward_ms\":%.6f,\"backward_ms\":%.6f,"
             "\"host_ms\":%.6f", (long long)pr->steps, step, pr->forward_ms, pr->backward_ms,
          pr->host_ms);
  json_entries(f, "ops", pr->ops, pr->n_ops, step);
  json_entries(f, "nodes", pr->nodes, pr->n_nodes, step);
  fputs("}\n", f);
}

/* ---- Chrome trace ---- */

typedef struct trace_event {
  int name;        /* index into names */
  const char *cat; /* an op type (static) or "host" */
  cx_trace_track track;
  double start, dur; /* seconds */
  int64_t step;
} trace_event;

struct cx_trace {
  char **names; /* the program's node names first, then host event names */
  int n_names, cap_names, n_prog;
  int64_t *seen; /* per node: calls already recorded */
  trace_event *ev;
  int64_t n_ev, cap_ev;
};

cx_status cx_trace_create(cx_trace **out) {
  *out = calloc(1, sizeof **out);
  return *out ? CX_OK : cx_fail(CX_ERR_NOMEM, "trace: out of memory");
}

void cx_trace_free(cx_trace *t) {
  if (!t) return;
  for (int i = 0; i < t->n_names; i++) free(t->names[i]);
  free(t->names);
  free(t->seen);
  free(t->ev);
  free(t);
}

int64_t cx_trace_events(const cx_trace *t) { return t->n_ev; }

static int add_name(cx_trace *t, const char *name) {
  if (t->n_names == t->cap_names) {
    int cap = t->cap_names ? 2 * t->cap_names : 64;
    char **grown = realloc(t->names, sizeof *grown * (size_t)cap);
    if (!grown) return -1;
    t->names = grown;
    t->cap_names = cap;
  }
  char *copy = strdup(name);
  if (!copy) return -1;
  t->names[t->n_names] = copy;
  return t->n_names++;
}

static cx_status add_event(cx_trace *t, const trace_event *e) {
  if (t->n_ev == t->cap_ev) {
    int64_t cap = t->cap_ev ? 2 * t->cap_ev : 1024;
    trace_event *grown = realloc(t->ev, sizeof *grown * (size_t)cap);
    if (!grown) return cx_fail(CX_ERR_NOMEM, "trace: out of memory");
    t->ev = grown;
    t->cap_ev = cap;
  }
  t->ev[t->n_ev++] = *e;
  return CX_OK;
}

/* The first call copies the program's node names: events may outlive the program. */
static cx_status trace_bind(cx_trace *t, const cx_graph *g) {
  if (t->seen) {
    if (t->n_prog != g->n_nodes)
      return cx_fail(CX_ERR_ARG, "trace: steps of two different programs");
    return CX_OK;
  }
  t->seen = calloc((size_t)g->n_nodes + 1, sizeof *t->seen);
  if (!t->seen) return cx_fail(CX_ERR_NOMEM, "trace: out of memory");
  for (int i = 0; i < g->n_nodes; i++)
    if (add_name(t, g->nodes[i].name) < 0) return cx_fail(CX_ERR_NOMEM, "trace: out of memory");
  t->n_prog = g->n_nodes;
  return CX_OK;
}

cx_status cx_trace_add_step(cx_trace *t, const cx_program *p, int64_t step) {
  const cx_node_timing *tm = cx_program_timings(p);
  if (!tm) return cx_fail(CX_ERR_ARG, "trace: profiling is off (cx_program_set_profiling)");
  const cx_graph *g = cx_program_graph(p);
  CX_TRY(trace_bind(t, g));
  int n_fwd = cx_program_forward_nodes(p);
  for (int i = 0; i < g->n_nodes; i++) {
    if (tm[i].calls <= t->seen[i]) continue;
    t->seen[i] = tm[i].calls;
    trace_event e = {.name = i, .cat = g->nodes[i].op->name,
                     .track = i < n_fwd ? CX_TRACE_FORWARD : CX_TRACE_BACKWARD,
                     .start = tm[i].last_start, .dur = tm[i].last, .step = step};
    CX_TRY(add_event(t, &e));
  }
  return CX_OK;
}

cx_status cx_trace_add_event(cx_trace *t, const char *name, cx_trace_track track, double start_s,
                             double seconds, int64_t step) {
  int id = add_name(t, name);
  if (id < 0) return cx_fail(CX_ERR_NOMEM, "trace: out of memory");
  trace_event e = {.name = id, .cat = "host", .track = track, .start = start_s, .dur = seconds,
                   .step = step};
  return add_event(t, &e);
}

static void write_metadata(FILE *f) {
  static const char *const tracks[] = {NULL, "forward", "backward", "host"};
  fputs("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,"
        "\"args\":{\"name\":\"compress\"}}", f);
  for (int k = 1; k <= 3; k++) {
    fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,"
               "\"args\":{\"name\":\"%s\"}}", k, tracks[k]);
    fprintf(f, ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,"
               "\"args\":{\"sort_index\":%d}}", k, k);
  }
}

static void write_events(const cx_trace *t, FILE *f) {
  double t0 = 0;
  for (int64_t k = 0; k < t->n_ev; k++)
    if (k == 0 || t->ev[k].start < t0) t0 = t->ev[k].start;
  fputs("{\"traceEvents\":[\n", f);
  write_metadata(f);
  for (int64_t k = 0; k < t->n_ev; k++) {
    const trace_event *e = &t->ev[k];
    fputs(",\n{\"name\":", f);
    json_string(f, t->names[e->name]);
    fputs(",\"cat\":", f);
    json_string(f, e->cat);
    fprintf(f, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,\"tid\":%d,"
               "\"args\":{\"step\":%lld}}", (e->start - t0) * 1e6, e->dur * 1e6, (int)e->track,
            (long long)e->step);
  }
  fputs("\n],\"displayTimeUnit\":\"ms\"}\n", f);
}

cx_status cx_trace_write(const cx_trace *t, const char *path) {
  cx_file_out o;
  CX_TRY(cx_file_out_open(path, &o));
  write_events(t, o.f);
  return cx_file_out_commit(&o);
}
