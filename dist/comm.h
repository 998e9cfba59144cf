#ifndef CX_DIST_COMM_H
#define CX_DIST_COMM_H

/* The transport under dist/ (internal to the folder): the few collectives data parallelism
 * needs, over MPI (comm_mpi.c) or, in a build without MPI, one process (comm_none.c). Every
 * call is checked; a failure names the MPI call and what it was given. */

#include <stdbool.h>
#include <stdint.h>

#include "../core/status.h"

typedef enum cx_comm_op { CX_COMM_SUM, CX_COMM_MIN, CX_COMM_MAX } cx_comm_op;

/* Whether this process was started by an MPI launcher (mpirun, srun, hydra): one of
 * OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE in the environment. */
bool cx_comm_launched(void);
/* MPI_Init (with the calling thread the only one that calls MPI) when launched, else nothing:
 * rank 0 of 1. */
cx_status cx_comm_init(void);
cx_status cx_comm_finalize(void);
/* Ends every rank of the job now (MPI_Abort); returns only when MPI is not running. */
void cx_comm_abort(int code);
int cx_comm_rank(void);
int cx_comm_world(void);
/* This rank among the ranks of its machine (MPI_COMM_TYPE_SHARED), and the machine's name
 * among the job's: the lowest world rank on it. */
int cx_comm_local_rank(void);
int cx_comm_node(void);
bool cx_comm_running(void); /* MPI initialised and not finalised */

/* A request slot for one non-blocking reduction at a time, reused step after step. */
typedef struct cx_comm_req cx_comm_req;
cx_status cx_comm_req_new(cx_comm_req **out);
void cx_comm_req_free(cx_comm_req *r);
/* Starts an in-place sum of n floats over all ranks into r (idle). */
cx_status cx_comm_iallreduce_f32(float *buf, int64_t n, cx_comm_req *r);
/* Drives r on (MPI progresses only inside its calls); *done when it has completed. */
cx_status cx_comm_test(cx_comm_req *r, bool *done);
cx_status cx_comm_wait(cx_comm_req *r);

cx_status cx_comm_allreduce_f64(double *buf, int n, cx_comm_op op);
cx_status cx_comm_allreduce_i64(int64_t *buf, int n, cx_comm_op op);
cx_status cx_comm_bcast(void *buf, int64_t bytes, int root);
/* Every rank's `bytes` bytes at `mine` into all[rank · bytes] on every rank. */
cx_status cx_comm_allgather(const void *mine, void *all, int64_t bytes);
cx_status cx_comm_barrier(void);

#endif
