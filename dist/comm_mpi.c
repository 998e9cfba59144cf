/* The transport over MPI. Errors return (MPI_ERRORS_RETURN) and become cx_status values naming
 * the call; a rank that dies is the launcher's to notice (mpirun ends the job). */
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"

struct cx_comm_req {
  MPI_Request req;
  bool active;
};

static bool running;
static int rank_, world_ = 1, local_rank_, node_;

static cx_status mpi_fail(int rc, const char *call, const char *file, int line) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return cx_fail(CX_ERR_BACKEND, "%s failed (%s:%d) on rank %d of %d: %s", call, file, line, rank_,
                 world_, msg);
}

#define MPI_TRY(call)                                                     \
  do {                                                                    \
    int rc_ = (call);                                                     \
    if (rc_ != MPI_SUCCESS) return mpi_fail(rc_, #call, __FILE__, __LINE__); \
  } while (0)

cx_status cx_comm_init(void) {
  if (running || !cx_comm_launched()) return CX_OK;
  int provided = 0;
  /* only the main thread calls MPI: the loader's and OpenMP's threads never do */
  MPI_TRY(MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided));
  running = true;
  MPI_TRY(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_TRY(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MPI_TRY(MPI_Comm_size(MPI_COMM_WORLD, &world_));
  /* the ranks sharing this machine: which of its GPUs this one takes */
  MPI_Comm node;
  MPI_TRY(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  MPI_TRY(MPI_Comm_rank(node, &local_rank_));
  node_ = rank_;
  MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, &node_, 1, MPI_INT, MPI_MIN, node));
  MPI_TRY(MPI_Comm_free(&node));
  return CX_OK;
}

cx_status cx_comm_finalize(void) {
  if (!running) return CX_OK;
  running = false;
  MPI_TRY(MPI_Finalize());
  return CX_OK;
}

void cx_comm_abort(int code) {
  if (running) MPI_Abort(MPI_COMM_WORLD, code);
}

int cx_comm_rank(void) { return rank_; }
int cx_comm_world(void) { return world_; }
int cx_comm_local_rank(void) { return local_rank_; }
int cx_comm_node(void) { return node_; }
bool cx_comm_running(void) { return running; }

cx_status cx_comm_req_new(cx_comm_req **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return cx_fail(CX_ERR_NOMEM, "out of memory");
  (*out)->req = MPI_REQUEST_NULL;
  return CX_OK;
}

void cx_comm_req_free(cx_comm_req *r) { free(r); }

static cx_status check_count(int64_t n) {
  if (n < 0 || n > INT_MAX)
    return cx_fail(CX_ERR_ARG, "a reduction of %lld elements: MPI counts are int", (long long)n);
  return CX_OK;
}

cx_status cx_comm_iallreduce_f32(float *buf, int64_t n, cx_comm_req *r) {
  if (r->active) return cx_fail(CX_ERR_ARG, "a reduction started on a busy request");
  CX_TRY(check_count(n));
  if (!running) return CX_OK;
  MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r->req));
  r->active = true;
  return CX_OK;
}

cx_status cx_comm_test(cx_comm_req *r, bool *done) {
  *done = !r->active;
  if (!r->active) return CX_OK;
  int flag = 0;
  MPI_TRY(MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE));
  if (flag) r->active = false, *done = true;
  return CX_OK;
}

cx_status cx_comm_wait(cx_comm_req *r) {
  if (!r->active) return CX_OK;
  r->active = false;
  MPI_TRY(MPI_Wait(&r->req, MPI_STATUS_IGNORE));
  return CX_OK;
}

static MPI_Op op_of(cx_comm_op op) {
  return op == CX_COMM_MIN ? MPI_MIN : op == CX_COMM_MAX ? MPI_MAX : MPI_SUM;
}

cx_status cx_comm_allreduce_f64(double *buf, int n, cx_comm_op op) {
  if (!running) return CX_OK;
  MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, op_of(op), MPI_COMM_WORLD));
  return CX_OK;
}

cx_status cx_comm_allreduce_i64(int64_t *buf, int n, cx_comm_op op) {
  if (!running) return CX_OK;
  MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_INT64_T, op_of(op), MPI_COMM_WORLD));
  return CX_OK;
}

cx_status cx_comm_bcast(void *buf, int64_t bytes, int root) {
  CX_TRY(check_count(bytes));
  if (!running) return CX_OK;
  MPI_TRY(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD));
  return CX_OK;
}

cx_status cx_comm_allgather(const void *mine, void *all, int64_t bytes) {
  CX_TRY(check_count(bytes));
  if (!running) return memcpy(all, mine, (size_t)bytes), CX_OK;
  MPI_TRY(MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD));
  return CX_OK;
}

cx_status cx_comm_barrier(void) {
  if (!running) return CX_OK;
  MPI_TRY(MPI_Barrier(MPI_COMM_WORLD));
  return CX_OK;
}
