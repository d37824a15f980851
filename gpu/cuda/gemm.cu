/*
 * gemm.cu - row-major GEMMs on cuBLASLt: bf16 operands, fp32 accumulation,
 * bf16 or fp32 output, optional accumulate into the output (beta = 1).
 *
 * cuBLASLt is column-major. A row-major (r, c) matrix with leading
 * dimension ld is, read column-major, its own transpose (c, r) with the
 * same ld. So the row-major product
 *     D (M, N) = op(A) (M, K) op(B) (K, N)
 * is the column-major product
 *     D^T (N, M) = op(B)^T (N, K) op(A)^T (K, M),
 * i.e. cuBLASLt gets m' = N, n' = M, k = K, its A' is our B with our B's
 * transpose flag and its B' is our A with our A's flag; no data moves.
 * For a linear layer y = x W^T (x (N, C), W (OC, C)) this makes
 *     forward  y  = x W^T      cuBLASLt "TN" (W as A', transposed)
 *     dgrad    dx = dy W       cuBLASLt "NN"
 *     wgrad    dW += dy^T x    cuBLASLt "NT", fp32 D with beta = 1
 * which are the layouts cuBLASLt's Hopper kernels run at full speed.
 *
 * Each distinct (shape, layout, dtype, beta, alignment) gets one plan:
 * the matmul descriptor, the three layouts and the algorithm the
 * heuristic ranks first, made on first use and cached in the context; a
 * step then issues cublasLtMatmul with no setup. Plans are found by a
 * linear scan: a model has a few dozen shapes and the scan costs far less
 * than the launch.
 *
 * With autotuning on (cuda_ctx_gemm_autotune) a new plan instead times
 * the heuristic's top GEMM_TUNE_CANDIDATES algorithms on the call's own
 * A and B, writing a scratch D (so an accumulating call's output is not
 * touched), GEMM_TUNE_REPEATS launches each after one warm-up, and keeps
 * the fastest. It synchronizes the stream and allocates the scratch D
 * (cudaMalloc) once per new shape; when that memory is not there the
 * heuristic's first choice stands.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define GEMM_TUNE_CANDIDATES 8
#define GEMM_TUNE_REPEATS 5

/* The operands of the call a new plan is made for: what autotuning times. */
struct gemm_operands {
	const void *A, *B;
	size_t d_bytes;
	cudaStream_t st;
};

/* Largest power of two up to 256 that divides every address and row pitch. */
static int common_alignment(const void *const ptrs[4], const int64_t pitches[3])
{
	uintptr_t bits = 256;
	for (int i = 0; i < 4; i++)
		bits |= (uintptr_t)ptrs[i];
	for (int i = 0; i < 3; i++)
		bits |= (uintptr_t)pitches[i];
	return (int)(bits & (~bits + 1)); /* lowest set bit */
}

/*
 * The fastest of the n candidates res[] for plan p on the operands,
 * timed on a scratch D; 0 (the heuristic's first) when the scratch cannot
 * be had or a candidate fails to run.
 */
static int tune(struct cuda_ctx *ctx, const struct gemm_plan *p, const cublasLtMatmulHeuristicResult_t *res,
		int n, const struct gemm_operands *o)
{
	void *d = NULL;
	cudaEvent_t e0, e1;
	const float alpha = 1.0f, beta = 0.0f;
	int best = 0;
	float best_ms = -1.0f;

	if (n <= 1 || cudaMalloc(&d, o->d_bytes) != cudaSuccess) {
		(void)cudaGetLastError(); /* out of memory for the scratch: no tuning for this shape */
		return 0;
	}
	cudaCheck(cudaEventCreate(&e0));
	cudaCheck(cudaEventCreate(&e1));
	for (int i = 0; i < n; i++) {
		float ms = 0.0f;
		int ok = 1;
		for (int r = 0; r <= GEMM_TUNE_REPEATS && ok; r++) {
			if (r == 1)
				cudaCheck(cudaEventRecord(e0, o->st));
			ok = cublasLtMatmul(ctx->lt, p->desc, &alpha, o->B, p->a, o->A, p->b, &beta, d, p->d,
					    d, p->d, &res[i].algo, ctx->workspace, GEMM_WORKSPACE_BYTES,
					    o->st) == CUBLAS_STATUS_SUCCESS;
		}
		cudaCheck(cudaEventRecord(e1, o->st));
		cudaCheck(cudaEventSynchronize(e1));
		if (!ok)
			continue;
		cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
		if (best_ms < 0.0f || ms < best_ms) {
			best_ms = ms;
			best = i;
		}
	}
	cudaCheck(cudaEventDestroy(e1));
	cudaCheck(cudaEventDestroy(e0));
	cudaCheck(cudaFree(d));
	return best;
}

