/*
 * test_recipe.c - the PyTorch recipes: kernels per op and their bytes,
 * what each checkpointing mode keeps and recomputes, and how the schedule
 * and the rules use them.
 */
#include <string.h>

#include <CUnit/CUnit.h>

#include "config.h"
#include "policy.h"
#include "recipe.h"
#include "schedule.h"

static const struct model_shape l8b = { "llama3-8b", 32, 4096, 14336, 32, 8, 128256, 8192, 500000.0 };

static int count(const struct kernel *k, int n, enum kernel_kind kind)
{
	int c = 0;
	for (int i = 0; i < n; i++)
		c += k[i].kind == kind;
	return c;
}

static uint64_t flops(const struct kernel *k, int n, enum kernel_kind kind)
{
	uint64_t f = 0;
	for (int i = 0; i < n; i++)
		if (k[i].kind == kind)
			f += k[i].flops;
	return f;
}

static const struct kernel *named(const struct kernel *k, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(k[i].name, name))
			return &k[i];
	return NULL;
}

/*
 * A model without GQA (as many KV heads as heads): repeat_kv returns its
 * input, so no kernel copies k or v, forward or backward (the two copies
 * and their two sums gone, every other kernel as with GQA), and the
 * expanded k and v the attention saves are k and v themselves: no tensors
 * of their own among the forward's transients (two fewer: the roped k and
 * v, which the saved expanded ones are). Eager and compiled.
 */
static void test_no_gqa(void)
{
	struct model_shape mha = l8b;
	struct kernel k[MODEL_MAX_KERNELS], g[MODEL_MAX_KERNELS];
	uint64_t tm[RECIPE_TRANSIENT_MAX], tg[RECIPE_TRANSIENT_MAX];

	mha.kv_heads = mha.heads;
	for (int r = KR_EAGER; r <= KR_COMPILE; r++)
		for (int ph = PH_FWD; ph <= PH_BWD; ph += PH_BWD - PH_FWD) {
			int n = recipe_kernels(r, &mha, 1, SEG_BLOCK, ph, AC_NONE, LOSS_FULL, 2, k, MODEL_MAX_KERNELS);
			int ng = recipe_kernels(r, &l8b, 1, SEG_BLOCK, ph, AC_NONE, LOSS_FULL, 2, g, MODEL_MAX_KERNELS);
			int copies = r == KR_EAGER ? 2 : 1; /* compiled: k's cast and copy are one kernel, which stays */
			CU_ASSERT_EQUAL(n, ng - copies);
			CU_ASSERT_PTR_NULL(named(k, n, ph == PH_FWD ? "v_repeat" : "v_repeat_bwd"));
			CU_ASSERT_PTR_NOT_NULL(named(g, ng, ph == PH_FWD ? "v_repeat" : "v_repeat_bwd"));
			if (r == KR_EAGER)
				CU_ASSERT_PTR_NULL(named(k, n, ph == PH_FWD ? "k_repeat" : "k_repeat_bwd"));
		}
	{
		int nm = recipe_transient_tensors(KR_EAGER, &mha, 1, SEG_BLOCK, PH_FWD, AC_NONE, LOSS_FULL, 2, tm);
		int ng = recipe_transient_tensors(KR_EAGER, &l8b, 1, SEG_BLOCK, PH_FWD, AC_NONE, LOSS_FULL, 2, tg);
		CU_ASSERT_EQUAL(nm, ng - 2);
	}
}

