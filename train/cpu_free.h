#ifndef CX_CPU_FREE_H
#define CX_CPU_FREE_H

/* `threads = "auto"`: how many of the CPUs this process may run on are not kept busy by other
 * processes, measured once over a short window of /proc/stat.
 *
 * Busy counts user, system, interrupt and steal time; time at a positive nice value does not
 * count, since the scheduler gives a normal-priority thread nearly all of a CPU shared with a
 * niced one (weight 1024 against 15 at nice 19). Time waiting for I/O is idle. Under MPI the free
 * CPUs are shared among the ranks on this host (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS or
 * SLURM_NTASKS_PER_NODE) when each rank may run on all of them; a rank bound to some CPUs
 * (mpirun --bind-to core) counts those. */

typedef struct cx_cpu_free {
  int allowed;   /* CPUs in the affinity mask */
  double busy;   /* of those, the CPUs' worth of other processes' work in the window */
  int ranks;     /* ranks on this host sharing them (1 without MPI) */
  int threads;   /* the count chosen: max(1, (allowed - round(busy)) / ranks) */
  int sampled;   /* 0 when /proc/stat could not be read: threads counts the mask alone */
} cx_cpu_free;

/* Samples /proc/stat window_ms apart (50-500 ms is sensible; the caller waits that long). */
cx_cpu_free cx_cpu_free_count(int window_ms);
/* The same from two /proc/stat texts taken some time apart (NULL: unread), the n CPUs this
 * process may use (their numbers), the ranks on this host and its online CPUs. */
cx_cpu_free cx_cpu_free_between(const char *before, const char *after, const int *cpus, int n,
                                int ranks, int online);

/* "auto" threads where a config key or option asks for them: counted over 200 ms and said on
 * stderr ("WHERE: threads = auto: 1 (2 CPUs, 1.0 busy with other work)"). */
int cx_cpu_free_threads(const char *where);

#endif
