/*
 * internal.h - what the .cu files of gpu/cuda share and nobody else sees:
 * the context's insides, the row-major GEMM on cuBLASLt, the kernel
 * timing hooks and a few launch helpers. CUDA C++ only.
 */
#ifndef GPU_CUDA_INTERNAL_H
#define GPU_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "check.h"
#include "cuda_model.h"

/* ---- context ---------------------------------------------------------------- */

#define GEMM_WORKSPACE_BYTES (32u << 20) /* what cuBLAS asks for on Hopper */
#define GEMM_PLANS_MAX 128               /* distinct GEMM shapes of a run: a few dozen */
#define PROF_FIRST 512                   /* timing entries made at first; more on demand */

/* Everything that identifies a cuBLASLt plan; compared with memcmp. */
struct gemm_key {
	int ta, tb;            /* row-major op(A), op(B) transposed */
	int M, N, K;           /* row-major D (M, N) = op(A) (M, K) op(B) (K, N) */
	int64_t lda, ldb, ldd; /* row-major leading dimensions (elements) */
	int dtype;             /* cudaDataType_t of C and D */
	int beta_nonzero;
	int align;             /* bytes every pointer and row is aligned to */
};

struct gemm_plan {
	struct gemm_key key;
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t a, b, d; /* column-major A', B', and C = D */
	cublasLtMatmulAlgo_t algo;
};

struct prof_entry {
	const char *name;
	cudaEvent_t start, stop;
};

struct cuda_ctx {
	cublasLtHandle_t lt;
	void *workspace;               /* GEMM_WORKSPACE_BYTES */
	struct gemm_plan plans[GEMM_PLANS_MAX];
	int nplans;
	int plan_next;                 /* the plan a full cache replaces next */
	void *scratch;                 /* device scratch, scratch_bytes */
	size_t scratch_bytes;
	int grad_bf16;                 /* parameter gradients are bf16 (cuda_ctx_grad_bf16) */
	int attention;                 /* enum cuda_attention asked for */
	int attention_used;            /* what the last attention launch used */
	const char *attention_msg;     /* why cuDNN was not used, when asked for */
	struct cudnn_sdpa *sdpa;       /* cuDNN's plans and handle (attention_cudnn.c), NULL until used */
	int gqa_repeat;                /* cuDNN's GQA backward on the repeated copy (cuda_ctx_attention_gqa_repeat) */
	int mask_float;                /* cuDNN's causal mask by FLOAT indices alone (cuda_ctx_attention_mask_float) */
	int autotune;                  /* time the heuristic's candidates per GEMM shape */
	int prof_on;
	int nprof;                     /* entries recorded since the last read */
	int prof_cap;                  /* entries with events made; grows by doubling */
	struct prof_entry *prof;
};

/* The first bytes of ctx scratch; aborts with a message when it is too small. */
void *ctx_scratch(struct cuda_ctx *ctx, size_t bytes);

/* Timing hooks: no-ops unless profiling is on. Every begin has one end. */
void prof_begin(struct cuda_ctx *ctx, cudaStream_t st, const char *name);
void prof_end(struct cuda_ctx *ctx, cudaStream_t st);

/* ---- GEMM ----------------------------------------------------------------------- */

/* Release a plan's cuBLASLt descriptors. */
void gemm_plan_destroy(struct gemm_plan *p);

/*
 * Row-major D (M, N) = op(A) (M, K) op(B) (K, N) + beta C, bf16 A and B,
 * fp32 accumulation, D of dtype CUDA_R_16BF or CUDA_R_32F. C has D's type
 * and ldd; it may equal D (accumulate) and is ignored when beta = 0.
 * ta: A is stored (K, M) row-major; tb: B is stored (N, K).
 */
void gemm_rm(struct cuda_ctx *ctx, cudaStream_t st, int ta, int tb, int M, int N, int K,
	     const bf16 *A, int64_t lda, const bf16 *B, int64_t ldb, void *D,
	     cudaDataType_t dtype, int64_t ldd, float beta, const void *C);

/* ---- kernels the block code uses beyond the public API ----------------------- */

/* The cuBLASLt type of the context's parameter gradients, and their element size. */
static inline cudaDataType_t grad_dtype(const struct cuda_ctx *ctx)
{
	return ctx->grad_bf16 ? CUDA_R_16BF : CUDA_R_32F;
}

