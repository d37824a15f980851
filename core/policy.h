/*
 * policy.h - the training policies the testbed compares, and their rules.
 *
 * A policy is plain data: enums and a few integers. Names are parsed and
 * printed here so the simulator, the runtime and the experiment files use
 * one spelling. The rules that define the policies live here too, once:
 * policy_resolve() makes a policy canonical for a cluster (what zero2 and
 * ddp mean for resharding, the default shard group, the gradient dtypes a
 * precision implies), policy_check() lists the combinations that make no
 * sense, and policy_next() walks every distinct valid policy. This module
 * knows nothing of files, lines or flags: config_resolve() (config.h)
 * tells it which fields were set explicitly and attaches the place each
 * key was set to the violations it returns.
 */
#ifndef CORE_POLICY_H
#define CORE_POLICY_H

#include "hw.h"
#include "model.h"

enum sharding { SHARD_DDP, SHARD_FSDP, SHARD_ZERO2, SHARD_HSDP, SHARD_COUNT };
enum accum { ACC_SYNC_EACH, ACC_NO_SYNC, ACC_DEFER_REPLICA, ACC_PARTIAL, ACC_COUNT };
enum wrap { WRAP_BLOCK, WRAP_BLOCK_IO, WRAP_WHOLE, WRAP_EVERY, WRAP_COUNT };
enum reshard { RESHARD_YES, RESHARD_NO, RESHARD_ALL_BUT_LAST, RESHARD_COUNT };
enum optim { OPT_FOREACH, OPT_FUSED, OPT_PER_PARAM, OPT_COUNT };
enum precision { PREC_MIXED, PREC_PURE_BF16, PREC_FP32, PREC_COUNT };
enum dtype { DT_FP32, DT_BF16, DT_COUNT };
enum offload { OFF_NONE, OFF_OPTIM, OFF_PARAMS, OFF_COUNT };
enum runtime { RT_TESTBED, RT_PYTORCH, RT_PYTORCH_COMPILE, RT_COUNT };
/* What torch.compile compiles (torchtitan's compile.components): the blocks and the loss, or the blocks only. */
enum compile_scope { COMPILE_MODEL_LOSS, COMPILE_MODEL, COMPILE_COUNT };
/*
 * The backend PyTorch's scaled_dot_product_attention dispatches to: the
 * runtime's (its catalog entry's attention kernel), FlashAttention-2, or
 * cuDNN's. Which one a PyTorch picks depends on its version and the GPU
 * (sdp_utils.cpp's priority order): PyTorch 2.11 picks cuDNN on an H100.
 */
enum sdpa { SDPA_RUNTIME, SDPA_FLASH, SDPA_CUDNN, SDPA_COUNT };

struct policy {
	enum sharding sharding;
	int shard_group;          /* ranks per shard group; 0 = default (world, or gpus per node for hsdp) */
	enum accum accum;
	int partial_k;            /* ACC_PARTIAL: every k-th block defers its reduce-scatter */
	int microbatches;         /* M >= 1 per optimizer step */
	enum dtype accum_dtype;   /* dtype gradients accumulate in across microbatches */
	enum wrap wrap;
	int wrap_k;               /* WRAP_EVERY: blocks per unit */
	enum reshard reshard;
	enum optim optim;
	int optim_in_backward;    /* 0/1 */
	enum precision precision;
	enum dtype reduce_dtype;
	enum ac_mode ac;
	int ac_k;                 /* AC_PER_LAYER: every k-th block is checkpointed */
	enum loss_mode loss;
	enum offload offload;
	int prefetch;             /* units gathered ahead of the one computing */
	int flat_params;          /* FSDP1-style flat buffers, gradients concatenated */
	int concat_last_only;     /* concatenate only on the last microbatch (needs flat_params) */
	enum runtime runtime;
	int expandable_segments;  /* pytorch runtimes: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (core/alloc.h) */
	enum compile_scope compile; /* pytorch-compile: whether the loss is compiled with the blocks */
	enum sdpa sdpa;           /* pytorch runtimes: SDPA's backend (the attention kernels' prices) */
	/*
	 * pytorch runtimes: the training loop holds each microbatch's logits
	 * in a variable (`logits = model(x); loss = loss_fn(logits, y);
	 * loss.backward()`) until the next microbatch's forward replaces them
	 * or the step returns, through the optimizer step; 0: it drops them
	 * before backward (torchtitan's `del pred`), and autograd frees them
	 * once the loss no longer needs them.
	 */
	int hold_logits;
};

