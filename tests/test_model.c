/*
 * test_model.c - parameter counts, tensor layout, kernel lists and
 * activation sizes of core/model.c, pinned to exact values.
 */
#include <CUnit/CUnit.h>
#include <string.h>

#include "model.h"

static const struct model_shape l8b = { "llama3-8b", 32, 4096, 14336, 32, 8, 128256, 8192, 500000.0 };
static const struct model_shape l70b = { "llama3-70b", 80, 8192, 28672, 64, 8, 128256, 8192, 500000.0 };

static void test_param_counts(void)
{
	CU_ASSERT_EQUAL(model_total_params(&l8b), 8030261248LL);
	CU_ASSERT_EQUAL(model_total_params(&l70b), 70553706496LL);
	CU_ASSERT_EQUAL(model_embed_params(&l8b), 525336576LL);
	CU_ASSERT_EQUAL(model_output_params(&l8b), 525336576LL);
	CU_ASSERT_EQUAL(model_attn_params(&l8b), 41943040LL);
	CU_ASSERT_EQUAL(model_mlp_params(&l8b), 176160768LL);
	CU_ASSERT_EQUAL(model_block_norm_params(&l8b), 8192LL);
	CU_ASSERT_EQUAL(model_block_params(&l8b), 218112000LL);
	CU_ASSERT_EQUAL(model_final_norm_params(&l8b), 4096LL);
	CU_ASSERT_EQUAL(model_module_tensors(&l8b, MOD_BLOCK), 9);
}

static void test_block_layout(void)
{
	struct tensor_desc td[BT_COUNT];
	int64_t D = 4096, HQ = 4096, KVQ = 1024, F = 14336;

	model_block_tensors(&l8b, td);
	CU_ASSERT_STRING_EQUAL(td[BT_WK].name, "wk");
	CU_ASSERT_EQUAL(td[BT_WK].rows, KVQ);
	CU_ASSERT_EQUAL(td[BT_WO].cols, HQ);
	CU_ASSERT_EQUAL(model_block_tensor_offset(&l8b, BT_ATTN_NORM), 0);
	CU_ASSERT_EQUAL(model_block_tensor_offset(&l8b, BT_WQ), D);
	CU_ASSERT_EQUAL(model_block_tensor_offset(&l8b, BT_WK), D + HQ * D);
	CU_ASSERT_EQUAL(model_block_tensor_offset(&l8b, BT_W_UP), 2 * D + 2 * HQ * D + 2 * KVQ * D + F * D);
	CU_ASSERT_EQUAL(model_block_tensor_offset(&l8b, BT_COUNT), model_block_params(&l8b));
}

static uint64_t kind_flops(const struct kernel *k, int n, enum kernel_kind kind)
{
	uint64_t f = 0;
	for (int i = 0; i < n; i++)
		if (k[i].kind == kind)
			f += k[i].flops;
	return f;
}

