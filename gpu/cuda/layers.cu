/*
 * layers.cu - the memory-bound layers and the GEMM-backed ones: embedding,
 * RMSNorm, linear, rotary embedding, SwiGLU, cross-entropy and the output
 * projection with its (full or chunked) loss. Attention is attention.cu.
 *
 * Element-wise kernels move 16 bytes (8 bf16) per thread access, which is
 * why D, F and V must be multiples of 8 (cuda_shape_check). Arithmetic is
 * fp32; only stored activations are bf16. Reductions whose order matters
 * for reproducibility (the loss) run in a fixed order; gradient
 * accumulations across rows (norm weights, embedding) use fp32 atomics.
 */
#include <math.h>

#include "internal.h"

#define WARP 32

/* ---- 8-wide bf16 vectors ------------------------------------------------------ */

struct f8 {
	float v[8];
};

static __device__ __forceinline__ f8 load8(const bf16 *p)
{
	uint4 raw = *(const uint4 *)p;
	const __nv_bfloat162 *h = (const __nv_bfloat162 *)&raw;
	f8 r;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		float2 f = __bfloat1622float2(h[i]);
		r.v[2 * i] = f.x;
		r.v[2 * i + 1] = f.y;
	}
	return r;
}

static __device__ __forceinline__ void store8(bf16 *p, const f8 &r)
{
	uint4 raw;
	__nv_bfloat162 *h = (__nv_bfloat162 *)&raw;
#pragma unroll
	for (int i = 0; i < 4; i++)
		h[i] = __floats2bfloat162_rn(r.v[2 * i], r.v[2 * i + 1]);
	*(uint4 *)p = raw;
}

static __device__ __forceinline__ float warp_sum(float x)
{
#pragma unroll
	for (int o = WARP / 2; o > 0; o /= 2)
		x += __shfl_xor_sync(0xffffffffu, x, o);
	return x;
}

static int sm_count(void)
{
	int dev, n;
	cudaCheck(cudaGetDevice(&dev));
	cudaCheck(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
	return n;
}

/* ---- embedding ----------------------------------------------------------------- */

static __global__ void embedding_fwd_kernel(bf16 *out, const int *tokens, const bf16 *wte,
					    int N, int D)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; /* vector index */
	int per_row = D / 8;
	if (i >= (int64_t)N * per_row)
		return;
	int n = (int)(i / per_row), c = (int)(i % per_row) * 8;
	*(uint4 *)(out + (int64_t)n * D + c) = *(const uint4 *)(wte + (int64_t)tokens[n] * D + c);
}

void cuda_embedding_forward(bf16 *out, const int *tokens, const bf16 *wte, int N, int D,
			    cudaStream_t st)
{
	int64_t vecs = (int64_t)N * (D / 8);
	embedding_fwd_kernel<<<cdiv(vecs, 256), 256, 0, st>>>(out, tokens, wte, N, D);
	cudaCheck(cudaGetLastError());
}

static __global__ void embedding_bwd_kernel(float *dwte, const bf16 *dout, const int *tokens,
					    int N, int D)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int per_row = D / 8;
	if (i >= (int64_t)N * per_row)
		return;
	int n = (int)(i / per_row), c = (int)(i % per_row) * 8;
	f8 g = load8(dout + (int64_t)n * D + c);
	float *row = dwte + (int64_t)tokens[n] * D + c;
#pragma unroll
	for (int j = 0; j < 8; j++)
		atomicAdd(row + j, g.v[j]);
}

void cuda_embedding_backward(float *dwte, const bf16 *dout, const int *tokens, int N, int D,
			     cudaStream_t st)
{
	int64_t vecs = (int64_t)N * (D / 8);
	embedding_bwd_kernel<<<cdiv(vecs, 256), 256, 0, st>>>(dwte, dout, tokens, N, D);
	cudaCheck(cudaGetLastError());
}

/*
 * One CTA per position n: if tokens[n] occurs at an earlier position the
 * CTA has nothing to do; else it owns that token and sums, column by
 * column in fp32, the dout rows of every position from n on that holds
 * it, in position order, and adds the sum to the bf16 row once. The
 * duplicate scan reads the token list through L1/L2: N^2 / 2 comparisons.
 */