static void test_eager_block(void)
{
	struct kernel k[MODEL_MAX_KERNELS];
	uint64_t N = 8192, D = 4096, F = 14336, KVQ = 1024;
	uint64_t mats = (uint64_t)(model_attn_params(&l8b) + model_mlp_params(&l8b));
	int n;

	/* forward: an op a kernel: norm, 3 projections, 2 casts, 2 products, 2 casts back, 2 expansions,
	 * SDPA, wo, add, norm, w1, w3, silu, mul, w2, add */
	n = recipe_kernels(KR_EAGER, &l8b, 1, SEG_BLOCK, PH_FWD, AC_NONE, LOSS_FULL, 2, k, MODEL_MAX_KERNELS);
	CU_ASSERT_EQUAL(n, 22);
	CU_ASSERT_EQUAL(count(k, n, K_GEMM), 7);
	CU_ASSERT_EQUAL(flops(k, n, K_GEMM), 2 * N * mats);
	/* RoPE of k: bf16 read, fp32 written; the complex product fp32 to fp32, the table (T x Q/2 complex64)
	 * read once; back to bf16 */
	CU_ASSERT_EQUAL(named(k, n, "k_float")->bytes, N * KVQ * (2 + 4));
	CU_ASSERT_EQUAL(named(k, n, "k_rope")->bytes, N * KVQ * (4 + 4) + 8192ull * 64 * 8);
	CU_ASSERT_EQUAL(named(k, n, "k_type_as")->bytes, N * KVQ * (4 + 2));
	/* repeat_kv copies k to every query head: (N, KV Q) read, (N, H Q) written */
	CU_ASSERT_EQUAL(named(k, n, "k_repeat")->bytes, N * (KVQ + D) * 2);
	/* SwiGLU: silu reads g and writes s; mul reads s and u, writes the product */
	CU_ASSERT_EQUAL(named(k, n, "silu")->bytes, 2 * N * F * 2);
	CU_ASSERT_EQUAL(named(k, n, "mul")->bytes, 3 * N * F * 2);
	/* _fused_rms_norm: x read, the output and an fp32 rstd per row written */
	CU_ASSERT_EQUAL(named(k, n, "attn_norm")->bytes, 2 * N * D * 2 + 4 * N);

	/* backward: dgrad and wgrad per matmul, flash's three kernels, each op's kernels (RoPE's products
	 * cloning the table's conjugate first: two more), and the adds of gradients where a tensor feeds
	 * several ops (xn1 three, x, h and xn2 two each: 5 adds): 37 + 2, the first H100 session's 48
	 * kernels less the 9 AccumulateGrad adds of its harness */
	n = recipe_kernels(KR_EAGER, &l8b, 1, SEG_BLOCK, PH_BWD, AC_NONE, LOSS_FULL, 2, k, MODEL_MAX_KERNELS);
	CU_ASSERT_EQUAL(count(k, n, K_GEMM), 14);
	CU_ASSERT_EQUAL(flops(k, n, K_GEMM), 4 * N * mats);
	CU_ASSERT_EQUAL(count(k, n, K_ATTN), 1);
	CU_ASSERT_EQUAL(n, 14 + 3 + 17 + 5);
	CU_ASSERT_PTR_NOT_NULL(named(k, n, "attention_bwd_dq"));
	/* the conjugate of the rotation table, T x Q/2 complex64 read and written, before each product's */
	CU_ASSERT_PTR_NOT_NULL_FATAL(named(k, n, "q_rope_conj"));
	CU_ASSERT_EQUAL(named(k, n, "q_rope_conj")->bytes, 2 * 8192ull * 64 * 8);
	CU_ASSERT(named(k, n, "k_rope_conj") + 1 == named(k, n, "k_rope_bwd"));
	/* the product's backward: the gradient and the conjugate read, the input's gradient written */
	CU_ASSERT_EQUAL(named(k, n, "k_rope_bwd")->bytes, N * KVQ * (4 + 4) + 8192ull * 64 * 8);
	CU_ASSERT_EQUAL(named(k, n, "attention_bwd")->backward, 1);
	/* mul's backward, a kernel per factor (ds = dp * u, du = dp * s): dp and the other factor read, the
	 * factor's gradient written, N x F each of the three */
	CU_ASSERT_EQUAL(named(k, n, "mul_bwd0")->bytes, 3 * N * F * 2);
	CU_ASSERT_EQUAL(named(k, n, "mul_bwd1")->bytes, 3 * N * F * 2);
	CU_ASSERT_EQUAL(named(k, n, "mul_bwd0")->flops, N * F);
	/* RMSNorm's two (the input's gradient and the weight's) read the same; the first writes dx too */
	CU_ASSERT_EQUAL(named(k, n, "mlp_norm_bwd0")->bytes - named(k, n, "mlp_norm_bwd1")->bytes, N * D * 2);
}

