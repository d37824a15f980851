/*
 * test_policy.c - policy names, suggestions, defaults, byte sizes, the K
 * forms, and the rules (core/policy.c): what policy_resolve() fills in,
 * the violations policy_check() names, and the policy space policy_next()
 * walks, whose size is counted by hand below.
 */
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "policy.h"

static void test_tables_follow_enums(void)
{
	CU_ASSERT_STRING_EQUAL(sharding_names[SHARD_DDP], "ddp");
	CU_ASSERT_STRING_EQUAL(sharding_names[SHARD_FSDP], "fsdp");
	CU_ASSERT_STRING_EQUAL(sharding_names[SHARD_ZERO2], "zero2");
	CU_ASSERT_STRING_EQUAL(sharding_names[SHARD_HSDP], "hsdp");
	CU_ASSERT_PTR_NULL(sharding_names[SHARD_COUNT]);
	CU_ASSERT_STRING_EQUAL(accum_names[ACC_DEFER_REPLICA], "defer-replica");
	CU_ASSERT_STRING_EQUAL(accum_names[ACC_PARTIAL], "partial");
	CU_ASSERT_STRING_EQUAL(wrap_names[WRAP_BLOCK_IO], "block+io");
	CU_ASSERT_STRING_EQUAL(wrap_names[WRAP_EVERY], "every");
	CU_ASSERT_STRING_EQUAL(reshard_names[RESHARD_ALL_BUT_LAST], "all-but-last");
	CU_ASSERT_STRING_EQUAL(optim_names[OPT_PER_PARAM], "per-param");
	CU_ASSERT_STRING_EQUAL(precision_names[PREC_PURE_BF16], "pure-bf16");
	CU_ASSERT_STRING_EQUAL(dtype_names[DT_BF16], "bf16");
	CU_ASSERT_STRING_EQUAL(ac_names[AC_SELECTIVE], "selective");
	CU_ASSERT_STRING_EQUAL(loss_names[LOSS_CHUNKED], "chunked");
	CU_ASSERT_STRING_EQUAL(offload_names[OFF_PARAMS], "params");
	CU_ASSERT_STRING_EQUAL(runtime_names[RT_PYTORCH], "pytorch");
	CU_ASSERT_PTR_NULL(runtime_names[RT_COUNT]);
}

static void test_name_index(void)
{
	CU_ASSERT_EQUAL(name_index(sharding_names, "hsdp"), SHARD_HSDP);
	CU_ASSERT_EQUAL(name_index(wrap_names, "block+io"), WRAP_BLOCK_IO);
	CU_ASSERT_EQUAL(name_index(sharding_names, "FSDP"), -1); /* exact spelling only */
	CU_ASSERT_EQUAL(name_index(sharding_names, ""), -1);
	CU_ASSERT_EQUAL(name_index(accum_names, "partial:4"), -1);
}

static void test_name_closest(void)
{
	/* a swap of neighbours is one edit: fsdp, not ddp (two edits) */
	CU_ASSERT_STRING_EQUAL(name_closest(sharding_names, "fdsp"), "fsdp");
	CU_ASSERT_STRING_EQUAL(name_closest(sharding_names, "FSDP"), "fsdp");
	CU_ASSERT_STRING_EQUAL(name_closest(sharding_names, "zero3"), "zero2");
	CU_ASSERT_STRING_EQUAL(name_closest(accum_names, "nosync"), "no-sync");
	CU_ASSERT_STRING_EQUAL(name_closest(reshard_names, "all_but_last"), "all-but-last");
	/* a prefix wins over an entry one edit away: h100 means h100-sxm */
	static const char *const gpus[] = { "a100-80g", "h100-sxm", "h200", "cpu", NULL };
	CU_ASSERT_STRING_EQUAL(name_closest(gpus, "h100"), "h100-sxm");
	CU_ASSERT_STRING_EQUAL(name_closest(gpus, "H2"), "h200");
	/* too far: no suggestion; limit max(2, len/2) */
	CU_ASSERT_PTR_NULL(name_closest(sharding_names, "pipeline"));
	CU_ASSERT_PTR_NULL(name_closest(optim_names, "sgd"));
	CU_ASSERT_STRING_EQUAL(name_closest(dtype_names, "f16"), "bf16");  /* 1 edit */
	CU_ASSERT_STRING_EQUAL(name_closest(dtype_names, "fp16"), "fp32"); /* 2 edits, limit 2, tie */
	CU_ASSERT_PTR_NULL(name_closest(dtype_names, "int8"));             /* 4 edits */
	/* ties go to the first entry in table order */
	static const char *const ab[] = { "ab", "ba", NULL };
	CU_ASSERT_STRING_EQUAL(name_closest(ab, "aa"), "ab");
}

static void test_names_joined(void)
{
	char buf[64], small[8];

	CU_ASSERT_STRING_EQUAL(names_joined(sharding_names, buf, sizeof buf), "ddp|fsdp|zero2|hsdp");
	CU_ASSERT_STRING_EQUAL(names_joined(dtype_names, buf, sizeof buf), "fp32|bf16");
	/* truncated, still terminated */
	CU_ASSERT_STRING_EQUAL(names_joined(sharding_names, small, sizeof small), "ddp|fsd");
}

