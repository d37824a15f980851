/*
 * model.c - parameter counts, kernel lists and activation sizes of a
 * Llama-architecture decoder, derived from its shape alone.
 *
 * The kernel lists here are the single description of what a segment
 * computes: the simulator prices them and the GPU model launches the
 * same kernels in the same order. The activation stores (block_fields,
 * grad_fields, head_fields) are the single description of what a segment
 * keeps: the simulator prices their layouts, and the fp32 reference and
 * the CUDA model in gpu/ point their store structs with the same layouts.
 */
#include "model.h"
#include "klist.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

/* rows of fp32 logits the chunked loss holds at once */
#define LOSS_CHUNK_ROWS 1024

int model_check(const struct model_shape *m, char *err, int errlen)
{
	if (m->layers < 1 || m->hidden < 1 || m->ffn < 1 || m->heads < 1 || m->kv_heads < 1 ||
	    m->vocab < 1 || m->seq < 1) {
		snprintf(err, errlen, "every dimension must be at least 1");
		return -1;
	}
	if (!(m->rope_theta >= MODEL_ROPE_THETA_MIN && m->rope_theta <= MODEL_ROPE_THETA_MAX)) {
		snprintf(err, errlen, "rope_theta (%g) must be from %g to %g", m->rope_theta, MODEL_ROPE_THETA_MIN,
			 MODEL_ROPE_THETA_MAX);
		return -1;
	}
	if (m->hidden % m->heads) {
		snprintf(err, errlen, "heads (%d) must divide hidden (%d)", m->heads, m->hidden);
		return -1;
	}
	if (m->heads % m->kv_heads) {
		snprintf(err, errlen, "kv_heads (%d) must divide heads (%d)", m->kv_heads, m->heads);
		return -1;
	}
	if (model_head_dim(m) % 2) {
		snprintf(err, errlen, "head dim hidden/heads = %d must be even for rotary embedding",
			 model_head_dim(m));
		return -1;
	}
	return 0;
}

void model_block_tensors(const struct model_shape *m, struct tensor_desc out[BT_COUNT])
{
	int64_t D = m->hidden, F = m->ffn, Q = model_head_dim(m);
	int64_t hq = (int64_t)m->heads * Q, kvq = (int64_t)m->kv_heads * Q;

	out[BT_ATTN_NORM] = (struct tensor_desc){ "attn_norm", 1, D };
	out[BT_WQ] = (struct tensor_desc){ "wq", hq, D };
	out[BT_WK] = (struct tensor_desc){ "wk", kvq, D };
	out[BT_WV] = (struct tensor_desc){ "wv", kvq, D };
	out[BT_WO] = (struct tensor_desc){ "wo", D, hq };
	out[BT_MLP_NORM] = (struct tensor_desc){ "mlp_norm", 1, D };
	out[BT_W_GATE] = (struct tensor_desc){ "w_gate", F, D };
	out[BT_W_UP] = (struct tensor_desc){ "w_up", F, D };
	out[BT_W_DOWN] = (struct tensor_desc){ "w_down", D, F };
}

int64_t model_block_tensor_offset(const struct model_shape *m, enum block_tensor t)
{
	struct tensor_desc td[BT_COUNT];
	int64_t off = 0;

	assert(t >= 0 && t <= BT_COUNT);
	model_block_tensors(m, td);
	for (int i = 0; i < (int)t; i++)
		off += td[i].rows * td[i].cols;
	return off;
}

int64_t model_embed_params(const struct model_shape *m)
{
	return (int64_t)m->vocab * m->hidden;
}

int64_t model_attn_params(const struct model_shape *m)
{
	int64_t D = m->hidden, Q = model_head_dim(m);
	return 2 * D * m->heads * Q + 2 * D * m->kv_heads * Q;
}

int64_t model_mlp_params(const struct model_shape *m)
{
	return 3 * (int64_t)m->hidden * m->ffn;
}

int64_t model_block_norm_params(const struct model_shape *m)
{
	return 2 * (int64_t)m->hidden;
}

