/*
 * comm.c - communicators for the schedule's groups and streams, the MPI
 * collectives of the CPU backend, and the MPI check (see comm.h).
 */
#include "comm.h"

#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <time.h>

#define COMM_POLL_NS 20000 /* between tests of a pending collective: 20 us */

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
	int used[GRP_COUNT][ST_COUNT] = { { 0 } };

	mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
	mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &c->world));
	assert(c->world == s->world && s->world % s->shard_n == 0);
	/* failures inside collectives come back as return codes, for mpi_check */
	mpi_check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
	c->shard_rank = c->rank % s->shard_n;
	c->group[GRP_NONE] = MPI_COMM_NULL;
	mpi_check(MPI_Comm_split(MPI_COMM_WORLD, c->rank / s->shard_n, c->rank, &c->group[GRP_SHARD]));
	mpi_check(MPI_Comm_split(MPI_COMM_WORLD, c->shard_rank, c->rank, &c->group[GRP_REPLICA]));
	mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &c->group[GRP_WORLD]));
	/* every rank builds the same schedule, so every rank dups the same pairs in the same order */
	for (int i = 0; i < s->nops; i++)
		if (op_is_collective(s->ops[i].kind))
			used[s->ops[i].group][s->ops[i].stream] = 1;
	for (int g = 0; g < GRP_COUNT; g++)
		for (int st = 0; st < ST_COUNT; st++) {
			struct comm_handle *h = &c->handle[g][st];
			h->comm = MPI_COMM_NULL;
			if (!used[g][st])
				continue;
			mpi_check(MPI_Comm_dup(c->group[g], &h->comm));
			mpi_check(MPI_Comm_size(h->comm, &h->size));
			mpi_check(MPI_Comm_rank(h->comm, &h->rank));
		}
}

void comm_release(struct comm *c)
{
	for (int g = 0; g < GRP_COUNT; g++) {
		for (int st = 0; st < ST_COUNT; st++)
			if (c->handle[g][st].comm != MPI_COMM_NULL)
				mpi_check(MPI_Comm_free(&c->handle[g][st].comm));
		if (c->group[g] != MPI_COMM_NULL)
			mpi_check(MPI_Comm_free(&c->group[g]));
	}
}

struct comm_handle *comm_handle_of(struct comm *c, int group, int stream)
{
	struct comm_handle *h;

	assert(group > GRP_NONE && group < GRP_COUNT && stream >= 0 && stream < ST_COUNT);
	h = &c->handle[group][stream];
	assert(h->comm != MPI_COMM_NULL && "a collective on a stream comm_init did not see");
	return h;
}

static int mpi_count(size_t count)
{
	if (count > INT_MAX) {
		fprintf(stderr, "gpu_run: a collective of %zu elements is more than MPI's int count\n", count);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	return (int)count;
}

static void scale(float *p, size_t n, float f)
{
	for (size_t i = 0; i < n; i++)
		p[i] *= f;
}

/*
 * Wait for a non-blocking collective without holding a core: test it, and
 * sleep a little between tests. MPI progresses the collective inside
 * MPI_Test; a blocking collective would spin at full speed and take the
 * core from the compute stream's thread, which is not what a GPU's
 * communication kernels do to its compute.
 */
static void wait_for(MPI_Request *req)
{
	const struct timespec nap = { 0, COMM_POLL_NS };
	int done = 0;

	for (;;) {
		mpi_check(MPI_Test(req, &done, MPI_STATUS_IGNORE));
		if (done)
			return;
		nanosleep(&nap, NULL);
	}
}

void comm_all_gather(struct comm_handle *h, float *out, const float *in, size_t count)
{
	MPI_Request req;
	int n = mpi_count(count);

	mpi_check(MPI_Iallgather(in, n, MPI_FLOAT, out, n, MPI_FLOAT, h->comm, &req));
	wait_for(&req);
}

void comm_reduce_scatter_mean(struct comm_handle *h, float *out, const float *in, size_t count)
{
	MPI_Request req;

	mpi_check(MPI_Ireduce_scatter_block(in, out, mpi_count(count), MPI_FLOAT, MPI_SUM, h->comm, &req));
	wait_for(&req);
	scale(out, count, 1.0f / (float)h->size);
}

void comm_all_reduce_mean(struct comm_handle *h, float *buf, size_t count)
{
	MPI_Request req;

	mpi_check(MPI_Iallreduce(MPI_IN_PLACE, buf, mpi_count(count), MPI_FLOAT, MPI_SUM, h->comm, &req));
	wait_for(&req);
	scale(buf, count, 1.0f / (float)h->size);
}
