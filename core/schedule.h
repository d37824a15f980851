/*
 * schedule.h - the op graph of one optimizer step on one rank.
 *
 * schedule_new() turns a resolved experiment (model, cluster, policy, run)
 * into every operation of one step: all-gathers, forward, recompute and
 * backward of each segment, reduce-scatters, all-reduces, gradient
 * accumulation, flat-gradient concatenation, optimizer steps, host-device
 * copies and buffer frees. Each op carries its stream, its dependencies,
 * its FLOPs and bytes, the kernels it launches, its operands (the buffers
 * it reads and writes) and the buffers it allocates and frees. This is
 * where the policy logic lives, once: the simulator prices this graph and
 * the runtime executes it, and neither reads the policy to do so. The
 * schedule states every fact they need (group sizes, the loss chunk, the
 * checkpointing mode, the peak FLOP rate of the compute dtype, ...).
 *
 * Invariants (schedule_check() verifies them; the tests run it for every
 * policy):
 *   - ops are in issue order (the order a single CPU thread launches them);
 *     every dependency points to an earlier op, so the array is a
 *     topological order;
 *   - ops on one stream execute in array order (streams are in-order queues);
 *   - a buffer is allocated by at most one op and freed by at most one op;
 *     buffers alive for the whole step (sharded parameters, optimizer state,
 *     host copies) have no allocating op;
 *   - every op that names a buffer as an operand happens after the op that
 *     allocates it and before (or is) the op that frees it, and two ops that
 *     touch one buffer, one of them writing it, are ordered by the graph
 *     (dependencies and stream order). This is what lets an allocator hand
 *     a freed block to any op that happens after the freeing op
 *     (schedule_happens_before) without waiting for anything.
 * All data-parallel ranks are symmetric, so one rank's graph stands for all.
 */
#ifndef CORE_SCHEDULE_H
#define CORE_SCHEDULE_H

#include <stdint.h>
#include <stdio.h>
#include "experiment.h"

enum op_kind {
	OP_ALLGATHER,      /* gather a unit's parameter shards into full params */
	OP_COPY_OUT,       /* unshard under FSDP2: gathered params out of the flat comm buffer, or at a
			    * shard group of one (local_shards) the shard itself, cast, into the params */
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
	OP_COPY,           /* a device copy standing for a reduce-scatter of one rank (local_shards) */
	OP_LOSS_BACKWARD,  /* the loss's own backward before the head's (eager PyTorch: recipe_loss_backward) */
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
	BUF_RESIDUAL,      /* (N, D) residual stream between segments, one microbatch's forward */
	BUF_RESIDUAL_GRAD, /* (N, D) its gradient, one microbatch's backward */
	BUF_TOKENS,        /* (N) int32 token ids the embedding keeps for its backward */
	BUF_HOST_MASTER,   /* offload: a unit's master shard on the host (persistent) */
	BUF_HOST_GRAD,     /* offload: a unit's reduced gradient shard on the host (persistent) */
	BUF_HOST_OPTIM_STATE, /* offload: a unit's Adam moments on the host (persistent) */
	BUF_KIND_COUNT
};

/* Element type of a buffer. A store of activations (BUF_ACTS, BUF_RECOMPUTED,
 * BUF_TRANSIENT of a segment) says its activation type; the fp32 statistics
 * inside it are part of its layout (core/model.h). */
enum elem { ELEM_FP32, ELEM_BF16, ELEM_I32, ELEM_COUNT };

struct buffer {
	uint64_t bytes;   /* memory it holds; 0 for an alias */
	uint8_t cat;      /* enum mem_cat */
	uint8_t kind;     /* enum buf_kind */
	uint8_t stream;   /* stream of the op that allocates it (caching allocators pool per stream) */
	uint8_t elem;     /* enum elem */
	uint8_t host;     /* 1: host memory (offload); not device memory */
	uint8_t zero;     /* 1: zero-filled by its allocating op before use (gradients accumulate into it) */
	/*
	 * 1: allocated by alloc_op in a run's first step only, and kept from
	 * then on (free_op -1): the optimizer's state where the runtime makes
	 * it at its first step (runtime.lazy_optim_state)
	 */
	uint8_t once;
	int32_t alias_of; /* the buffer whose memory this one is (ddp's full params are its shard), -1 */
	int32_t unit;     /* -1 when none */
	int32_t seg;      /* -1 when none */
	int16_t micro;    /* -1 when none */
	int32_t alloc_op; /* -1: alive from the start of the step */
	int32_t free_op;  /* -1: alive at the end of the step */
};

/* How an op uses an operand. */
enum opd_role { OPD_IN = 1, OPD_OUT = 2, OPD_INOUT = 3 };

