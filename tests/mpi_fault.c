/*
 * mpi_fault.c - MPI failing on purpose, for tests/e2e_safety.sh: a
 * profiling shim (LD_PRELOAD) over gpu_run's MPI. On the rank FAULT_RANK
 * names:
 *   FAULT_BARRIER=N   the Nth MPI_Barrier returns MPI_ERR_COMM (gpu_run
 *                     sets MPI_ERRORS_RETURN, so the call's own check sees it);
 *   FAULT_FINALIZE=1  MPI_Finalize finalizes and then never returns, as a
 *                     finalize stuck on a peer would;
 *   FAULT_ALLOC_ABOVE=N  aligned_alloc of more than N bytes (the CPU
 *                     backend's device segments) returns NULL once MPI is
 *                     up, as a host out of memory on one node would.
 * Every other call goes straight to MPI (PMPI_*) or the C library.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

static int faulty(void)
{
	const char *s = getenv("FAULT_RANK");
	int r = -1, up = 0, down = 0;

	PMPI_Initialized(&up);
	PMPI_Finalized(&down);
	if (!up || down)
		return 0;
	PMPI_Comm_rank(MPI_COMM_WORLD, &r);
	return s && atoi(s) == r;
}

void *aligned_alloc(size_t align, size_t size)
{
	static void *(*next)(size_t, size_t);
	const char *n = getenv("FAULT_ALLOC_ABOVE");

	if (!next)
		next = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
	if (n && size > strtoull(n, NULL, 10) && faulty())
		return NULL;
	return next(align, size);
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