int64_t model_block_params(const struct model_shape *m)
{
	return model_attn_params(m) + model_mlp_params(m) + model_block_norm_params(m);
}

int64_t model_final_norm_params(const struct model_shape *m)
{
	return m->hidden;
}

int64_t model_output_params(const struct model_shape *m)
{
	return (int64_t)m->vocab * m->hidden;
}

int64_t model_module_params(const struct model_shape *m, enum module_kind k)
{
	switch (k) {
	case MOD_EMBED: return model_embed_params(m);
	case MOD_BLOCK: return model_block_params(m);
	case MOD_FINAL_NORM: return model_final_norm_params(m);
	case MOD_OUTPUT: return model_output_params(m);
	default: assert(!"bad module kind"); return 0;
	}
}

int model_module_tensor_list(const struct model_shape *m, enum module_kind k,
			     struct tensor_desc *out, int max)
{
	switch (k) {
	case MOD_EMBED:
		assert(max >= 1);
		out[0] = (struct tensor_desc){ "embed", m->vocab, m->hidden };
		return 1;
	case MOD_BLOCK:
		assert(max >= BT_COUNT);
		model_block_tensors(m, out);
		return BT_COUNT;
	case MOD_FINAL_NORM:
		assert(max >= 1);
		out[0] = (struct tensor_desc){ "final_norm", 1, m->hidden };
		return 1;
	case MOD_OUTPUT:
		assert(max >= 1);
		out[0] = (struct tensor_desc){ "output", m->vocab, m->hidden };
		return 1;
	default: assert(!"bad module kind"); return 0;
	}
}

int64_t model_module_offset(const struct model_shape *m, enum module_kind k, int block)
{
	int64_t blocks = model_embed_params(m);
	int64_t final_norm = blocks + (int64_t)m->layers * model_block_params(m);

	switch (k) {
	case MOD_EMBED: return 0;
	case MOD_BLOCK:
		assert(block >= 0 && block < m->layers);
		return blocks + (int64_t)block * model_block_params(m);
	case MOD_FINAL_NORM: return final_norm;
	case MOD_OUTPUT: return final_norm + model_final_norm_params(m);
	default: assert(!"bad module kind"); return 0;
	}
}

int64_t model_module_tensors(const struct model_shape *m, enum module_kind k)
{
	struct tensor_desc td[BT_COUNT];
	return model_module_tensor_list(m, k, td, BT_COUNT);
}

int64_t model_total_params(const struct model_shape *m)
{
	return model_embed_params(m) + (int64_t)m->layers * model_block_params(m) +
	       model_final_norm_params(m) + model_output_params(m);
}

double model_mfu_flops_per_token(const struct model_shape *m)
{
	double n = (double)(model_total_params(m) - model_embed_params(m));
	double attn = 12.0 * m->layers * m->heads * model_head_dim(m) * (double)m->seq;
	return 6.0 * n + attn;
}

/* ---- kernel lists ------------------------------------------------------ */

void klist_put(struct klist *l, const char *name, enum kernel_kind kind, int64_t m, int64_t n, int64_t k,
	       uint64_t flops, uint64_t bytes)
{
	struct kernel *x;

	assert(l->n < l->max);
	x = &l->k[l->n++];
	memset(x, 0, sizeof(*x));
	snprintf(x->name, sizeof(x->name), "%s", name);
	x->kind = kind;
	x->m = m;
	x->n = n;
	x->k = k;
	x->flops = flops;
	x->bytes = bytes;
}

void klist_gemm(struct klist *l, const char *name, int64_t m, int64_t n, int64_t k, int a)
{
	klist_put(l, name, K_GEMM, m, n, k, 2ull * m * n * k,
		  (uint64_t)a * ((uint64_t)m * k + (uint64_t)k * n + (uint64_t)m * n));
}

/* y = x W^T forward, and its two backward GEMMs (dgrad, wgrad). */
static void linear_fwd(struct klist *l, const char *name, int64_t N, int64_t in, int64_t out, int a)
{
	klist_gemm(l, name, N, out, in, a);
}

