/*
 * comm.h - the communicators of a run: the schedule's groups, one
 * communicator per group and per stream that issues its collectives, the
 * collectives the CPU backend runs over them (MPI), the NCCL communicators
 * of the CUDA build, and the emulated fabric of --emulate-world.
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
 *
 * Staged (CUDA build, gpu_run --staged-collectives): several ranks share
 * one GPU, which NCCL refuses; the CUDA backend hands each collective to
 * its host thread, which runs it over the group's MPI communicator on
 * host memory (comm_all_gather_bytes and the fp32 means here), no NCCL
 * communicator made. Correct and slow: the run is marked fabric = staged.
 *
 * NCCL (CUDA build, comm_nccl_init): rank 0 makes the unique id and
 * broadcasts it over MPI; every rank joins one world communicator with
 * the run's NCCL configuration (CTAs, CGA cluster size, CTA policy: how
 * many SMs a collective may hold, which the simulator models), and each
 * (group, stream) pair gets its own communicator split from it
 * (ncclCommSplit: color = the shard group's node, the replica index, or
 * one color for the world), so HSDP's 2-D grid comes from one id.
 *
 * The emulated fabric (comm_init_emulated): one process is rank 0 of an
 * N-rank job. Its communicators have the group sizes of the N-rank job but
 * no peers; a collective on them is device traffic of exactly the bytes
 * rank 0 sends in a ring of the group (collective_wire_bytes), in the
 * ring's steps, each step paced to the emulated link's bandwidth plus its
 * share of the collective's latency (struct comm_emu_plan). The link and
 * the latency of each group are the ones ./sim prices, from one rule
 * (core/fabric.h: the intra-node bus inside a node, the slower of it and
 * the per-GPU network across nodes, NVLink or network latency per ring
 * step, a double binary tree's latency for an all-reduce across nodes
 * where shorter); flags override the bandwidth and the step latency.
 * What the data becomes: an all-gather fills every slot with this rank's
 * shard, so the full parameters repeat it; a reduce-scatter leaves the
 * mean of the n chunks of this rank's gradient, which is the gradient of
 * that repeated shard (it fills every slot) over n; an all-reduce leaves
 * the mean of identical contributions, the buffer itself. The emulated
 * model so trains, on this rank's data, and its numbers stay finite and
 * plausible; they are not those of the N-rank job, whose equivalence the
 * real multi-rank runs check.
 */
#ifndef GPU_RUN_COMM_H
#define GPU_RUN_COMM_H

#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "fabric.h"
#include "schedule.h"

#define mpi_check(call) comm_check((call), #call, __FILE__, __LINE__)

struct ncclComm; /* ncclComm_t is struct ncclComm * (nccl.h); opaque here */

/* A group's communicator for one stream. */
struct comm_handle {
	MPI_Comm comm;        /* MPI_COMM_NULL when no collective of the group runs on the stream */
	int size, rank;
	struct ncclComm *nccl; /* CUDA build after comm_nccl_init; NULL otherwise */
	int used;             /* a collective of the schedule runs on it */
	int emulated;         /* no peers: collectives are paced traffic (comm_emu_plan) */
	struct fabric_link link; /* emulated: the group's link (core/fabric.h), as ./sim prices it unless overridden */
	uint64_t wire_bytes;  /* emulated: bytes sent so far (what a ring rank would put on the wire) */
};

/* The emulated fabric's parameters (zero means: from the cluster, as ./sim prices it). */
struct comm_emu_opts {
	int world;            /* N, the job's ranks: cluster.nodes * cluster.gpus_per_node */
	double gbps;          /* every group's link bandwidth, GB/s; 0: per group from the cluster */
	double lat_us;        /* every ring step's latency; < 0: per group from the cluster */
	int engine;           /* CUDA: 0 a kernel on `ctas` SMs, 1 the copy engine where it can */
	int ctas;             /* CUDA: CTAs (SMs) the traffic kernel holds, like NCCL's channels */
};

/* NCCL's communicator configuration (ncclConfig_t), -1 for NCCL's default. */
struct comm_nccl_opts {
	int min_ctas, max_ctas;   /* CTAs (SMs) one collective may use */
	int cga_cluster;          /* CGA cluster size */
	int cta_policy;           /* NCCL_CTA_POLICY_*: 0 default, 1 efficiency, 2 zero (copy engine) */
};

struct comm {
	int rank, world;      /* of the job: MPI_COMM_WORLD's, or rank 0 of the emulated N */
	int local_ranks;      /* the job's processes on this one's node (comm_node), 1 emulated: they share its CPUs */
	int shard_rank;       /* index inside the shard group = which shard this rank keeps */
	MPI_Comm group[GRP_COUNT];                 /* GRP_SHARD, GRP_REPLICA, GRP_WORLD */
	struct comm_handle handle[GRP_COUNT][ST_COUNT];
	int emulated;         /* comm_init_emulated */
	int staged;           /* CUDA, several ranks on one GPU: collectives through host memory and MPI (no NCCL) */
	struct comm_emu_opts emu;
	struct ncclComm *nccl_world; /* the communicator the others are split from */
	struct comm_nccl_opts nccl_opts;
	int nccl_version;     /* ncclGetVersion's, 0 before comm_nccl_init */
};