static void plan_make(struct cuda_ctx *ctx, struct gemm_plan *p, const struct gemm_key *k,
		      const struct gemm_operands *o)
{
	const cublasOperation_t op_n = CUBLAS_OP_N, op_t = CUBLAS_OP_T;
	/* column-major view: A' = our B, B' = our A */
	cublasOperation_t opa = k->tb ? op_t : op_n;
	cublasOperation_t opb = k->ta ? op_t : op_n;
	uint64_t a_rows = k->tb ? k->K : k->N, a_cols = k->tb ? k->N : k->K;
	uint64_t b_rows = k->ta ? k->M : k->K, b_cols = k->ta ? k->K : k->M;

	p->key = *k;
	cublasCheck(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa,
						   sizeof(opa)));
	cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb,
						   sizeof(opb)));
	cublasCheck(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, a_rows, a_cols, k->ldb));
	cublasCheck(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, b_rows, b_cols, k->lda));
	cublasCheck(cublasLtMatrixLayoutCreate(&p->d, (cudaDataType_t)k->dtype, k->N, k->M,
					       k->ldd));

	cublasLtMatmulPreference_t pref;
	uint64_t ws = GEMM_WORKSPACE_BYTES;
	uint32_t align = (uint32_t)k->align;
	cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
	cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
							 &ws, sizeof(ws)));
	const cublasLtMatmulPreferenceAttributes_t aligns[4] = {
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
	};
	for (int i = 0; i < 4; i++)
		cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &align,
								 sizeof(align)));

	cublasLtMatmulHeuristicResult_t res[GEMM_TUNE_CANDIDATES];
	int found = 0;
	cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(ctx->lt, p->desc, p->a, p->b, p->d, p->d,
							  pref, ctx->autotune ? GEMM_TUNE_CANDIDATES : 1,
							  res, &found);
	cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
	if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
		char msg[256];
		snprintf(msg, sizeof(msg), "no algorithm for row-major D (%d, %d) = op(A) op(B), "
			 "K %d, ta %d tb %d, ld %lld %lld %lld, %s output, alignment %d: %s",
			 k->M, k->N, k->K, k->ta, k->tb, (long long)k->lda, (long long)k->ldb,
			 (long long)k->ldd, k->dtype == CUDA_R_32F ? "fp32" : "bf16", k->align,
			 s == CUBLAS_STATUS_SUCCESS ? "heuristic returned nothing"
						    : cublasLtGetStatusString(s));
		cuda_fail("cuBLAS", "cublasLtMatmulAlgoGetHeuristic", msg, __FILE__, __LINE__);
	}
	p->algo = res[ctx->autotune ? tune(ctx, p, res, found, o) : 0].algo;
}

void gemm_plan_destroy(struct gemm_plan *p)
{
	cublasCheck(cublasLtMatrixLayoutDestroy(p->d));
	cublasCheck(cublasLtMatrixLayoutDestroy(p->b));
	cublasCheck(cublasLtMatrixLayoutDestroy(p->a));
	cublasCheck(cublasLtMatmulDescDestroy(p->desc));
}

/* The cached plan for k, made on a miss; a full cache replaces its oldest plan. */
static struct gemm_plan *plan_get(struct cuda_ctx *ctx, const struct gemm_key *k,
				  const struct gemm_operands *o)
{
	for (int i = 0; i < ctx->nplans; i++)
		if (memcmp(&ctx->plans[i].key, k, sizeof(*k)) == 0)
			return &ctx->plans[i];
	struct gemm_plan *p;
	if (ctx->nplans < GEMM_PLANS_MAX) {
		p = &ctx->plans[ctx->nplans++];
	} else {
		p = &ctx->plans[ctx->plan_next];
		ctx->plan_next = (ctx->plan_next + 1) % GEMM_PLANS_MAX;
		gemm_plan_destroy(p); /* cublasLtMatmul keeps no reference to a descriptor */
	}
	plan_make(ctx, p, k, o);
	return p;
}

void gemm_rm(struct cuda_ctx *ctx, cudaStream_t st, int ta, int tb, int M, int N, int K,
	     const bf16 *A, int64_t lda, const bf16 *B, int64_t ldb, void *D,
	     cudaDataType_t dtype, int64_t ldd, float beta, const void *C)
{
	cuda_assert(dtype == CUDA_R_16BF || dtype == CUDA_R_32F);
	cuda_assert(M > 0 && N > 0 && K > 0);
	cuda_assert(lda >= (ta ? M : K) && ldb >= (tb ? K : N) && ldd >= N);
	if (beta == 0.0f || C == NULL) {
		cuda_assert(beta == 0.0f);
		C = D;
	}
	size_t esize = dtype == CUDA_R_32F ? 4 : 2;
	const void *ptrs[4] = { A, B, C, D };
	const int64_t pitches[3] = { lda * 2, ldb * 2, ldd * (int64_t)esize };

	struct gemm_key k;
	memset(&k, 0, sizeof(k)); /* padding too: keys compare with memcmp */
	k.ta = ta;
	k.tb = tb;
	k.M = M;
	k.N = N;
	k.K = K;
	k.lda = lda;
	k.ldb = ldb;
	k.ldd = ldd;
	k.dtype = (int)dtype;
	k.beta_nonzero = beta != 0.0f;
	k.align = common_alignment(ptrs, pitches);
	cuda_assert(k.align >= 2);

	struct gemm_operands ops = { A, B, (size_t)M * (size_t)ldd * esize, st };
	struct gemm_plan *p = plan_get(ctx, &k, &ops);
	const float alpha = 1.0f;
	cublasCheck(cublasLtMatmul(ctx->lt, p->desc, &alpha, B, p->a, A, p->b, &beta, C, p->d, D,
				   p->d, &p->algo, ctx->workspace, GEMM_WORKSPACE_BYTES, st));
}