static void linear_bwd(struct klist *l, const char *name, int64_t N, int64_t in, int64_t out, int a)
{
	char b[KERNEL_NAME_MAX];

	snprintf(b, sizeof(b), "%s_dgrad", name);
	klist_gemm(l, b, N, in, out, a);
	snprintf(b, sizeof(b), "%s_wgrad", name);
	klist_gemm(l, b, out, in, N, a);
}

static void elementwise(struct klist *l, const char *name, uint64_t elems_in_out, int a,
			uint64_t flops)
{
	klist_put(l, name, K_ELEMENTWISE, 0, 0, 0, flops, elems_in_out * (uint64_t)a);
}

struct model_dims model_dims_of(const struct model_shape *m, int batch)
{
	struct model_dims d;

	d.B = batch;
	d.T = m->seq;
	d.N = d.B * d.T;
	d.D = m->hidden;
	d.F = m->ffn;
	d.H = m->heads;
	d.KV = m->kv_heads;
	d.Q = model_head_dim(m);
	d.V = m->vocab;
	d.qkv = (d.H + 2 * d.KV) * d.Q;
	d.hq = d.H * d.Q;
	d.rope_theta = m->rope_theta;
	return d;
}

/* Causal attention forward executes 2 T^2 Q per (sequence, head): half of QK^T and PV. */
static uint64_t attn_fwd_flops(const struct model_dims *d)
{
	return 2ull * d->B * d->H * d->T * d->T * d->Q;
}

/* Bytes of a store's field, unpadded: what a kernel reading or writing it moves. */
static uint64_t fbytes(const struct store_layout *st, int f)
{
	return st->f[f].elems * (uint64_t)st->f[f].elem_bytes;
}

/*
 * What a testbed block launches forward (FK_FORWARD) and when it rebuilds
 * its activations for backward. A full recompute stops after SwiGLU: the
 * down projection and the second residual make the block's output, which
 * backward never reads (gpu/ref/ref_block.c, gpu/cuda/block.cu). A
 * selective one keeps q and k rotated and every GEMM's output, so it runs
 * the two norms and SwiGLU only.
 */
enum forward_kind { FK_FORWARD, FK_RECOMPUTE_FULL, FK_RECOMPUTE_SELECTIVE };

/* st: the block's store, at act_bytes a (the mode does not change field sizes). */
static void block_forward_kernels(struct klist *l, const struct model_dims *d,
				  const struct store_layout *st, int a, enum forward_kind fk)
{
	int64_t N = d->N;
	int gemms = fk != FK_RECOMPUTE_SELECTIVE;

	elementwise(l, "attn_norm", 2 * N * d->D, a, 4ull * N * d->D);
	if (gemms) {
		linear_fwd(l, "qkv", N, d->D, d->qkv, a);
		elementwise(l, "rope", 2 * N * (d->H + d->KV) * d->Q, a, 6ull * N * (d->H + d->KV) * d->Q);
		klist_put(l, "attention", K_ATTN, d->B * d->H, d->T, d->Q, attn_fwd_flops(d),
		     fbytes(st, BF_QKV) + fbytes(st, BF_ATT) + fbytes(st, BF_LSE));
		linear_fwd(l, "wo", N, d->hq, d->D, a);
		elementwise(l, "residual1", 3 * N * d->D, a, (uint64_t)N * d->D);
	}
	elementwise(l, "mlp_norm", 2 * N * d->D, a, 4ull * N * d->D);
	if (gemms)
		linear_fwd(l, "gate_up", N, d->D, 2 * d->F, a);
	klist_put(l, "swiglu", K_ELEMENTWISE, 0, 0, 0, 6ull * N * d->F,
	     fbytes(st, BF_GATEUP) + fbytes(st, BF_H));
	if (fk == FK_FORWARD) {
		linear_fwd(l, "down", N, d->F, d->D, a);
		elementwise(l, "residual2", 3 * N * d->D, a, (uint64_t)N * d->D);
	}
}