#define EMB_BWD_THREADS 128
static __global__ void embedding_bwd_bf16_kernel(bf16 *dwte, const bf16 *dout, const int *tokens,
						 int N, int D)
{
	int n = blockIdx.x, tok = tokens[n], found = 0;
	for (int j = threadIdx.x; j < n; j += blockDim.x)
		found |= tokens[j] == tok;
	/* any thread's find, through the barrier (no shared flag that many threads write) */
	if (__syncthreads_or(found))
		return;
	for (int c = threadIdx.x * 8; c < D; c += blockDim.x * 8) {
		f8 acc;
#pragma unroll
		for (int k = 0; k < 8; k++)
			acc.v[k] = 0.0f;
		for (int j = n; j < N; j++) {
			if (tokens[j] != tok)
				continue;
			f8 g = load8(dout + (int64_t)j * D + c);
#pragma unroll
			for (int k = 0; k < 8; k++)
				acc.v[k] += g.v[k];
		}
		bf16 *row = dwte + (int64_t)tok * D + c;
		f8 old = load8(row);
#pragma unroll
		for (int k = 0; k < 8; k++)
			acc.v[k] += old.v[k];
		store8(row, acc);
	}
}

void cuda_embedding_backward_bf16(bf16 *dwte, const bf16 *dout, const int *tokens, int N, int D,
				  cudaStream_t st)
{
	cuda_assert(D % 8 == 0);
	embedding_bwd_bf16_kernel<<<N, EMB_BWD_THREADS, 0, st>>>(dwte, dout, tokens, N, D);
	cudaCheck(cudaGetLastError());
}

static __global__ void add_f32_to_bf16_kernel(bf16 *dst, const float *src, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		dst[i] = __float2bfloat16(__bfloat162float(dst[i]) + src[i]);
}

void add_f32_to_bf16(bf16 *dst, const float *src, int n, cudaStream_t st)
{
	add_f32_to_bf16_kernel<<<cdiv(n, 256), 256, 0, st>>>(dst, src, n);
	cudaCheck(cudaGetLastError());
}

/* ---- RMSNorm ------------------------------------------------------------------- */

/* One warp per row; the second pass re-reads the row from L1. */
static __global__ void rmsnorm_fwd_kernel(bf16 *out, float *rstd, const bf16 *x, const bf16 *w,
					  int N, int C)
{
	int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
	int lane = threadIdx.x % WARP;
	if (row >= N)
		return;
	const bf16 *xr = x + (int64_t)row * C;
	float ss = 0.0f;
	for (int c = lane * 8; c < C; c += WARP * 8) {
		f8 v = load8(xr + c);
#pragma unroll
		for (int j = 0; j < 8; j++)
			ss += v.v[j] * v.v[j];
	}
	ss = warp_sum(ss);
	float r = 1.0f / sqrtf(ss / C + CUDA_RMS_EPS);
	for (int c = lane * 8; c < C; c += WARP * 8) {
		f8 v = load8(xr + c), wv = load8(w + c), o;
#pragma unroll
		for (int j = 0; j < 8; j++)
			o.v[j] = v.v[j] * r * wv.v[j];
		store8(out + (int64_t)row * C + c, o);
	}
	if (lane == 0)
		rstd[row] = r;
}

void cuda_rmsnorm_forward(bf16 *out, float *rstd, const bf16 *x, const bf16 *w, int N, int C,
			  cudaStream_t st)
{
	cuda_assert(C % 8 == 0);
	rmsnorm_fwd_kernel<<<cdiv(N, 8), 8 * WARP, 0, st>>>(out, rstd, x, w, N, C);
	cudaCheck(cudaGetLastError());
}

/*
 * With xhat = x r: dx = r (g w - xhat mean(g w xhat)) + dres, dw += g xhat.
 * A CTA takes a strip of rows, one warp per row at a time; dw is summed
 * per CTA in shared memory (C floats) and added to the fp32 gradient with
 * one atomic per column per CTA. A lane reads its dout/dres elements before
 * writing the same elements of dx, so dx may alias either.
 */