/*
 * The eager loss's softmax over N x V fp32 logits, in passes over the
 * whole (SoftMax.cu): llama3's 128,256-wide rows are three reads and a
 * write each way; rows that fit 48 KiB of shared memory are read once
 * forward; rows of at most 1024 values are a warp's, read once both ways.
 */
/*
 * How each kernel moves its bytes (enum mem_access): eager PyTorch's
 * templates in the eager recipe, Inductor's generated streams in the
 * compiled one, where the kernels it leaves eager (RoPE's complex product,
 * the final norm outside the blocks) keep theirs.
 */
static void test_access_patterns(void)
{
	static const struct { const char *name; enum mem_access eager, compiled; } want[] = {
		{ "attn_norm", MA_NORM, MA_STREAM },          { "attn_norm_bwd0", MA_NORM, MA_STREAM },
		{ "q_float", MA_CAST_UP, MA_STREAM },          { "q_float_bwd", MA_STREAM, MA_STREAM },
		{ "q_type_as", MA_STREAM, MA_STREAM },         { "q_type_as_bwd", MA_CAST_UP, MA_STREAM },
		{ "q_rope", MA_BROADCAST, MA_BROADCAST },      { "k_rope_bwd", MA_BROADCAST, MA_BROADCAST },
		{ "k_repeat", MA_GATHER, MA_COUNT },           { "v_repeat_bwd", MA_REDUCE, MA_STREAM },
		{ "mlp_norm_bwd1", MA_NORM, MA_STREAM },       { "silu", MA_STREAM, MA_COUNT },
		{ "final_norm", MA_NORM, MA_NORM },            { "final_norm_bwd1", MA_NORM, MA_NORM },
		{ "loss_float", MA_CAST_UP, MA_COUNT },        { "loss_float_bwd", MA_STREAM, MA_COUNT },
	};
	for (int r = 0; r < 2; r++) {
		enum kernel_recipe kr = r ? KR_COMPILE : KR_EAGER;
		struct kernel k[2 * MODEL_MAX_KERNELS];
		int n = 0, library = 0;

		for (int s = 0; s < 2; s++)
			for (int ph = 0; ph < 2; ph++)
				n += recipe_kernels(kr, &l8b, 1, s ? SEG_HEAD : SEG_BLOCK, ph ? PH_BWD : PH_FWD, AC_NONE,
						    LOSS_FULL, 2, k + n, 2 * MODEL_MAX_KERNELS - n);
		for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
			enum mem_access a = r ? want[i].compiled : want[i].eager;
			const struct kernel *x = named(k, n, want[i].name);
			/* MA_COUNT: the recipe has no such kernel */
			CU_ASSERT_EQUAL(x != NULL, a != MA_COUNT);
			if (x && a != MA_COUNT && x->access != a)
				CU_FAIL_FATAL(want[i].name);
		}
		for (int i = 0; i < n; i++)
			if (k[i].kind != K_ELEMENTWISE) {
				library++;
				CU_ASSERT_EQUAL(k[i].access, MA_STREAM);
			}
		CU_ASSERT(library > 0);
	}
}

