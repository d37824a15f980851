/*
 * block.cu - one transformer block (forward, recompute, backward) with
 * activation checkpointing, the head (final norm, output projection,
 * loss) and the whole model, all launched on the caller's stream.
 *
 * The structure is ref_block.c's, call for call, so the two can be read
 * side by side: a store whose fields all point somewhere, the mode only
 * deciding whether a field lives in saved memory (kept from forward to
 * backward) or in transient memory (rebuilt by recompute right before the
 * backward, shareable between blocks). Forward runs the same code under
 * every mode; recompute repeats forward's own kernels, so the modes give
 * the same gradients up to the order of fp32 atomic additions.
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

/* ---- parameter layout ------------------------------------------------------------------- */

size_t cuda_block_offset(const struct model_shape *m, enum block_tensor t)
{
	return (size_t)model_block_tensor_offset(m, t);
}

size_t cuda_block_elems(const struct model_shape *m)
{
	return cuda_block_offset(m, BT_COUNT);
}

/* ---- activation store ------------------------------------------------------------------- */

enum field {
	F_X, F_XN1, F_RSTD1, F_QKV, F_QKV_ROPE, F_ATT, F_LSE, F_X1, F_XN2, F_RSTD2,
	F_GATEUP, F_H, F_COUNT
};

static size_t field_bytes(const struct model_dims *d, enum field f)
{
	size_t N = (size_t)d->N, bf = sizeof(bf16), fl = sizeof(float);
	switch (f) {
	case F_X: case F_XN1: case F_X1: case F_XN2:
		return align256(N * d->D * bf);
	case F_RSTD1: case F_RSTD2:
		return align256(N * fl);
	case F_QKV: case F_QKV_ROPE:
		return align256(N * d->qkv * bf);
	case F_ATT:
		return align256(N * d->hq * bf);
	case F_LSE:
		return align256((size_t)d->B * d->H * d->T * fl);
	case F_GATEUP:
		return align256(N * 2 * d->F * bf);
	case F_H:
		return align256(N * d->F * bf);
	case F_COUNT:
		break;
	}
	cuda_assert(0);
	return 0;
}

enum where { W_ALIAS, W_SAVED, W_TRANSIENT };

/* ref_block.c's table: F_QKV is an alias of F_QKV_ROPE except under AC_SELECTIVE. */
static enum where field_where(enum ac_mode mode, enum field f)
{
	if (f == F_X)
		return W_SAVED;
	switch (mode) {
	case AC_NONE:
		return f == F_QKV ? W_ALIAS : W_SAVED;
	case AC_FULL:
		return f == F_QKV ? W_ALIAS : W_TRANSIENT;
	case AC_SELECTIVE:
		return (f == F_QKV || f == F_ATT || f == F_LSE || f == F_X1 || f == F_GATEUP)
			       ? W_SAVED : W_TRANSIENT;
	case AC_COUNT:
		break;
	}
	cuda_assert(0);
	return W_SAVED;
}

static size_t bytes_where(const struct model_shape *m, int B, enum ac_mode mode, enum where w)
{
	struct model_dims d = model_dims_of(m, B);
	size_t n = 0;
	for (int f = 0; f < F_COUNT; f++)
		if (field_where(mode, (enum field)f) == w)
			n += field_bytes(&d, (enum field)f);
	return n;
}

size_t cuda_block_saved_bytes(const struct model_shape *m, int B, enum ac_mode mode)
{
	return bytes_where(m, B, mode, W_SAVED);
}

size_t cuda_block_transient_bytes(const struct model_shape *m, int B, enum ac_mode mode)
{
	return bytes_where(m, B, mode, W_TRANSIENT);
}

void cuda_block_store_init(struct cuda_block_store *s, void *saved, void *transient,
			   const struct model_shape *m, int B, enum ac_mode mode)
{
	struct model_dims d = model_dims_of(m, B);
	char *next[3] = { NULL, (char *)saved, (char *)transient };
	char *at[F_COUNT];
	for (int f = 0; f < F_COUNT; f++) {
		enum where w = field_where(mode, (enum field)f);
		at[f] = NULL;
		if (w == W_ALIAS)
			continue;
		cuda_assert(next[w] != NULL);
		at[f] = next[w];
		next[w] += field_bytes(&d, (enum field)f);
	}
	if (field_where(mode, F_QKV) == W_ALIAS)
		at[F_QKV] = at[F_QKV_ROPE];
	memset(s, 0, sizeof(*s));
	s->mode = mode;
	s->x = (bf16 *)at[F_X];
	s->xn1 = (bf16 *)at[F_XN1];
	s->rstd1 = (float *)at[F_RSTD1];
	s->qkv = (bf16 *)at[F_QKV];
	s->qkv_rope = (bf16 *)at[F_QKV_ROPE];
	s->att = (bf16 *)at[F_ATT];
	s->lse = (float *)at[F_LSE];
	s->x1 = (bf16 *)at[F_X1];
	s->xn2 = (bf16 *)at[F_XN2];
	s->rstd2 = (float *)at[F_RSTD2];
	s->gateup = (bf16 *)at[F_GATEUP];
	s->h = (bf16 *)at[F_H];
}

