/*
 * model.c - parameter counts, kernel lists and activation sizes of a
 * Llama-architecture decoder, derived from its shape alone.
 *
 * The kernel lists here are the single description of what a segment
 * computes: the simulator prices them and the GPU model launches the
 * same kernels in the same order. Activation sizes follow what the model
 * in gpu/ keeps for backward (see gpu/ref/ref.h), not a rule of thumb.
 */
#include "model.h"

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

struct klist {
	struct kernel *k;
	int n, max;
};

static void kput(struct klist *l, const char *name, enum kernel_kind kind, int64_t m, int64_t n,
		 int64_t k, uint64_t flops, uint64_t bytes)
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

/* GEMM (m x k) by (k x n): reads both operands, writes the output. */
static void gemm(struct klist *l, const char *name, int64_t m, int64_t n, int64_t k, int a)
{
	kput(l, name, K_GEMM, m, n, k, 2ull * m * n * k,
	     (uint64_t)a * ((uint64_t)m * k + (uint64_t)k * n + (uint64_t)m * n));
}

/* y = x W^T forward, and its two backward GEMMs (dgrad, wgrad). */
static void linear_fwd(struct klist *l, const char *name, int64_t N, int64_t in, int64_t out, int a)
{
	gemm(l, name, N, out, in, a);
}

static void linear_bwd(struct klist *l, const char *name, int64_t N, int64_t in, int64_t out, int a)
{
	char b[KERNEL_NAME_MAX];

	snprintf(b, sizeof(b), "%s_dgrad", name);
	gemm(l, b, N, in, out, a);
	snprintf(b, sizeof(b), "%s_wgrad", name);
	gemm(l, b, out, in, N, a);
}

static void elementwise(struct klist *l, const char *name, uint64_t elems_in_out, int a,
			uint64_t flops)
{
	kput(l, name, K_ELEMENTWISE, 0, 0, 0, flops, elems_in_out * (uint64_t)a);
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
	return d;
}

/* Causal attention forward executes 2 T^2 Q per (sequence, head): half of QK^T and PV. */
static uint64_t attn_fwd_flops(const struct model_dims *d)
{
	return 2ull * d->B * d->H * d->T * d->T * d->Q;
}

static void block_forward_kernels(struct klist *l, const struct model_dims *d, int a, int elementwise_only)
{
	int64_t N = d->N;

	elementwise(l, "attn_norm", 2 * N * d->D, a, 4ull * N * d->D);
	if (!elementwise_only)
		linear_fwd(l, "qkv", N, d->D, d->qkv, a);
	if (!elementwise_only) /* selective keeps q and k already rotated */
		elementwise(l, "rope", 2 * N * (d->H + d->KV) * d->Q, a, 6ull * N * (d->H + d->KV) * d->Q);
	if (!elementwise_only) {
		kput(l, "attention", K_ATTN, d->B * d->H, d->T, d->Q, attn_fwd_flops(d),
		     (uint64_t)a * (N * d->qkv + N * d->hq) + 4ull * d->B * d->H * d->T);
		linear_fwd(l, "wo", N, d->hq, d->D, a);
	}
	elementwise(l, "residual1", 3 * N * d->D, a, (uint64_t)N * d->D);
	elementwise(l, "mlp_norm", 2 * N * d->D, a, 4ull * N * d->D);
	if (!elementwise_only)
		linear_fwd(l, "gate_up", N, d->D, 2 * d->F, a);
	elementwise(l, "swiglu", 3 * N * d->F, a, 6ull * N * d->F);
	if (!elementwise_only) {
		linear_fwd(l, "down", N, d->F, d->D, a);
		elementwise(l, "residual2", 3 * N * d->D, a, (uint64_t)N * d->D);
	}
}

