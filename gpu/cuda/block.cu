/*
 * block.cu - one transformer block (forward, recompute, backward) with
 * activation checkpointing, the head (final norm, output projection,
 * loss) and the whole model, all launched on the caller's stream.
 *
 * The structure is ref_block.c's, call for call, so the two can be read
 * side by side: a store whose fields all point somewhere, the mode only
 * deciding whether a field lives in saved memory (kept from forward to
 * backward) or in transient memory (rebuilt by recompute right before the
 * backward, shareable between blocks); core/model.c's table decides which,
 * and layout.c points the fields. Forward runs the same code under every
 * mode; recompute repeats forward's own kernels, so the modes give the
 * same gradients up to the order of fp32 atomic additions. Rope runs in
 * place on the QKV GEMM output, so a saved qkv is already roped and the
 * selective recompute, which keeps qkv, does not rotate it again.
 *
 * Fusions the reference spells out as loops: the two residual adds of the
 * forward are the beta = 1 epilogues of the Wo and down GEMMs (C = the
 * residual, D = the output); the two residual adds of the backward are
 * folded into the RMSNorm backward kernels. Kernel names for profiling
 * follow core/model.c.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- forward, recompute, backward ------------------------------------------------------- */

#define W(t) (params + cuda_block_offset(m, (t)))
#define DW(t) ((char *)dparams + cuda_block_offset(m, (t)) * grad_bytes(ctx)) /* the ctx's gradient type */

void norm_backward(struct cuda_ctx *ctx, bf16 *dx, void *dw, const bf16 *dout, const bf16 *dres,
		   const bf16 *x, const bf16 *w, const float *rstd, int N, int C, cudaStream_t st)
{
	if (!ctx->grad_bf16) {
		rmsnorm_backward_add(dx, (float *)dw, dout, dres, x, w, rstd, N, C, st);
		return;
	}
	float *acc = (float *)ctx_scratch(ctx, (size_t)C * sizeof(float));
	cudaCheck(cudaMemsetAsync(acc, 0, (size_t)C * sizeof(float), st));
	rmsnorm_backward_add(dx, acc, dout, dres, x, w, rstd, N, C, st);
	add_f32_to_bf16((bf16 *)dw, acc, C, st);
}

/* The context's choices of cuDNN's graphs, as cudnn_sdpa's flags */
static unsigned cudnn_flags(const struct cuda_ctx *ctx)
{
	return (ctx->gqa_repeat ? CUDNN_SDPA_GQA_REPEAT : 0u) | (ctx->mask_float ? CUDNN_SDPA_MASK_FLOAT : 0u);
}

void cuda_attention_forward_ctx(struct cuda_ctx *ctx, bf16 *out, float *lse, const bf16 *qkv, int B,
			   int T, int H, int KV, int Q, cudaStream_t st)
{
	const char *why = NULL;
	if (ctx->attention == CUDA_ATTN_CUDNN
	    && cudnn_sdpa_forward(&ctx->sdpa, out, lse, qkv, B, T, H, KV, Q, ctx->scratch,
				  ctx->scratch_bytes, cudnn_flags(ctx), st, &why) == 0) {
		ctx->attention_used = CUDA_ATTN_CUDNN;
		ctx->attention_msg = NULL;
		return;
	}
	ctx->attention_used = CUDA_ATTN_MMA;
	ctx->attention_msg = why;
	cuda_attention_forward(out, lse, qkv, B, T, H, KV, Q, st);
}

void cuda_attention_backward_ctx(struct cuda_ctx *ctx, bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
			    const bf16 *out, const float *lse, int B, int T, int H, int KV, int Q,
			    cudaStream_t st)
{
	const char *why = NULL;
	if (ctx->attention == CUDA_ATTN_CUDNN
	    && cudnn_sdpa_backward(&ctx->sdpa, dqkv, dout, qkv, out, lse, B, T, H, KV, Q,
				   ctx->scratch, ctx->scratch_bytes, cudnn_flags(ctx), st, &why) == 0) {
		ctx->attention_used = CUDA_ATTN_CUDNN;
		ctx->attention_msg = NULL;
		return;
	}
	ctx->attention_used = CUDA_ATTN_MMA;
	ctx->attention_msg = why;
	cuda_attention_backward(ctx, dqkv, dout, qkv, out, lse, B, T, H, KV, Q, st);
}

/*
 * attn_norm: s->x -> xn1, rstd1; with gemms also QKV, rope in place and
 * attention: -> qkv (roped), att, lse. Without gemms (selective recompute)
 * qkv is the saved, already roped one and is left alone.
 */
