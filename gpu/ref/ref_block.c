/*
 * ref_block.c - one transformer block and the head of the fp32 reference,
 * with activation checkpointing.
 *
 * A block's activations live in a struct ref_block_store whose fields all
 * point somewhere: the checkpointing mode only decides which memory each
 * field points into, saved (kept from forward to backward) or transient
 * (scratch that ref_block_recompute refills). Forward therefore runs the
 * same code under every mode, and backward reads the same fields; the
 * modes differ only in what recompute has to rebuild. That is why the
 * three modes give bit-identical gradients: recompute repeats the forward's
 * own arithmetic on the same inputs.
 */
#include <assert.h>
#include <string.h>

#include "ref.h"

/* ---- parameter layout ---------------------------------------------------- */

size_t ref_block_offset(const struct model_shape *m, enum block_tensor t)
{
	return (size_t)model_block_tensor_offset(m, t);
}

size_t ref_block_floats(const struct model_shape *m)
{
	return (size_t)model_block_params(m);
}

/* ---- activation store ---------------------------------------------------- */

/* The store's layout at 4 bytes an element: core/model.c's table decides everything. */
static struct store_layout block_layout(const struct model_shape *m, int B, enum ac_mode mode)
{
	struct store_layout l;
	model_block_store_layout(&l, m, B, mode, sizeof(float));
	return l;
}

size_t ref_block_saved_floats(const struct model_shape *m, int B, enum ac_mode mode)
{
	return (size_t)block_layout(m, B, mode).saved_bytes / sizeof(float);
}

size_t ref_block_transient_floats(const struct model_shape *m, int B, enum ac_mode mode)
{
	return (size_t)block_layout(m, B, mode).transient_bytes / sizeof(float);
}

void ref_block_store_init(struct ref_block_store *s, float *saved, float *transient,
			  const struct model_shape *m, int B, enum ac_mode mode)
{
	struct store_layout l = block_layout(m, B, mode);
	float **field[BF_COUNT] = {
		[BF_X] = &s->x,     [BF_XN1] = &s->xn1,     [BF_RSTD1] = &s->rstd1,
		[BF_QKV] = &s->qkv, [BF_ATT] = &s->att,     [BF_LSE] = &s->lse,
		[BF_X1] = &s->x1,   [BF_XN2] = &s->xn2,     [BF_RSTD2] = &s->rstd2,
		[BF_GATEUP] = &s->gateup,                   [BF_H] = &s->h,
	};
	memset(s, 0, sizeof(*s));
	s->mode = mode;
	for (int f = 0; f < BF_COUNT; f++)
		*field[f] = model_store_field_at(&l, f, saved, transient);
}

/* ---- forward, recompute, backward ---------------------------------------- */

/* Tensor t of a block's flat parameter (or gradient) buffer. */
static const float *tensor(const float *params, const struct model_shape *m, enum block_tensor t)
{
	return params + ref_block_offset(m, t);
}

static float *grad_tensor(float *dparams, const struct model_shape *m, enum block_tensor t)
{
	return dparams + ref_block_offset(m, t);
}

/* x1 = x + Wo attn(rope(QKV(attn_norm(x)))), filling xn1 .. x1. */
static void attention_forward(struct ref_block_store *s, const float *params,
			      const struct model_shape *m, const struct model_dims *d)
{
	size_t nd = (size_t)d->N * d->D;
	ref_rmsnorm_forward(s->xn1, s->rstd1, s->x, tensor(params, m, BT_ATTN_NORM), d->N, d->D);
	ref_linear_forward(s->qkv, s->xn1, tensor(params, m, BT_WQ), d->N, d->D, (int)d->qkv);
	ref_rope_forward(s->qkv, d->B, d->T, d->H, d->KV, d->Q, (float)d->rope_theta);
	ref_attention_forward(s->att, s->lse, s->qkv, d->B, d->T, d->H, d->KV, d->Q);
	ref_linear_forward(s->x1, s->att, tensor(params, m, BT_WO), d->N, (int)d->hq, d->D);
	for (size_t i = 0; i < nd; i++)
		s->x1[i] += s->x[i];
}

/* mlp_norm, gate/up, SwiGLU: x1 -> xn2, gateup, h (the Wdown GEMM is the caller's). */
static void mlp_forward(struct ref_block_store *s, const float *params,
			const struct model_shape *m, const struct model_dims *d)
{
	ref_rmsnorm_forward(s->xn2, s->rstd2, s->x1, tensor(params, m, BT_MLP_NORM), d->N, d->D);
	ref_linear_forward(s->gateup, s->xn2, tensor(params, m, BT_W_GATE), d->N, d->D, 2 * d->F);
	ref_swiglu_forward(s->h, s->gateup, d->N, d->F);
}