static void test_eager_loss_softmax(void)
{
	struct kernel k[MODEL_MAX_KERNELS];
	struct model_shape m = l8b;
	const int64_t vocab[] = { 128256, 8000, 1000 };
	const uint64_t fwd[] = { 4, 2, 2 }, bwd[] = { 4, 4, 3 };

	for (int i = 0; i < 3; i++) {
		uint64_t NV;
		int n;
		m.vocab = vocab[i];
		NV = (uint64_t)m.seq * (uint64_t)m.vocab;
		n = recipe_kernels(KR_EAGER, &m, 1, SEG_HEAD, PH_FWD, AC_NONE, LOSS_FULL, 2, k, MODEL_MAX_KERNELS);
		CU_ASSERT_PTR_NOT_NULL_FATAL(named(k, n, "log_softmax"));
		CU_ASSERT_EQUAL(named(k, n, "log_softmax")->bytes, fwd[i] * NV * 4);
		n = recipe_kernels(KR_EAGER, &m, 1, SEG_HEAD, PH_BWD, AC_NONE, LOSS_FULL, 2, k, MODEL_MAX_KERNELS);
		CU_ASSERT_PTR_NOT_NULL_FATAL(named(k, n, "log_softmax_bwd"));
		CU_ASSERT_EQUAL(named(k, n, "log_softmax_bwd")->bytes, bwd[i] * NV * 4);
	}
	/* a row of 12,000 values not a multiple of the 4-wide vectors: the three-read kernel */
	m.vocab = 12001;
	{
		int n = recipe_kernels(KR_EAGER, &m, 1, SEG_HEAD, PH_FWD, AC_NONE, LOSS_FULL, 2, k, MODEL_MAX_KERNELS);
		CU_ASSERT_EQUAL(named(k, n, "log_softmax")->bytes, 4 * (uint64_t)m.seq * 12001 * 4);
	}
}

static void test_compiled_block(void)
{
	struct kernel k[MODEL_MAX_KERNELS];
	uint64_t N = 8192, D = 4096, F = 14336;
	int n;

	/* Inductor: one kernel per chain of element-wise ops, RoPE's complex product left to eager between
	 * two casts for each of q and k (the first H100 session's profile: 19 kernels) */
	n = recipe_kernels(KR_COMPILE, &l8b, 1, SEG_BLOCK, PH_FWD, AC_NONE, LOSS_FULL, 2, k, MODEL_MAX_KERNELS);
	CU_ASSERT_EQUAL(n, 19);
	CU_ASSERT_EQUAL(named(k, n, "k_rope")->bytes, N * 1024 * (4 + 4) + 8192ull * 64 * 8);
	CU_ASSERT_EQUAL(count(k, n, K_GEMM), 7);
	CU_ASSERT_EQUAL(named(k, n, "silu_mul")->bytes, 3 * N * F * 2);
	/* the residual add fused with the next norm: x and wo out read, h, its norm and rstd written */
	CU_ASSERT_EQUAL(named(k, n, "residual1_mlp_norm")->bytes, 4 * N * D * 2 + 4 * N);
	n = recipe_kernels(KR_COMPILE, &l8b, 1, SEG_BLOCK, PH_BWD, AC_NONE, LOSS_FULL, 2, k, MODEL_MAX_KERNELS);
	/* backward: 25 fused, and RoPE's three more each for q and k (the profile's 40 less 9 adds of its
	 * harness): a cast back, the table's conjugate, the product, a cast */
	CU_ASSERT_EQUAL(n, 14 + 3 + 8 + 6);
	/* the testbed's own list is model.c's */
	CU_ASSERT_EQUAL(recipe_kernels(KR_TESTBED, &l8b, 1, SEG_BLOCK, PH_FWD, AC_NONE, LOSS_FULL, 2, k,
				       MODEL_MAX_KERNELS), 11);
}