static void test_defaults(void)
{
	struct policy p;

	memset(&p, 0x5a, sizeof p);
	policy_default(&p);
	CU_ASSERT_EQUAL(p.sharding, SHARD_FSDP);
	CU_ASSERT_EQUAL(p.shard_group, 0);
	CU_ASSERT_EQUAL(p.accum, ACC_SYNC_EACH);
	CU_ASSERT_EQUAL(p.microbatches, 1);
	CU_ASSERT_EQUAL(p.accum_dtype, DT_FP32);
	CU_ASSERT_EQUAL(p.wrap, WRAP_BLOCK);
	CU_ASSERT_EQUAL(p.reshard, RESHARD_YES);
	CU_ASSERT_EQUAL(p.optim, OPT_FOREACH);
	CU_ASSERT_EQUAL(p.optim_in_backward, 0);
	CU_ASSERT_EQUAL(p.precision, PREC_MIXED);
	CU_ASSERT_EQUAL(p.reduce_dtype, DT_FP32);
	CU_ASSERT_EQUAL(p.ac, AC_NONE);
	CU_ASSERT_EQUAL(p.loss, LOSS_FULL);
	CU_ASSERT_EQUAL(p.offload, OFF_NONE);
	CU_ASSERT_EQUAL(p.prefetch, 1);
	CU_ASSERT_EQUAL(p.flat_params, 0);
	CU_ASSERT_EQUAL(p.concat_last_only, 0);
	CU_ASSERT_EQUAL(p.runtime, RT_TESTBED);
}

static void test_bytes(void)
{
	struct policy p;

	CU_ASSERT_EQUAL(dtype_bytes(DT_FP32), 4);
	CU_ASSERT_EQUAL(dtype_bytes(DT_BF16), 2);
	/* mixed: 2 + 4 + 8 = 14 bytes of params and optimizer state per element */
	CU_ASSERT_EQUAL(precision_param_bytes(PREC_MIXED), 2);
	CU_ASSERT_EQUAL(precision_master_bytes(PREC_MIXED), 4);
	CU_ASSERT_EQUAL(precision_optstate_bytes(PREC_MIXED), 8);
	/* pure bf16: 2 (master) + 2 (grad) + 4 (moments) = 8 bytes of model state */
	CU_ASSERT_EQUAL(precision_param_bytes(PREC_PURE_BF16), 2);
	CU_ASSERT_EQUAL(precision_master_bytes(PREC_PURE_BF16), 2);
	CU_ASSERT_EQUAL(precision_optstate_bytes(PREC_PURE_BF16), 4);
	CU_ASSERT_EQUAL(precision_param_bytes(PREC_FP32), 4);
	CU_ASSERT_EQUAL(precision_master_bytes(PREC_FP32), 4);
	CU_ASSERT_EQUAL(precision_optstate_bytes(PREC_FP32), 8);

	policy_default(&p);
	CU_ASSERT_EQUAL(policy_grad_bytes(&p), 4);
	CU_ASSERT_EQUAL(policy_accum_bytes(&p), 4);
	p.reduce_dtype = DT_BF16;
	CU_ASSERT_EQUAL(policy_grad_bytes(&p), 2);
	CU_ASSERT_EQUAL(policy_accum_bytes(&p), 4);
	p.accum_dtype = DT_BF16;
	CU_ASSERT_EQUAL(policy_accum_bytes(&p), 2);
}

static void test_k_forms(void)
{
	struct policy p;
	char buf[32];

	policy_default(&p);
	CU_ASSERT_STRING_EQUAL(policy_accum_str(&p, buf, sizeof buf), "sync-each");
	CU_ASSERT_EQUAL(policy_parse_accum(&p, "partial:4"), 0);
	CU_ASSERT_EQUAL(p.accum, ACC_PARTIAL);
	CU_ASSERT_EQUAL(p.partial_k, 4);
	CU_ASSERT_STRING_EQUAL(policy_accum_str(&p, buf, sizeof buf), "partial:4");
	CU_ASSERT_EQUAL(policy_parse_accum(&p, "no-sync"), 0);
	CU_ASSERT_EQUAL(p.accum, ACC_NO_SYNC);
	CU_ASSERT_EQUAL(p.partial_k, 0);

	/* failures leave the policy as it was */
	CU_ASSERT_EQUAL(policy_parse_accum(&p, "partial"), -2);
	CU_ASSERT_EQUAL(policy_parse_accum(&p, "partial:"), -2);
	CU_ASSERT_EQUAL(policy_parse_accum(&p, "partial:0"), -2);
	CU_ASSERT_EQUAL(policy_parse_accum(&p, "partial:-1"), -2);
	CU_ASSERT_EQUAL(policy_parse_accum(&p, "partial:2x"), -2);
	CU_ASSERT_EQUAL(policy_parse_accum(&p, "parital:2"), -1);
	CU_ASSERT_EQUAL(policy_parse_accum(&p, "no-sync:2"), -1);
	CU_ASSERT_EQUAL(policy_parse_accum(&p, ""), -1);
	CU_ASSERT_EQUAL(p.accum, ACC_NO_SYNC);
	CU_ASSERT_EQUAL(p.partial_k, 0);

	CU_ASSERT_EQUAL(policy_parse_wrap(&p, "every:2"), 0);
	CU_ASSERT_EQUAL(p.wrap, WRAP_EVERY);
	CU_ASSERT_EQUAL(p.wrap_k, 2);
	CU_ASSERT_STRING_EQUAL(policy_wrap_str(&p, buf, sizeof buf), "every:2");
	CU_ASSERT_EQUAL(policy_parse_wrap(&p, "every"), -2);
	CU_ASSERT_EQUAL(policy_parse_wrap(&p, "block+io:2"), -1);
	CU_ASSERT_EQUAL(p.wrap_k, 2);
	CU_ASSERT_EQUAL(policy_parse_wrap(&p, "block+io"), 0);
	CU_ASSERT_EQUAL(p.wrap, WRAP_BLOCK_IO);
	CU_ASSERT_STRING_EQUAL(policy_wrap_str(&p, buf, sizeof buf), "block+io");
}