/* This process's index among the job's processes on its node, and their number. Collective over MPI_COMM_WORLD. */
void comm_node(int *rank, int *size);
/*
 * Split the world for the schedule's groups and give each (group, stream)
 * its collectives use a communicator. MPI must be initialised and its
 * size s->world. Collective over MPI_COMM_WORLD.
 */
void comm_init(struct comm *c, const struct schedule *s);
/*
 * This process as rank 0 of an o->world-rank job (s->world == o->world):
 * every used (group, stream) gets an emulated handle of the group's size,
 * its link from the cluster unless o overrides it; the groups' MPI
 * communicators are MPI_COMM_SELF duplicates (sums over "the group" are
 * this rank's own).
 */
void comm_init_emulated(struct comm *c, const struct schedule *s, const struct comm_emu_opts *o);
void comm_release(struct comm *c);

/* The communicator of a collective of `group` issued on `stream`. */
struct comm_handle *comm_handle_of(struct comm *c, int group, int stream);

/* fp32 collectives, blocking: out (count x size) = every rank's in; the reductions average. */
void comm_all_gather(struct comm_handle *h, float *out, const float *in, size_t count);
/* The same over bytes of any type: out (bytes x size) = every rank's `bytes` bytes of in. */
void comm_all_gather_bytes(struct comm_handle *h, void *out, const void *in, size_t bytes);
void comm_reduce_scatter_mean(struct comm_handle *h, float *out, const float *in, size_t count);
void comm_all_reduce_mean(struct comm_handle *h, float *buf, size_t count);

/*
 * An emulated collective's ring: `steps` steps, step i moving
 * comm_emu_step_bytes(p, i) bytes (the wire bytes spread over the steps,
 * so they sum to collective_wire_bytes exactly), each lasting at least
 * its bytes over the link plus its share of the latency; the first reduce_steps
 * steps also add what they receive (reduce-scatter, and the first half of
 * an all-reduce).
 */
struct comm_emu_plan {
	int steps;
	int reduce_steps;
	uint64_t wire_bytes;      /* collective_wire_bytes(kind, S, n) */
	double bytes_per_ns;
	double step_lat_ns;       /* the collective's latency (fabric_latency_ns) over its steps */
};
/* The plan of a collective of kind k over S bytes (the full buffer) on handle h. */
void comm_emu_plan(const struct comm_handle *h, enum op_kind k, uint64_t S, struct comm_emu_plan *p);
uint64_t comm_emu_step_bytes(const struct comm_emu_plan *p, int step);
/* ns from the collective's start by which step `step` (0-based) may end. */
double comm_emu_deadline_ns(const struct comm_emu_plan *p, int step);

/*
 * The CPU backend's emulated collectives (bytes of any element type; the
 * reductions are fp32): the ring's copies and additions on this thread,
 * each step slept up to its deadline (all-reduce's additions go to a
 * scratch chunk). See the file comment for what the data becomes.
 */
void comm_emu_all_gather(struct comm_handle *h, void *out, const void *in, size_t count, int elem_bytes);
void comm_emu_reduce_scatter(struct comm_handle *h, float *out, const float *in, size_t count);
void comm_emu_all_reduce(struct comm_handle *h, float *buf, size_t count);

/* The emulated fabric as key = value pairs (results attributes); nothing when not emulated. */
void comm_describe(const struct comm *c, void (*put)(void *ctx, const char *key, const char *value), void *ctx);

/*
 * CUDA build only (GPU_RUN_CUDA): NCCL communicators for every used
 * (group, stream), with configuration o, on the current device. Collective
 * over MPI_COMM_WORLD. Nothing to do for an emulated or a staged comm. Failures go
 * through ncclCheck (gpu/cuda/check.h: message, then the abort hook).
 */
void comm_nccl_init(struct comm *c, const struct schedule *s, const struct comm_nccl_opts *o);
/* Asynchronous NCCL errors of every communicator: on one, its message, abort them all, MPI_Abort. */
void comm_nccl_check_async(struct comm *c);
/* Abort every NCCL communicator (a failing job: collectives in flight must not hang the exit). */
void comm_nccl_abort(struct comm *c);
/* Finalise and destroy them (the streams have finished). */
void comm_nccl_release(struct comm *c);

/* Used by mpi_check: on rc != MPI_SUCCESS print and MPI_Abort. */
void comm_check(int rc, const char *call, const char *file, int line);

#endif