static void test_eager_saved_bytes(void)
{
	uint64_t N = 8192, D = 4096, HQ = 4096, F = 14336, KVQ = 1024, a = 2, lse = 4ull * 32 * 8192;
	uint64_t none = a * N * (4 * D + 4 * HQ + 4 * F) + 2 * 4 * N + lse;

	/* x, rstd, xn1; roped q, expanded k and v, SDPA's output and logsumexp; h, rstd, xn2; g, silu(g), u, product */
	CU_ASSERT_EQUAL(recipe_saved_bytes(KR_EAGER, &l8b, 1, SEG_BLOCK, AC_NONE, LOSS_FULL, 2), none);
	/* more than the fused testbed keeps: the expanded k and v, silu's output */
	CU_ASSERT(none > recipe_saved_bytes(KR_TESTBED, &l8b, 1, SEG_BLOCK, AC_NONE, LOSS_FULL, 2));
	/* full: the block's input */
	CU_ASSERT_EQUAL(recipe_saved_bytes(KR_EAGER, &l8b, 1, SEG_BLOCK, AC_FULL, LOSS_FULL, 2), a * N * D);
	/* torchtitan per-op: x, the 1st, 3rd, 5th and 7th matmul's outputs (wq, wv, w1, w2), SDPA's */
	CU_ASSERT_EQUAL(recipe_saved_bytes(KR_EAGER, &l8b, 1, SEG_BLOCK, AC_PER_OP, LOSS_FULL, 2),
			a * N * (D + HQ + KVQ + HQ + F + D) + lse);
	/* every matmul's output and SDPA's */
	CU_ASSERT_EQUAL(recipe_saved_bytes(KR_EAGER, &l8b, 1, SEG_BLOCK, AC_SELECTIVE, LOSS_FULL, 2),
			a * N * (D + HQ + 2 * KVQ + HQ + D + 2 * F + D) + lse);
	/* what recompute rebuilds is what backward reads less what the mode kept */
	CU_ASSERT_EQUAL(recipe_transient_bytes(KR_EAGER, &l8b, 1, SEG_BLOCK, PH_RECOMPUTE, AC_FULL, LOSS_FULL, 2),
			none - a * N * D);
	/* the head: x, its norm, rstd, int64 targets, the fp32 log-probabilities */
	CU_ASSERT_EQUAL(recipe_saved_bytes(KR_EAGER, &l8b, 1, SEG_HEAD, AC_NONE, LOSS_FULL, 2),
			2 * a * N * D + 4 * N + 8 * N + 4 * N * 128256ull);
}

/*
 * What a block keeps is a tensor each where PyTorch allocates them apart,
 * in the order forward makes them, and they sum to recipe_saved_bytes;
 * the testbed keeps one region.
 */
static void test_saved_tensors(void)
{
	const enum ac_mode modes[] = { AC_NONE, AC_FULL, AC_PER_OP, AC_SELECTIVE };
	uint64_t t[RECIPE_TRANSIENT_MAX], N = 8192, D = 4096, HQ = 4096, F = 14336, a = 2, lse = 4ull * 32 * 8192;
	int n;

	for (int r = 0; r < KR_COUNT; r++)
		for (int m = 0; m < 4; m++) {
			uint64_t sum = 0;
			n = recipe_saved_tensors(r, &l8b, 1, SEG_BLOCK, modes[m], LOSS_FULL, 2, t);
			for (int i = 0; i < n; i++)
				sum += t[i];
			CU_ASSERT_EQUAL(sum, recipe_saved_bytes(r, &l8b, 1, SEG_BLOCK, modes[m], LOSS_FULL, 2));
			CU_ASSERT(r == KR_TESTBED ? n == 1 : n >= 1);
		}
	/* eager without checkpointing: x, rstd, xn1, roped q, expanded k and v, SDPA's output and logsumexp,
	 * h, rstd, xn2, g, u, silu(g), the product: 15 tensors, the first the block's input */
	n = recipe_saved_tensors(KR_EAGER, &l8b, 1, SEG_BLOCK, AC_NONE, LOSS_FULL, 2, t);
	CU_ASSERT_EQUAL(n, 15);
	CU_ASSERT_EQUAL(t[0], a * N * D);
	CU_ASSERT_EQUAL(t[1], 4 * N);
	CU_ASSERT_EQUAL(t[3], a * N * HQ); /* roped q: the tensors in the order forward makes them */
	CU_ASSERT_EQUAL(t[7], lse);
	CU_ASSERT_EQUAL(t[n - 1], a * N * F);
	/* full: the input alone */
	CU_ASSERT_EQUAL(recipe_saved_tensors(KR_EAGER, &l8b, 1, SEG_BLOCK, AC_FULL, LOSS_FULL, 2, t), 1);
	CU_ASSERT_EQUAL(t[0], a * N * D);
	/* the head keeps one region here (its largest part, the fp32 log-probabilities, dominates) */
	CU_ASSERT_EQUAL(recipe_saved_tensors(KR_EAGER, &l8b, 1, SEG_HEAD, AC_NONE, LOSS_FULL, 2, t), 1);
	CU_ASSERT_EQUAL(t[0], recipe_saved_bytes(KR_EAGER, &l8b, 1, SEG_HEAD, AC_NONE, LOSS_FULL, 2));
}