/* ---- resolution and rules ---------------------------------------------- */

/* A cluster of nodes x gpus_per_node: the rules read nothing else of it. */
static struct cluster cluster_of(int nodes, int gpus_per_node)
{
	struct cluster c;

	memset(&c, 0, sizeof c);
	c.nodes = nodes;
	c.gpus_per_node = gpus_per_node;
	return c;
}

static struct model_shape model_of(const char *name)
{
	struct model_shape m;

	CU_ASSERT_FATAL(model_lookup(name, &m) == 0);
	return m;
}

/* Every field equal: resolving changed nothing. */
static int policy_same(const struct policy *a, const struct policy *b)
{
	return a->sharding == b->sharding && a->shard_group == b->shard_group &&
	       a->accum == b->accum && a->partial_k == b->partial_k &&
	       a->microbatches == b->microbatches && a->accum_dtype == b->accum_dtype &&
	       a->wrap == b->wrap && a->wrap_k == b->wrap_k && a->reshard == b->reshard &&
	       a->optim == b->optim && a->optim_in_backward == b->optim_in_backward &&
	       a->precision == b->precision && a->reduce_dtype == b->reduce_dtype && a->ac == b->ac &&
	       a->loss == b->loss && a->offload == b->offload && a->prefetch == b->prefetch &&
	       a->flat_params == b->flat_params && a->concat_last_only == b->concat_last_only &&
	       a->runtime == b->runtime;
}

#define BIT(f) POLICY_BIT(f)

static void test_field_names(void)
{
	CU_ASSERT_STRING_EQUAL(policy_field_names[PF_SHARDING], "sharding");
	CU_ASSERT_STRING_EQUAL(policy_field_names[PF_SHARD_GROUP], "shard_group");
	CU_ASSERT_STRING_EQUAL(policy_field_names[PF_OPTIM_IN_BACKWARD], "optim_in_backward");
	CU_ASSERT_STRING_EQUAL(policy_field_names[PF_RUNTIME], "runtime");
	CU_ASSERT_PTR_NULL(policy_field_names[PF_COUNT]);
	CU_ASSERT_EQUAL(POLICY_ALL_FIELDS, (1u << PF_COUNT) - 1);
}

static void test_resolve_sharding(void)
{
	struct cluster c = cluster_of(2, 4); /* world 8 */
	struct policy p, q;
	unsigned wrote;

	/* nothing set: fsdp shards over the world and reshards */
	policy_default(&p);
	p.reshard = RESHARD_NO;
	wrote = policy_resolve(&p, 0, &c, NULL);
	CU_ASSERT_EQUAL(p.shard_group, 8);
	CU_ASSERT_EQUAL(p.reshard, RESHARD_YES);
	CU_ASSERT_EQUAL(wrote, BIT(PF_SHARD_GROUP) | BIT(PF_RESHARD) | BIT(PF_REDUCE_DTYPE) |
				       BIT(PF_ACCUM_DTYPE));

	/* zero2 means reshard no: unset, or set to yes (the default's spelling) */
	policy_default(&p);
	p.sharding = SHARD_ZERO2;
	wrote = policy_resolve(&p, BIT(PF_SHARDING), &c, NULL);
	CU_ASSERT_EQUAL(p.reshard, RESHARD_NO);
	CU_ASSERT_EQUAL(p.shard_group, 8);
	CU_ASSERT(wrote & BIT(PF_RESHARD));
	p.reshard = RESHARD_YES;
	wrote = policy_resolve(&p, BIT(PF_SHARDING) | BIT(PF_RESHARD), &c, NULL);
	CU_ASSERT_EQUAL(p.reshard, RESHARD_NO);
	CU_ASSERT(wrote & BIT(PF_RESHARD));
	/* an explicit no stays explicit; an explicit all-but-last is left for policy_check */
	wrote = policy_resolve(&p, BIT(PF_SHARDING) | BIT(PF_RESHARD), &c, NULL);
	CU_ASSERT_EQUAL(p.reshard, RESHARD_NO);
	CU_ASSERT_FALSE(wrote & BIT(PF_RESHARD));
	p.reshard = RESHARD_ALL_BUT_LAST;
	wrote = policy_resolve(&p, BIT(PF_SHARDING) | BIT(PF_RESHARD), &c, NULL);
	CU_ASSERT_EQUAL(p.reshard, RESHARD_ALL_BUT_LAST);
	CU_ASSERT_FALSE(wrote & BIT(PF_RESHARD));
	CU_ASSERT_EQUAL(policy_check(&p, &c, NULL, NULL, 0), 1);
	/* not set, all-but-last is only a leftover: no */
	wrote = policy_resolve(&p, BIT(PF_SHARDING), &c, NULL);
	CU_ASSERT_EQUAL(p.reshard, RESHARD_NO);

	/* ddp: one rank per shard group, no resharding */
	policy_default(&p);
	p.sharding = SHARD_DDP;
	policy_resolve(&p, BIT(PF_SHARDING), &c, NULL);
	CU_ASSERT_EQUAL(p.shard_group, 1);
	CU_ASSERT_EQUAL(p.reshard, RESHARD_NO);

	/* hsdp: one node's GPUs by default; a set group stays; a set 0 is the default */
	policy_default(&p);
	p.sharding = SHARD_HSDP;
	wrote = policy_resolve(&p, BIT(PF_SHARDING), &c, NULL);
	CU_ASSERT_EQUAL(p.shard_group, 4);
	CU_ASSERT_EQUAL(p.reshard, RESHARD_YES);
	CU_ASSERT(wrote & BIT(PF_SHARD_GROUP));
	p.shard_group = 2;
	wrote = policy_resolve(&p, BIT(PF_SHARDING) | BIT(PF_SHARD_GROUP), &c, NULL);
	CU_ASSERT_EQUAL(p.shard_group, 2);
	CU_ASSERT_FALSE(wrote & BIT(PF_SHARD_GROUP));
	p.shard_group = 0;
	wrote = policy_resolve(&p, BIT(PF_SHARDING) | BIT(PF_SHARD_GROUP), &c, NULL);
	CU_ASSERT_EQUAL(p.shard_group, 4);
	CU_ASSERT(wrote & BIT(PF_SHARD_GROUP));

	/* fsdp keeps a set reshard; fields no rule derives are never written */
	policy_default(&p);
	p.reshard = RESHARD_ALL_BUT_LAST;
	p.ac = AC_FULL;
	p.offload = OFF_PARAMS;
	p.microbatches = 7;
	p.wrap = WRAP_EVERY;
	p.wrap_k = 3;
	q = p;
	wrote = policy_resolve(&p, POLICY_ALL_FIELDS & ~BIT(PF_SHARD_GROUP), &c, NULL);
	CU_ASSERT_EQUAL(wrote, BIT(PF_SHARD_GROUP));
	q.shard_group = 8;
	CU_ASSERT(policy_same(&p, &q));

	/* idempotent, whatever the mask */
	for (unsigned set = 0; set < 4; set++) {
		unsigned mask = (set & 1 ? BIT(PF_RESHARD) : 0) | (set & 2 ? BIT(PF_REDUCE_DTYPE) : 0);
		policy_default(&p);
		p.sharding = SHARD_ZERO2;
		policy_resolve(&p, mask, &c, NULL);
		q = p;
		policy_resolve(&q, mask, &c, NULL);
		CU_ASSERT(policy_same(&p, &q));
	}
}