/* st: the block's store, g: its backward's gradient scratch, both at act_bytes a. */
static void block_backward_kernels(struct klist *l, const struct model_dims *d,
				   const struct store_layout *st, const struct store_layout *g, int a)
{
	int64_t N = d->N;

	linear_bwd(l, "down", N, d->F, d->D, a);
	klist_put(l, "swiglu_bwd", K_ELEMENTWISE, 0, 0, 0, 10ull * N * d->F,
	     fbytes(g, GF_DH) + fbytes(st, BF_GATEUP) + fbytes(g, GF_DGATEUP));
	linear_bwd(l, "gate_up", N, d->D, 2 * d->F, a);
	elementwise(l, "mlp_norm_bwd", 4 * N * d->D, a, 8ull * N * d->D);
	elementwise(l, "residual1_bwd", 3 * N * d->D, a, (uint64_t)N * d->D);
	linear_bwd(l, "wo", N, d->hq, d->D, a);
	/* flash backward: recompute QK^T, then dV, dP, dQ, dK: 5/2 of forward */
	klist_put(l, "attention_bwd", K_ATTN, d->B * d->H, d->T, d->Q, 5 * attn_fwd_flops(d) / 2,
	     fbytes(st, BF_QKV) + fbytes(st, BF_ATT) + fbytes(st, BF_LSE) + fbytes(g, GF_DATT) +
		     fbytes(g, GF_DQKV));
	l->k[l->n - 1].backward = 1;
	elementwise(l, "rope_bwd", 2 * N * (d->H + d->KV) * d->Q, a, 6ull * N * (d->H + d->KV) * d->Q);
	linear_bwd(l, "qkv", N, d->D, d->qkv, a);
	elementwise(l, "attn_norm_bwd", 4 * N * d->D, a, 8ull * N * d->D);
	elementwise(l, "residual2_bwd", 3 * N * d->D, a, (uint64_t)N * d->D);
}

static void head_kernels(struct klist *l, const struct model_dims *d, enum phase ph, enum loss_mode loss,
			 int a)
{
	int64_t N = d->N;
	uint64_t logits = (uint64_t)N * d->V;

	if (ph == PH_FWD) {
		elementwise(l, "final_norm", 2 * N * d->D, a, 4ull * N * d->D);
		linear_fwd(l, "output", N, d->D, d->V, a);
		if (loss == LOSS_FULL) /* reads bf16 logits, writes them upcast to fp32 */
			klist_put(l, "loss", K_ELEMENTWISE, 0, 0, 0, 5 * logits, logits * (a + 4));
		else /* reads logit chunks straight from the GEMM, keeps a log-sum-exp per row */
			klist_put(l, "loss_chunked", K_ELEMENTWISE, 0, 0, 0, 5 * logits, logits * a);
		return;
	}
	if (ph != PH_BWD)
		return;
	if (loss == LOSS_CHUNKED) /* logits are rebuilt chunk by chunk */
		linear_fwd(l, "output_recompute", N, d->D, d->V, a);
	klist_put(l, "loss_bwd", K_ELEMENTWISE, 0, 0, 0, 3 * logits,
	     logits * (loss == LOSS_FULL ? 4 + a : 2 * a));
	linear_bwd(l, "output", N, d->D, d->V, a);
	elementwise(l, "final_norm_bwd", 4 * N * d->D, a, 8ull * N * d->D);
}

int model_segment_kernels(const struct model_shape *m, int batch, enum segment_kind s,
			  enum phase ph, enum ac_mode ac, enum loss_mode loss, int act_bytes,
			  struct kernel *out, int max)
{
	struct klist l = { out, 0, max };
	struct model_dims d = model_dims_of(m, batch);
	struct store_layout st, g;
	int a = act_bytes;