static void attention_half(struct cuda_ctx *ctx, struct cuda_block_store *s, const bf16 *params,
			   const struct model_shape *m, const struct model_dims *d, int gemms,
			   cudaStream_t st)
{
	prof_begin(ctx, st, "attn_norm");
	cuda_rmsnorm_forward(s->xn1, s->rstd1, s->x, W(BT_ATTN_NORM), d->N, d->D, st);
	prof_end(ctx, st);
	if (!gemms)
		return;
	prof_begin(ctx, st, "qkv");
	cuda_linear_forward(ctx, s->qkv, s->xn1, W(BT_WQ), d->N, d->D, d->qkv, st);
	prof_end(ctx, st);
	prof_begin(ctx, st, "rope");
	cuda_rope_forward(s->qkv, d->B, d->T, d->H, d->KV, d->Q, (float)d->rope_theta, st);
	prof_end(ctx, st);
	prof_begin(ctx, st, "attention");
	cuda_attention_forward_ctx(ctx, s->att, s->lse, s->qkv, d->B, d->T, d->H, d->KV, d->Q, st);
	prof_end(ctx, st);
}

/* x1 = x + Wo att: the residual is the GEMM's C operand. */
static void attention_residual(struct cuda_ctx *ctx, struct cuda_block_store *s,
			       const bf16 *params, const struct model_shape *m,
			       const struct model_dims *d, cudaStream_t st)
{
	prof_begin(ctx, st, "wo");
	gemm_rm(ctx, st, 0, 1, d->N, d->D, d->hq, s->att, d->hq, W(BT_WO), d->hq, s->x1,
		CUDA_R_16BF, d->D, 1.0f, s->x);
	prof_end(ctx, st);
}

/* mlp_norm, gate/up, SwiGLU: s->x1 -> xn2, gateup, h. */
static void mlp_half(struct cuda_ctx *ctx, struct cuda_block_store *s, const bf16 *params,
		     const struct model_shape *m, const struct model_dims *d, int gemms, cudaStream_t st)
{
	prof_begin(ctx, st, "mlp_norm");
	cuda_rmsnorm_forward(s->xn2, s->rstd2, s->x1, W(BT_MLP_NORM), d->N, d->D, st);
	prof_end(ctx, st);
	if (gemms) {
		prof_begin(ctx, st, "gate_up");
		cuda_linear_forward(ctx, s->gateup, s->xn2, W(BT_W_GATE), d->N, d->D, 2 * d->F, st);
		prof_end(ctx, st);
	}
	prof_begin(ctx, st, "swiglu");
	cuda_swiglu_forward(s->h, s->gateup, d->N, d->F, st);
	prof_end(ctx, st);
}

void cuda_block_forward(struct cuda_ctx *ctx, bf16 *out, struct cuda_block_store *s,
			const bf16 *params, const struct model_shape *m, int B, cudaStream_t st)
{
	struct model_dims d = model_dims_of(m, B);
	cuda_assert(out != s->x);
	attention_half(ctx, s, params, m, &d, 1, st);
	attention_residual(ctx, s, params, m, &d, st);
	mlp_half(ctx, s, params, m, &d, 1, st);
	prof_begin(ctx, st, "down");
	gemm_rm(ctx, st, 0, 1, d.N, d.D, d.F, s->h, d.F, W(BT_W_DOWN), d.F, out, CUDA_R_16BF, d.D,
		1.0f, s->x1);
	prof_end(ctx, st);
	s->complete = s->mode == AC_NONE;
}

void cuda_block_recompute(struct cuda_ctx *ctx, struct cuda_block_store *s, const bf16 *params,
			  const struct model_shape *m, int B, cudaStream_t st)
{
	struct model_dims d = model_dims_of(m, B);
	switch (s->mode) {
	case AC_NONE:
		break;
	case AC_FULL:
		attention_half(ctx, s, params, m, &d, 1, st);
		attention_residual(ctx, s, params, m, &d, st);
		mlp_half(ctx, s, params, m, &d, 1, st);
		break;
	case AC_SELECTIVE:
		attention_half(ctx, s, params, m, &d, 0, st);
		mlp_half(ctx, s, params, m, &d, 0, st);
		break;
	case AC_PER_OP: /* PyTorch's checkpointing policies: ./sim prices them, gpu_run refuses them */
	case AC_PER_LAYER:
	case AC_MODES:
		cuda_assert(0);
	}
	s->complete = 1;
}

/*
 * The forward in reverse. dout is last read by the mlp_norm backward (as
 * the residual gradient), before dx is first written, so dx may alias dout.
 */