static void test_resolve_dtypes(void)
{
	struct cluster c = cluster_of(1, 2);
	struct policy p;

	/* the gradient dtypes follow the precision: bf16 for pure-bf16, else fp32 */
	policy_default(&p);
	p.precision = PREC_PURE_BF16;
	policy_resolve(&p, BIT(PF_PRECISION), &c, NULL);
	CU_ASSERT_EQUAL(p.reduce_dtype, DT_BF16);
	CU_ASSERT_EQUAL(p.accum_dtype, DT_BF16);
	p.precision = PREC_FP32;
	policy_resolve(&p, BIT(PF_PRECISION), &c, NULL);
	CU_ASSERT_EQUAL(p.reduce_dtype, DT_FP32);
	CU_ASSERT_EQUAL(p.accum_dtype, DT_FP32);
	p.precision = PREC_MIXED;
	policy_resolve(&p, BIT(PF_PRECISION), &c, NULL);
	CU_ASSERT_EQUAL(p.reduce_dtype, DT_FP32);
	CU_ASSERT_EQUAL(p.accum_dtype, DT_FP32);

	/* unless set: each on its own */
	p.precision = PREC_PURE_BF16;
	p.reduce_dtype = DT_FP32;
	unsigned wrote = policy_resolve(&p, BIT(PF_PRECISION) | BIT(PF_REDUCE_DTYPE), &c, NULL);
	CU_ASSERT_EQUAL(p.reduce_dtype, DT_FP32);
	CU_ASSERT_EQUAL(p.accum_dtype, DT_BF16);
	CU_ASSERT_FALSE(wrote & BIT(PF_REDUCE_DTYPE));
	CU_ASSERT(wrote & BIT(PF_ACCUM_DTYPE));
	p.precision = PREC_MIXED;
	p.accum_dtype = DT_BF16;
	policy_resolve(&p, BIT(PF_ACCUM_DTYPE), &c, NULL);
	CU_ASSERT_EQUAL(p.reduce_dtype, DT_FP32);
	CU_ASSERT_EQUAL(p.accum_dtype, DT_BF16);
}

/* p (resolved by the caller) breaks exactly one rule, the one described. */
static void expect_violation(const struct policy *p, const struct cluster *c,
			     const struct model_shape *m, const char *key, const char *other0,
			     const char *other1, const char *what)
{
	struct policy_violation v[POLICY_VIOLATIONS_MAX];

	memset(v, 0, sizeof v);
	CU_ASSERT_EQUAL_FATAL(policy_check(p, c, m, v, POLICY_VIOLATIONS_MAX), 1);
	CU_ASSERT_EQUAL(policy_check(p, c, m, NULL, 0), 1); /* counting only */
	CU_ASSERT_STRING_EQUAL(v[0].key, key);
	if (other0) {
		CU_ASSERT_PTR_NOT_NULL_FATAL(v[0].others[0]);
		CU_ASSERT_STRING_EQUAL(v[0].others[0], other0);
	} else {
		CU_ASSERT_PTR_NULL(v[0].others[0]);
	}
	if (other0 && other1) {
		CU_ASSERT_PTR_NOT_NULL_FATAL(v[0].others[1]);
		CU_ASSERT_STRING_EQUAL(v[0].others[1], other1);
	} else if (other0) {
		CU_ASSERT_PTR_NULL(v[0].others[1]);
	}
	CU_ASSERT_STRING_EQUAL(v[0].what, what);
	if (strcmp(v[0].what, what) != 0)
		fprintf(stderr, "\nwant: %s\ngot:  %s\n", what, v[0].what);
}

