/*
 * policy.h - the training policies the testbed compares.
 *
 * A policy is plain data: enums and a few integers. Names are parsed and
 * printed here so the simulator, the runtime and the experiment files use
 * one spelling. The rules that relate the keys to each other and to the
 * cluster (a world size the shard group must divide, a partial:K no larger
 * than the layer count, ...) are checked by config_resolve() (config.h),
 * which can name where each key involved was set.
 */
#ifndef CORE_POLICY_H
#define CORE_POLICY_H

#include "model.h"

enum sharding { SHARD_DDP, SHARD_FSDP, SHARD_ZERO2, SHARD_HSDP, SHARD_COUNT };
enum accum { ACC_SYNC_EACH, ACC_NO_SYNC, ACC_DEFER_REPLICA, ACC_PARTIAL, ACC_COUNT };
enum wrap { WRAP_BLOCK, WRAP_BLOCK_IO, WRAP_WHOLE, WRAP_EVERY, WRAP_COUNT };
enum reshard { RESHARD_YES, RESHARD_NO, RESHARD_ALL_BUT_LAST, RESHARD_COUNT };
enum optim { OPT_FOREACH, OPT_FUSED, OPT_PER_PARAM, OPT_COUNT };
enum precision { PREC_MIXED, PREC_PURE_BF16, PREC_FP32, PREC_COUNT };
enum dtype { DT_FP32, DT_BF16, DT_COUNT };
enum offload { OFF_NONE, OFF_OPTIM, OFF_PARAMS, OFF_COUNT };
enum runtime { RT_TESTBED, RT_PYTORCH, RT_COUNT };

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
	enum loss_mode loss;
	enum offload offload;
	int prefetch;             /* units gathered ahead of the one computing */
	int flat_params;          /* FSDP1-style flat buffers, gradients concatenated */
	int concat_last_only;     /* concatenate only on the last microbatch (needs flat_params) */
	enum runtime runtime;
};

/* Name tables, NULL-terminated, indexed by the enum. */
extern const char *const sharding_names[];
extern const char *const accum_names[];  /* "partial" stands for partial:K */
extern const char *const wrap_names[];   /* "every" stands for every:K */
extern const char *const reshard_names[];
extern const char *const optim_names[];
extern const char *const precision_names[];
extern const char *const dtype_names[];
extern const char *const ac_names[];
extern const char *const loss_names[];
extern const char *const offload_names[];
extern const char *const runtime_names[];

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

/* accum and wrap print with their K: "partial:4", "every:2" */
const char *policy_accum_str(const struct policy *p, char *buf, int len);
const char *policy_wrap_str(const struct policy *p, char *buf, int len);
/* parse "partial:K" / "every:K" forms; 0 ok, -1 bad name, -2 bad K */
int policy_parse_accum(struct policy *p, const char *s);
int policy_parse_wrap(struct policy *p, const char *s);

#endif