	switch (s) {
	case SEG_EMBED:
		if (ph == PH_FWD)
			klist_put(&l, "embed", K_ELEMENTWISE, 0, 0, 0, 0,
			     2ull * d.N * d.D * a + 4ull * d.N);
		else if (ph == PH_BWD) /* zero the (V, D) gradient, scatter-add N rows */
			klist_put(&l, "embed_bwd", K_ELEMENTWISE, 0, 0, 0, (uint64_t)d.N * d.D,
			     (uint64_t)d.V * d.D * a + 3ull * d.N * d.D * a + 4ull * d.N);
		break;
	case SEG_BLOCK:
		model_block_store_layout(&st, m, batch, AC_NONE, a);
		model_block_grads_layout(&g, m, batch, a);
		if (ph == PH_FWD)
			block_forward_kernels(&l, &d, &st, a, FK_FORWARD);
		else if (ph == PH_BWD)
			block_backward_kernels(&l, &d, &st, &g, a);
		else if (ac == AC_FULL)
			block_forward_kernels(&l, &d, &st, a, FK_RECOMPUTE_FULL);
		else if (ac == AC_SELECTIVE)
			block_forward_kernels(&l, &d, &st, a, FK_RECOMPUTE_SELECTIVE);
		break;
	case SEG_HEAD:
		head_kernels(&l, &d, ph, loss, a);
		break;
	default:
		assert(!"bad segment kind");
	}
	return l.n;
}

uint64_t model_segment_flops_per_token(const struct model_shape *m, enum segment_kind s,
				       enum phase ph, enum ac_mode ac)
{
	struct kernel k[MODEL_MAX_KERNELS];
	uint64_t f = 0;
	int n = model_segment_kernels(m, 1, s, ph, ac, LOSS_FULL, 2, k, MODEL_MAX_KERNELS);

	for (int i = 0; i < n; i++)
		f += k[i].flops;
	return f / (uint64_t)m->seq;
}

/* ---- activation stores ------------------------------------------------- */

/* Element counts a field can have, in the dims of struct model_dims. */
enum extent {
	X_ND,     /* (N, D) */
	X_N,      /* (N) */
	X_NQKV,   /* (N, (H + 2 KV) Q) */
	X_NHQ,    /* (N, H Q) */
	X_BHT,    /* (B, H, T) */
	X_N2F,    /* (N, 2F) */
	X_NF,     /* (N, F) */
	X_LOGITS, /* (rows, V): rows = N under LOSS_FULL, the chunk under LOSS_CHUNKED */
};

/* One row of a store's table; region[] is indexed by the store's mode. */
_Static_assert((int)LOSS_COUNT <= (int)AC_COUNT, "a field_row's region[] holds the loss modes too");

struct field_row {
	const char *name;
	enum extent extent;
	enum field_dtype dtype;
	enum field_region region[AC_COUNT];
};

#define ACT FIELD_ACT
#define FP32 FIELD_FP32
#define SAVED FIELD_SAVED
#define TRANS FIELD_TRANSIENT

/* What a block's backward reads, by checkpointing mode (see model.h). */
static const struct field_row block_fields[BF_COUNT] = {
	/*              name      extent   dtype  AC_NONE  AC_FULL  AC_SELECTIVE */
	[BF_X]      = { "x",      X_ND,    ACT,  { SAVED,   SAVED,   SAVED } },
	[BF_XN1]    = { "xn1",    X_ND,    ACT,  { SAVED,   TRANS,   TRANS } },
	[BF_RSTD1]  = { "rstd1",  X_N,     FP32, { SAVED,   TRANS,   TRANS } },
	[BF_QKV]    = { "qkv",    X_NQKV,  ACT,  { SAVED,   TRANS,   SAVED } },
	[BF_ATT]    = { "att",    X_NHQ,   ACT,  { SAVED,   TRANS,   SAVED } },
	[BF_LSE]    = { "lse",    X_BHT,   FP32, { SAVED,   TRANS,   SAVED } },
	[BF_X1]     = { "x1",     X_ND,    ACT,  { SAVED,   TRANS,   SAVED } },
	[BF_XN2]    = { "xn2",    X_ND,    ACT,  { SAVED,   TRANS,   TRANS } },
	[BF_RSTD2]  = { "rstd2",  X_N,     FP32, { SAVED,   TRANS,   TRANS } },
	[BF_GATEUP] = { "gateup", X_N2F,   ACT,  { SAVED,   TRANS,   SAVED } },
	[BF_H]      = { "h",      X_NF,    ACT,  { SAVED,   TRANS,   TRANS } },
};

