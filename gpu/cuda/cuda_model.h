/*
 * cuda_model.h - the Llama decoder's training step on one GPU, in CUDA:
 * the C-callable API gpu_run links. It mirrors gpu/ref/ref.h function by
 * function (cuda_ prefix, same argument order) and is checked against it
 * by gpu_test.
 *
 * Differences from the reference, all deliberate:
 *   - Pointers are device pointers. Activations and parameters are bf16;
 *     statistics (rstd, lse), logits and the loss are fp32.
 *   - Parameter gradients are fp32 accumulation buffers (same flat layout
 *     as the parameters, 4 bytes an element) by default: the wgrad GEMMs
 *     accumulate into them with beta = 1 and the norm / embedding gradients
 *     with fp32 atomics, so microbatches add up without bf16 rounding. A
 *     bf16 reduce dtype is a cast before the reduce-scatter, not a
 *     different backward. A context can switch them to bf16
 *     (cuda_ctx_grad_bf16: the unsharded gradient of mixed precision as
 *     PyTorch keeps it, which gpu_run's schedules hold); the functions
 *     that take a context then read their gradient pointers (void *) as
 *     bf16.
 *   - Every launch goes to the cudaStream_t passed last; nothing
 *     synchronizes the host unless its comment says so. The loss is written
 *     to a device float instead of being returned.
 *   - Functions that run GEMMs or need scratch take a struct cuda_ctx first
 *     (cuBLASLt handle, its workspace, the cache of matmul plans, device
 *     scratch). A context serves one stream at a time: two streams that run
 *     GEMMs concurrently need two contexts (the workspace is shared).
 *   - Sizes are bytes (mixed dtypes). The buffers' layouts (stores,
 *     scratch, parameter pointers) are cuda_layout.h's: core/model.c's
 *     store table at bf16, every field 256-byte aligned.
 *
 * Supported shapes (cuda_shape_check): head dim Q in {16, 32, 64, 128}
 * (the attention kernel's tiles), D, F and V multiples of 8 (16-byte
 * vector accesses). Anything else is refused at start-up.
 */
#ifndef GPU_CUDA_MODEL_H
#define GPU_CUDA_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "cuda_kernel.h" /* one kernel of the lists: its launch plan */
#include "cuda_layout.h" /* bf16, model.h, the stores and their host-side layout */