/*
 * What PyTorch 2.11's compiled forward returns for its backward
 * (experiments/pytorch/saved.py lists it): the partitioner saves a policy's
 * output only where the backward reads it or recomputes from it, so the
 * last matmul's output, which eager checkpointing caches, is not kept.
 */
static void test_compiled_saved_bytes(void)
{
	uint64_t N = 8192, D = 4096, HQ = 4096, F = 14336, KVQ = 1024, a = 2, lse = 4ull * 32 * 8192;

	/* x, rstd, xn1; roped q, expanded k and v, SDPA's output and logsumexp; h, rstd, xn2; g, u, product */
	CU_ASSERT_EQUAL(recipe_saved_bytes(KR_COMPILE, &l8b, 1, SEG_BLOCK, AC_NONE, LOSS_FULL, 2),
			a * N * (4 * D + 4 * HQ + 3 * F) + 2 * 4 * N + lse);
	/* per-op: x, wq's and wv's outputs, SDPA's, w1's; not w2's (eager keeps it: one N x D more) */
	CU_ASSERT_EQUAL(recipe_saved_bytes(KR_COMPILE, &l8b, 1, SEG_BLOCK, AC_PER_OP, LOSS_FULL, 2),
			a * N * (D + HQ + KVQ + HQ + F) + lse);
	CU_ASSERT_EQUAL(recipe_saved_bytes(KR_EAGER, &l8b, 1, SEG_BLOCK, AC_PER_OP, LOSS_FULL, 2) -
			recipe_saved_bytes(KR_COMPILE, &l8b, 1, SEG_BLOCK, AC_PER_OP, LOSS_FULL, 2), a * N * D);
	/* every matmul's output but w2's, and SDPA's */
	CU_ASSERT_EQUAL(recipe_saved_bytes(KR_COMPILE, &l8b, 1, SEG_BLOCK, AC_SELECTIVE, LOSS_FULL, 2),
			a * N * (D + HQ + 2 * KVQ + HQ + D + 2 * F) + lse);
	CU_ASSERT_EQUAL(recipe_saved_bytes(KR_COMPILE, &l8b, 1, SEG_BLOCK, AC_FULL, LOSS_FULL, 2), a * N * D);
	/* the head: x, its norm, rstd, int64 targets; the bf16 logits, each row's maximum and log-sum-exp */
	CU_ASSERT_EQUAL(recipe_saved_bytes(KR_COMPILE, &l8b, 1, SEG_HEAD, AC_NONE, LOSS_FULL, 2),
			2 * a * N * D + 4 * N + 8 * N + a * N * 128256ull + 2 * 4 * N);
}

