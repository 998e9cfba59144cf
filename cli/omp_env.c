/* OpenMP's waiting policy for compress (docs/cli.md, "Threads"). libgomp spins up to 300,000
 * iterations at every barrier before it sleeps, when a job has no more threads than CPUs. On a
 * machine with any other busy process, a thread whose core was taken keeps the others spinning
 * for the whole count at each of a step's hundreds of barriers: with one co-tenant the quick
 * example's two-thread training fell to a third of its speed. A short spin keeps most of the
 * quiet-machine latency and sleeps soon when a peer is not running. libgomp reads its
 * environment in its constructor, before main, so the policy is set by re-executing ourselves
 * once with it; a user's OMP_WAIT_POLICY or GOMP_SPINCOUNT is left as it is. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <unistd.h>

#include "commands.h"

void cx_cli_omp_env(char **argv) {
  if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || getenv("CX_OMP_ENV_SET")) return;
  if (setenv("GOMP_SPINCOUNT", CX_GOMP_SPINCOUNT, 0) != 0 || setenv("CX_OMP_ENV_SET", "1", 1))
    return;
  execv("/proc/self/exe", argv); /* returns only on failure: run on with libgomp's default */
  unsetenv("GOMP_SPINCOUNT");
}