/* A default policy with sharding sh, resolved for c with nothing else set. */
static struct policy resolved(enum sharding sh, const struct cluster *c)
{
	struct policy p;

	policy_default(&p);
	p.sharding = sh;
	policy_resolve(&p, BIT(PF_SHARDING), c, NULL);
	return p;
}

static void test_check_rules(void)
{
	struct cluster c = cluster_of(2, 4); /* world 8 */
	struct model_shape m = model_of("tiny"); /* 2 layers */
	struct policy p;

	/* valid policies break nothing */
	for (int sh = 0; sh < SHARD_COUNT; sh++) {
		p = resolved((enum sharding)sh, &c);
		CU_ASSERT_EQUAL(policy_check(&p, &c, &m, NULL, 0), 0);
	}
	p = resolved(SHARD_HSDP, &c);
	p.accum = ACC_DEFER_REPLICA;
	p.shard_group = 2;
	p.flat_params = p.concat_last_only = 1;
	p.wrap = WRAP_EVERY;
	p.wrap_k = 2;
	p.offload = OFF_OPTIM;
	CU_ASSERT_EQUAL(policy_check(&p, &c, &m, NULL, 0), 0);

	/* each rule, its keys and its words (config prefixes the place and values) */
	p = resolved(SHARD_FSDP, &c);
	p.shard_group = 2;
	expect_violation(&p, &c, &m, "policy.shard_group", "policy.sharding", NULL,
			 "applies to hsdp only; fsdp shards over all 8 ranks");
	p = resolved(SHARD_DDP, &c);
	p.shard_group = 2;
	expect_violation(&p, &c, &m, "policy.shard_group", "policy.sharding", NULL,
			 "applies to hsdp only; ddp shards nothing");
	p = resolved(SHARD_HSDP, &c);
	p.shard_group = 3;
	expect_violation(&p, &c, &m, "policy.shard_group", "cluster.nodes", "cluster.gpus_per_node",
			 "does not divide the world size 8");
	p = resolved(SHARD_ZERO2, &c);
	p.reshard = RESHARD_ALL_BUT_LAST;
	expect_violation(&p, &c, &m, "policy.reshard", "policy.sharding", NULL,
			 "does not apply: zero2 keeps full parameters from forward to backward");
	p = resolved(SHARD_DDP, &c);
	p.reshard = RESHARD_YES; /* not canonical, and not valid either */
	expect_violation(&p, &c, &m, "policy.reshard", "policy.sharding", NULL,
			 "does not apply: ddp keeps full parameters from forward to backward");
	p = resolved(SHARD_FSDP, &c);
	p.accum = ACC_DEFER_REPLICA;
	expect_violation(&p, &c, &m, "policy.accum", "policy.sharding", NULL,
			 "needs policy.sharding = hsdp: it defers the all-reduce across replicas");
	p = resolved(SHARD_FSDP, &c);
	p.accum = ACC_PARTIAL;
	p.partial_k = 3;
	expect_violation(&p, &c, &m, "policy.accum", "model.layers", NULL,
			 "needs K from 1 to the number of layers, 2");
	CU_ASSERT_EQUAL(policy_check(&p, &c, NULL, NULL, 0), 0); /* no model: not checked */
	p.partial_k = 2;
	CU_ASSERT_EQUAL(policy_check(&p, &c, &m, NULL, 0), 0);
	p = resolved(SHARD_FSDP, &c);
	p.wrap = WRAP_EVERY;
	p.wrap_k = 3;
	expect_violation(&p, &c, &m, "policy.wrap", "model.layers", NULL,
			 "needs K from 1 to the number of layers, 2");
	p.wrap_k = 0;
	expect_violation(&p, &c, &m, "policy.wrap", "model.layers", NULL,
			 "needs K from 1 to the number of layers, 2");
	p = resolved(SHARD_FSDP, &c);
	p.microbatches = 0;
	expect_violation(&p, &c, &m, "policy.microbatches", NULL, NULL, "must be at least 1");
	p = resolved(SHARD_FSDP, &c);
	p.concat_last_only = 1;
	expect_violation(&p, &c, &m, "policy.concat_last_only", "policy.flat_params", NULL,
			 "needs policy.flat_params = true");
	p = resolved(SHARD_DDP, &c);
	p.flat_params = 1;
	expect_violation(&p, &c, &m, "policy.flat_params", "policy.sharding", NULL,
			 "does not apply to ddp: it has no shards to flatten");
	p = resolved(SHARD_DDP, &c);
	p.offload = OFF_OPTIM;
	expect_violation(&p, &c, &m, "policy.offload", "policy.sharding", NULL,
			 "does not apply to ddp: it has no shards to offload");

	/* several at once: all counted, in rule order, only max described */
	struct policy_violation v[2];
	p = resolved(SHARD_DDP, &c);
	p.shard_group = 2;
	p.accum = ACC_DEFER_REPLICA;
	p.flat_params = 1;
	p.offload = OFF_PARAMS;
	memset(v, 0, sizeof v);
	CU_ASSERT_EQUAL(policy_check(&p, &c, &m, v, 2), 4);
	CU_ASSERT_STRING_EQUAL(v[0].key, "policy.shard_group");
	CU_ASSERT_STRING_EQUAL(v[1].key, "policy.accum");
	CU_ASSERT_EQUAL(policy_check(&p, &c, &m, NULL, 0), 4);
}

