/*
 * test_policy.c - policy names, suggestions, defaults, byte sizes and the
 * K forms (core/policy.c).
 */
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

void suite_policy(void)
{
	CU_pSuite s = CU_add_suite("policy", NULL, NULL);
	CU_add_test(s, "name tables follow the enums", test_tables_follow_enums);
	CU_add_test(s, "name_index", test_name_index);
	CU_add_test(s, "name_closest suggestions", test_name_closest);
	CU_add_test(s, "names_joined", test_names_joined);
	CU_add_test(s, "policy_default", test_defaults);
	CU_add_test(s, "bytes per element", test_bytes);
	CU_add_test(s, "partial:K and every:K", test_k_forms);
}