static void test_recompute(void)
{
	struct kernel k[MODEL_MAX_KERNELS];
	uint64_t N = 8192, D = 4096, KVQ = 1024, F = 14336;
	int n;

	/* full: forward again up to w2, which saved its input before it ran (early stop): 20 kernels, 6 GEMMs */
	n = recipe_kernels(KR_EAGER, &l8b, 1, SEG_BLOCK, PH_RECOMPUTE, AC_FULL, LOSS_FULL, 2, k, MODEL_MAX_KERNELS);
	CU_ASSERT_EQUAL(n, 20);
	CU_ASSERT_EQUAL(count(k, n, K_GEMM), 6);
	CU_ASSERT_PTR_NULL(named(k, n, "w2"));
	CU_ASSERT_EQUAL(count(k, n, K_ATTN), 1);
	/* per-op: wk, wo and w3 run again (the 2nd, 4th, 6th matmuls), SDPA does not */
	n = recipe_kernels(KR_EAGER, &l8b, 1, SEG_BLOCK, PH_RECOMPUTE, AC_PER_OP, LOSS_FULL, 2, k, MODEL_MAX_KERNELS);
	CU_ASSERT_EQUAL(count(k, n, K_ATTN), 0);
	CU_ASSERT_EQUAL(flops(k, n, K_GEMM), 2 * N * D * (KVQ + D + F));
	CU_ASSERT_EQUAL(n, 16);
	/* selective: no matmul, no attention */
	n = recipe_kernels(KR_EAGER, &l8b, 1, SEG_BLOCK, PH_RECOMPUTE, AC_SELECTIVE, LOSS_FULL, 2, k, MODEL_MAX_KERNELS);
	CU_ASSERT_EQUAL(count(k, n, K_GEMM) + count(k, n, K_ATTN), 0);
	CU_ASSERT(n > 0);
	CU_ASSERT_EQUAL(recipe_kernels(KR_EAGER, &l8b, 1, SEG_BLOCK, PH_RECOMPUTE, AC_NONE, LOSS_FULL, 2, k,
				       MODEL_MAX_KERNELS), 0);
}

static struct schedule *build(struct experiment *e, const char *a, const char *b, const char *c)
{
	char err[256];
	config_init(e);
	config_set(e, "model.name=small", "t");
	config_set(e, "policy.microbatches=2", "t");
	if (a)
		config_set(e, a, "t");
	if (b)
		config_set(e, b, "t");
	if (c)
		config_set(e, c, "t");
	if (config_resolve(e) != 0)
		return NULL;
	return schedule_new(e, err, sizeof err);
}

static void test_schedule_modes(void)
{
	struct experiment e;
	struct schedule *s;
	char err[256];

	/* per-layer:2 on 4 blocks: blocks 1 and 3 checkpointed, each microbatch */
	s = build(&e, "policy.runtime=pytorch", "policy.ac=per-layer:2", NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_RECOMPUTE), 2 * 2);
	CU_ASSERT_EQUAL(schedule_check(s, err, sizeof err), 0);
	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].kind == OP_RECOMPUTE)
			CU_ASSERT(s->segs[s->ops[i].seg].block % 2 == 1);
	schedule_free(s);
	config_release(&e);
	/* per-op everywhere */
	s = build(&e, "policy.runtime=pytorch-compile", "policy.ac=per-op", NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_RECOMPUTE), 2 * 4);
	schedule_free(s);
	config_release(&e);
	/* the testbed's stores have no per-op or per-layer mode: the rule names both keys */
	CU_ASSERT_PTR_NULL(build(&e, "policy.ac=per-op", NULL, NULL));
	config_release(&e);
}

