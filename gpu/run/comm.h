/*
 * comm.h - the MPI side of gpu_run's CPU backend: the communicators a
 * schedule's collectives name, and the check every MPI call goes through.
 *
 * Ranks are laid out as the schedule assumes: a shard group is s->shard_n
 * consecutive ranks (one node's GPUs under hsdp), a replica group the ranks
 * with the same index inside their shard group. ddp runs over the world.
 * A failed MPI call is a failed library call (docs/STYLE.md): mpi_check
 * prints the call, file:line and MPI's own error string, then MPI_Abort.
 */
#ifndef GPU_RUN_COMM_H
#define GPU_RUN_COMM_H

#include <mpi.h>

#include "schedule.h"

#define mpi_check(call) comm_check((call), #call, __FILE__, __LINE__)

/* The communicators of one run; comm_init/comm_release. */
struct comm {
	int rank, world;      /* in MPI_COMM_WORLD */
	int shard_rank;       /* index inside the shard group = which shard this rank keeps */
	MPI_Comm shard;       /* s->shard_n consecutive ranks */
	MPI_Comm replica;     /* ranks holding the same shard index */
};

/* Split the world for the schedule's groups. MPI must be initialised and its size s->world. */
void comm_init(struct comm *c, const struct schedule *s);
void comm_release(struct comm *c);

/* The communicator and rank count of a collective's group (enum comm_group). */
MPI_Comm comm_of(const struct comm *c, int group);
int comm_size_of(const struct comm *c, int group);

/* Used by mpi_check: on rc != MPI_SUCCESS print and MPI_Abort. */
void comm_check(int rc, const char *call, const char *file, int line);

#endif