#ifdef __cplusplus
extern "C" {
#endif

#define CUDA_RMS_EPS 1e-5f

/* ---- context -------------------------------------------------------------- */

struct cuda_ctx;

/*
 * A context for the current device: a cuBLASLt handle, one 32 MiB GEMM
 * workspace, the matmul plan cache and scratch_bytes of device scratch
 * (cuda_scratch_bytes). Aborts through the check hook on failure.
 */
struct cuda_ctx *cuda_ctx_new(size_t scratch_bytes);

/*
 * The NVIDIA kernel driver's version ("580.159.04") from
 * /proc/driver/nvidia/version, or "unknown": the first word after
 * "Kernel Module" made of digits and dots (the open module's line reads
 * "... Open Kernel Module for x86_64  580.159.04  Release Build ...").
 */
void cuda_driver_version(char *out, size_t len);
/* Frees everything; synchronizes the device. cuda_ctx_free(NULL) is a no-op. */
void cuda_ctx_free(struct cuda_ctx *ctx);
/* Grow the scratch to at least bytes (synchronizes the device when it grows). */
void cuda_ctx_reserve(struct cuda_ctx *ctx, size_t bytes);

/*
 * Parameter gradients of the backward functions that take ctx: fp32 (0,
 * the default) or bf16 (1). With bf16 the wgrad GEMMs accumulate into a
 * bf16 C = D (fp32 inside the GEMM, one rounding per call), a norm
 * weight's gradient is summed in fp32 context scratch and added to the
 * bf16 buffer once, and the embedding's is cuda_embedding_backward_bf16.
 * Host-side state: it applies to the launches that follow.
 */
void cuda_ctx_grad_bf16(struct cuda_ctx *ctx, int on);

/*
 * The attention kernels a context's block functions launch: the mma.sync
 * flash kernels of attention.cu (the default, and the oracle), or cuDNN's
 * fused scaled-dot-product attention through its graph API
 * (attention_cudnn.c) where cuDNN 9 is loadable and builds a plan for the
 * shape; otherwise the mma kernels run and cuda_ctx_attention_used says
 * so. Host-side state.
 */
enum cuda_attention { CUDA_ATTN_MMA, CUDA_ATTN_CUDNN };
void cuda_ctx_attention(struct cuda_ctx *ctx, enum cuda_attention a);
/* What the last attention launch used, and why not cuDNN when asked for (msg, may be NULL). */
enum cuda_attention cuda_ctx_attention_used(const struct cuda_ctx *ctx, const char **msg);
/* The index type of the causal mask in cuDNN's attention plans ("int32", "float", both; NULL: no plan yet) */
const char *cuda_ctx_attention_mask(const struct cuda_ctx *ctx);
/*
 * cuDNN's backward under GQA: the graph of KV heads, its dK and dV summed
 * over each group inside it, as cudnn-frontend builds it (the default), or
 * (on) the graph of H heads on a copy with K and V repeated, then the
 * group sums (the form the first GPU sessions ran; also where cuDNN builds
 * no plan for the first).
 */
void cuda_ctx_attention_gqa_repeat(struct cuda_ctx *ctx, int on);
/*
 * cuDNN's causal mask: its row and column indices INT32 where cuDNN builds
 * a plan so, as cudnn-frontend builds them (the default), else FLOAT; on:
 * FLOAT alone, the graph the first GPU sessions ran and checked (plans are
 * kept per shape and choice).
 */
void cuda_ctx_attention_mask_float(struct cuda_ctx *ctx, int on);
/* How the last GQA backward by cuDNN ran ("the graph of KV heads", "the repeated copy"; NULL: none), *why: why not the first */
const char *cuda_ctx_attention_gqa(const struct cuda_ctx *ctx, const char **why);
/* cuDNN's version (cudnnGetVersion: 91000 for 9.10.0), loading it if need be; 0 with the reason when not loadable. */
size_t cuda_cudnn_version(const char **why);
/*
 * The operations of the attention graph (forward, or backward; under GQA,
 * KV < H, the graph of the KV heads with the group sums, or with KV = H
 * the graph the repeated copy runs), built and finalized one by one in
 * cuDNN as attention_cudnn.cu builds them, without a device (cuDNN checks
 * each operation's tensors on the host; the graph and its plans need a
 * device): 0 when every descriptor finalizes, -1 when cuDNN refuses one,
 * 1 when cuDNN is not loadable; why says which, or how many operations.
 */
int cuda_cudnn_check_ops(int B, int T, int H, int KV, int Q, int backward, int int32_index, char *why, size_t n);

/*
 * cuBLASLt algorithm selection: 0 (the default until measured) takes the
 * heuristic's first algorithm; 1 times the heuristic's top candidates
 * (up to 8) once per GEMM shape, on the shape's own operands, and keeps
 * the fastest. The timing synchronizes the stream once per new shape:
 * warm up before a timed step. Host-side state.
 */
void cuda_ctx_gemm_autotune(struct cuda_ctx *ctx, int on);

/* Scratch the attention backward needs: dq accumulator (N, H Q) and delta (B, H, T), fp32. */
size_t cuda_attention_scratch_bytes(int B, int T, int H, int Q);
/* Scratch every function below needs for a model shape and B sequences. */
size_t cuda_scratch_bytes(const struct model_shape *m, int B);

/* 0 when the CUDA kernels support the shape; else -1 and a message in err. */
int cuda_shape_check(const struct model_shape *m, char *err, int errlen);
/* 1 when the attention kernels have tiles for head dim Q. */
int cuda_attention_supported(int Q);

/*
 * Per-kernel timing: while on, the block, head and model functions put a
 * CUDA event pair around each kernel they launch, named as core/model.c
 * names the kernels ("qkv", "attention", "down_wgrad", ...; residual adds
 * are fused into GEMMs and norms and have no entry). Any number of kernels
 * may be timed between reads (the entries grow). Count says how many are
 * pending; read synchronizes, copies up to max of them and clears all;
 * returns the number written.
 */
struct cuda_kernel_time {
	char name[24];
	float ms;
};
void cuda_ctx_profile(struct cuda_ctx *ctx, int on);
int cuda_ctx_profile_count(const struct cuda_ctx *ctx);
int cuda_ctx_profile_read(struct cuda_ctx *ctx, struct cuda_kernel_time *out, int max);

/* ---- layers ---------------------------------------------------------------- */

/* out (N, D) = wte[tokens[n]], wte (V, D). */
void cuda_embedding_forward(bf16 *out, const int *tokens, const bf16 *wte, int N, int D,
			    cudaStream_t st);
/* dwte (V, D) += dout scattered by token (fp32 atomics). */
void cuda_embedding_backward(float *dwte, const bf16 *dout, const int *tokens, int N, int D,
			     cudaStream_t st);
/*
 * The same into a bf16 dwte: each distinct token's rows of dout are summed
 * in fp32 in a fixed order and added to its row once (one rounding,
 * deterministic). O(N^2) token comparisons: about 10^8 for N = 8192.
 */
void cuda_embedding_backward_bf16(bf16 *dwte, const bf16 *dout, const int *tokens, int N, int D,
				  cudaStream_t st);

/* out (N, C) = x * rstd * w, rstd (N) = 1 / sqrt(mean(x^2) + eps). */
void cuda_rmsnorm_forward(bf16 *out, float *rstd, const bf16 *x, const bf16 *w, int N, int C,
			  cudaStream_t st);
/* dx (N, C) = (written), dw (C) +=. dx may alias dout. */
void cuda_rmsnorm_backward(bf16 *dx, float *dw, const bf16 *dout, const bf16 *x, const bf16 *w,
			   const float *rstd, int N, int C, cudaStream_t st);

/* out (N, OC) = x (N, C) w^T, w (OC, C). */
void cuda_linear_forward(struct cuda_ctx *ctx, bf16 *out, const bf16 *x, const bf16 *w, int N,
			 int C, int OC, cudaStream_t st);
/* dx (N, C) = dout w (skipped when dx is NULL); dw (OC, C) += dout^T x (ctx's gradient type). */
void cuda_linear_backward(struct cuda_ctx *ctx, bf16 *dx, void *dw, const bf16 *dout,
			  const bf16 *x, const bf16 *w, int N, int C, int OC, cudaStream_t st);

/* Rotary embedding in place on the query and key heads of qkv (N, (H + 2 KV) Q). */
void cuda_rope_forward(bf16 *qkv, int B, int T, int H, int KV, int Q, float theta,
		       cudaStream_t st);
/* The transpose, in place on dqkv's query and key heads. */
void cuda_rope_backward(bf16 *dqkv, int B, int T, int H, int KV, int Q, float theta,
			cudaStream_t st);

/*
 * Causal GQA attention over roped qkv; out (N, H Q), lse (B, H, T). Flash
 * style: no T x T matrix exists anywhere. Q must be supported.
 */
void cuda_attention_forward(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int H, int KV,
			    int Q, cudaStream_t st);
/* dqkv (N, (H + 2 KV) Q) = (written). Uses cuda_attention_scratch_bytes of ctx scratch. */
void cuda_attention_backward(struct cuda_ctx *ctx, bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
			     const bf16 *out, const float *lse, int B, int T, int H, int KV, int Q,
			     cudaStream_t st);
/*
 * The same two through the context's choice (cuda_ctx_attention): cuDNN's
 * fused SDPA when asked for and it builds a plan, else the mma.sync
 * kernels above; the block functions call these.
 */
void cuda_attention_forward_ctx(struct cuda_ctx *ctx, bf16 *out, float *lse, const bf16 *qkv,
				int B, int T, int H, int KV, int Q, cudaStream_t st);
void cuda_attention_backward_ctx(struct cuda_ctx *ctx, bf16 *dqkv, const bf16 *dout,
				 const bf16 *qkv, const bf16 *out, const float *lse, int B, int T,
				 int H, int KV, int Q, cudaStream_t st);

/* h (N, F) = silu(gate) * up, gateup (N, 2F) = [gate | up]. */
void cuda_swiglu_forward(bf16 *h, const bf16 *gateup, int N, int F, cudaStream_t st);
/* dgateup (N, 2F) = (written). */
void cuda_swiglu_backward(bf16 *dgateup, const bf16 *dh, const bf16 *gateup, int N, int F,
			  cudaStream_t st);

/*
 * Mean cross-entropy of fp32 logits (N, V) against targets (N): *loss
 * (device) = the mean, lse (N) kept. Uses N floats of ctx scratch.
 */
void cuda_cross_entropy_forward(struct cuda_ctx *ctx, float *loss, float *lse,
				const float *logits, const int *targets, int N, int V,
				cudaStream_t st);
/*
 * dlogits = dloss / N * (softmax - onehot) in bf16, row n at dlogits + n *
 * ldd. It may overwrite the logits in place: dlogits == (bf16 *)logits with
 * ldd = 2 V puts each bf16 row at the start of its own fp32 row.
 */
void cuda_cross_entropy_backward(bf16 *dlogits, int64_t ldd, const float *logits,
				 const float *lse, const int *targets, int N, int V, float dloss,
				 cudaStream_t st);

/*
 * Output projection and loss, as ref_lm_loss_*: logits is fp32 (N, V) for
 * LOSS_FULL or (chunk, V) scratch for LOSS_CHUNKED, which never holds the
 * full (N, V). Backward turns each logits row into its bf16 dlogits in
 * place (row stride 2V), then dxn (N, D) = (written), dw_out (V, D) += (ctx's
 * gradient type).
 */
void cuda_lm_loss_forward(struct cuda_ctx *ctx, float *loss, float *lse, float *logits,
			  const bf16 *xn, const bf16 *w_out, const int *targets, int N, int D,
			  int V, enum loss_mode mode, int chunk, cudaStream_t st);
void cuda_lm_loss_backward(struct cuda_ctx *ctx, bf16 *dxn, void *dw_out, float *logits,
			   const bf16 *xn, const bf16 *w_out, const float *lse, const int *targets,
			   int N, int D, int V, enum loss_mode mode, int chunk, cudaStream_t st);

/* ---- one transformer block ------------------------------------------------- */

/* struct cuda_block_store, its sizes and cuda_block_scratch_bytes: cuda_layout.h. */

/* out (N, D) = the block of s->x; fills every field. out may not alias s->x. */
void cuda_block_forward(struct cuda_ctx *ctx, bf16 *out, struct cuda_block_store *s,
			const bf16 *params, const struct model_shape *m, int B, cudaStream_t st);
/* Rebuild the transient fields (nothing for AC_NONE); sets s->complete. */
void cuda_block_recompute(struct cuda_ctx *ctx, struct cuda_block_store *s, const bf16 *params,
			  const struct model_shape *m, int B, cudaStream_t st);
/*
 * dx (N, D) = (written), dparams (block flat layout, ctx's gradient type)
 * +=, from dout. Recomputes first unless s->complete. scratch holds
 * cuda_block_scratch_bytes. dx may alias dout.
 */
void cuda_block_backward(struct cuda_ctx *ctx, bf16 *dx, void *dparams, const bf16 *dout,
			 struct cuda_block_store *s, const bf16 *params, void *scratch,
			 const struct model_shape *m, int B, cudaStream_t st);

/* ---- head: final norm, output projection, loss ------------------------------ */

/* struct cuda_head_store and its sizes: cuda_layout.h. */

/* *loss (device) = mean cross-entropy of final_norm(s->x) w_out^T. */
void cuda_head_forward(struct cuda_ctx *ctx, float *loss, struct cuda_head_store *s,
		       const bf16 *norm_w, const bf16 *w_out, const int *targets,
		       const struct model_shape *m, int B, cudaStream_t st);
/* dx (N, D) = (written); dnorm_w (D) +=, dw_out (V, D) += (ctx's gradient type). Once per forward. */
void cuda_head_backward(struct cuda_ctx *ctx, bf16 *dx, void *dnorm_w, void *dw_out,
			struct cuda_head_store *s, const bf16 *norm_w, const bf16 *w_out,
			const int *targets, const struct model_shape *m, int B, cudaStream_t st);

/* ---- whole model ------------------------------------------------------------ */

/* struct cuda_model, struct cuda_acts and where they point: cuda_layout.h. */

/* NULL when host or device memory runs out. cuda_acts_free(NULL) is a no-op. */
struct cuda_acts *cuda_acts_new(const struct model_shape *m, int B, enum ac_mode ac,
				enum loss_mode loss, int chunk);
void cuda_acts_free(struct cuda_acts *a);

/* *loss (device) = mean loss of tokens (N, device) predicting targets (N, device). */
void cuda_model_forward(struct cuda_ctx *ctx, float *loss, const struct cuda_model *model,
			struct cuda_acts *a, const int *tokens, const int *targets,
			cudaStream_t st);
/* Accumulate every parameter gradient (+=). Once per forward. */
void cuda_model_backward(struct cuda_ctx *ctx, const struct cuda_model *model,
			 struct cuda_acts *a, const int *tokens, const int *targets,
			 cudaStream_t st);

/* ---- one kernel of the lists, alone (calibration) ------------------------------ */

/*
 * Launch the kernel plan p describes (cuda_kernel.h: what the block, head
 * and model functions launch for one kernel of core/model.c's lists) once
 * on st: its operands in work (cuda_kernel_bytes(p) bytes, laid out by
 * cuda_kernel_offset), ids N token ids in [0, V) when p->ids. The contents
 * are whatever is there (cuda_kernel_fill: finite); outputs are
 * overwritten or accumulated into. Uses the context's GEMM plans, its
 * attention choice and its scratch (cuda_scratch_bytes of the model); the
 * context's gradient type is set to the plan's.
 */
void cuda_kernel_run(struct cuda_ctx *ctx, const struct cuda_kernel_plan *p, void *work, const int *ids,
		     cudaStream_t st);
/*
 * Fill `bytes` of work with random finite bf16 words (read as fp32 too,
 * each pair is finite: its high word is a bf16 of modest size), as data
 * whose bits change like a model's do, so the GEMMs draw the power real
 * operands draw; and ids (n of them, may be NULL) with token ids in [0, V).
 */
void cuda_kernel_fill(void *work, uint64_t bytes, int *ids, int n, int V, uint64_t seed, cudaStream_t st);

/* ---- optimizer ---------------------------------------------------------------- */

struct cuda_adamw_hparams {
	float lr;
	float beta1;
	float beta2;
	float eps;
	float weight_decay;
};

/*
 * Three launch forms of one AdamW step at step t >= 1 on fp32 master
 * params p, fp32 grads g, fp32 moments m, v (ref_adamw's arithmetic):
 *
 * cuda_adamw: one launch for one parameter (the per-parameter form an
 *   optimizer-in-backward hook issues; launch cost per tensor).
 */
void cuda_adamw(float *p, const float *g, float *m, float *v, size_t n,
		const struct cuda_adamw_hparams *hp, int t, cudaStream_t st);

struct cuda_adamw_tensor {
	float *p;
	const float *g;
	float *m;
	float *v;
	size_t n;
};

/*
 * cuda_adamw_multi: the multi-tensor (foreach) form, one launch for up to
 *   CUDA_ADAMW_MULTI_MAX tensors (the list travels in the kernel parameter
 *   block; longer lists take ceil(count / max) launches).
 */
#define CUDA_ADAMW_MULTI_MAX 192
void cuda_adamw_multi(const struct cuda_adamw_tensor *ts, int count,
		      const struct cuda_adamw_hparams *hp, int t, cudaStream_t st);

/*
 * cuda_adamw_fused: one launch over a flat shard (a unit's parameters in
 *   one buffer) fusing the step with what follows it: p_bf16 (may be NULL)
 *   receives the bf16 copy of the updated params for the next all-gather,
 *   and g is zeroed for the next accumulation when zero_grad is set.
 */
void cuda_adamw_fused(float *p, bf16 *p_bf16, float *g, float *m, float *v, size_t n,
		      const struct cuda_adamw_hparams *hp, int t, int zero_grad, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