static void test_block_kernels(void)
{
	struct kernel k[MODEL_MAX_KERNELS];
	uint64_t N = 8192, mats = (uint64_t)(model_attn_params(&l8b) + model_mlp_params(&l8b));
	int n;

	/* forward GEMMs do 2 FLOPs per weight per token; backward twice that */
	n = model_segment_kernels(&l8b, 1, SEG_BLOCK, PH_FWD, AC_NONE, LOSS_FULL, 2, k, MODEL_MAX_KERNELS);
	CU_ASSERT_EQUAL(n, 11);
	CU_ASSERT_EQUAL(kind_flops(k, n, K_GEMM), 2 * N * mats);
	CU_ASSERT_STRING_EQUAL(k[1].name, "qkv");
	CU_ASSERT_EQUAL(k[1].m, 8192);
	CU_ASSERT_EQUAL(k[1].n, 6144);
	CU_ASSERT_EQUAL(k[1].k, 4096);
	/* causal attention: 2 T^2 Q per head per sequence */
	CU_ASSERT_EQUAL(kind_flops(k, n, K_ATTN), 2ull * 32 * 8192 * 8192 * 128);
	n = model_segment_kernels(&l8b, 1, SEG_BLOCK, PH_BWD, AC_NONE, LOSS_FULL, 2, k, MODEL_MAX_KERNELS);
	CU_ASSERT_EQUAL(kind_flops(k, n, K_GEMM), 4 * N * mats);
	CU_ASSERT_EQUAL(kind_flops(k, n, K_ATTN), 5ull * 32 * 8192 * 8192 * 128);
	/*
	 * recompute: nothing; the forward up to SwiGLU (the down projection and
	 * the second residual make the block's output, which backward never
	 * reads: gpu/ref/ref_block.c, gpu/cuda/block.cu); or the two norms and
	 * SwiGLU, whose inputs selective keeps
	 */
	CU_ASSERT_EQUAL(model_segment_kernels(&l8b, 1, SEG_BLOCK, PH_RECOMPUTE, AC_NONE, LOSS_FULL, 2, k,
					      MODEL_MAX_KERNELS), 0);
	n = model_segment_kernels(&l8b, 1, SEG_BLOCK, PH_RECOMPUTE, AC_FULL, LOSS_FULL, 2, k, MODEL_MAX_KERNELS);
	CU_ASSERT_EQUAL(n, 9);
	CU_ASSERT_STRING_EQUAL(k[n - 1].name, "swiglu");
	CU_ASSERT_EQUAL(kind_flops(k, n, K_GEMM), 2 * N * (mats - 4096ull * 14336));
	CU_ASSERT_EQUAL(kind_flops(k, n, K_ATTN), 2ull * 32 * 8192 * 8192 * 128);
	n = model_segment_kernels(&l8b, 1, SEG_BLOCK, PH_RECOMPUTE, AC_SELECTIVE, LOSS_FULL, 2, k, MODEL_MAX_KERNELS);
	CU_ASSERT_EQUAL(n, 3);
	CU_ASSERT_STRING_EQUAL(k[0].name, "attn_norm");
	CU_ASSERT_STRING_EQUAL(k[1].name, "mlp_norm");
	CU_ASSERT_STRING_EQUAL(k[2].name, "swiglu");
}

static void test_head_kernels(void)
{
	struct kernel k[MODEL_MAX_KERNELS];
	uint64_t N = 8192, VD = 128256ull * 4096;
	int n;

	n = model_segment_kernels(&l8b, 1, SEG_HEAD, PH_BWD, AC_NONE, LOSS_FULL, 2, k, MODEL_MAX_KERNELS);
	CU_ASSERT_EQUAL(kind_flops(k, n, K_GEMM), 4 * N * VD);
	/* the chunked loss rebuilds the logits in backward: one more forward GEMM */
	n = model_segment_kernels(&l8b, 1, SEG_HEAD, PH_BWD, AC_NONE, LOSS_CHUNKED, 2, k, MODEL_MAX_KERNELS);
	CU_ASSERT_EQUAL(kind_flops(k, n, K_GEMM), 6 * N * VD);
}