struct operand {
	uint32_t buf;
	uint8_t role;     /* enum opd_role */
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
	uint32_t opd_first;          /* into schedule.opds: the buffers it reads and writes */
	uint16_t nopd;
	int32_t ktab;      /* kernel list in schedule.ktabs, -1 when none */
	uint32_t launches; /* kernels the CPU launches for this op */
	uint32_t host_ns;  /* host time issuing it takes beyond the launches (DTensor dispatch of optimizer ops) */
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
	int64_t last_tensor;      /* elements of its last tensor so far (while its modules are added) */
	int64_t pair_elems;       /* the most elements two tensors in a row hold: the cast copies a
				   * local_shards unshard has alive at once */
	int64_t *tensor_elems;    /* ntensors: each tensor's elements, in module order */
	int64_t *tensor_shard;    /* ntensors: each tensor's dim-0 shard, padded (per-tensor shards) */
	uint64_t full_bytes;      /* gathered params, compute dtype */
	uint64_t shard_elems;     /* elements of one rank's shard (padded: per tensor, or at the end) */
	int reshard_after_fwd;    /* 1: freed after forward, gathered again in backward */
	int defer_sync;           /* partial:K: reduce only on the last microbatch */
	int accumulates_full;     /* keeps an unsharded gradient across microbatches */
	uint64_t full_grad_bytes; /* its unsharded gradient buffer */
	uint8_t full_grad_elem;   /* enum elem of that buffer */
	uint64_t reduce_bytes;    /* S of its reduce-scatter (or ddp all-reduce), reduce dtype */
};

struct segment {
	enum segment_kind kind;
	int block;   /* SEG_BLOCK: block index, else -1 */
	int unit;
};

struct schedule {
	const struct experiment *exp; /* for printing the configuration only */
	int world, shard_n, replica_n; /* ranks: all, per shard group, per replica group */
	int group_n[GRP_COUNT];        /* ranks of each collective group */
	int shard_spans_nodes;         /* the shard group crosses the node boundary */
	/*
	 * Shard layout: 1 when each tensor is sharded along dim 0, padded to a
	 * multiple of the group (FSDP2; gathers copy out of, reductions copy into,
	 * a flat communication buffer); 0 when a unit's flat buffer is cut into
	 * shard_n equal pieces, padded at its end (the testbed runtime: a gather's
	 * output is the unit's flat parameters, a reduction's input its gradient).
	 */
	int per_tensor_shards;
	/*
	 * 1: per-tensor shards over a shard group of one rank, where FSDP2
	 * issues no collective (world_size == 1 in FSDPParamGroup.unshard,
	 * wait_for_unshard and foreach_reduce): a unit's unshard is a copy of
	 * its shard, cast, into the unsharded params on the compute stream
	 * (OP_COPY_OUT, no gathered buffer), and its reduction copies the
	 * reduce-scatter input into its output on the reduce-scatter stream
	 * (OP_COPY).
	 */
	int local_shards;
	/*
	 * The attention kernel the step's attention is priced as (enum
	 * attention_kernel, core/recipe.h): the runtime's, or the backend of
	 * PyTorch's scaled_dot_product_attention that policy.sdpa names
	 */
	int attention;
	int microbatches;              /* M per optimizer step */
	enum optim optim;              /* how an optimizer step launches: foreach, fused or a kernel per tensor */
	int batch;                     /* sequences per microbatch */
	enum ac_mode ac;               /* how segments keep activations (per-layer: each block none or full) */
	enum loss_mode loss;
	int loss_chunk_rows;           /* rows of logits the chunked loss holds at once */
	enum elem act_elem;            /* activation (compute) element type */
	double peak_flops;             /* dense FLOP/s of one GPU in the compute dtype */
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
	struct operand *opds;
	int nopds, cap_opds;
	struct kernel *kernels;
	int nkernels, cap_kernels;
	struct ktab *ktabs;
	int nktabs, cap_ktabs;
	int *bwd_order;            /* units in the order backward first needs them */
	uint64_t tokens_per_step;  /* per rank */
	uint64_t model_flops;      /* per rank per step, conventional MFU count */
	/*
	 * Happens-before, as vector clocks over the streams: stream_pos[i] is op
	 * i's position on its stream; clock[i * ST_COUNT + t] the number of ops
	 * of stream t that happen before op i or are op i (dependencies and
	 * stream order, transitively).
	 */
	uint32_t *stream_pos;
	uint32_t *clock;
	/* the ops of each stream in order: stream t's op at position p is stream_ops[stream_first[t] + p] */
	int32_t *stream_ops;
	uint32_t stream_first[ST_COUNT + 1];
};

/*
 * Build the step graph. The experiment must be resolved (config_resolve)
 * and outlive the schedule. Returns NULL with a message in err when the
 * policy cannot be built for this model and cluster.
 */
struct schedule *schedule_new(const struct experiment *e, char *err, int errlen);
void schedule_free(struct schedule *s);
/*
 * Why gpu_run cannot run schedule s as ./sim prices it, or NULL: an
 * attention backend of PyTorch's named by the policy (gpu_run runs its
 * model's own attention kernels).
 */
const char *schedule_priced_only(const struct schedule *s);

/*
 * The experiments whose collectives a calibration of s measures besides
 * s's own, so that one calibration prices every sharding: s's experiment
 * with each policy of policy_sharding_variants(). They share s's strings.
 * Returns how many it wrote (at most POLICY_SHARDING_VARIANTS).
 */