void cuda_block_backward(struct cuda_ctx *ctx, bf16 *dx, void *dparams, const bf16 *dout,
			 struct cuda_block_store *s, const bf16 *params, void *scratch,
			 const struct model_shape *m, int B, cudaStream_t st)
{
	struct model_dims d = model_dims_of(m, B);
	struct cuda_block_grads g;
	cuda_block_grads_init(&g, scratch, m, B);
	if (!s->complete)
		cuda_block_recompute(ctx, s, params, m, B, st);

	/* MLP: out = x1 + Wdown swiglu(GateUp(norm2(x1))) */
	prof_begin(ctx, st, "down_dgrad");
	gemm_rm(ctx, st, 0, 0, d.N, d.F, d.D, dout, d.D, W(BT_W_DOWN), d.F, g.dh, CUDA_R_16BF, d.F,
		0.0f, NULL);
	prof_end(ctx, st);
	prof_begin(ctx, st, "down_wgrad");
	gemm_rm(ctx, st, 1, 0, d.D, d.F, d.N, dout, d.D, s->h, d.F, DW(BT_W_DOWN), grad_dtype(ctx),
		d.F, 1.0f, DW(BT_W_DOWN));
	prof_end(ctx, st);
	prof_begin(ctx, st, "swiglu_bwd");
	cuda_swiglu_backward(g.dgu, g.dh, s->gateup, d.N, d.F, st);
	prof_end(ctx, st);
	prof_begin(ctx, st, "gate_up_dgrad");
	gemm_rm(ctx, st, 0, 0, d.N, d.D, 2 * d.F, g.dgu, 2 * d.F, W(BT_W_GATE), d.D, g.dxn,
		CUDA_R_16BF, d.D, 0.0f, NULL);
	prof_end(ctx, st);
	prof_begin(ctx, st, "gate_up_wgrad");
	gemm_rm(ctx, st, 1, 0, 2 * d.F, d.D, d.N, g.dgu, 2 * d.F, s->xn2, d.D, DW(BT_W_GATE),
		grad_dtype(ctx), d.D, 1.0f, DW(BT_W_GATE));
	prof_end(ctx, st);
	prof_begin(ctx, st, "mlp_norm_bwd"); /* + dout: g.dxn becomes dx1 */
	norm_backward(ctx, g.dxn, DW(BT_MLP_NORM), g.dxn, dout, s->x1, W(BT_MLP_NORM), s->rstd2, d.N,
		      d.D, st);
	prof_end(ctx, st);

	/* attention: x1 = x + Wo attn(rope(QKV(norm1(x)))) */
	prof_begin(ctx, st, "wo_dgrad");
	gemm_rm(ctx, st, 0, 0, d.N, d.hq, d.D, g.dxn, d.D, W(BT_WO), d.hq, g.datt, CUDA_R_16BF,
		d.hq, 0.0f, NULL);
	prof_end(ctx, st);
	prof_begin(ctx, st, "wo_wgrad");
	gemm_rm(ctx, st, 1, 0, d.D, d.hq, d.N, g.dxn, d.D, s->att, d.hq, DW(BT_WO), grad_dtype(ctx),
		d.hq, 1.0f, DW(BT_WO));
	prof_end(ctx, st);
	prof_begin(ctx, st, "attention_bwd");
	cuda_attention_backward_ctx(ctx, g.dqkv, g.datt, s->qkv, s->att, s->lse, d.B, d.T, d.H, d.KV,
			       d.Q, st);
	prof_end(ctx, st);
	prof_begin(ctx, st, "rope_bwd");
	cuda_rope_backward(g.dqkv, d.B, d.T, d.H, d.KV, d.Q, (float)d.rope_theta, st);
	prof_end(ctx, st);
	prof_begin(ctx, st, "qkv_dgrad");
	gemm_rm(ctx, st, 0, 0, d.N, d.D, d.qkv, g.dqkv, d.qkv, W(BT_WQ), d.D, dx, CUDA_R_16BF, d.D,
		0.0f, NULL);
	prof_end(ctx, st);
	prof_begin(ctx, st, "qkv_wgrad");
	gemm_rm(ctx, st, 1, 0, d.qkv, d.D, d.N, g.dqkv, d.qkv, s->xn1, d.D, DW(BT_WQ),
		grad_dtype(ctx), d.D, 1.0f, DW(BT_WQ));
	prof_end(ctx, st);
	prof_begin(ctx, st, "attn_norm_bwd"); /* + dx1 */
	norm_backward(ctx, dx, DW(BT_ATTN_NORM), dx, g.dxn, s->x, W(BT_ATTN_NORM), s->rstd1, d.N, d.D,
		      st);
	prof_end(ctx, st);

	if (s->mode != AC_NONE)
		s->complete = 0;
}

