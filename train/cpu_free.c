#define _GNU_SOURCE
#include "cpu_free.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct ticks {
  unsigned long long busy, total;
} ticks;

/* Per-CPU busy and total ticks of a /proc/stat text's "cpuN" lines; false if it has none. */
static int parse_stat(const char *text, ticks *t) {
  int any = 0;
  for (const char *line = text, *nl; *line; line = nl ? nl + 1 : line + strlen(line)) {
    nl = strchr(line, '\n');
    int cpu;
    unsigned long long v[8] = {0}; /* user nice system idle iowait irq softirq steal */
    if (strncmp(line, "cpu", 3) || line[3] < '0' || line[3] > '9') continue;
    if (sscanf(line + 3, "%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &v[0], &v[1], &v[2],
               &v[3], &v[4], &v[5], &v[6], &v[7]) < 8 || cpu < 0 || cpu >= CPU_SETSIZE)
      continue;
    t[cpu].busy = v[0] + v[2] + v[5] + v[6] + v[7];
    t[cpu].total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
    any = 1;
  }
  return any;
}

cx_cpu_free cx_cpu_free_between(const char *before, const char *after, const int *cpus, int n,
                                int ranks, int online) {
  ticks *a = calloc(2 * CPU_SETSIZE, sizeof *a), *b = a ? a + CPU_SETSIZE : NULL;
  cx_cpu_free r = {.allowed = n, .ranks = ranks};
  r.sampled = a && before && after && parse_stat(before, a) && parse_stat(after, b);
  for (int i = 0; r.sampled && i < n; i++) {
    int c = cpus[i];
    if (c >= 0 && c < CPU_SETSIZE && b[c].total > a[c].total && b[c].busy >= a[c].busy)
      r.busy += (double)(b[c].busy - a[c].busy) / (double)(b[c].total - a[c].total);
  }
  free(a);
  int idle = r.allowed - (int)lround(r.busy);
  /* a rank bound to some of the CPUs (mpirun --bind-to core) holds its share already */
  int share = ranks > 1 && r.allowed >= online ? ranks : 1;
  r.threads = idle / share > 1 ? idle / share : 1;
  return r;
}

static char *read_stat(void) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *text = malloc(cap + 1);
  while (text) {
    n += fread(text + n, 1, cap - n, f);
    if (n < cap) break;
    char *more = realloc(text, 2 * cap + 1);
    if (!more) free(text);
    text = more, cap *= 2;
  }
  fclose(f);
  if (text) text[n] = 0;
  return text;
}

static int local_ranks(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                     "SLURM_NTASKS_PER_NODE", NULL};
  for (int i = 0; vars[i]; i++) {
    const char *v = getenv(vars[i]);
    int n = v ? atoi(v) : 0;
    if (n > 0) return n;
  }
  return 1;
}

cx_cpu_free cx_cpu_free_count(int window_ms) {
  cpu_set_t mask;
  static int cpus[CPU_SETSIZE];
  int n = 0;
  if (sched_getaffinity(0, sizeof mask, &mask) == 0)
    for (int c = 0; c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &mask)) cpus[n++] = c;
  if (!n) cpus[n++] = 0;
  struct timespec wait = {window_ms / 1000, (long)(window_ms % 1000) * 1000000L};
  char *before = read_stat();
  char *after = before && nanosleep(&wait, NULL) == 0 ? read_stat() : NULL;
  cx_cpu_free r = cx_cpu_free_between(before, after, cpus, n, local_ranks(),
                                      (int)sysconf(_SC_NPROCESSORS_ONLN));
  free(before), free(after);
  return r;
}

int cx_cpu_free_threads(const char *where) {
  cx_cpu_free f = cx_cpu_free_count(200);
  fprintf(stderr, "%s: threads = auto: %d (%d CPUs, %.1f busy with other work%s%s)\n", where,
          f.threads, f.allowed, f.busy, f.ranks > 1 ? ", shared by this host's ranks" : "",
          f.sampled ? "" : "; /proc/stat unreadable");
  return f.threads;
}