/* Name tables, NULL-terminated, indexed by the enum. */
extern const char *const sharding_names[];
extern const char *const accum_names[];  /* "partial" stands for partial:K */
extern const char *const wrap_names[];   /* "every" stands for every:K */
extern const char *const reshard_names[];
extern const char *const optim_names[];
extern const char *const precision_names[];
extern const char *const dtype_names[];
extern const char *const ac_names[];     /* "per-layer" stands for per-layer:K */
extern const char *const loss_names[];
extern const char *const offload_names[];
extern const char *const runtime_names[];
extern const char *const sdpa_names[];
extern const char *const compile_names[];

/* index of name in a NULL-terminated table, or -1 */
int name_index(const char *const *names, const char *name);
/*
 * the table entry closest to name, for "did you mean": the first entry that
 * starts with name (ignoring case, name at least 2 characters), else the one
 * at the least edit distance; NULL when none is within max(2, strlen/2) edits
 */
const char *name_closest(const char *const *names, const char *name);
/* a|b|c list of a table into buf */
const char *names_joined(const char *const *names, char *buf, int len);

void policy_default(struct policy *p);

/* Bytes per element of each dtype. */
int dtype_bytes(enum dtype d);
/* dtypes a precision implies: compute (full params, activations), master (sharded params), grads, optimizer state */
int precision_param_bytes(enum precision p);   /* full (gathered) params */
int precision_master_bytes(enum precision p);  /* sharded params kept by the optimizer */
int precision_optstate_bytes(enum precision p);/* both Adam moments together */
int policy_grad_bytes(const struct policy *p); /* bytes per reduced gradient element */
int policy_accum_bytes(const struct policy *p);/* bytes per accumulated gradient element */

/* accum, wrap and ac print with their K: "partial:4", "every:2", "per-layer:2" */
const char *policy_accum_str(const struct policy *p, char *buf, int len);
const char *policy_wrap_str(const struct policy *p, char *buf, int len);
const char *policy_ac_str(const struct policy *p, char *buf, int len);
/* parse "partial:K" / "every:K" / "per-layer:K" forms; 0 ok, -1 bad name, -2 bad K */
int policy_parse_accum(struct policy *p, const char *s);
int policy_parse_wrap(struct policy *p, const char *s);
int policy_parse_ac(struct policy *p, const char *s);

/* ---- resolution, rules and the policy space ------------------------------ */

/*
 * The fields of struct policy a user sets, one bit each (POLICY_BIT):
 * policy_resolve() is told with such a mask which ones were set
 * explicitly, and returns one of those it filled in. partial_k and wrap_k
 * belong to PF_ACCUM and PF_WRAP, ac_k to PF_AC (they are written "partial:K",
 * "every:K", "per-layer:K").
 */
enum policy_field {
	PF_SHARDING, PF_SHARD_GROUP, PF_ACCUM, PF_MICROBATCHES, PF_ACCUM_DTYPE, PF_WRAP,
	PF_RESHARD, PF_OPTIM, PF_OPTIM_IN_BACKWARD, PF_PRECISION, PF_REDUCE_DTYPE, PF_AC,
	PF_LOSS, PF_OFFLOAD, PF_PREFETCH, PF_FLAT_PARAMS, PF_CONCAT_LAST_ONLY, PF_RUNTIME,
	PF_EXPANDABLE_SEGMENTS, PF_COMPILE, PF_SDPA, PF_HOLD_LOGITS, PF_COUNT
};
#define POLICY_BIT(f) (1u << (f))
#define POLICY_ALL_FIELDS ((1u << PF_COUNT) - 1)

/* The key of each field in an experiment's [policy] section, indexed by enum policy_field. */
extern const char *const policy_field_names[];

/* Field f of p as an experiment file writes it ("hsdp", "partial:4", "8", "true"), into buf. */
const char *policy_field_str(const struct policy *p, enum policy_field f, char *buf, int len);

/*
 * Make p canonical for cluster c: fill in what the rules decide and the
 * user did not. `set` has POLICY_BIT(f) for each field f set explicitly;
 * the others are defaults the rules replace. m is the model (NULL when its
 * shape did not resolve); no rule derives from it yet. After the call:
 *   - reduce_dtype and accum_dtype, unless set, follow the precision: bf16
 *     for pure-bf16, fp32 otherwise;
 *   - shard_group, unless set to a non-zero value, is the sharding's: the
 *     world for fsdp and zero2, gpus_per_node for hsdp, 1 for ddp;
 *   - zero2 and ddp, which keep full parameters from forward to backward,
 *     have reshard = no, also when "yes" (the default's spelling) was set;
 *     an explicit all-but-last is left for policy_check() to reject. fsdp
 *     and hsdp have reshard = yes unless set.
 * Every other field is left as it is. Returns the mask of the fields it
 * wrote, whatever their previous value: the caller's "derived" fields.
 * Idempotent: resolving the result again with the same mask gives the same
 * policy. Pure: no I/O, no allocation.
 */
