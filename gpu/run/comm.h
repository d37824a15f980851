/*
 * comm.h - the communicators of a run: the schedule's groups, one
 * communicator per group and per stream that issues its collectives, and
 * the collectives the CPU backend runs over them (MPI).
 *
 * Ranks are laid out as the schedule assumes: a shard group is s->shard_n
 * consecutive ranks (one node's GPUs under hsdp), a replica group the
 * ranks with the same index inside their shard group, the world every
 * rank (ddp). Streams run concurrently, each in its own order; giving
 * every (group, stream) pair a communicator of its own keeps the order of
 * collectives on each communicator the same on every rank, which MPI and
 * NCCL require. A failed MPI call is a failed library call
 * (docs/STYLE.md): mpi_check prints the call, file:line and MPI's own
 * error string, then MPI_Abort.
 */
#ifndef GPU_RUN_COMM_H
#define GPU_RUN_COMM_H

#include <stddef.h>

#include <mpi.h>

#include "schedule.h"

#define mpi_check(call) comm_check((call), #call, __FILE__, __LINE__)

/* A group's communicator for one stream. */
struct comm_handle {
	MPI_Comm comm;        /* MPI_COMM_NULL when no collective of the group runs on the stream */
	int size, rank;
};

struct comm {
	int rank, world;      /* in MPI_COMM_WORLD */
	int shard_rank;       /* index inside the shard group = which shard this rank keeps */
	MPI_Comm group[GRP_COUNT];                 /* GRP_SHARD, GRP_REPLICA, GRP_WORLD */
	struct comm_handle handle[GRP_COUNT][ST_COUNT];
};

/*
 * Split the world for the schedule's groups and give each (group, stream)
 * its collectives use a communicator. MPI must be initialised and its
 * size s->world. Collective over MPI_COMM_WORLD.
 */
void comm_init(struct comm *c, const struct schedule *s);
void comm_release(struct comm *c);

/* The communicator of a collective of `group` issued on `stream`. */
struct comm_handle *comm_handle_of(struct comm *c, int group, int stream);

/* fp32 collectives, blocking: out (count x size) = every rank's in; the reductions average. */
void comm_all_gather(struct comm_handle *h, float *out, const float *in, size_t count);
void comm_reduce_scatter_mean(struct comm_handle *h, float *out, const float *in, size_t count);
void comm_all_reduce_mean(struct comm_handle *h, float *buf, size_t count);

/* Used by mpi_check: on rc != MPI_SUCCESS print and MPI_Abort. */
void comm_check(int rc, const char *call, const char *file, int line);

#endif