/* ---- the policy space ------------------------------------------------------ */

struct walked {
	struct policy *p;
	int n;
};

/* The resolved base of a walk: fsdp, M microbatches, fp32 as tiny.ini. */
static struct policy walk_base(int microbatches, const struct cluster *c)
{
	struct policy p;

	policy_default(&p);
	p.microbatches = microbatches;
	p.precision = PREC_FP32;
	policy_resolve(&p, BIT(PF_MICROBATCHES) | BIT(PF_PRECISION), c, NULL);
	return p;
}

/* Every policy of the walk around base, checked against policy_next's guarantees. */
static struct walked walk_all(const struct policy *base, const struct cluster *c,
			      const struct model_shape *m)
{
	struct walked w = { NULL, 0 };
	struct policy_walk it;
	struct policy p;
	int cap = 0;

	policy_walk_init(&it, base, c, m);
	while (policy_next(&it, &p)) {
		struct policy q = p;
		/* canonical: resolving it again, everything set, writes nothing */
		CU_ASSERT_EQUAL(policy_resolve(&q, POLICY_ALL_FIELDS, c, m), 0);
		CU_ASSERT(policy_same(&p, &q));
		/* ... and the shard group is the sharding's, as if unset */
		if (base->sharding != SHARD_HSDP) {
			q = p;
			policy_resolve(&q, POLICY_ALL_FIELDS & ~BIT(PF_SHARD_GROUP), c, m);
			CU_ASSERT(policy_same(&p, &q));
		}
		/* valid */
		CU_ASSERT_EQUAL(policy_check(&p, c, m, NULL, 0), 0);
		/* the fields off the axes are base's */
		CU_ASSERT(p.precision == base->precision && p.reduce_dtype == base->reduce_dtype &&
			  p.accum_dtype == base->accum_dtype && p.microbatches == base->microbatches &&
			  p.prefetch == base->prefetch && p.flat_params == base->flat_params &&
			  p.concat_last_only == base->concat_last_only && p.runtime == base->runtime &&
			  p.loss == base->loss);
		if (w.n == cap) {
			cap = cap ? 2 * cap : 1024;
			w.p = realloc(w.p, sizeof *w.p * (size_t)cap);
			CU_ASSERT_PTR_NOT_NULL_FATAL(w.p);
		}
		w.p[w.n++] = p;
	}
	/* over: it stays over */
	CU_ASSERT_EQUAL(policy_next(&it, &p), 0);
	return w;
}

static int field_cmp(const void *a, const void *b)
{
	const struct policy *x = a, *y = b;
	const int fx[] = { x->sharding, x->shard_group, x->accum, x->partial_k, x->wrap, x->wrap_k,
			   x->reshard, x->optim, x->optim_in_backward, x->ac, x->offload };
	const int fy[] = { y->sharding, y->shard_group, y->accum, y->partial_k, y->wrap, y->wrap_k,
			   y->reshard, y->optim, y->optim_in_backward, y->ac, y->offload };
	for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++)
		if (fx[i] != fy[i])
			return fx[i] < fy[i] ? -1 : 1;
	return 0;
}

static int duplicates(struct walked *w)
{
	int d = 0;

	qsort(w->p, (size_t)w->n, sizeof *w->p, field_cmp);
	for (int i = 1; i < w->n; i++)
		d += field_cmp(&w->p[i - 1], &w->p[i]) == 0;
	return d;
}

static int count_if(const struct walked *w, int (*pred)(const struct policy *p, int arg), int arg)
{
	int n = 0;
	for (int i = 0; i < w->n; i++)
		n += pred(&w->p[i], arg);
	return n;
}

static int is_sharding(const struct policy *p, int sh) { return p->sharding == (enum sharding)sh; }
static int is_accum(const struct policy *p, int a) { return p->accum == (enum accum)a; }
static int is_partial(const struct policy *p, int k) { return p->accum == ACC_PARTIAL && p->partial_k == k; }
static int is_every(const struct policy *p, int k) { return p->wrap == WRAP_EVERY && p->wrap_k == k; }
static int is_ac(const struct policy *p, int ac) { return p->ac == (enum ac_mode)ac; }

/*
 * The size of the walk for tiny (2 layers), counted by hand.
 *
 * The axes: 4 shardings x 5 accumulations (sync-each, no-sync,
 * defer-replica, partial:1, partial:2) x 4 wrappings (block, block+io,
 * whole, every:2) x 3 reshard x 3 optim x 2 optim_in_backward x 3 ac x 3
 * offload = 12960 combinations. What is left, per sharding:
 *   - optim and offload: without offload 3 optims; with optim or params
 *     offload the host takes the step and foreach stands for all three:
 *     3 + 1 + 1 = 5 pairs. ddp has no shards to offload: 3 pairs.
 *   - defer-replica needs hsdp: 4 accumulations for the others.
 *   - fsdp: reshard yes or all-but-last (fsdp with reshard no is zero2):
 *     4 accum x 4 wrap x 2 reshard x 5 pairs x 2 x 3 ac = 960.
 *   - zero2: reshard no only (yes resolves to no, all-but-last is invalid):
 *     4 x 4 x 1 x 5 x 2 x 3 = 480.
 *   - ddp: reshard no, no offload: 4 x 4 x 1 x 3 x 2 x 3 = 288.
 *   - hsdp: on 1 node x 2 its shard group (gpus per node) is the world, a
 *     single replica: that is fsdp, 0. On 2 nodes x 2 it has 2 replicas:
 *     5 accum x 4 x 3 reshard x 5 x 2 x 3 = 1800.
 * M = 2: 960 + 480 + 288 = 1728 on 1 node; + 1800 = 3528 on 2 nodes.
 * M = 1: only sync-each, one accumulation instead of 4 (hsdp: 5):
 * 240 + 120 + 72 = 432 on 1 node; + 360 = 792 on 2 nodes.
 */