static __global__ void rmsnorm_bwd_kernel(bf16 *dx, float *dw, const bf16 *dout,
					  const bf16 *dres, const bf16 *x, const bf16 *w,
					  const float *rstd, int N, int C, int rows_per_cta)
{
	extern __shared__ float dw_s[]; /* (C) */
	int warps = blockDim.x / WARP, warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
	for (int c = threadIdx.x; c < C; c += blockDim.x)
		dw_s[c] = 0.0f;
	__syncthreads();
	int row0 = blockIdx.x * rows_per_cta;
	int row_end = min(row0 + rows_per_cta, N);
	for (int row = row0 + warp; row < row_end; row += warps) {
		const bf16 *xr = x + (int64_t)row * C;
		const bf16 *gr = dout + (int64_t)row * C;
		float r = rstd[row];
		float dot = 0.0f;
		for (int c = lane * 8; c < C; c += WARP * 8) {
			f8 xv = load8(xr + c), gv = load8(gr + c), wv = load8(w + c);
#pragma unroll
			for (int j = 0; j < 8; j++)
				dot += gv.v[j] * wv.v[j] * (xv.v[j] * r);
		}
		float mean = warp_sum(dot) / C;
		for (int c = lane * 8; c < C; c += WARP * 8) {
			f8 xv = load8(xr + c), gv = load8(gr + c), wv = load8(w + c), o;
			f8 rv;
			if (dres)
				rv = load8(dres + (int64_t)row * C + c);
#pragma unroll
			for (int j = 0; j < 8; j++) {
				float xhat = xv.v[j] * r;
				o.v[j] = r * (gv.v[j] * wv.v[j] - xhat * mean) + (dres ? rv.v[j] : 0.0f);
				atomicAdd(&dw_s[c + j], gv.v[j] * xhat);
			}
			store8(dx + (int64_t)row * C + c, o);
		}
	}
	__syncthreads();
	for (int c = threadIdx.x; c < C; c += blockDim.x)
		atomicAdd(dw + c, dw_s[c]);
}

void rmsnorm_backward_add(bf16 *dx, float *dw, const bf16 *dout, const bf16 *dres,
			  const bf16 *x, const bf16 *w, const float *rstd, int N, int C,
			  cudaStream_t st)
{
	cuda_assert(C % 8 == 0);
	const int threads = 8 * WARP, min_rows = 32;
	int ctas = (int)cdiv(N, min_rows);
	if (ctas > 2 * sm_count())
		ctas = 2 * sm_count();
	int rows_per_cta = (int)cdiv(N, ctas);
	size_t smem = (size_t)C * sizeof(float);
	if (smem > 48 * 1024)
		KERNEL_SMEM_OPT_IN(rmsnorm_bwd_kernel, smem);
	rmsnorm_bwd_kernel<<<ctas, threads, smem, st>>>(dx, dw, dout, dres, x, w, rstd, N, C,
							 rows_per_cta);
	cudaCheck(cudaGetLastError());
}

void cuda_rmsnorm_backward(bf16 *dx, float *dw, const bf16 *dout, const bf16 *x, const bf16 *w,
			   const float *rstd, int N, int C, cudaStream_t st)
{
	rmsnorm_backward_add(dx, dw, dout, NULL, x, w, rstd, N, C, st);
}

/* ---- linear ---------------------------------------------------------------------- */

void cuda_linear_forward(struct cuda_ctx *ctx, bf16 *out, const bf16 *x, const bf16 *w, int N,
			 int C, int OC, cudaStream_t st)
{
	gemm_rm(ctx, st, 0, 1, N, OC, C, x, C, w, C, out, CUDA_R_16BF, OC, 0.0f, NULL);
}

void cuda_linear_backward(struct cuda_ctx *ctx, bf16 *dx, void *dw, const bf16 *dout,
			  const bf16 *x, const bf16 *w, int N, int C, int OC, cudaStream_t st)
{
	if (dx)
		gemm_rm(ctx, st, 0, 0, N, C, OC, dout, OC, w, C, dx, CUDA_R_16BF, C, 0.0f, NULL);
	gemm_rm(ctx, st, 1, 0, OC, C, N, dout, OC, x, C, dw, grad_dtype(ctx), C, 1.0f, dw);
}

/* ---- rotary embedding ------------------------------------------------------------- */

/*
 * One thread per (token, pair i): the angle t theta^(-2i/Q) in double,
 * rounded to float as the reference does, then applied to the pair in
 * every query and key head of the token. Value heads are copied when
 * dst != src.
 */