static inline size_t grad_bytes(const struct cuda_ctx *ctx)
{
	return ctx->grad_bf16 ? 2 : 4;
}

/* dst (n, bf16) += src (n, fp32), rounded once. */
void add_f32_to_bf16(bf16 *dst, const float *src, int n, cudaStream_t st);

/*
 * A norm weight's gradient in the context's type: dx as
 * rmsnorm_backward_add; dw (C) += in fp32, or, for bf16 gradients, summed
 * in fp32 context scratch (C floats) and added once.
 */
void norm_backward(struct cuda_ctx *ctx, bf16 *dx, void *dw, const bf16 *dout, const bf16 *dres,
		   const bf16 *x, const bf16 *w, const float *rstd, int N, int C, cudaStream_t st);


/*
 * cuDNN's SDPA (attention_cudnn.c, plain C on cuDNN's backend API, loaded
 * with dlopen): 0 when the launch was made, -1 (with *why set) when cuDNN
 * is not there or builds no plan for the shape; nothing was launched then.
 * cudnn_sdpa_free releases the plans and handle (NULL is a no-op).
 */
struct cudnn_sdpa;
/* flags: the backward under GQA on the repeated copy; the causal mask's FLOAT-index graph alone */
#define CUDNN_SDPA_GQA_REPEAT 1u
#define CUDNN_SDPA_MASK_FLOAT 2u
int cudnn_sdpa_forward(struct cudnn_sdpa **sp, bf16 *out, float *lse, const bf16 *qkv, int B, int T,
		       int H, int KV, int Q, void *workspace, size_t workspace_bytes, unsigned flags,
		       cudaStream_t st, const char **why);
int cudnn_sdpa_backward(struct cudnn_sdpa **sp, bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
			const bf16 *out, const float *lse, int B, int T, int H, int KV, int Q,
			void *workspace, size_t workspace_bytes, unsigned flags, cudaStream_t st,
			const char **why);
void cudnn_sdpa_free(struct cudnn_sdpa *s);
/* The causal mask's index type cuDNN's plans were built with: "int32", "float", "int32 and float", NULL: none */
const char *cudnn_sdpa_mask(const struct cudnn_sdpa *s);
/*
 * How the last GQA backward ran: "the graph of KV heads", "the repeated
 * copy", NULL: none yet; *why: why not by the graph of KV heads, when not
 * (NULL otherwise).
 */
const char *cudnn_sdpa_gqa(const struct cudnn_sdpa *s, const char **why);

/* dx = rmsnorm backward + dres (dres may be NULL); dx may alias dout or dres. */
void rmsnorm_backward_add(bf16 *dx, float *dw, const bf16 *dout, const bf16 *dres,
			  const bf16 *x, const bf16 *w, const float *rstd, int N, int C,
			  cudaStream_t st);
/*
 * The loss's rows, one launch each way (a chunk of rows, or all N): lse and
 * the row losses of fp32 logits (rows, V); and the bf16 gradient dlogits
 * (row stride ldd, in place over the logits with ldd = 2V) scaled by scale.
 */
void ce_forward_rows(float *lse, float *row_loss, const float *logits, const int *targets,
		     int rows, int V, cudaStream_t st);
void ce_backward_rows(bf16 *dlogits, int64_t ldd, const float *logits, const float *lse,
		      const int *targets, int rows, int V, float scale, cudaStream_t st);
/* Rope from src to dst (value heads copied when they differ); sign -1 is backward. */
void rope_apply(bf16 *dst, const bf16 *src, int B, int T, int H, int KV, int Q, float theta,
		int sign, cudaStream_t st);

/* ---- helpers ---------------------------------------------------------------------- */

static inline unsigned cdiv(int64_t a, int64_t b)
{
	return (unsigned)((a + b - 1) / b);
}

/* Round a byte count up to the 256-byte alignment every buffer field gets (MODEL_FIELD_ALIGN). */
static inline size_t align256(size_t bytes)
{
	return (bytes + MODEL_FIELD_ALIGN - 1) & ~(size_t)(MODEL_FIELD_ALIGN - 1);
}

/* Raise a kernel's dynamic shared memory limit once, when it needs more than 48 KiB. */
#define KERNEL_SMEM_OPT_IN(kernel, bytes)                                                    \
	cudaCheck(cudaFuncSetAttribute((kernel), cudaFuncAttributeMaxDynamicSharedMemorySize, \
				       (int)(bytes)))

#endif