/* ---- forward, recompute, backward ------------------------------------------------------- */

#define W(t) (params + cuda_block_offset(m, (t)))
#define DW(t) (dparams + cuda_block_offset(m, (t)))

/* attn_norm, QKV, rope, attention: s->x -> qkv_rope, att, lse. */
static void attention_half(struct cuda_ctx *ctx, struct cuda_block_store *s, const bf16 *params,
			   const struct model_shape *m, const struct model_dims *d, int gemms,
			   cudaStream_t st)
{
	prof_begin(ctx, st, "attn_norm");
	cuda_rmsnorm_forward(s->xn1, s->rstd1, s->x, W(BT_ATTN_NORM), d->N, d->D, st);
	prof_end(ctx, st);
	if (gemms) {
		prof_begin(ctx, st, "qkv");
		cuda_linear_forward(ctx, s->qkv, s->xn1, W(BT_WQ), d->N, d->D, d->qkv, st);
		prof_end(ctx, st);
	}
	prof_begin(ctx, st, "rope");
	rope_apply(s->qkv_rope, s->qkv, d->B, d->T, d->H, d->KV, d->Q, CUDA_ROPE_THETA, 1, st);
	prof_end(ctx, st);
	if (gemms) {
		prof_begin(ctx, st, "attention");
		cuda_attention_forward(s->att, s->lse, s->qkv_rope, d->B, d->T, d->H, d->KV, d->Q,
				       st);
		prof_end(ctx, st);
	}
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
	case AC_COUNT:
		cuda_assert(0);
	}
	s->complete = 1;
}

/* Scratch for the activation gradients of one block's backward. */
struct grads {
	bf16 *dxn;    /* (N, D) */
	bf16 *dh;     /* (N, F) */
	bf16 *dgu;    /* (N, 2F) */
	bf16 *datt;   /* (N, H Q) */
	bf16 *dqkv;   /* (N, (H + 2 KV) Q) */
};

/* Point g (when not NULL) into scratch; returns the bytes the layout takes. */
static size_t grads_layout(struct grads *g, void *scratch, const struct model_dims *d)
{
	size_t N = (size_t)d->N;
	size_t sizes[5] = { N * d->D, N * d->F, N * 2 * d->F, N * d->hq, N * d->qkv };
	size_t off[6] = { 0 };
	for (int i = 0; i < 5; i++)
		off[i + 1] = off[i] + align256(sizes[i] * sizeof(bf16));
	if (g) {
		char *p = (char *)scratch;
		g->dxn = (bf16 *)(p + off[0]);
		g->dh = (bf16 *)(p + off[1]);
		g->dgu = (bf16 *)(p + off[2]);
		g->datt = (bf16 *)(p + off[3]);
		g->dqkv = (bf16 *)(p + off[4]);
	}
	return off[5];
}

size_t cuda_block_scratch_bytes(const struct model_shape *m, int B)
{
	struct model_dims d = model_dims_of(m, B);
	return grads_layout(NULL, NULL, &d);
}

/*
 * The forward in reverse. dout is last read by the mlp_norm backward (as
 * the residual gradient), before dx is first written, so dx may alias dout.
 */