void ref_block_forward(float *out, struct ref_block_store *s, const float *params,
		       const struct model_shape *m, int B)
{
	struct model_dims d = model_dims_of(m, B);
	size_t nd = (size_t)d.N * d.D;
	assert(out != s->x);
	attention_forward(s, params, m, &d);
	mlp_forward(s, params, m, &d);
	ref_linear_forward(out, s->h, tensor(params, m, BT_W_DOWN), d.N, d.F, d.D);
	for (size_t i = 0; i < nd; i++)
		out[i] += s->x1[i];
	s->complete = s->mode == AC_NONE;
}

/* The same calls as forward, so recomputed values are bit-identical to saved ones. */
void ref_block_recompute(struct ref_block_store *s, const float *params,
			 const struct model_shape *m, int B)
{
	struct model_dims d = model_dims_of(m, B);
	switch (s->mode) {
	case AC_NONE:
		break;
	case AC_FULL:
		attention_forward(s, params, m, &d);
		mlp_forward(s, params, m, &d);
		break;
	case AC_SELECTIVE:
		ref_rmsnorm_forward(s->xn1, s->rstd1, s->x, tensor(params, m, BT_ATTN_NORM), d.N, d.D);
		ref_rmsnorm_forward(s->xn2, s->rstd2, s->x1, tensor(params, m, BT_MLP_NORM), d.N, d.D);
		ref_swiglu_forward(s->h, s->gateup, d.N, d.F);
		break;
	default:
		assert(!"a mode the store table has no column for");
	}
	s->complete = 1;
}

/* Scratch for the activation gradients of one block's backward (model_block_grads_layout). */
struct grads {
	float *dxn;    /* (N, D) */
	float *dh;     /* (N, F) */
	float *dgu;    /* (N, 2F) */
	float *datt;   /* (N, H Q) */
	float *dqkv;   /* (N, (H + 2 KV) Q) */
};

static struct grads grads_at(float *scratch, const struct model_shape *m, int B)
{
	struct store_layout l;
	struct grads g;
	model_block_grads_layout(&l, m, B, sizeof(float));
	g.dxn = model_store_field_at(&l, GF_DXN, NULL, scratch);
	g.dh = model_store_field_at(&l, GF_DH, NULL, scratch);
	g.dgu = model_store_field_at(&l, GF_DGATEUP, NULL, scratch);
	g.datt = model_store_field_at(&l, GF_DATT, NULL, scratch);
	g.dqkv = model_store_field_at(&l, GF_DQKV, NULL, scratch);
	return g;
}

size_t ref_block_scratch_floats(const struct model_shape *m, int B)
{
	struct store_layout l;
	model_block_grads_layout(&l, m, B, sizeof(float));
	return (size_t)l.transient_bytes / sizeof(float);
}

/*
 * The forward in reverse. dout is last read when dx1 = dout + (norm2 path)
 * is formed, before dx is first written, so dx may alias dout.
 */
void ref_block_backward(float *dx, float *dparams, const float *dout, struct ref_block_store *s,
			const float *params, float *scratch, const struct model_shape *m, int B)
{
	struct model_dims d = model_dims_of(m, B);
	struct grads g = grads_at(scratch, m, B);
	size_t nd = (size_t)d.N * d.D;
	const float *norm1 = tensor(params, m, BT_ATTN_NORM), *wqkv = tensor(params, m, BT_WQ);
	const float *wo = tensor(params, m, BT_WO), *norm2 = tensor(params, m, BT_MLP_NORM);
	const float *wgu = tensor(params, m, BT_W_GATE), *wdown = tensor(params, m, BT_W_DOWN);
	float *dnorm1 = grad_tensor(dparams, m, BT_ATTN_NORM);
	float *dwqkv = grad_tensor(dparams, m, BT_WQ), *dwo = grad_tensor(dparams, m, BT_WO);
	float *dnorm2 = grad_tensor(dparams, m, BT_MLP_NORM);
	float *dwgu = grad_tensor(dparams, m, BT_W_GATE), *dwdown = grad_tensor(dparams, m, BT_W_DOWN);

	if (!s->complete)
		ref_block_recompute(s, params, m, B);

	/* MLP: out = x1 + Wdown swiglu(GateUp(norm2(x1))) */
	ref_linear_backward(g.dh, dwdown, dout, s->h, wdown, d.N, d.F, d.D);
	ref_swiglu_backward(g.dgu, g.dh, s->gateup, d.N, d.F);
	ref_linear_backward(g.dxn, dwgu, g.dgu, s->xn2, wgu, d.N, d.D, 2 * d.F);
	ref_rmsnorm_backward(g.dxn, dnorm2, g.dxn, s->x1, norm2, s->rstd2, d.N, d.D);
	for (size_t i = 0; i < nd; i++)
		g.dxn[i] += dout[i]; /* g.dxn is now dx1 */

	/* attention: x1 = x + Wo attn(rope(QKV(norm1(x)))) */
	ref_linear_backward(g.datt, dwo, g.dxn, s->att, wo, d.N, (int)d.hq, d.D);
	ref_attention_backward(g.dqkv, g.datt, s->qkv, s->att, s->lse, d.B, d.T, d.H, d.KV, d.Q);
	ref_rope_backward(g.dqkv, d.B, d.T, d.H, d.KV, d.Q, (float)d.rope_theta);
	ref_linear_backward(dx, dwqkv, g.dqkv, s->xn1, wqkv, d.N, d.D, (int)d.qkv);
	ref_rmsnorm_backward(dx, dnorm1, dx, s->x, norm1, s->rstd1, d.N, d.D);
	for (size_t i = 0; i < nd; i++)
		dx[i] += g.dxn[i];

	if (s->mode != AC_NONE)
		s->complete = 0;
}

