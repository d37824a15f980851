/*
 * kernel_plan.c - how the CUDA model launches each kernel of core/model.c's
 * lists (see cuda_kernel.h). Plain C: names and shapes to launches and
 * operand sizes; nothing here touches a GPU.
 */
#include "cuda_kernel.h"

#include <stdio.h>
#include <string.h>

#define ALIGN 256 /* MODEL_FIELD_ALIGN, as every buffer field of the CUDA model */

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && !strcmp(s + n - m, suffix);
}

static int is(const char *name, const char *what)
{
	return !strcmp(name, what);
}

static void operand(struct cuda_kernel_plan *p, uint64_t bytes)
{
	p->bytes[p->noperands++] = bytes;
}

/* A GEMM as block.cu and layers.cu call gemm_rm for kernel k. */
static int gemm_plan(const struct kernel *k, struct cuda_kernel_plan *p, char *err, int errlen)
{
	const char *n = k->name;
	int logits = !strncmp(n, "output", 6); /* the head's GEMMs: fp32 logits, or their bf16 gradient in place */
	uint64_t esize;

	if (k->m < 1 || k->n < 1 || k->k < 1 || k->m > INT32_MAX || k->n > INT32_MAX || k->k > INT32_MAX) {
		snprintf(err, errlen, "GEMM %s of shape (%lld, %lld, %lld): out of gemm_rm's range", n,
			 (long long)k->m, (long long)k->n, (long long)k->k);
		return -1;
	}
	p->form = CUDA_KF_GEMM;
	p->M = (int)k->m;
	p->N = (int)k->n;
	p->K = (int)k->k;
	if (ends_with(n, "_dgrad")) { /* dx (M, N) = dout (M, K) W (K, N) */
		p->lda = logits ? 2 * (int64_t)p->K : p->K;
		p->ldb = p->N;
	} else if (ends_with(n, "_wgrad")) { /* dW (M, N) += dout^T x: dout stored (K, M), x (K, N) */
		p->ta = 1;
		p->lda = logits ? 2 * (int64_t)p->M : p->M;
		p->ldb = p->N;
		p->d_grad = 1;
	} else { /* y (M, N) = x (M, K) W^T, W stored (N, K) */
		p->tb = 1;
		p->lda = p->K;
		p->ldb = p->K;
		p->d_fp32 = logits;
		p->residual = is(n, "wo") || is(n, "down");
	}
	p->ldd = p->N;
	/* A, B, D, then the residual */
	operand(p, 2ull * (uint64_t)(p->ta ? p->K : p->M) * (uint64_t)p->lda);
	operand(p, 2ull * (uint64_t)(p->tb ? p->N : p->K) * (uint64_t)p->ldb);
	esize = p->d_fp32 ? 4 : p->d_grad ? (p->grad_bf16 ? 2 : 4) : 2;
	operand(p, esize * (uint64_t)p->M * (uint64_t)p->ldd);
	if (p->residual)
		operand(p, 2ull * (uint64_t)p->M * (uint64_t)p->ldd);
	return 0;
}

int cuda_kernel_plan(const struct kernel *k, const struct model_shape *m, int batch, int grad_bf16,
		     struct cuda_kernel_plan *p, char *err, int errlen)
{
	const char *n = k->name;
	struct model_dims d = model_dims_of(m, batch);
	uint64_t N = (uint64_t)d.N, D = (uint64_t)d.D, F = (uint64_t)d.F, V = (uint64_t)d.V;
	uint64_t nd = 2 * N * D, gsize = grad_bf16 ? 2 : 4, logits = N * V;

