/* Whether an MPI launcher started us: decided from the environment alone, so that a plain run
 * never touches MPI (and a build without MPI can say why it refuses to run under mpirun). */
#include <stdlib.h>

#include "comm.h"

bool cx_comm_launched(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
    if (getenv(vars[i])) return true;
  return false;
}