/* The shardings a calibration measures besides the run's: the others the cluster allows, in one form each. */
static void test_sharding_variants(void)
{
	struct model_shape m = model_of("tiny");
	struct cluster two = cluster_of(2, 4), one = cluster_of(1, 2);
	struct policy p, v[POLICY_SHARDING_VARIANTS];
	int n;

	policy_default(&p);
	p.microbatches = 4;
	p.accum = ACC_NO_SYNC;
	p.reshard = RESHARD_NO;
	p.optim_in_backward = 1;
	policy_resolve(&p, BIT(PF_ACCUM) | BIT(PF_RESHARD), &two, &m);
	n = policy_sharding_variants(&p, &two, &m, v);
	CU_ASSERT_EQUAL_FATAL(n, 2); /* fsdp's: ddp and hsdp */
	CU_ASSERT_EQUAL(v[0].sharding, SHARD_DDP);
	CU_ASSERT_EQUAL(v[0].shard_group, 1);
	CU_ASSERT_EQUAL(v[1].sharding, SHARD_HSDP);
	CU_ASSERT_EQUAL(v[1].shard_group, 4); /* a node */
	for (int i = 0; i < n; i++) {
		CU_ASSERT_EQUAL(v[i].accum, ACC_SYNC_EACH);
		CU_ASSERT_EQUAL(v[i].optim_in_backward, 0);
		CU_ASSERT_EQUAL(v[i].microbatches, 4); /* the rest is the run's */
		CU_ASSERT_EQUAL(policy_check(&v[i], &two, &m, NULL, 0), 0);
	}
	CU_ASSERT_EQUAL(v[1].reshard, RESHARD_YES);
	/* ddp's on one node of 2: fsdp over both, and hsdp with its one node as the shard group */
	p.sharding = SHARD_DDP;
	policy_resolve(&p, BIT(PF_SHARDING) | BIT(PF_ACCUM), &one, &m);
	n = policy_sharding_variants(&p, &one, &m, v);
	CU_ASSERT_EQUAL_FATAL(n, 2);
	CU_ASSERT_EQUAL(v[0].sharding, SHARD_FSDP);
	CU_ASSERT_EQUAL(v[0].shard_group, 2);
	CU_ASSERT_EQUAL(v[1].sharding, SHARD_HSDP);
	CU_ASSERT_EQUAL(v[1].shard_group, 2);
}

static void test_walk_counts(void)
{
	struct model_shape m = model_of("tiny");
	struct { int nodes, micro, want; } cases[] = {
		{ 1, 2, 1728 }, { 1, 1, 432 }, { 2, 2, 3528 }, { 2, 1, 792 },
	};

	CU_ASSERT_EQUAL_FATAL(m.layers, 2);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct cluster c = cluster_of(cases[i].nodes, 2);
		struct policy base = walk_base(cases[i].micro, &c);
		struct walked w = walk_all(&base, &c, &m);

		CU_ASSERT_EQUAL(w.n, cases[i].want);
		if (w.n != cases[i].want)
			fprintf(stderr, "\n%d nodes, M = %d: %d policies, want %d\n", cases[i].nodes,
				cases[i].micro, w.n, cases[i].want);
		CU_ASSERT_EQUAL(count_if(&w, is_sharding, SHARD_FSDP), cases[i].micro == 2 ? 960 : 240);
		CU_ASSERT_EQUAL(count_if(&w, is_sharding, SHARD_ZERO2), cases[i].micro == 2 ? 480 : 120);
		CU_ASSERT_EQUAL(count_if(&w, is_sharding, SHARD_DDP), cases[i].micro == 2 ? 288 : 72);
		CU_ASSERT_EQUAL(count_if(&w, is_sharding, SHARD_HSDP),
				cases[i].nodes == 1 ? 0 : cases[i].micro == 2 ? 1800 : 360);
		/* with one microbatch, sync-each only */
		if (cases[i].micro == 1)
			CU_ASSERT_EQUAL(count_if(&w, is_accum, ACC_SYNC_EACH), w.n);
		CU_ASSERT_EQUAL(duplicates(&w), 0);
		free(w.p);
	}
}