unsigned policy_resolve(struct policy *p, unsigned set, const struct cluster *c,
			const struct model_shape *m);

/* The most violations policy_check() can return for one policy (one per rule). */
#define POLICY_VIOLATIONS_MAX 14

/* One broken rule: the keys involved, and what is wrong. */
struct policy_violation {
	const char *key;        /* the key the rule is about: "policy.accum" */
	const char *others[3];  /* the other keys involved ("policy.sharding"), NULL-terminated */
	char what[160];         /* the rest of "<key> = <value> <what>":
				   "needs policy.sharding = hsdp: it defers the all-reduce across replicas" */
};

/*
 * The rules a resolved policy must keep, for cluster c and model m (NULL:
 * the rules on the model's layer count are skipped). Fills out[0..max-1]
 * with the violations in a fixed order (the order of the rules in
 * policy.c) and returns how many rules p breaks, 0 when it is valid. With
 * out NULL or max 0 it only counts, formatting nothing. Keys are spelled
 * "section.key" as in an experiment file; `what` never names a place.
 * Pure: no I/O.
 */
int policy_check(const struct policy *p, const struct cluster *c, const struct model_shape *m,
		 struct policy_violation *out, int max);

/*
 * The policies whose collectives a calibration measures besides p's own,
 * so that one calibration prices every sharding: for each of ddp, fsdp and
 * hsdp other than p's that the rules allow on cluster c and model m, p
 * with that sharding (its default shard group), sync-each accumulation,
 * reshard yes and the optimizer after backward, resolved. Fills out and
 * returns how many (at most POLICY_SHARDING_VARIANTS). Pure.
 */
#define POLICY_SHARDING_VARIANTS 3
int policy_sharding_variants(const struct policy *p, const struct cluster *c, const struct model_shape *m,
			     struct policy *out);

/* The axes policy_next() varies, outermost first. */
enum policy_axis {
	PA_SHARDING, PA_ACCUM, PA_WRAP, PA_RESHARD, PA_OPTIM, PA_OPTIM_IN_BACKWARD, PA_AC,
	PA_OFFLOAD, PA_COUNT
};

/* A walk over the policy space; fill with policy_walk_init(). */
struct policy_walk {
	struct policy base;               /* the fields the walk keeps */
	const struct cluster *cluster;    /* must outlive the walk */
	const struct model_shape *model;  /* must outlive the walk */
	int at[PA_COUNT];                 /* the current choice on each axis */
	int size[PA_COUNT];               /* choices on each axis */
	int started, done;
};

/*
 * Start a walk around base, a resolved policy, for cluster c and model m
 * (both kept by pointer). The walk varies the sharding, the accumulation
 * (sync-each, no-sync, defer-replica, partial:K for K = 1..layers), the
 * wrapping (block, block+io, whole, every:K for K = 2..layers; every:1 is
 * block), reshard, optim, optim_in_backward, ac (none, full, selective,
 * per-op; per-layer:K only as the base has it) and offload; every other
 * field (precision, dtypes, microbatches, prefetch, flat params, runtime,
 * loss) is base's. The shard group follows the sharding (policy_resolve),
 * except that an hsdp base keeps its own group for hsdp.
 */
void policy_walk_init(struct policy_walk *w, const struct policy *base, const struct cluster *c,
		      const struct model_shape *m);

/*
 * The next policy of the walk into *p: 1, or 0 when the walk is over (and
 * *p is untouched). Guarantees over a whole walk: every policy emitted is
 * canonical (what policy_resolve makes of it: resolving it again, all
 * fields explicit, writes nothing) and valid (policy_check finds nothing);
 * each is emitted once, in a fixed order (the axes as an odometer, offload
 * turning fastest); and of the policies that are one step by what they
 * mean, only the one that stands for the others is emitted (the rules are
 * same_step_as_another() in policy.c: with one microbatch only sync-each;
 * zero2, not fsdp with reshard no; fsdp, not hsdp with one replica; with
 * offload only foreach). Policies that give the same step only because of
 * how this model and runtime happen to be built or priced may still both
 * appear. A combination policy_resolve would change (zero2 with reshard
 * yes) or policy_check rejects is skipped by calling them, never by rules
 * of the walk's own. No string formatting, no allocation.
 */
int policy_next(struct policy_walk *w, struct policy *p);

#endif