static __global__ void rope_kernel(bf16 *dst, const bf16 *src, int N, int T, int H, int KV,
				   int Q, float theta, float sign)
{
	int half = Q / 2;
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= (int64_t)N * half)
		return;
	int n = (int)(i / half), p = (int)(i % half), t = n % T;
	double freq = pow((double)theta, -2.0 * p / Q);
	double angle = (double)t * freq;
	float c = (float)cos(angle);
	float s = (float)sin(angle) * sign;
	int64_t row = (int64_t)n * (H + 2 * KV) * Q;
	for (int hd = 0; hd < H + KV; hd++) {
		int64_t o = row + (int64_t)hd * Q + p;
		float a = __bfloat162float(src[o]);
		float b = __bfloat162float(src[o + half]);
		dst[o] = __float2bfloat16(a * c - b * s);
		dst[o + half] = __float2bfloat16(a * s + b * c);
	}
	if (dst != src) {
		for (int hd = H + KV; hd < H + 2 * KV; hd++) {
			int64_t o = row + (int64_t)hd * Q + p;
			dst[o] = src[o];
			dst[o + half] = src[o + half];
		}
	}
}

void rope_apply(bf16 *dst, const bf16 *src, int B, int T, int H, int KV, int Q, float theta,
		int sign, cudaStream_t st)
{
	cuda_assert(Q % 2 == 0 && theta >= 1.0f);
	int N = B * T;
	int64_t threads = (int64_t)N * (Q / 2);
	rope_kernel<<<cdiv(threads, 256), 256, 0, st>>>(dst, src, N, T, H, KV, Q, theta,
							 (float)sign);
	cudaCheck(cudaGetLastError());
}

void cuda_rope_forward(bf16 *qkv, int B, int T, int H, int KV, int Q, float theta,
		       cudaStream_t st)
{
	rope_apply(qkv, qkv, B, T, H, KV, Q, theta, 1, st);
}

void cuda_rope_backward(bf16 *dqkv, int B, int T, int H, int KV, int Q, float theta,
			cudaStream_t st)
{
	rope_apply(dqkv, dqkv, B, T, H, KV, Q, theta, -1, st);
}

/* ---- SwiGLU ------------------------------------------------------------------------ */

static __device__ __forceinline__ float sigmoidf_(float x)
{
	return 1.0f / (1.0f + expf(-x));
}

static __global__ void swiglu_fwd_kernel(bf16 *h, const bf16 *gateup, int N, int F)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int per_row = F / 8;
	if (i >= (int64_t)N * per_row)
		return;
	int64_t n = i / per_row;
	int c = (int)(i % per_row) * 8;
	const bf16 *gate = gateup + n * 2 * F + c;
	f8 a = load8(gate), u = load8(gate + F), o;
#pragma unroll
	for (int j = 0; j < 8; j++)
		o.v[j] = a.v[j] * sigmoidf_(a.v[j]) * u.v[j];
	store8(h + n * F + c, o);
}

void cuda_swiglu_forward(bf16 *h, const bf16 *gateup, int N, int F, cudaStream_t st)
{
	cuda_assert(F % 8 == 0);
	int64_t vecs = (int64_t)N * (F / 8);
	swiglu_fwd_kernel<<<cdiv(vecs, 256), 256, 0, st>>>(h, gateup, N, F);
	cudaCheck(cudaGetLastError());
}

/* silu'(a) = sig(a) (1 + a (1 - sig(a))). */
static __global__ void swiglu_bwd_kernel(bf16 *dgateup, const bf16 *dh, const bf16 *gateup,
					 int N, int F)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int per_row = F / 8;
	if (i >= (int64_t)N * per_row)
		return;
	int64_t n = i / per_row;
	int c = (int)(i % per_row) * 8;
	const bf16 *gate = gateup + n * 2 * F + c;
	f8 a = load8(gate), u = load8(gate + F), g = load8(dh + n * F + c), dg, du;
#pragma unroll
	for (int j = 0; j < 8; j++) {
		float sg = sigmoidf_(a.v[j]);
		dg.v[j] = g.v[j] * u.v[j] * sg * (1.0f + a.v[j] * (1.0f - sg));
		du.v[j] = g.v[j] * a.v[j] * sg;
	}
	store8(dgateup + n * 2 * F + c, dg);
	store8(dgateup + n * 2 * F + F + c, du);
}

void cuda_swiglu_backward(bf16 *dgateup, const bf16 *dh, const bf16 *gateup, int N, int F,
			  cudaStream_t st)
{
	cuda_assert(F % 8 == 0);
	int64_t vecs = (int64_t)N * (F / 8);
	swiglu_bwd_kernel<<<cdiv(vecs, 256), 256, 0, st>>>(dgateup, dh, gateup, N, F);
	cudaCheck(cudaGetLastError());
}

/* ---- cross-entropy ----------------------------------------------------------------- */

#define CE_THREADS 256

