/* Start, agreement and end of a data-parallel job. */
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "dist.h"

static bool agreed_failure; /* a failure every rank knows of: finalize, do not abort */

cx_status cx_dist_init(void) { return cx_comm_init(); }

int cx_dist_rank(void) { return cx_comm_rank(); }
int cx_dist_world(void) { return cx_comm_world(); }
int cx_dist_local_rank(void) { return cx_comm_local_rank(); }

int cx_dist_finalize(int rc) {
  if (!cx_comm_running()) return rc;
  if (rc != 0 && !agreed_failure) {
    fprintf(stderr, "compress: rank %d of %d failed (above): ending every rank\n",
            cx_comm_rank(), cx_comm_world());
    fflush(stderr);
    cx_comm_abort(rc);
  }
  cx_status s = cx_comm_finalize();
  if (s != CX_OK) fprintf(stderr, "compress: %s\n", cx_last_error());
  return rc;
}

cx_status cx_dist_agree(cx_status s) {
  if (cx_comm_world() == 1) return s;
  enum { MSG = 1024 };
  int world = cx_comm_world();
  /* the lowest failing rank speaks: (failed ? rank : world), minimised */
  int64_t who = s != CX_OK ? cx_comm_rank() : world;
  CX_TRY(cx_comm_allreduce_i64(&who, 1, CX_COMM_MIN));
  if (who == world) return CX_OK;
  struct { int64_t status; char text[MSG]; } m = {.status = s};
  if (who == cx_comm_rank()) snprintf(m.text, sizeof m.text, "%s", cx_last_error());
  CX_TRY(cx_comm_bcast(&m, (int64_t)sizeof m, (int)who));
  m.text[MSG - 1] = 0;
  agreed_failure = true;
  if (who == cx_comm_rank()) return cx_fail(s, "rank %d: %s", (int)who, m.text);
  return cx_fail((cx_status)m.status, "rank %d failed: %s", (int)who, m.text);
}

cx_status cx_dist_barrier(void) { return cx_comm_barrier(); }