void cuda_block_backward(struct cuda_ctx *ctx, bf16 *dx, float *dparams, const bf16 *dout,
			 struct cuda_block_store *s, const bf16 *params, void *scratch,
			 const struct model_shape *m, int B, cudaStream_t st)
{
	struct model_dims d = model_dims_of(m, B);
	struct grads g;
	grads_layout(&g, scratch, &d);
	if (!s->complete)
		cuda_block_recompute(ctx, s, params, m, B, st);

	/* MLP: out = x1 + Wdown swiglu(GateUp(norm2(x1))) */
	prof_begin(ctx, st, "down_dgrad");
	gemm_rm(ctx, st, 0, 0, d.N, d.F, d.D, dout, d.D, W(BT_W_DOWN), d.F, g.dh, CUDA_R_16BF, d.F,
		0.0f, NULL);
	prof_end(ctx, st);
	prof_begin(ctx, st, "down_wgrad");
	gemm_rm(ctx, st, 1, 0, d.D, d.F, d.N, dout, d.D, s->h, d.F, DW(BT_W_DOWN), CUDA_R_32F, d.F,
		1.0f, DW(BT_W_DOWN));
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
		CUDA_R_32F, d.D, 1.0f, DW(BT_W_GATE));
	prof_end(ctx, st);
	prof_begin(ctx, st, "mlp_norm_bwd"); /* + dout: g.dxn becomes dx1 */
	rmsnorm_backward_add(g.dxn, DW(BT_MLP_NORM), g.dxn, dout, s->x1, W(BT_MLP_NORM), s->rstd2,
			     d.N, d.D, st);
	prof_end(ctx, st);

	/* attention: x1 = x + Wo attn(rope(QKV(norm1(x)))) */
	prof_begin(ctx, st, "wo_dgrad");
	gemm_rm(ctx, st, 0, 0, d.N, d.hq, d.D, g.dxn, d.D, W(BT_WO), d.hq, g.datt, CUDA_R_16BF,
		d.hq, 0.0f, NULL);
	prof_end(ctx, st);
	prof_begin(ctx, st, "wo_wgrad");
	gemm_rm(ctx, st, 1, 0, d.D, d.hq, d.N, g.dxn, d.D, s->att, d.hq, DW(BT_WO), CUDA_R_32F,
		d.hq, 1.0f, DW(BT_WO));
	prof_end(ctx, st);
	prof_begin(ctx, st, "attention_bwd");
	cuda_attention_backward(ctx, g.dqkv, g.datt, s->qkv_rope, s->att, s->lse, d.B, d.T, d.H,
				d.KV, d.Q, st);
	prof_end(ctx, st);
	prof_begin(ctx, st, "rope_bwd");
	rope_apply(g.dqkv, g.dqkv, d.B, d.T, d.H, d.KV, d.Q, CUDA_ROPE_THETA, -1, st);
	prof_end(ctx, st);
	prof_begin(ctx, st, "qkv_dgrad");
	gemm_rm(ctx, st, 0, 0, d.N, d.D, d.qkv, g.dqkv, d.qkv, W(BT_WQ), d.D, dx, CUDA_R_16BF, d.D,
		0.0f, NULL);
	prof_end(ctx, st);
	prof_begin(ctx, st, "qkv_wgrad");
	gemm_rm(ctx, st, 1, 0, d.qkv, d.D, d.N, g.dqkv, d.qkv, s->xn1, d.D, DW(BT_WQ), CUDA_R_32F,
		d.D, 1.0f, DW(BT_WQ));
	prof_end(ctx, st);
	prof_begin(ctx, st, "attn_norm_bwd"); /* + dx1 */
	rmsnorm_backward_add(dx, DW(BT_ATTN_NORM), dx, g.dxn, s->x, W(BT_ATTN_NORM), s->rstd1, d.N,
			     d.D, st);
	prof_end(ctx, st);

	if (s->mode != AC_NONE)
		s->complete = 0;
}

#undef W
#undef DW

/* ---- head ---------------------------------------------------------------------------- */

size_t cuda_head_store_bytes(const struct model_shape *m, int B, enum loss_mode loss, int chunk)
{
	size_t N = (size_t)B * m->seq;
	size_t rows = loss == LOSS_FULL ? N : (size_t)chunk;
	return 2 * align256(N * m->hidden * sizeof(bf16)) + 2 * align256(N * sizeof(float))
	       + align256(rows * m->vocab * sizeof(float));
}

void cuda_head_store_init(struct cuda_head_store *s, void *buf, const struct model_shape *m,
			  int B, enum loss_mode loss, int chunk)
{
	size_t N = (size_t)B * m->seq;
	char *p = (char *)buf;
	cuda_assert(loss == LOSS_FULL || chunk > 0);
	s->loss = loss;
	s->chunk = loss == LOSS_FULL ? B * m->seq : chunk;
	s->x = (bf16 *)p;
	p += align256(N * m->hidden * sizeof(bf16));
	s->xn = (bf16 *)p;
	p += align256(N * m->hidden * sizeof(bf16));
	s->rstd = (float *)p;
	p += align256(N * sizeof(float));
	s->lse = (float *)p;
	p += align256(N * sizeof(float));
	s->logits = (float *)p;
}

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