/* Combine two (max, sum of exp(x - max)) pairs. */
static __device__ __forceinline__ void lse_merge(float &m, float &s, float m2, float s2)
{
	float mx = fmaxf(m, m2);
	if (mx == -INFINITY)
		return;
	s = s * expf(m - mx) + s2 * expf(m2 - mx);
	m = mx;
}

/*
 * One CTA per row: running (max, sum) per thread over float4 loads, then
 * a shared-memory tree. Writes lse[n] and the row's loss lse - x[target].
 */
static __global__ void ce_fwd_kernel(float *lse, float *row_loss, const float *logits,
				     const int *targets, int V)
{
	__shared__ float sm[CE_THREADS], ss[CE_THREADS];
	int n = blockIdx.x;
	const float *x = logits + (int64_t)n * V;
	float m = -INFINITY, s = 0.0f;
	for (int i = threadIdx.x * 4; i < V; i += CE_THREADS * 4) {
		float4 v = *(const float4 *)(x + i);
		float vm = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
		float vs = expf(v.x - vm) + expf(v.y - vm) + expf(v.z - vm) + expf(v.w - vm);
		lse_merge(m, s, vm, vs);
	}
	sm[threadIdx.x] = m;
	ss[threadIdx.x] = s;
	__syncthreads();
	for (int o = CE_THREADS / 2; o > 0; o /= 2) {
		if (threadIdx.x < o) {
			float mm = sm[threadIdx.x], sx = ss[threadIdx.x];
			lse_merge(mm, sx, sm[threadIdx.x + o], ss[threadIdx.x + o]);
			sm[threadIdx.x] = mm;
			ss[threadIdx.x] = sx;
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		float l = sm[0] + logf(ss[0]);
		lse[n] = l;
		row_loss[n] = l - x[targets[n]];
	}
}

/* *loss = sum(row_loss) / N_total, in double, in a fixed order. */
static __global__ void loss_sum_kernel(float *loss, const float *row_loss, int N)
{
	__shared__ double part[1024];
	double s = 0.0;
	for (int i = threadIdx.x; i < N; i += blockDim.x)
		s += row_loss[i];
	part[threadIdx.x] = s;
	__syncthreads();
	for (int o = blockDim.x / 2; o > 0; o /= 2) {
		if (threadIdx.x < o)
			part[threadIdx.x] += part[threadIdx.x + o];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		*loss = (float)(part[0] / N);
}

void ce_forward_rows(float *lse, float *row_loss, const float *logits, const int *targets,
		     int rows, int V, cudaStream_t st)
{
	cuda_assert(V % 4 == 0);
	ce_fwd_kernel<<<rows, CE_THREADS, 0, st>>>(lse, row_loss, logits, targets, V);
	cudaCheck(cudaGetLastError());
}

static void loss_sum(float *loss, const float *row_loss, int N, cudaStream_t st)
{
	loss_sum_kernel<<<1, 1024, 0, st>>>(loss, row_loss, N);
	cudaCheck(cudaGetLastError());
}

void cuda_cross_entropy_forward(struct cuda_ctx *ctx, float *loss, float *lse,
				const float *logits, const int *targets, int N, int V,
				cudaStream_t st)
{
	float *row_loss = (float *)ctx_scratch(ctx, (size_t)N * sizeof(float));
	ce_forward_rows(lse, row_loss, logits, targets, N, V, st);
	loss_sum(loss, row_loss, N, st);
}

/*
 * One CTA per row, in segments of CE_THREADS * 8 elements: every thread
 * reads its 8 logits of the segment, the CTA synchronizes, then every
 * thread writes its 8 bf16 gradients. Written bytes of segment s lie in
 * fp32 elements below the end of segment s, all read by then, so dlogits
 * may overwrite logits in place (row stride 2V).
 */
static __global__ void ce_bwd_kernel(bf16 *dlogits, int64_t ldd, const float *logits,
				     const float *lse, const int *targets, int V, float scale)
{
	int n = blockIdx.x;
	const float *x = logits + (int64_t)n * V;
	bf16 *d = dlogits + (int64_t)n * ldd;
	float l = lse[n];
	int target = targets[n];
	for (int base = 0; base < V; base += CE_THREADS * 8) {
		int i = base + threadIdx.x * 8;
		f8 v;
		if (i < V) {
			float4 a = *(const float4 *)(x + i), b = *(const float4 *)(x + i + 4);
			v.v[0] = a.x; v.v[1] = a.y; v.v[2] = a.z; v.v[3] = a.w;
			v.v[4] = b.x; v.v[5] = b.y; v.v[6] = b.z; v.v[7] = b.w;
		}
		__syncthreads();
		if (i < V) {
#pragma unroll
			for (int j = 0; j < 8; j++)
				v.v[j] = expf(v.v[j] - l) * scale - (i + j == target ? scale : 0.0f);
			store8(d + i, v);
		}
	}
}

/* scale = dloss / N_total, so a chunk of rows gets the gradient the whole would. */
void ce_backward_rows(bf16 *dlogits, int64_t ldd, const float *logits, const float *lse,
		      const int *targets, int rows, int V, float scale, cudaStream_t st)
{
	cuda_assert(V % 8 == 0 && ldd >= V);
	ce_bwd_kernel<<<rows, CE_THREADS, 0, st>>>(dlogits, ldd, logits, lse, targets, V, scale);
	cudaCheck(cudaGetLastError());
}

void cuda_cross_entropy_backward(bf16 *dlogits, int64_t ldd, const float *logits,
				 const float *lse, const int *targets, int N, int V, float dloss,
				 cudaStream_t st)
{
	ce_backward_rows(dlogits, ldd, logits, lse, targets, N, V, dloss / N, st);
}

/* ---- output projection and loss ------------------------------------------------------ */

void cuda_lm_loss_forward(struct cuda_ctx *ctx, float *loss, float *lse, float *logits,
			  const bf16 *xn, const bf16 *w_out, const int *targets, int N, int D,
			  int V, enum loss_mode mode, int chunk, cudaStream_t st)
{
	if (mode == LOSS_FULL)
		chunk = N;
	cuda_assert(chunk > 0);
	float *row_loss = (float *)ctx_scratch(ctx, (size_t)N * sizeof(float));
	for (int n0 = 0; n0 < N; n0 += chunk) {
		int rows = N - n0 < chunk ? N - n0 : chunk;
		prof_begin(ctx, st, "output");
		gemm_rm(ctx, st, 0, 1, rows, V, D, xn + (int64_t)n0 * D, D, w_out, D, logits,
			CUDA_R_32F, V, 0.0f, NULL);
		prof_end(ctx, st);
		prof_begin(ctx, st, mode == LOSS_FULL ? "loss" : "loss_chunked");
		ce_forward_rows(lse + n0, row_loss + n0, logits, targets + n0, rows, V, st);
		prof_end(ctx, st);
	}
	loss_sum(loss, row_loss, N, st);
}

void cuda_lm_loss_backward(struct cuda_ctx *ctx, bf16 *dxn, void *dw_out, float *logits,
			   const bf16 *xn, const bf16 *w_out, const float *lse, const int *targets,
			   int N, int D, int V, enum loss_mode mode, int chunk, cudaStream_t st)
{
	if (mode == LOSS_FULL)
		chunk = N;
	cuda_assert(chunk > 0);
	bf16 *dlogits = (bf16 *)logits; /* in place, row stride 2V */
	int64_t ldd = 2 * (int64_t)V;
	for (int n0 = 0; n0 < N; n0 += chunk) {
		int rows = N - n0 < chunk ? N - n0 : chunk;
		const bf16 *x = xn + (int64_t)n0 * D;
		if (mode == LOSS_CHUNKED) {
			prof_begin(ctx, st, "output_recompute");
			gemm_rm(ctx, st, 0, 1, rows, V, D, x, D, w_out, D, logits, CUDA_R_32F, V,
				0.0f, NULL);
			prof_end(ctx, st);
		}
		prof_begin(ctx, st, "loss_bwd");
		ce_backward_rows(dlogits, ldd, logits, lse + n0, targets + n0, rows, V, 1.0f / N,
				 st);
		prof_end(ctx, st);
		prof_begin(ctx, st, "output_dgrad");
		gemm_rm(ctx, st, 0, 0, rows, D, V, dlogits, ldd, w_out, D, dxn + (int64_t)n0 * D,
			CUDA_R_16BF, D, 0.0f, NULL);
		prof_end(ctx, st);
		prof_begin(ctx, st, "output_wgrad");
		gemm_rm(ctx, st, 1, 0, V, D, rows, dlogits, ldd, x, D, dw_out, grad_dtype(ctx), D,
			1.0f, dw_out);
		prof_end(ctx, st);
	}
}
