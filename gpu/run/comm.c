/*
 * comm.c - communicators for the schedule's groups, and the MPI check
 * (see comm.h).
 */
#include "comm.h"

#include <assert.h>
#include <stdio.h>

void comm_check(int rc, const char *call, const char *file, int line)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	if (rc == MPI_SUCCESS)
		return;
	if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
		snprintf(msg, sizeof(msg), "error %d", rc);
	fprintf(stderr, "gpu_run: %s failed at %s:%d: %s\n", call, file, line, msg);
	fflush(stderr);
	MPI_Abort(MPI_COMM_WORLD, 1);
}

void comm_init(struct comm *c, const struct schedule *s)
{
	mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
	mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &c->world));
	assert(c->world == s->world && s->world % s->shard_n == 0);
	/* failures inside collectives come back as return codes, for mpi_check */
	mpi_check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
	c->shard_rank = c->rank % s->shard_n;
	mpi_check(MPI_Comm_split(MPI_COMM_WORLD, c->rank / s->shard_n, c->rank, &c->shard));
	mpi_check(MPI_Comm_split(MPI_COMM_WORLD, c->shard_rank, c->rank, &c->replica));
}

void comm_release(struct comm *c)
{
	if (c->shard != MPI_COMM_NULL)
		mpi_check(MPI_Comm_free(&c->shard));
	if (c->replica != MPI_COMM_NULL)
		mpi_check(MPI_Comm_free(&c->replica));
}

MPI_Comm comm_of(const struct comm *c, int group)
{
	switch (group) {
	case GRP_SHARD: return c->shard;
	case GRP_REPLICA: return c->replica;
	case GRP_WORLD: return MPI_COMM_WORLD;
	default: assert(!"collective without a group"); return MPI_COMM_NULL;
	}
}

int comm_size_of(const struct comm *c, int group)
{
	int n = 1;

	mpi_check(MPI_Comm_size(comm_of(c, group), &n));
	return n;
}