/* ---- head ---------------------------------------------------------------- */

/* The head store's layout at 4 bytes an element (core/model.c's table). */
static struct store_layout head_layout(const struct model_shape *m, int B, enum loss_mode loss,
				       int chunk)
{
	struct store_layout l;
	model_head_store_layout(&l, m, B, loss, loss == LOSS_FULL ? 1 : chunk, sizeof(float));
	return l;
}

size_t ref_head_saved_floats(const struct model_shape *m, int B, enum loss_mode loss)
{
	return (size_t)head_layout(m, B, loss, 1).saved_bytes / sizeof(float);
}

size_t ref_head_transient_floats(const struct model_shape *m, int B, enum loss_mode loss,
				 int chunk)
{
	return (size_t)head_layout(m, B, loss, chunk).transient_bytes / sizeof(float);
}

size_t ref_head_store_floats(const struct model_shape *m, int B, enum loss_mode loss, int chunk)
{
	struct store_layout l = head_layout(m, B, loss, chunk);
	return (size_t)(l.saved_bytes + l.transient_bytes) / sizeof(float);
}

void ref_head_store_init_split(struct ref_head_store *s, float *saved, float *transient,
			       const struct model_shape *m, int B, enum loss_mode loss, int chunk)
{
	struct store_layout l = head_layout(m, B, loss, chunk);
	s->loss = loss;
	s->chunk = loss == LOSS_FULL ? B * m->seq : chunk;
	s->x = model_store_field_at(&l, HF_X, saved, transient);
	s->xn = model_store_field_at(&l, HF_XN, saved, transient);
	s->rstd = model_store_field_at(&l, HF_RSTD, saved, transient);
	s->lse = model_store_field_at(&l, HF_LSE, saved, transient);
	s->logits = model_store_field_at(&l, HF_LOGITS, saved, transient);
}

void ref_head_store_init(struct ref_head_store *s, float *buf, const struct model_shape *m,
			 int B, enum loss_mode loss, int chunk)
{
	ref_head_store_init_split(s, buf, buf + ref_head_saved_floats(m, B, loss), m, B, loss,
				  chunk);
}

float ref_head_forward(struct ref_head_store *s, const float *norm_w, const float *w_out,
		       const int *targets, const struct model_shape *m, int B)
{
	int N = B * m->seq;
	ref_rmsnorm_forward(s->xn, s->rstd, s->x, norm_w, N, m->hidden);
	return ref_lm_loss_forward(s->lse, s->logits, s->xn, w_out, targets, N, m->hidden,
				   m->vocab, s->loss, s->chunk);
}

void ref_head_backward(float *dx, float *dnorm_w, float *dw_out, struct ref_head_store *s,
		       const float *norm_w, const float *w_out, const int *targets,
		       const struct model_shape *m, int B)
{
	int N = B * m->seq;
	ref_lm_loss_backward(dx, dw_out, s->logits, s->xn, w_out, s->lse, targets, N, m->hidden,
			     m->vocab, s->loss, s->chunk);
	ref_rmsnorm_backward(dx, dnorm_w, dx, s->x, norm_w, s->rstd, N, m->hidden);
}