#undef W
#undef DW

/* ---- head ---------------------------------------------------------------------------- */

void cuda_head_forward(struct cuda_ctx *ctx, float *loss, struct cuda_head_store *s,
		       const bf16 *norm_w, const bf16 *w_out, const int *targets,
		       const struct model_shape *m, int B, cudaStream_t st)
{
	int N = B * m->seq;
	prof_begin(ctx, st, "final_norm");
	cuda_rmsnorm_forward(s->xn, s->rstd, s->x, norm_w, N, m->hidden, st);
	prof_end(ctx, st);
	cuda_lm_loss_forward(ctx, loss, s->lse, s->logits, s->xn, w_out, targets, N, m->hidden,
			     m->vocab, s->loss, s->chunk, st);
}

void cuda_head_backward(struct cuda_ctx *ctx, bf16 *dx, void *dnorm_w, void *dw_out,
			struct cuda_head_store *s, const bf16 *norm_w, const bf16 *w_out,
			const int *targets, const struct model_shape *m, int B, cudaStream_t st)
{
	int N = B * m->seq;
	cuda_lm_loss_backward(ctx, dx, dw_out, s->logits, s->xn, w_out, s->lse, targets, N,
			      m->hidden, m->vocab, s->loss, s->chunk, st);
	prof_begin(ctx, st, "final_norm_bwd");
	norm_backward(ctx, dx, dnorm_w, dx, NULL, s->x, norm_w, s->rstd, N, m->hidden, st);
	prof_end(ctx, st);
}

/* ---- whole model ----------------------------------------------------------------------- */

struct cuda_acts *cuda_acts_new(const struct model_shape *m, int B, enum ac_mode ac,
				enum loss_mode loss, int chunk)
{
	size_t total = cuda_acts_bytes(m, B, ac, loss, chunk);
	void *buf = NULL;
	struct cuda_acts *a = (struct cuda_acts *)calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->blocks = (struct cuda_block_store *)calloc(m->layers > 0 ? (size_t)m->layers : 1,
						      sizeof(*a->blocks));
	if (!a->blocks || cudaMalloc(&buf, total) != cudaSuccess) {
		(void)cudaGetLastError(); /* an out-of-memory is reported by the NULL return */
		cuda_acts_free(a);
		return NULL;
	}
	cuda_acts_point(a, buf, m, B, ac, loss, chunk);
	return a;
}

void cuda_acts_free(struct cuda_acts *a)
{
	if (!a)
		return;
	if (a->buf)
		cudaCheck(cudaFree(a->buf));
	free(a->blocks);
	free(a);
}

void cuda_model_forward(struct cuda_ctx *ctx, float *loss, const struct cuda_model *model,
			struct cuda_acts *a, const int *tokens, const int *targets,
			cudaStream_t st)
{
	const struct model_shape *m = &model->shape;
	int L = m->layers, N = a->B * m->seq;
	prof_begin(ctx, st, "embed");
	cuda_embedding_forward(L > 0 ? a->blocks[0].x : a->head.x, tokens, model->embed, N,
			       m->hidden, st);
	prof_end(ctx, st);
	for (int l = 0; l < L; l++) {
		bf16 *out = l + 1 < L ? a->blocks[l + 1].x : a->head.x;
		cuda_block_forward(ctx, out, &a->blocks[l], model->blocks[l], m, a->B, st);
	}
	cuda_head_forward(ctx, loss, &a->head, model->final_norm, model->w_out, targets, m, a->B,
			  st);
}

void cuda_model_backward(struct cuda_ctx *ctx, const struct cuda_model *model,
			 struct cuda_acts *a, const int *tokens, const int *targets,
			 cudaStream_t st)
{
	const struct model_shape *m = &model->shape;
	int N = a->B * m->seq;
	cuda_assert(model->d_embed != NULL && !ctx->grad_bf16); /* the model's gradients are fp32 */
	cuda_head_backward(ctx, a->dres, model->d_final_norm, model->d_w_out, &a->head,
			   model->final_norm, model->w_out, targets, m, a->B, st);
	for (int l = m->layers - 1; l >= 0; l--)
		cuda_block_backward(ctx, a->dres, model->d_blocks[l], a->dres, &a->blocks[l],
				    model->blocks[l], a->scratch, m, a->B, st);
	prof_begin(ctx, st, "embed_bwd");
	cuda_embedding_backward(model->d_embed, a->dres, tokens, N, m->hidden, st);
	prof_end(ctx, st);
}
