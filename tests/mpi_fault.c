/*
 * mpi_fault.c - MPI failing on purpose, for tests/e2e_safety.sh: a
 * profiling shim (LD_PRELOAD) over gpu_run's MPI. On the rank FAULT_RANK
 * names:
 *   FAULT_BARRIER=N   the Nth MPI_Barrier returns MPI_ERR_COMM (gpu_run
 *                     sets MPI_ERRORS_RETURN, so the call's own check sees it);
 *   FAULT_FINALIZE=1  MPI_Finalize finalizes and then never returns, as a
 *                     finalize stuck on a peer would.
 * Every other call goes straight to MPI (PMPI_*).
 */
#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

static int faulty(void)
{
	const char *s = getenv("FAULT_RANK");
	int r = -1;

	PMPI_Comm_rank(MPI_COMM_WORLD, &r);
	return s && atoi(s) == r;
}

int MPI_Barrier(MPI_Comm comm)
{
	static int calls;
	const char *n = getenv("FAULT_BARRIER");

	if (n && faulty() && ++calls == atoi(n))
		return MPI_ERR_COMM;
	return PMPI_Barrier(comm);
}

int MPI_Finalize(void)
{
	int hang = getenv("FAULT_FINALIZE") && faulty();
	int rc = PMPI_Finalize();

	while (hang)
		pause();
	return rc;
}