/* The activation gradients a block's backward writes, whatever the mode. */
static const struct field_row grad_fields[GF_COUNT] = {
	[GF_DXN]     = { "dxn",     X_ND,   ACT, { TRANS, TRANS, TRANS } },
	[GF_DH]      = { "dh",      X_NF,   ACT, { TRANS, TRANS, TRANS } },
	[GF_DGATEUP] = { "dgateup", X_N2F,  ACT, { TRANS, TRANS, TRANS } },
	[GF_DATT]    = { "datt",    X_NHQ,  ACT, { TRANS, TRANS, TRANS } },
	[GF_DQKV]    = { "dqkv",    X_NQKV, ACT, { TRANS, TRANS, TRANS } },
};

/* What the head's backward reads, by loss mode. */
static const struct field_row head_fields[HF_COUNT] = {
	/*              name      extent    dtype  LOSS_FULL LOSS_CHUNKED */
	[HF_X]      = { "x",      X_ND,     ACT,  { SAVED,    SAVED } },
	[HF_XN]     = { "xn",     X_ND,     ACT,  { SAVED,    SAVED } },
	[HF_RSTD]   = { "rstd",   X_N,      FP32, { SAVED,    SAVED } },
	[HF_LSE]    = { "lse",    X_N,      FP32, { SAVED,    SAVED } },
	[HF_LOGITS] = { "logits", X_LOGITS, FP32, { SAVED,    TRANS } },
};

#undef ACT
#undef FP32
#undef SAVED
#undef TRANS

static uint64_t extent_elems(enum extent e, const struct model_dims *d, int64_t logit_rows)
{
	uint64_t N = (uint64_t)d->N;
	switch (e) {
	case X_ND: return N * d->D;
	case X_N: return N;
	case X_NQKV: return N * d->qkv;
	case X_NHQ: return N * d->hq;
	case X_BHT: return (uint64_t)d->B * d->H * d->T;
	case X_N2F: return N * 2 * d->F;
	case X_NF: return N * d->F;
	case X_LOGITS: return (uint64_t)logit_rows * d->V;
	}
	assert(!"bad extent");
	return 0;
}

uint64_t model_field_align(uint64_t bytes)
{
	return (bytes + MODEL_FIELD_ALIGN - 1) / MODEL_FIELD_ALIGN * MODEL_FIELD_ALIGN;
}

int model_loss_chunk_rows(const struct model_shape *m, int batch)
{
	int64_t n = (int64_t)batch * m->seq;
	return n < LOSS_CHUNK_ROWS ? (int)n : LOSS_CHUNK_ROWS;
}

/* Lay the n rows of a table out under the mode (the column of region[]). */
static void store_lay_out(struct store_layout *l, enum store_kind kind, const struct field_row *rows,
			  int n, int mode, const struct model_shape *m, int batch, int64_t logit_rows,
			  int act_bytes)
{
	struct model_dims d = model_dims_of(m, batch);

	assert(n <= MODEL_STORE_FIELDS_MAX && mode >= 0 && mode < AC_COUNT && act_bytes > 0);
	memset(l, 0, sizeof(*l));
	l->kind = kind;
	l->nfields = n;
	for (int i = 0; i < n; i++) {
		struct store_field *f = &l->f[i];
		uint64_t *end;

		f->name = rows[i].name;
		f->region = rows[i].region[mode];
		f->dtype = rows[i].dtype;
		f->elem_bytes = f->dtype == FIELD_ACT ? act_bytes : 4;
		f->elems = extent_elems(rows[i].extent, &d, logit_rows);
		end = f->region == FIELD_SAVED ? &l->saved_bytes : &l->transient_bytes;
		f->offset = *end;
		*end += model_field_align(f->elems * (uint64_t)f->elem_bytes);
	}
}

void model_block_store_layout(struct store_layout *l, const struct model_shape *m, int batch,
			      enum ac_mode ac, int act_bytes)
{
	assert(ac >= 0 && ac < AC_COUNT);
	store_lay_out(l, STORE_BLOCK, block_fields, BF_COUNT, ac, m, batch, 0, act_bytes);
}