void cuda_head_backward(struct cuda_ctx *ctx, bf16 *dx, float *dnorm_w, float *dw_out,
			struct cuda_head_store *s, const bf16 *norm_w, const bf16 *w_out,
			const int *targets, const struct model_shape *m, int B, cudaStream_t st)
{
	int N = B * m->seq;
	cuda_lm_loss_backward(ctx, dx, dw_out, s->logits, s->xn, w_out, s->lse, targets, N,
			      m->hidden, m->vocab, s->loss, s->chunk, st);
	prof_begin(ctx, st, "final_norm_bwd");
	cuda_rmsnorm_backward(dx, dnorm_w, dx, s->x, norm_w, s->rstd, N, m->hidden, st);
	prof_end(ctx, st);
}

/* ---- whole model ----------------------------------------------------------------------- */

size_t cuda_model_elems(const struct model_shape *m)
{
	size_t vd = (size_t)m->vocab * m->hidden;
	return vd + (size_t)m->layers * cuda_block_elems(m) + (size_t)m->hidden + vd;
}

/* Point the four parts of a flat model buffer (elements of type T); blocks[] gets L pointers. */
template <typename T>
static void model_point(const struct model_shape *m, T *buf, T **embed, T **blocks,
			T **final_norm, T **w_out)
{
	size_t vd = (size_t)m->vocab * m->hidden;
	*embed = buf;
	buf += vd;
	for (int l = 0; l < m->layers; l++) {
		blocks[l] = buf;
		buf += cuda_block_elems(m);
	}
	*final_norm = buf;
	*w_out = buf + m->hidden;
}

int cuda_model_init(struct cuda_model *model, const struct model_shape *m, bf16 *params,
		    float *grads)
{
	size_t L = m->layers > 0 ? (size_t)m->layers : 1;
	memset(model, 0, sizeof(*model));
	model->shape = *m;
	model->blocks = (bf16 **)calloc(L, sizeof(bf16 *));
	model->d_blocks = (float **)calloc(L, sizeof(float *));
	if (!model->blocks || !model->d_blocks) {
		cuda_model_release(model);
		return -1;
	}
	model_point(m, params, &model->embed, model->blocks, &model->final_norm, &model->w_out);
	if (grads)
		model_point(m, grads, &model->d_embed, model->d_blocks, &model->d_final_norm,
			    &model->d_w_out);
	return 0;
}

void cuda_model_release(struct cuda_model *model)
{
	free(model->blocks);
	free(model->d_blocks);
	model->blocks = NULL;
	model->d_blocks = NULL;
}

struct cuda_acts *cuda_acts_new(const struct model_shape *m, int B, enum ac_mode ac,
				enum loss_mode loss, int chunk)
{
	size_t nd = align256((size_t)B * m->seq * m->hidden * sizeof(bf16));
	size_t saved = cuda_block_saved_bytes(m, B, ac);
	size_t transient = cuda_block_transient_bytes(m, B, ac);
	size_t head = cuda_head_store_bytes(m, B, loss, chunk);
	size_t total = (size_t)m->layers * saved + transient + head + nd
		       + cuda_block_scratch_bytes(m, B);
	struct cuda_acts *a = (struct cuda_acts *)calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->B = B;
	a->ac = ac;
	a->blocks = (struct cuda_block_store *)calloc(m->layers > 0 ? (size_t)m->layers : 1,
						      sizeof(*a->blocks));
	if (!a->blocks || cudaMalloc(&a->buf, total) != cudaSuccess) {
		(void)cudaGetLastError(); /* an out-of-memory is reported by the NULL return */
		a->buf = NULL;
		cuda_acts_free(a);
		return NULL;
	}
	a->bytes = total;
	char *p = (char *)a->buf;
	char *shared = p + (size_t)m->layers * saved;
	for (int l = 0; l < m->layers; l++)
		cuda_block_store_init(&a->blocks[l], p + (size_t)l * saved,
				      transient ? shared : NULL, m, B, ac);
	p = shared + transient;
	cuda_head_store_init(&a->head, p, m, B, loss, chunk);
	p += head;
	a->dres = (bf16 *)p;
	a->scratch = p + nd;
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
	cuda_assert(model->d_embed != NULL);
	cuda_head_backward(ctx, a->dres, model->d_final_norm, model->d_w_out, &a->head,
			   model->final_norm, model->w_out, targets, m, a->B, st);
	for (int l = m->layers - 1; l >= 0; l--)
		cuda_block_backward(ctx, a->dres, model->d_blocks[l], a->dres, &a->blocks[l],
				    model->blocks[l], a->scratch, m, a->B, st);
	prof_begin(ctx, st, "embed_bwd");
	cuda_embedding_backward(model->d_embed, a->dres, tokens, N, m->hidden, st);
	prof_end(ctx, st);
}
