/*
 * kernel_run.cu - one kernel of core/model.c's lists, alone, as the CUDA
 * model launches it (cuda_kernel.h has the plans, cuda_model.h the API):
 * what gpu_run's CUDA backend times for its calibration.
 */
#include "internal.h"

/* A bf16 word of random sign and mantissa, of magnitude in [2^-7, 2^-3): finite, as weights and activations are. */
static __device__ uint16_t word_of(uint64_t i, uint64_t seed)
{
	uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
	h ^= h >> 31;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 29;
	uint16_t sign = (uint16_t)(h & 0x8000u);
	uint16_t exp = (uint16_t)(120 + (h >> 16) % 4); /* 2^-7 .. 2^-4 */
	uint16_t man = (uint16_t)((h >> 24) & 0x7f);
	return (uint16_t)(sign | exp << 7 | man);
}

static __global__ void fill_kernel(uint16_t *w, uint64_t n, uint64_t seed)
{
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
		w[i] = word_of(i, seed);
}

static __global__ void ids_kernel(int *ids, int n, int V)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		ids[i] = (int)(((uint64_t)i * 2654435761u) % (uint64_t)V);
}

void cuda_kernel_fill(void *work, uint64_t bytes, int *ids, int n, int V, uint64_t seed, cudaStream_t st)
{
	if (bytes >= 2) {
		fill_kernel<<<1024, 256, 0, st>>>((uint16_t *)work, bytes / 2, seed);
		cudaCheck(cudaGetLastError());
	}
	if (ids && n > 0) {
		cuda_assert(V > 0);
		ids_kernel<<<cdiv(n, 256) < 1024 ? cdiv(n, 256) : 1024, 256, 0, st>>>(ids, n, V);
		cudaCheck(cudaGetLastError());
	}
}

void cuda_kernel_run(struct cuda_ctx *ctx, const struct cuda_kernel_plan *p, void *work, const int *ids,
		     cudaStream_t st)
{
	char *w = (char *)work;
	void *o[CUDA_KERNEL_OPERANDS];
	const struct model_dims *d = &p->d;
	int B = (int)d->B, T = (int)d->T, N = (int)d->N, D = (int)d->D, F = (int)d->F;
	int H = (int)d->H, KV = (int)d->KV, Q = (int)d->Q, V = (int)d->V;

	for (int i = 0; i < p->noperands; i++)
		o[i] = w + cuda_kernel_offset(p, i);
	cuda_assert(!p->ids || ids);
	cuda_ctx_grad_bf16(ctx, p->grad_bf16);
	switch (p->form) {
	case CUDA_KF_FUSED:
		break;
	case CUDA_KF_GEMM: {
		cudaDataType_t dt = p->d_fp32 ? CUDA_R_32F : p->d_grad ? grad_dtype(ctx) : CUDA_R_16BF;
		const void *C = p->d_grad ? o[2] : p->residual ? o[3] : NULL;
		gemm_rm(ctx, st, p->ta, p->tb, p->M, p->N, p->K, (const bf16 *)o[0], p->lda, (const bf16 *)o[1], p->ldb,
			o[2], dt, p->ldd, C ? 1.0f : 0.0f, C);
		break;
	}
	case CUDA_KF_NORM:
		cuda_rmsnorm_forward((bf16 *)o[0], (float *)o[1], (const bf16 *)o[2], (const bf16 *)o[3], N, D, st);
		break;
	case CUDA_KF_NORM_BWD: /* dx written over dout, as the block does */
		norm_backward(ctx, (bf16 *)o[0], o[1], (const bf16 *)o[0], p->norm_residual ? (const bf16 *)o[2] : NULL,
			      (const bf16 *)o[3], (const bf16 *)o[4], (const float *)o[5], N, D, st);
		break;
	case CUDA_KF_ROPE:
		cuda_rope_forward((bf16 *)o[0], B, T, H, KV, Q, (float)d->rope_theta, st);
		break;
	case CUDA_KF_ROPE_BWD:
		cuda_rope_backward((bf16 *)o[0], B, T, H, KV, Q, (float)d->rope_theta, st);
		break;
	case CUDA_KF_ATTN:
		cuda_attention_forward_ctx(ctx, (bf16 *)o[0], (float *)o[1], (const bf16 *)o[2], B, T, H, KV, Q, st);
		break;
	case CUDA_KF_ATTN_BWD:
		cuda_attention_backward_ctx(ctx, (bf16 *)o[0], (const bf16 *)o[1], (const bf16 *)o[2],
					    (const bf16 *)o[3], (const float *)o[4], B, T, H, KV, Q, st);
		break;
	case CUDA_KF_SWIGLU:
		cuda_swiglu_forward((bf16 *)o[0], (const bf16 *)o[1], N, F, st);
		break;
	case CUDA_KF_SWIGLU_BWD:
		cuda_swiglu_backward((bf16 *)o[0], (const bf16 *)o[1], (const bf16 *)o[2], N, F, st);
		break;
	case CUDA_KF_EMBED:
		cuda_embedding_forward((bf16 *)o[0], ids, (const bf16 *)o[1], N, D, st);
		break;
	case CUDA_KF_EMBED_BWD:
		if (p->grad_bf16)
			cuda_embedding_backward_bf16((bf16 *)o[0], (const bf16 *)o[1], ids, N, D, st);
		else
			cuda_embedding_backward((float *)o[0], (const bf16 *)o[1], ids, N, D, st);
		break;
	case CUDA_KF_LOSS: /* lse, row losses, a chunk's logits: as cuda_lm_loss_forward's loop */
		for (int n0 = 0; n0 < N; n0 += p->chunk) {
			int rows = N - n0 < p->chunk ? N - n0 : p->chunk;
			ce_forward_rows((float *)o[0] + n0, (float *)o[1] + n0, (const float *)o[2], ids + n0, rows, V, st);
		}
		break;
	case CUDA_KF_LOSS_BWD: /* the bf16 gradient in place over the chunk's logits, row stride 2V */
		for (int n0 = 0; n0 < N; n0 += p->chunk) {
			int rows = N - n0 < p->chunk ? N - n0 : p->chunk;
			ce_backward_rows((bf16 *)o[2], 2 * (int64_t)V, (const float *)o[2], (const float *)o[0] + n0,
					 ids + n0, rows, V, 1.0f / (float)N, st);
		}
		break;
	default:
		cuda_assert(!"a kernel form kernel_run.cu does not know");
	}
}