	memset(p, 0, sizeof(*p));
	p->d = d;
	p->grad_bf16 = grad_bf16;
	if (k->kind == K_GEMM)
		return gemm_plan(k, p, err, errlen);
	if (!strncmp(n, "residual", 8)) {
		p->form = CUDA_KF_FUSED;
	} else if (is(n, "attn_norm") || is(n, "mlp_norm") || is(n, "final_norm")) {
		p->form = CUDA_KF_NORM; /* out, rstd, x, w */
		operand(p, nd);
		operand(p, 4 * N);
		operand(p, nd);
		operand(p, 2 * D);
	} else if (is(n, "attn_norm_bwd") || is(n, "mlp_norm_bwd") || is(n, "final_norm_bwd")) {
		p->form = CUDA_KF_NORM_BWD; /* dx = dout (in place), dw, dres, x, w, rstd */
		p->norm_residual = !is(n, "final_norm_bwd");
		operand(p, nd);
		operand(p, gsize * D);
		operand(p, nd);
		operand(p, nd);
		operand(p, 2 * D);
		operand(p, 4 * N);
	} else if (is(n, "rope") || is(n, "rope_bwd")) {
		p->form = is(n, "rope") ? CUDA_KF_ROPE : CUDA_KF_ROPE_BWD; /* qkv, in place */
		operand(p, 2 * N * (uint64_t)d.qkv);
	} else if (is(n, "attention")) {
		p->form = CUDA_KF_ATTN; /* out, lse, qkv */
		operand(p, 2 * N * (uint64_t)d.hq);
		operand(p, 4 * (uint64_t)(d.B * d.H * d.T));
		operand(p, 2 * N * (uint64_t)d.qkv);
	} else if (is(n, "attention_bwd")) {
		p->form = CUDA_KF_ATTN_BWD; /* dqkv, dout, qkv, out, lse */
		operand(p, 2 * N * (uint64_t)d.qkv);
		operand(p, 2 * N * (uint64_t)d.hq);
		operand(p, 2 * N * (uint64_t)d.qkv);
		operand(p, 2 * N * (uint64_t)d.hq);
		operand(p, 4 * (uint64_t)(d.B * d.H * d.T));
	} else if (is(n, "swiglu")) {
		p->form = CUDA_KF_SWIGLU; /* h, gateup */
		operand(p, 2 * N * F);
		operand(p, 4 * N * F);
	} else if (is(n, "swiglu_bwd")) {
		p->form = CUDA_KF_SWIGLU_BWD; /* dgateup, dh, gateup */
		operand(p, 4 * N * F);
		operand(p, 2 * N * F);
		operand(p, 4 * N * F);
	} else if (is(n, "embed")) {
		p->form = CUDA_KF_EMBED; /* out, wte */
		p->ids = 1;
		operand(p, nd);
		operand(p, 2 * V * D);
	} else if (is(n, "embed_bwd")) {
		p->form = CUDA_KF_EMBED_BWD; /* dwte (the gradient type), dout */
		p->ids = 1;
		operand(p, gsize * V * D);
		operand(p, nd);
	} else if (is(n, "loss") || is(n, "loss_chunked") || is(n, "loss_bwd")) {
		int chunked = is(n, "loss_chunked");
		if (is(n, "loss_bwd")) {
			/* core/model.c: the full loss's backward moves logits * (4 + 2) bytes, the chunked one's 2 * 2 */
			if (k->bytes != logits * 6 && k->bytes != logits * 4) {
				snprintf(err, errlen, "loss_bwd of %llu bytes: neither the full nor the chunked loss's "
						      "at 2-byte activations", (unsigned long long)k->bytes);
				return -1;
			}
			chunked = k->bytes == logits * 4;
		}
		p->form = is(n, "loss_bwd") ? CUDA_KF_LOSS_BWD : CUDA_KF_LOSS; /* lse, row losses, logits */
		p->chunk = chunked ? model_loss_chunk_rows(m, batch) : (int)d.N;
		p->ids = 1;
		operand(p, 4 * N);
		operand(p, 4 * N);
		operand(p, 4 * (uint64_t)p->chunk * V);
	} else {
		snprintf(err, errlen, "kernel '%s': the CUDA model launches no kernel of that name", n);
		return -1;
	}
	return 0;
}

static uint64_t up(uint64_t b)
{
	return (b + ALIGN - 1) / ALIGN * ALIGN;
}

uint64_t cuda_kernel_offset(const struct cuda_kernel_plan *p, int i)
{
	uint64_t off = 0;

	for (int j = 0; j < i && j < p->noperands; j++)
		off += up(p->bytes[j]);
	return off;
}

uint64_t cuda_kernel_bytes(const struct cuda_kernel_plan *p)
{
	return cuda_kernel_offset(p, p->noperands);
}
