/*
 * schedule.h - the op graph of one optimizer step on one rank.
 *
 * schedule_new() turns an experiment (model, cluster, policy, run) into
 * every operation of one step: all-gathers, forward, recompute and backward
 * of each segment, reduce-scatters, all-reduces, gradient accumulation,
 * flat-gradient concatenation, optimizer steps, host-device copies and
 * buffer frees. Each op carries its stream, its dependencies, its FLOPs and
 * bytes, the kernels it launches and the buffers it allocates and frees.
 * This is where the policy logic lives, once: the simulator prices this
 * graph and the GPU runtime launches it; neither re-derives a policy.
 *
 * Invariants:
 *   - ops are in issue order (the order a single CPU thread launches them);
 *     every dependency points to an earlier op, so the array is a
 *     topological order;
 *   - ops on one stream execute in array order (streams are in-order queues);
 *   - a buffer is allocated by at most one op and freed by at most one op;
 *     buffers alive for the whole step (sharded parameters, optimizer state)
 *     have no allocating op.
 * All data-parallel ranks are symmetric, so one rank's graph stands for all.
 */
#ifndef CORE_SCHEDULE_H
#define CORE_SCHEDULE_H

#include <stdint.h>
#include <stdio.h>
#include "experiment.h"

enum op_kind {
	OP_ALLGATHER,      /* gather a unit's parameter shards into full params */
	OP_COPY_OUT,       /* copy gathered params out of the flat comm buffer (pytorch) */
	OP_FORWARD,        /* forward of one segment */
	OP_RECOMPUTE,      /* rebuild a segment's activations before its backward */
	OP_BACKWARD,       /* backward of one segment */
	OP_ACCUM,          /* add this microbatch's gradient into the accumulated one */
	OP_CONCAT,         /* flat-params: per-parameter grads into the flat gradient */
	OP_COPY_IN,        /* copy grads into the flat reduce-scatter input (pytorch) */
	OP_REDUCE_SCATTER, /* sum full grads into each rank's shard */
	OP_ALLREDUCE,      /* sum over replicas (hsdp) or the world (ddp) */
	OP_OPTIM,          /* optimizer step on the GPU */
	OP_D2H,            /* device to host copy (offload) */
	OP_H2D,            /* host to device copy (offload) */
	OP_CPU_OPTIM,      /* optimizer step on the host (offload) */
	OP_FREE,           /* release buffers (reshard) */
	OP_KIND_COUNT
};

enum stream_id {
	ST_COMPUTE,
	ST_ALLGATHER,
	ST_REDUCE_SCATTER,
	ST_ALLREDUCE,
	ST_COPY,     /* host-device copies */
	ST_HOST,     /* host optimizer thread */
	ST_COUNT
};

/* Which ranks a collective spans. */
enum comm_group {
	GRP_NONE,
	GRP_SHARD,   /* the shard group (all ranks for fsdp/zero2) */
	GRP_REPLICA, /* the replicas of one shard (hsdp) */
	GRP_WORLD,   /* every rank (ddp) */
	GRP_COUNT
};

/* Memory categories of the timeline. */
enum mem_cat {
	MEM_SHARDED_PARAMS,
	MEM_FULL_PARAMS,
	MEM_FULL_GRADS,    /* unsharded gradients */
	MEM_SHARDED_GRADS,
	MEM_OPTIM_STATE,
	MEM_ACTIVATIONS,   /* saved activations and checkpoints */
	MEM_TRANSIENT,     /* intermediates inside one op */
	MEM_LOGITS,        /* logits and loss */
	MEM_COMM,          /* communication buffers */
	MEM_CAT_COUNT
};

/* What a buffer holds, for the runtime to map it to memory. */
enum buf_kind {
	BUF_SHARD_PARAM,   /* a unit's parameter shard (persistent) */
	BUF_OPTIM_STATE,   /* a unit's Adam moments (persistent) */
	BUF_FULL_PARAM,    /* a unit's gathered params */
	BUF_GATHER_OUT,    /* flat all-gather output before copy-out (pytorch) */
	BUF_FULL_GRAD,     /* a unit's unsharded gradient */
	BUF_RS_IN,         /* flat reduce-scatter input (pytorch copy-in, or dtype cast) */
	BUF_RS_OUT,        /* this microbatch's reduced shard */
	BUF_SHARD_GRAD,    /* accumulated sharded gradient */
	BUF_ACTS,          /* a segment's saved activations for one microbatch */
	BUF_RECOMPUTED,    /* activations rebuilt by recompute */
	BUF_TRANSIENT,     /* inside one op */
	BUF_HOST_STAGE,    /* device copy of a host-offloaded shard */
	BUF_KIND_COUNT
};

