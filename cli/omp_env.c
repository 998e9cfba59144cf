/* OpenMP's waiting policy for compress (docs/cli.md, "Threads"). libgomp spins up to 300,000
 * iterations at every barrier before it sleeps, when a job has no more threads than CPUs. Beside
 * another process at normal priority, a thread whose core was taken keeps the others spinning
 * for the whole count at each of a step's hundreds of barriers: with one such co-tenant the quick
 * example's two-thread training fell to a third of its speed. A short spin (1000) sleeps soon
 * when a peer is not running. Beside a niced process, or none, the long spin wins instead: a
 * normal-priority thread that keeps spinning keeps its core, where one that sleeps hands it to
 * the niced process at every barrier and waits to get it back (ResNet-20 at 28 px, 2 threads,
 * beside a nice-19 loop: 1037 images/s spinning long, 765 short; quiet: 1124-1234 against
 * 991-1155). So the policy follows what runs beside us at the start: short when other processes
 * keep at least half a CPU of ours busy at normal priority over 50 ms (train/cpu_free.h), long
 * otherwise. libgomp reads its environment in its constructor, before main, so the policy is
 * set by re-executing ourselves once with it (CX_OMP_ENV_SET says which); a user's
 * OMP_WAIT_POLICY or GOMP_SPINCOUNT is left as it is. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <unistd.h>

#include "../train/cpu_free.h"
#include "commands.h"

void cx_cli_omp_env(char **argv) {
  if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || getenv("CX_OMP_ENV_SET")) return;
  bool shared = cx_cpu_free_count(50).busy >= 0.5;
  if (setenv("GOMP_SPINCOUNT", shared ? CX_GOMP_SPINCOUNT_SHORT : CX_GOMP_SPINCOUNT_LONG, 0) ||
      setenv("CX_OMP_ENV_SET", shared ? "short" : "long", 1))
    return;
  execv("/proc/self/exe", argv); /* returns only on failure: run on with libgomp's default */
  unsetenv("GOMP_SPINCOUNT");
}