void model_block_grads_layout(struct store_layout *l, const struct model_shape *m, int batch,
			      int act_bytes)
{
	store_lay_out(l, STORE_BLOCK_GRADS, grad_fields, GF_COUNT, 0, m, batch, 0, act_bytes);
}

void model_head_store_layout(struct store_layout *l, const struct model_shape *m, int batch,
			     enum loss_mode loss, int chunk, int act_bytes)
{
	assert(loss >= 0 && loss < LOSS_COUNT && (loss == LOSS_FULL || chunk > 0));
	store_lay_out(l, STORE_HEAD, head_fields, HF_COUNT, loss, m, batch,
		      loss == LOSS_FULL ? (int64_t)batch * m->seq : chunk, act_bytes);
}

void *model_store_field_at(const struct store_layout *l, int f, void *saved, void *transient)
{
	char *base;

	assert(f >= 0 && f < l->nfields);
	base = l->f[f].region == FIELD_SAVED ? saved : transient;
	assert(base);
	return base + l->f[f].offset;
}

uint64_t model_segment_saved_bytes(const struct model_shape *m, int batch, enum segment_kind s,
				   enum ac_mode ac, enum loss_mode loss, int act_bytes)
{
	struct store_layout l;

	switch (s) {
	case SEG_EMBED:
		return 4ull * batch * m->seq; /* token ids */
	case SEG_BLOCK:
		model_block_store_layout(&l, m, batch, ac, act_bytes);
		return l.saved_bytes;
	case SEG_HEAD:
		model_head_store_layout(&l, m, batch, loss, model_loss_chunk_rows(m, batch), act_bytes);
		return l.saved_bytes;
	default:
		assert(!"bad segment kind");
		return 0;
	}
}

uint64_t model_segment_transient_bytes(const struct model_shape *m, int batch, enum segment_kind s,
				       enum phase ph, enum ac_mode ac, enum loss_mode loss,
				       int act_bytes)
{
	struct store_layout l;

	switch (s) {
	case SEG_EMBED:
		return 0;
	case SEG_BLOCK:
		if (ph == PH_BWD) {
			model_block_grads_layout(&l, m, batch, act_bytes);
			return l.transient_bytes;
		}
		/* forward writes every field, the transient ones as scratch; AC_NONE has none */
		model_block_store_layout(&l, m, batch, ac, act_bytes);
		return l.transient_bytes;
	case SEG_HEAD:
		if (ph == PH_RECOMPUTE)
			return 0;
		/* the logits chunk: forward's, and backward's (it recomputes it), dlogits in place */
		model_head_store_layout(&l, m, batch, loss, model_loss_chunk_rows(m, batch), act_bytes);
		return l.transient_bytes;
	default:
		assert(!"bad segment kind");
		return 0;
	}
}

const char *segment_name(enum segment_kind s)
{
	static const char *const n[] = { "embed", "block", "head" };
	assert(s >= 0 && s < SEG_KIND_COUNT);
	return n[s];
}

const char *module_name(enum module_kind k)
{
	static const char *const n[] = { "embed", "block", "final_norm", "output" };
	assert(k >= 0 && k < MOD_KIND_COUNT);
	return n[k];
}

const char *ac_name(enum ac_mode a)
{
	static const char *const n[] = { "none", "full", "selective", "per-op", "per-layer" };
	assert(a >= 0 && a < AC_MODES);
	return n[a];
}

const char *mem_access_name(enum mem_access a)
{
	static const char *const n[] = { "stream", "norm", "cast-up", "gather", "broadcast", "reduce" };
	_Static_assert(sizeof n / sizeof n[0] == MA_COUNT, "a name per access pattern");
	assert(a >= 0 && a < MA_COUNT);
	return n[a];
}

const char *kernel_kind_name(enum kernel_kind k)
{
	static const char *const n[] = { "gemm", "attention", "elementwise" };
	assert(k >= 0 && k < K_KIND_COUNT);
	return n[k];
}