static void block_backward_kernels(struct klist *l, const struct model_dims *d, int a)
{
	int64_t N = d->N;

	linear_bwd(l, "down", N, d->F, d->D, a);
	elementwise(l, "swiglu_bwd", 5 * N * d->F, a, 10ull * N * d->F);
	linear_bwd(l, "gate_up", N, d->D, 2 * d->F, a);
	elementwise(l, "mlp_norm_bwd", 4 * N * d->D, a, 8ull * N * d->D);
	elementwise(l, "residual1_bwd", 3 * N * d->D, a, (uint64_t)N * d->D);
	linear_bwd(l, "wo", N, d->hq, d->D, a);
	/* flash backward: recompute QK^T, then dV, dP, dQ, dK: 5/2 of forward */
	kput(l, "attention_bwd", K_ATTN, d->B * d->H, d->T, d->Q, 5 * attn_fwd_flops(d) / 2,
	     (uint64_t)a * (2 * N * d->qkv + 2 * N * d->hq) + 4ull * d->B * d->H * d->T);
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
			kput(l, "loss", K_ELEMENTWISE, 0, 0, 0, 5 * logits, logits * (a + 4));
		else /* reads logit chunks straight from the GEMM, keeps a log-sum-exp per row */
			kput(l, "loss_chunked", K_ELEMENTWISE, 0, 0, 0, 5 * logits, logits * a);
		return;
	}
	if (ph != PH_BWD)
		return;
	if (loss == LOSS_CHUNKED) /* logits are rebuilt chunk by chunk */
		linear_fwd(l, "output_recompute", N, d->D, d->V, a);
	kput(l, "loss_bwd", K_ELEMENTWISE, 0, 0, 0, 3 * logits,
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
	int a = act_bytes;

	switch (s) {
	case SEG_EMBED:
		if (ph == PH_FWD)
			kput(&l, "embed", K_ELEMENTWISE, 0, 0, 0, 0,
			     2ull * d.N * d.D * a + 4ull * d.N);
		else if (ph == PH_BWD) /* zero the (V, D) gradient, scatter-add N rows */
			kput(&l, "embed_bwd", K_ELEMENTWISE, 0, 0, 0, (uint64_t)d.N * d.D,
			     (uint64_t)d.V * d.D * a + 3ull * d.N * d.D * a + 4ull * d.N);
		break;
	case SEG_BLOCK:
		if (ph == PH_FWD)
			block_forward_kernels(&l, &d, a, 0);
		else if (ph == PH_BWD)
			block_backward_kernels(&l, &d, a);
		else if (ac == AC_FULL)
			block_forward_kernels(&l, &d, a, 0);
		else if (ac == AC_SELECTIVE)
			block_forward_kernels(&l, &d, a, 1);
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

/* ---- activation memory ------------------------------------------------- */

/* Bytes one block keeps for backward when nothing is recomputed. */
static uint64_t block_saved_all(const struct model_dims *d, int a)
{
	uint64_t N = d->N;
	/* x, attn_norm out, qkv (roped), attn out, x1, mlp_norm out, gate_up, h */
	uint64_t acts = N * (4 * d->D + d->qkv + d->hq + 3 * d->F) * a;
	/* two rstd vectors and the attention log-sum-exp, fp32 */
	return acts + 2 * 4 * N + 4ull * d->B * d->H * d->T;
}

/* Selective keeps the block input, the GEMM outputs and the attention output. */
static uint64_t block_saved_selective(const struct model_dims *d, int a)
{
	uint64_t N = d->N;
	return N * (d->D + d->qkv + d->hq + d->D + 2 * d->F) * a + 4ull * d->B * d->H * d->T;
}

uint64_t model_segment_saved_bytes(const struct model_shape *m, int batch, enum segment_kind s,
				   enum ac_mode ac, enum loss_mode loss, int act_bytes)
{
	struct model_dims d = model_dims_of(m, batch);
	uint64_t N = d.N;
	int a = act_bytes;

	switch (s) {
	case SEG_EMBED:
		return 4 * N; /* token ids */
	case SEG_BLOCK:
		if (ac == AC_NONE)
			return block_saved_all(&d, a);
		if (ac == AC_FULL)
			return N * d.D * a;
		return block_saved_selective(&d, a);
	case SEG_HEAD:
		/* head input, normed input, rstd, and the loss state */
		if (loss == LOSS_FULL)
			return 2 * N * d.D * a + 4 * N + N * d.V * (uint64_t)(a + 4);
		return 2 * N * d.D * a + 4 * N + 4 * N;
	default:
		assert(!"bad segment kind");
		return 0;
	}
}

uint64_t model_segment_transient_bytes(const struct model_shape *m, int batch, enum segment_kind s,
				       enum phase ph, enum ac_mode ac, enum loss_mode loss,
				       int act_bytes)
{
	struct model_dims d = model_dims_of(m, batch);
	uint64_t N = d.N;
	int a = act_bytes;

	switch (s) {
	case SEG_EMBED:
		return 0;
	case SEG_BLOCK:
		if (ph == PH_FWD) /* TEMPORARY until the layout table lands */
			return ac == AC_NONE ? 0 : block_saved_all(&d, a) - model_segment_saved_bytes(m, batch, s, ac, loss, a);
		if (ph == PH_RECOMPUTE) /* what backward needs and the checkpoint lacks */
			return ac == AC_NONE ? 0 : block_saved_all(&d, a) -
				model_segment_saved_bytes(m, batch, s, ac, loss, a);
		return N * (d.D + d.F + 2 * d.F + d.hq + d.qkv) * a; /* TEMPORARY */
	case SEG_HEAD:
		if (ph == PH_FWD)
			return loss == LOSS_FULL ? 0 : (uint64_t)LOSS_CHUNK_ROWS * d.V * 4;
		if (ph == PH_BWD) /* dlogits, whole or one chunk */
			return loss == LOSS_FULL ? N * d.V * a : (uint64_t)LOSS_CHUNK_ROWS * d.V * (4 + a);
		return 0;
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
	static const char *const n[] = { "none", "full", "selective" };
	assert(a >= 0 && a < AC_COUNT);
	return n[a];
}

const char *kernel_kind_name(enum kernel_kind k)
{
	static const char *const n[] = { "gemm", "attention", "elementwise" };
	assert(k >= 0 && k < K_KIND_COUNT);
	return n[k];
}