/* Every K of partial:K and every:K appears; no policy twice; the rules hold. */
static void test_walk_space(void)
{
	struct model_shape m = model_of("tiny");
	struct cluster c = cluster_of(2, 2);

	m.layers = 5; /* the walk reads the layer count only */
	struct policy base = walk_base(2, &c);
	struct walked w = walk_all(&base, &c, &m);

	for (int k = 1; k <= 5; k++)
		CU_ASSERT(count_if(&w, is_partial, k) > 0);
	CU_ASSERT_EQUAL(count_if(&w, is_partial, 6), 0);
	CU_ASSERT_EQUAL(count_if(&w, is_every, 1), 0); /* every:1 is block */
	for (int k = 2; k <= 5; k++)
		CU_ASSERT(count_if(&w, is_every, k) > 0);
	CU_ASSERT_EQUAL(count_if(&w, is_every, 6), 0);
	/* K choices are symmetric: each partial:K as often as no-sync, each every:K as block */
	int nosync = count_if(&w, is_accum, ACC_NO_SYNC), block = 0;
	for (int i = 0; i < w.n; i++)
		block += w.p[i].wrap == WRAP_BLOCK;
	CU_ASSERT_EQUAL(count_if(&w, is_partial, 3), nosync);
	CU_ASSERT_EQUAL(count_if(&w, is_every, 4), block);
	for (int i = 0; i < w.n; i++) {
		const struct policy *p = &w.p[i];
		CU_ASSERT(p->sharding != SHARD_ZERO2 || p->reshard == RESHARD_NO);
		CU_ASSERT(p->sharding != SHARD_DDP || (p->reshard == RESHARD_NO && p->offload == OFF_NONE));
		CU_ASSERT(p->sharding != SHARD_FSDP || p->reshard != RESHARD_NO);
		CU_ASSERT(p->accum != ACC_DEFER_REPLICA || p->sharding == SHARD_HSDP);
		CU_ASSERT(p->offload == OFF_NONE || p->optim == OPT_FOREACH);
		CU_ASSERT_EQUAL(p->shard_group, p->sharding == SHARD_HSDP ? 2 : p->sharding == SHARD_DDP ? 1 : 4);
	}
	CU_ASSERT_EQUAL(duplicates(&w), 0);
	free(w.p);

	/* an hsdp base keeps its shard group for hsdp; the others take their own */
	c = cluster_of(2, 4); /* world 8 */
	policy_default(&base);
	base.sharding = SHARD_HSDP;
	base.shard_group = 2;
	base.microbatches = 2;
	policy_resolve(&base, BIT(PF_SHARDING) | BIT(PF_SHARD_GROUP) | BIT(PF_MICROBATCHES), &c, NULL);
	w = walk_all(&base, &c, &m);
	CU_ASSERT(count_if(&w, is_sharding, SHARD_HSDP) > 0);
	for (int i = 0; i < w.n; i++)
		CU_ASSERT_EQUAL(w.p[i].shard_group, w.p[i].sharding == SHARD_HSDP ? 2 :
						    w.p[i].sharding == SHARD_DDP ? 1 : 8);
	free(w.p);
}

/*
 * per-layer:K is walked only from a base that has it (PyTorch runtimes),
 * with the base's K: each policy of the walk around it is also walked with
 * per-layer:K, none around a base without it.
 */
static int is_per_layer(const struct policy *p, int k) { return p->ac == AC_PER_LAYER && p->ac_k == k; }

static void test_walk_per_layer(void)
{
	struct model_shape m = model_of("tiny");
	struct cluster c = cluster_of(1, 2);
	struct policy base = walk_base(2, &c), none;

	base.runtime = RT_PYTORCH;
	none = base;
	base.ac = AC_PER_LAYER;
	base.ac_k = 2;
	struct walked w = walk_all(&base, &c, &m), wn = walk_all(&none, &c, &m);
	CU_ASSERT(count_if(&w, is_per_layer, 2) > 0);
	CU_ASSERT_EQUAL(count_if(&w, is_per_layer, 2), count_if(&w, is_ac, AC_FULL));
	CU_ASSERT_EQUAL(w.n, wn.n + count_if(&w, is_per_layer, 2));
	for (int k = 0; k <= m.layers; k++)
		CU_ASSERT_EQUAL(count_if(&wn, is_per_layer, k), 0);
	free(w.p);
	free(wn.p);
}

/* The walk does not depend on the base's own axis values. */
static void test_walk_base_axes(void)
{
	struct model_shape m = model_of("tiny");
	struct cluster c = cluster_of(1, 2);
	struct policy a = walk_base(2, &c), b = a;

	b.sharding = SHARD_ZERO2;
	b.reshard = RESHARD_NO;
	b.accum = ACC_PARTIAL;
	b.partial_k = 2;
	b.wrap = WRAP_WHOLE;
	b.ac = AC_FULL;
	b.offload = OFF_OPTIM;
	struct walked wa = walk_all(&a, &c, &m), wb = walk_all(&b, &c, &m);
	CU_ASSERT_EQUAL_FATAL(wa.n, wb.n);
	for (int i = 0; i < wa.n; i++)
		CU_ASSERT(policy_same(&wa.p[i], &wb.p[i]));
	free(wa.p);
	free(wb.p);
}

void suite_policy(void)
{
	CU_pSuite s = CU_add_suite("policy", NULL, NULL);
	CU_add_test(s, "name tables follow the enums", test_tables_follow_enums);
	CU_add_test(s, "name_index", test_name_index);
	CU_add_test(s, "name_closest suggestions", test_name_closest);
	CU_add_test(s, "names_joined", test_names_joined);
	CU_add_test(s, "policy_default", test_defaults);
	CU_add_test(s, "sharding variants of a calibration", test_sharding_variants);
	CU_add_test(s, "bytes per element", test_bytes);
	CU_add_test(s, "partial:K and every:K", test_k_forms);
	CU_add_test(s, "policy_field_names", test_field_names);
	CU_add_test(s, "policy_resolve: sharding, shard group, reshard", test_resolve_sharding);
	CU_add_test(s, "policy_resolve: gradient dtypes", test_resolve_dtypes);
	CU_add_test(s, "policy_check: each rule and its keys", test_check_rules);
	CU_add_test(s, "policy_next: counts by hand", test_walk_counts);
	CU_add_test(s, "policy_next: every K, canonical, valid, once", test_walk_space);
	CU_add_test(s, "policy_next: the base's axes do not matter", test_walk_base_axes);
	CU_add_test(s, "policy_next: per-layer:K from a base that has it", test_walk_per_layer);
}