static void test_activation_bytes(void)
{
	uint64_t N = 8192, D = 4096, a = 2;
	/* x, norm out, qkv, attn out, x1, norm out, gate_up, h; two rstd; lse */
	uint64_t all = N * (4 * D + 6144 + 4096 + 3 * 14336) * a + 2 * 4 * N + 4ull * 32 * 8192;

	CU_ASSERT_EQUAL(model_segment_saved_bytes(&l8b, 1, SEG_BLOCK, AC_NONE, LOSS_FULL, 2), all);
	CU_ASSERT_EQUAL(model_segment_saved_bytes(&l8b, 1, SEG_BLOCK, AC_FULL, LOSS_FULL, 2), N * D * a);
	CU_ASSERT_EQUAL(model_segment_saved_bytes(&l8b, 2, SEG_BLOCK, AC_FULL, LOSS_FULL, 2), 2 * N * D * a);
	/* full checkpointing rebuilds what it did not keep */
	CU_ASSERT_EQUAL(model_segment_transient_bytes(&l8b, 1, SEG_BLOCK, PH_RECOMPUTE, AC_FULL, LOSS_FULL, 2),
			all - N * D * a);
	/* selective forward writes the norms and h into scratch */
	CU_ASSERT_EQUAL(model_segment_transient_bytes(&l8b, 1, SEG_BLOCK, PH_FWD, AC_SELECTIVE, LOSS_FULL, 2),
			N * (2 * D + 14336) * a + 2 * 4 * N);
	CU_ASSERT_EQUAL(model_segment_transient_bytes(&l8b, 1, SEG_BLOCK, PH_FWD, AC_NONE, LOSS_FULL, 2), 0);
	/* backward's activation gradients: dxn, dh, dgateup, datt, dqkv */
	CU_ASSERT_EQUAL(model_segment_transient_bytes(&l8b, 1, SEG_BLOCK, PH_BWD, AC_NONE, LOSS_FULL, 2),
			N * (D + 3 * 14336 + 4096 + 6144) * a);
	/* the full loss keeps fp32 logits, several GiB; the chunked one a few vectors */
	CU_ASSERT_EQUAL(model_segment_saved_bytes(&l8b, 1, SEG_HEAD, AC_NONE, LOSS_FULL, 2),
			2 * N * D * a + 8 * N + N * 128256ull * 4);
	CU_ASSERT(model_segment_saved_bytes(&l8b, 1, SEG_HEAD, AC_NONE, LOSS_FULL, 2) > 3ull << 30);
	CU_ASSERT_EQUAL(model_segment_saved_bytes(&l8b, 1, SEG_HEAD, AC_NONE, LOSS_CHUNKED, 2),
			2 * N * D * a + 8 * N);
	/* the embedding keeps its token ids for its backward: int32, a sequence per batch row */
	CU_ASSERT_EQUAL(model_segment_saved_bytes(&l8b, 2, SEG_EMBED, AC_NONE, LOSS_FULL, 2), 4 * 2 * N);
	/* dlogits overwrite the logits: only the chunked loss needs scratch, one chunk */
	CU_ASSERT_EQUAL(model_segment_transient_bytes(&l8b, 1, SEG_HEAD, PH_BWD, AC_NONE, LOSS_FULL, 2), 0);
	CU_ASSERT_EQUAL(model_segment_transient_bytes(&l8b, 1, SEG_HEAD, PH_FWD, AC_NONE, LOSS_CHUNKED, 2),
			1024 * 128256ull * 4);
	CU_ASSERT_EQUAL(model_segment_transient_bytes(&l8b, 1, SEG_HEAD, PH_BWD, AC_NONE, LOSS_CHUNKED, 2),
			1024 * 128256ull * 4);
}

static void test_mfu_flops(void)
{
	/* 6 N (N without the embedding) + 12 L H Q T */
	double n = 8030261248.0 - 525336576.0;
	CU_ASSERT_DOUBLE_EQUAL(model_mfu_flops_per_token(&l8b), 6 * n + 12.0 * 32 * 32 * 128 * 8192, 1.0);
}

static void test_check(void)
{
	struct model_shape m = l8b;
	char err[128];

	CU_ASSERT_EQUAL(model_check(&m, err, sizeof(err)), 0);
	m.kv_heads = 5;
	CU_ASSERT_EQUAL(model_check(&m, err, sizeof(err)), -1);
	CU_ASSERT_STRING_EQUAL(err, "kv_heads (5) must divide heads (32)");
	m = l8b;
	m.heads = 3;
	CU_ASSERT_EQUAL(model_check(&m, err, sizeof(err)), -1);
	CU_ASSERT_STRING_EQUAL(err, "heads (3) must divide hidden (4096)");
	/* rotary embedding pairs a head's dimensions: an even head dim (6: 24 / 4), not an odd one (3: 24 / 8) */
	m = l8b;
	m.hidden = 24;
	m.heads = 4;
	m.kv_heads = 2;
	CU_ASSERT_EQUAL(model_check(&m, err, sizeof(err)), 0);
	m.heads = 8;
	CU_ASSERT_EQUAL(model_check(&m, err, sizeof(err)), -1);
	CU_ASSERT_STRING_EQUAL(err, "head dim hidden/heads = 3 must be even for rotary embedding");
}

void suite_model(void)
{
	CU_pSuite s = CU_add_suite("model", NULL, NULL);
	CU_add_test(s, "parameter counts", test_param_counts);
	CU_add_test(s, "block tensor layout", test_block_layout);
	CU_add_test(s, "block kernels", test_block_kernels);
	CU_add_test(s, "head kernels", test_head_kernels);
	CU_add_test(s, "activation bytes", test_activation_bytes);
	CU_add_test(s, "mfu flops", test_mfu_flops);
	CU_add_test(s, "shape checks", test_check);
}