static void test_optimizer_extras(void)
{
	struct experiment e;
	struct schedule *s;
	int scratch = 0, optim = -1;

	/*
	 * PyTorch's foreach AdamW allocates an fp32 temporary per parameter
	 * (the sqrt of exp_avg_sq, a new tensor list): one block per tensor, in
	 * the units' tensor order, each 4 bytes per element of its shard, all
	 * alive until the op's end
	 */
	s = build(&e, "policy.runtime=pytorch", "policy.precision=fp32", NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].kind == OP_OPTIM)
			optim = i;
	CU_ASSERT_FATAL(optim >= 0);
	{
		int u = 0, t = 0, tensors = 0;
		uint64_t sum = 0, elems = 0;
		for (int k = 0; k < s->nunits; k++) {
			tensors += s->units[k].ntensors;
			elems += s->units[k].shard_elems;
		}
		for (int a = 0; a < s->ops[optim].nalloc; a++) {
			const struct buffer *b = &s->bufs[s->bufrefs[s->ops[optim].buf_first + a]];
			if (b->kind == BUF_OPTIM_STATE) /* the state, made at the first step (test_schedule.c) */
				continue;
			while (u < s->nunits && t == s->units[u].ntensors)
				u++, t = 0;
			CU_ASSERT_FATAL(u < s->nunits);
			CU_ASSERT_EQUAL(b->bytes, 4 * (uint64_t)s->units[u].tensor_shard[t]);
			CU_ASSERT_EQUAL(b->free_op, optim);
			sum += b->bytes;
			t++;
			scratch++;
		}
		CU_ASSERT_EQUAL(scratch, tensors);
		CU_ASSERT(tensors > s->nunits); /* not one per unit */
		CU_ASSERT_EQUAL(sum, 4 * elems);
	}
	/*
	 * the DTensor dispatch of its ops is host time the launch thread spends:
	 * each of foreach AdamW's ops unwraps every tensor of its lists, and so
	 * do the clipping's two (_foreach_norm, _foreach_mul_), which launch a
	 * kernel each per chunk of foreach_chunk tensors
	 */
	{
		const struct runtime_spec *r = &e.runtime;
		int tensors = 0, chunks;
		for (int k = 0; k < s->nunits; k++)
			tensors += s->units[k].ntensors;
		chunks = (tensors + r->foreach_chunk - 1) / r->foreach_chunk;
		CU_ASSERT_FATAL(r->clip_grad_norm && r->dtensor_us > 0);
		CU_ASSERT_EQUAL(s->ops[optim].host_ns, (uint32_t)(1e3 * r->dtensor_us * tensors * r->foreach_kernels + 0.5) +
								(uint32_t)(1e3 * r->dtensor_us * tensors * 2 + 0.5));
		CU_ASSERT_EQUAL(s->ops[optim].launches, (uint32_t)(chunks * r->foreach_kernels + 2 * chunks));
	}
	schedule_free(s);
	config_release(&e);
	s = build(&e, "policy.precision=fp32", NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].kind == OP_OPTIM)
			CU_ASSERT_EQUAL(s->ops[i].nalloc, 0);
	schedule_free(s);
	config_release(&e);
}

void suite_recipe(void)
{
	CU_pSuite s = CU_add_suite("recipe", NULL, NULL);
	CU_add_test(s, "a block's saved tensors: one each, summing to its saved bytes", test_saved_tensors);
	CU_add_test(s, "eager block: kernels and bytes", test_eager_block);
	CU_add_test(s, "a model without GQA: repeat_kv copies nothing", test_no_gqa);
	CU_add_test(s, "the eager loss's softmax passes over the logits", test_eager_loss_softmax);
	CU_add_test(s, "how each kernel moves its bytes, eager and compiled", test_access_patterns);
	CU_add_test(s, "compiled block: fused kernels", test_compiled_block);
	CU_add_test(s, "eager saved bytes per checkpointing mode", test_eager_saved_bytes);
	CU_add_test(s, "compiled saved bytes per checkpointing mode", test_compiled_saved_bytes);
	CU_add_test(s, "recompute per checkpointing mode", test_recompute);
	CU_add_test(s, "schedule: per-layer and per-op, the testbed rule", test_schedule_modes);
	CU_add_test(s, "optimizer: foreach temporaries, host dispatch", test_optimizer_extras);
}
