/*
 * cuda_kernel.h - how the CUDA model launches one kernel of core/model.c's
 * lists, by name and shape, so that it can be run alone: what
 * `gpu_run --calibrate --device cuda` times for every kernel of the model
 * (gpu/run/calibrate.c), the same launches the block, head and model
 * functions make (block.cu, layers.cu), with the same operand layouts,
 * leading dimensions, output types and epilogues.
 *
 * Plain C with no CUDA header (kernel_plan.c), so that the CPU tests check
 * that every kernel of every list has a plan; cuda_kernel_run (cuda_model.h,
 * kernel_run.cu) launches one.
 *
 * What the CUDA model launches for each name:
 *   - GEMMs by their call sites: forward y = x W^T (bf16 out; "wo" and
 *     "down" with the residual as the beta = 1 epilogue, "output" and
 *     "output_recompute" into fp32 logits), dgrad (bf16 out; "output_dgrad"
 *     reading the bf16 gradient written in place over the fp32 logits, row
 *     stride 2V), wgrad (accumulated, beta = 1, into the parameter
 *     gradient's type); the grid's "gemm" as a forward;
 *   - the residual adds ("residual1", "residual2" and their backward) have
 *     no launch: the forward's are the Wo and down GEMM epilogues, the
 *     backward's are folded into the RMSNorm backward kernels;
 *   - norms, rope, attention (the context's choice of kernels: mma or
 *     cuDNN), SwiGLU, embedding, each forward and backward;
 *   - the loss over the logits in launches of the loss chunk's rows (all N
 *     rows at once for the full loss), its backward likewise, telling the
 *     two loss modes apart by the kernel's bytes (core/model.c).
 */
#ifndef GPU_CUDA_KERNEL_H
#define GPU_CUDA_KERNEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "model.h"

enum cuda_kernel_form {
	CUDA_KF_FUSED,      /* nothing of its own: fused into another kernel */
	CUDA_KF_GEMM,
	CUDA_KF_NORM,
	CUDA_KF_NORM_BWD,
	CUDA_KF_ROPE,
	CUDA_KF_ROPE_BWD,
	CUDA_KF_ATTN,
	CUDA_KF_ATTN_BWD,
	CUDA_KF_SWIGLU,
	CUDA_KF_SWIGLU_BWD,
	CUDA_KF_EMBED,
	CUDA_KF_EMBED_BWD,
	CUDA_KF_LOSS,
	CUDA_KF_LOSS_BWD,
};

#define CUDA_KERNEL_OPERANDS 7

struct cuda_kernel_plan {
	enum cuda_kernel_form form;
	struct model_dims d;       /* the model's, for `batch` sequences */
	/* CUDA_KF_GEMM: gemm_rm's row-major D (M, N) = op(A) (M, K) op(B) (K, N) (+ C) */
	int ta, tb, M, N, K;
	int64_t lda, ldb, ldd;
	int d_fp32;                /* D is fp32 (the logits); else bf16, or the gradient type when d_grad */
	int d_grad;                /* D is a parameter gradient: accumulated (beta = 1, C = D) */
	int residual;              /* C is a residual of its own, beta = 1 (x1 = x + Wo att) */
	int norm_residual;         /* CUDA_KF_NORM_BWD: the residual's gradient is added (the block's norms) */
	int chunk;                 /* CUDA_KF_LOSS, _BWD: rows per launch (N for the full loss) */
	int grad_bf16;             /* parameter gradients are bf16 (else fp32) */
	int ids;                   /* reads N token ids (embeddings, the loss's targets) */
	uint64_t bytes[CUDA_KERNEL_OPERANDS]; /* the device operands, in the order kernel_run.cu takes them */
	int noperands;
};

/*
 * The plan of kernel k (a kernel of model_segment_kernels' lists for
 * model m and `batch` sequences at 2-byte activations, or a "gemm" of any
 * shape), with parameter gradients bf16 or fp32. 0, or -1 with a message
 * in err for a kernel the CUDA model does not launch.
 */
int cuda_kernel_plan(const struct kernel *k, const struct model_shape *m, int batch, int grad_bf16,
		     struct cuda_kernel_plan *p, char *err, int errlen);

/* Bytes of one buffer holding the plan's operands, each from a 256-byte aligned offset. */
uint64_t cuda_kernel_bytes(const struct cuda_kernel_plan *p);
/* The offset of operand i in that buffer. */
uint64_t cuda_kernel_offset(const struct cuda_kernel_plan *p, int i);

#ifdef __cplusplus
}
#endif

#endif