int schedule_calibration_variants(const struct schedule *s, struct experiment *out);

/*
 * 1 when schedule_new builds the same graph for experiments a and b: they
 * agree on everything it reads (the model's shape, the policy, nodes and
 * GPUs per node, the runtime, the batch, the GPU's peak FLOP rate). Links,
 * latencies and the GPU's other speeds may differ: they only price it. A
 * schedule built for a serves b once its exp points to b.
 */
int schedule_same_inputs(const struct experiment *a, const struct experiment *b);

/*
 * Check the invariants listed at the top of this file. 0, or -1 with the
 * first violation in err. O(ops + operand pairs per buffer).
 */
int schedule_check(const struct schedule *s, char *err, int errlen);

/*
 * Compute the happens-before clocks from the dependencies and stream order,
 * one pass in issue order (schedule_new does; call it again after editing
 * the graph).
 */
void schedule_clocks(struct schedule *s);

/* 1 when op a happens before op b (or a == b): b waits for a, transitively. */
static inline int schedule_happens_before(const struct schedule *s, int a, int b)
{
	return s->clock[(size_t)b * ST_COUNT + s->ops[a].stream] > s->stream_pos[a];
}

/* Ranks of a collective group. */
static inline int schedule_group_size(const struct schedule *s, int group)
{
	return s->group_n[group];
}

/* Collectives (all-gather, reduce-scatter, all-reduce) and kernel ops (run on the GPU's SMs). */
static inline int op_is_collective(enum op_kind k)
{
	return k == OP_ALLGATHER || k == OP_REDUCE_SCATTER || k == OP_ALLREDUCE;
}

static inline int op_is_kernel(const struct op *o)
{
	switch (o->kind) {
	case OP_FORWARD: case OP_RECOMPUTE: case OP_BACKWARD: case OP_ACCUM: case OP_CONCAT:
	case OP_COPY_IN: case OP_COPY_OUT: case OP_OPTIM: case OP_COPY: case OP_LOSS_BACKWARD:
		return 1;
	default:
		return 0;
	}
}
/* Communication the step can expose: a collective over more than one rank, or a host-device copy. */
int op_is_comm(const struct schedule *s, const struct op *o);

/* The first operand of op i of buffer kind k with a role including `role` bits, or -1. */
int op_operand(const struct schedule *s, int op, enum buf_kind k, int role);
/*
 * The bytes of op's transient buffers together; *n (when not NULL) gets
 * how many it has: one scratch region for the testbed's recipe, a buffer
 * per tensor for PyTorch's (recipe_transient_tensors).
 */
uint64_t op_transient_bytes(const struct schedule *s, int op, int *n);
/*
 * The bytes of the buffers of kind `kind` op allocates (its transient
 * operands, for BUF_TRANSIENT); *n (when not NULL) gets how many: a
 * block's saved and recomputed activations are a buffer per tensor where
 * the runtime allocates them apart (PyTorch's), one region for the testbed.
 */
uint64_t op_made_bytes(const struct schedule *s, int op, enum buf_kind kind, int *n);
/*
 * The bytes the kernels may use of buffer buf: its own, or for a
 * transient buffer or a block's activations, the ones of its kind its op
 * made together (the kernels take an op's tensors as one region,
 * gpu/run/exec.c).
 */
uint64_t buf_kernel_bytes(const struct schedule *s, int buf);

/* Bytes per element of a buffer's element type. */
int elem_bytes(enum elem e);

/* One line per op, in issue order; with kernels, each op's kernels on lines of their own below it. */
void schedule_print(const struct schedule *s, FILE *f, int kernels);
/* "AG u3 m0" style label of an op into buf */
const char *op_label(const struct schedule *s, int op, char *buf, int len);

const char *op_kind_name(enum op_kind k);
const char *stream_name(enum stream_id s);
const char *mem_cat_name(enum mem_cat c);
const char *buf_kind_name(enum buf_kind k);
const char *comm_group_name(enum comm_group g);
const char *elem_name(enum elem e);

/* Wire bytes one rank sends for a collective of buffer S over n ranks. */
uint64_t collective_wire_bytes(enum op_kind k, uint64_t S, int n);

/* Bytes of one kind summed over the step (tests and reports). */
uint64_t schedule_bytes_of(const struct schedule *s, enum op_kind k);
/* The part of optimizer op `op`'s bytes that clips the gradient norm before it (0 when it does not clip) */
uint64_t schedule_clip_bytes(const struct schedule *s, int op);
/* The parameter elements an optimizer op (OP_OPTIM, OP_CPU_OPTIM) steps: its shards' or host masters' */
double schedule_optim_elems(const struct schedule *s, const struct op *o);
/* The most elements one optimizer op of the step updates (0: none): the size the calibration times it at */
double schedule_largest_optim_elems(const struct schedule *s);
int schedule_count_of(const struct schedule *s, enum op_kind k);

/* Bytes alive at the start of a step after the first, by category: the persistent state and what the first step made to keep. */
void schedule_static_bytes(const struct schedule *s, uint64_t out[MEM_CAT_COUNT]);

#endif