struct buffer {
	uint64_t bytes;
	uint8_t cat;      /* enum mem_cat */
	uint8_t kind;     /* enum buf_kind */
	uint8_t stream;   /* stream that allocates it (caching allocators pool per stream) */
	int32_t unit;     /* -1 when none */
	int32_t seg;      /* -1 when none */
	int16_t micro;    /* -1 when none */
	int32_t alloc_op; /* -1: alive from the start of the step */
	int32_t free_op;  /* -1: alive at the end of the step */
};

struct op {
	uint8_t kind;      /* enum op_kind */
	uint8_t stream;    /* enum stream_id */
	uint8_t group;     /* enum comm_group, collectives only */
	uint8_t seg_kind;  /* enum segment_kind, compute ops only */
	int16_t micro;     /* microbatch, -1 for per-step ops */
	int32_t unit;      /* -1 when none */
	int32_t seg;       /* segment index in forward order, -1 when none */
	uint32_t dep_first, ndeps;   /* into schedule.deps */
	uint32_t buf_first;          /* into schedule.bufrefs: nalloc allocated at start, then nfree freed at end */
	uint16_t nalloc, nfree;
	int32_t ktab;      /* kernel list in schedule.ktabs, -1 when none */
	uint32_t launches; /* kernels the CPU launches for this op */
	uint64_t bytes;    /* collectives: the full buffer S; copies: bytes moved; memory-bound ops: HBM bytes */
	uint64_t flops;
};

/* A list of kernels one compute op runs, shared by ops of the same shape. */
struct ktab {
	uint32_t first, count;  /* into schedule.kernels */
	uint64_t flops, bytes;  /* sums */
};

/* A wrapping unit: the parameters gathered and reduced together. */
struct unit {
	char name[40];
	int first_seg, last_seg;  /* first and last segment using it, in forward order */
	int is_root;              /* holds the embedding or head and is not a block unit of its own */
	int64_t params;           /* elements */
	int ntensors;
	uint64_t full_bytes;      /* gathered params, compute dtype */
	uint64_t shard_elems;     /* elements of one rank's shard, padded per tensor */
	int reshard_after_fwd;    /* 1: freed after forward, gathered again in backward */
	int defer_sync;           /* partial:K: reduce only on the last microbatch */
	int accumulates_full;     /* keeps an unsharded gradient across microbatches */
	uint64_t full_grad_bytes; /* its unsharded gradient buffer */
	uint64_t reduce_bytes;    /* S of its reduce-scatter (or ddp all-reduce), reduce dtype */
};

struct segment {
	enum segment_kind kind;
	int block;   /* SEG_BLOCK: block index, else -1 */
	int unit;
};

struct schedule {
	const struct experiment *exp;
	int world, shard_n, replica_n; /* ranks: all, per shard group, per replica group */
	int shard_spans_nodes;         /* the shard group crosses the node boundary */
	int nunits, nsegs;
	struct unit *units;
	struct segment *segs;
	int nops, cap_ops;
	struct op *ops;
	uint32_t *deps;
	int ndeps, cap_deps;
	uint32_t *bufrefs;
	int nbufrefs, cap_bufrefs;
	struct buffer *bufs;
	int nbufs, cap_bufs;
	struct kernel *kernels;
	int nkernels, cap_kernels;
	struct ktab *ktabs;
	int nktabs, cap_ktabs;
	int *bwd_order;            /* units in the order backward first needs them */
	uint64_t tokens_per_step;  /* per rank */
	uint64_t model_flops;      /* per rank per step, conventional MFU count */
};

/*
 * Build the step graph. The experiment must be resolved (config_resolve)
 * and outlive the schedule. Returns NULL with a message in err when the
 * policy cannot be built for this model and cluster.
 */
struct schedule *schedule_new(const struct experiment *e, char *err, int errlen);
void schedule_free(struct schedule *s);

/* One line per op, in issue order. */
void schedule_print(const struct schedule *s, FILE *f);
/* "AG u3 m0" style label of an op into buf */
const char *op_label(const struct schedule *s, int op, char *buf, int len);

const char *op_kind_name(enum op_kind k);
const char *stream_name(enum stream_id s);
const char *mem_cat_name(enum mem_cat c);
const char *buf_kind_name(enum buf_kind k);
const char *comm_group_name(enum comm_group g);

/* Wire bytes one rank sends for a collective of buffer S over n ranks. */
uint64_t collective_wire_bytes(enum op_kind k, uint64_t S, int n);

/* Bytes of one kind summed over the step (tests and reports). */
uint64_t schedule_bytes_of(const struct schedule *s, enum op_kind k);
int schedule_count_of(const struct schedule *s, enum op_kind k);

/* Bytes alive at the start of the step, by category (persistent state). */
void schedule_static_bytes(const struct schedule *s, uint64_t out[MEM_CAT_COUNT]);

#endif
