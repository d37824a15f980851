/*
 * adamw.cu - the AdamW step in three launch forms (per parameter,
 * multi-tensor, fused over a flat shard), all with ref_adamw's arithmetic:
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   p -= lr ((m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd p)
 * fp32 master params, grads and moments. The bias corrections are
 * computed once on the host (powf, as the reference does).
 *
 * The step is memory-bound: 16 bytes read and 12 written per element (more
 * for the fused form's bf16 copy), so every form moves float4s when the
 * pointers allow and the forms differ only in how many launches they take.
 */
#include <math.h>
#include <string.h>

#include "internal.h"

#define ADAM_THREADS 256
#define ADAM_CHUNK (ADAM_THREADS * 4 * 8) /* elements per CTA in the multi-tensor form */

struct adam_consts {
	float lr, b1, b2, eps, wd;
	float c1, c2; /* 1 - b^t */
};

static struct adam_consts consts_of(const struct cuda_adamw_hparams *hp, int t)
{
	cuda_assert(t >= 1);
	struct adam_consts k = { hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay,
				 1.0f - powf(hp->beta1, (float)t), 1.0f - powf(hp->beta2, (float)t) };
	return k;
}

/*
 * ref_adamw's expression, one IEEE-rounded operation at a time in the same
 * order (the _rn intrinsics keep the compiler from contracting into FMAs),
 * so the result is the reference's bit for bit.
 */
static __device__ __forceinline__ void adam_elem(float &p, float g, float &m, float &v,
						 const adam_consts &k)
{
	m = __fadd_rn(__fmul_rn(k.b1, m), __fmul_rn(1.0f - k.b1, g));
	v = __fadd_rn(__fmul_rn(k.b2, v), __fmul_rn(__fmul_rn(1.0f - k.b2, g), g));
	float mhat = __fdiv_rn(m, k.c1);
	float vhat = __fdiv_rn(v, k.c2);
	float step = __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), k.eps)),
			       __fmul_rn(k.wd, p));
	p = __fsub_rn(p, __fmul_rn(k.lr, step));
}

static __device__ __forceinline__ bool aligned16(const void *a)
{
	return ((uintptr_t)a & 15) == 0;
}

/*
 * Elements [lo, hi) of one tensor, by the threads of one CTA (stride
 * blockDim.x): float4 when every pointer is 16-byte aligned, else scalar.
 * Optional: p16 gets the bf16 params, g is zeroed.
 */
static __device__ __forceinline__ void adam_range(float *p, bf16 *p16, float *gz, const float *g,
						  float *m, float *v, int64_t lo, int64_t hi,
						  const adam_consts &k)
{
	bool vec = aligned16(p + lo) && aligned16(g + lo) && aligned16(m + lo) && aligned16(v + lo)
		   && (!p16 || ((uintptr_t)(p16 + lo) & 7) == 0);
	int64_t i = lo;
	if (vec) {
		int64_t nv = (hi - lo) / 4;
		for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
			int64_t e = lo + 4 * j;
			float4 pp = *(float4 *)(p + e), gg = *(const float4 *)(g + e);
			float4 mm = *(float4 *)(m + e), vv = *(float4 *)(v + e);
			adam_elem(pp.x, gg.x, mm.x, vv.x, k);
			adam_elem(pp.y, gg.y, mm.y, vv.y, k);
			adam_elem(pp.z, gg.z, mm.z, vv.z, k);
			adam_elem(pp.w, gg.w, mm.w, vv.w, k);
			*(float4 *)(p + e) = pp;
			*(float4 *)(m + e) = mm;
			*(float4 *)(v + e) = vv;
			if (p16) {
				__nv_bfloat162 lo2 = __floats2bfloat162_rn(pp.x, pp.y);
				__nv_bfloat162 hi2 = __floats2bfloat162_rn(pp.z, pp.w);
				uint2 raw = { *(uint32_t *)&lo2, *(uint32_t *)&hi2 };
				*(uint2 *)(p16 + e) = raw;
			}
			if (gz)
				*(float4 *)(gz + e) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		}
		i = lo + 4 * nv;
	}
	for (int64_t e = i + threadIdx.x; e < hi; e += blockDim.x) {
		float pp = p[e], mm = m[e], vv = v[e];
		adam_elem(pp, g[e], mm, vv, k);
		p[e] = pp;
		m[e] = mm;
		v[e] = vv;
		if (p16)
			p16[e] = __float2bfloat16(pp);
		if (gz)
			gz[e] = 0.0f;
	}
}

/* ---- per parameter and fused: one flat range, split across CTAs ------------------- */

static __global__ void adam_flat_kernel(float *p, bf16 *p16, float *gz, const float *g, float *m,
					float *v, int64_t n, int64_t per_cta, adam_consts k)
{
	int64_t lo = (int64_t)blockIdx.x * per_cta;
	int64_t hi = lo + per_cta < n ? lo + per_cta : n;
	adam_range(p, p16, gz, g, m, v, lo, hi, k);
}

static void flat_launch(float *p, bf16 *p16, float *gz, const float *g, float *m, float *v,
			size_t n, const adam_consts &k, cudaStream_t st)
{
	if (n == 0)
		return;
	const int64_t per_cta = ADAM_CHUNK; /* a multiple of 4: CTA ranges stay aligned */
	adam_flat_kernel<<<cdiv((int64_t)n, per_cta), ADAM_THREADS, 0, st>>>(p, p16, gz, g, m, v,
									   (int64_t)n, per_cta, k);
	cudaCheck(cudaGetLastError());
}

void cuda_adamw(float *p, const float *g, float *m, float *v, size_t n,
		const struct cuda_adamw_hparams *hp, int t, cudaStream_t st)
{
	flat_launch(p, NULL, NULL, g, m, v, n, consts_of(hp, t), st);
}

void cuda_adamw_fused(float *p, bf16 *p_bf16, float *g, float *m, float *v, size_t n,
		      const struct cuda_adamw_hparams *hp, int t, int zero_grad, cudaStream_t st)
{
	flat_launch(p, p_bf16, zero_grad ? g : NULL, g, m, v, n, consts_of(hp, t), st);
}

/* ---- multi-tensor: the tensor list travels in the parameter block ----------------- */

/* About 8.5 KB: kernel parameters may reach 32 KB since CUDA 12.1 (Volta and later). */
struct adam_list {
	float *p[CUDA_ADAMW_MULTI_MAX];
	const float *g[CUDA_ADAMW_MULTI_MAX];
	float *m[CUDA_ADAMW_MULTI_MAX];
	float *v[CUDA_ADAMW_MULTI_MAX];
	int64_t n[CUDA_ADAMW_MULTI_MAX];
	int first_cta[CUDA_ADAMW_MULTI_MAX + 1]; /* prefix sums of CTAs per tensor */
	int count;
};

static __global__ void adam_multi_kernel(const __grid_constant__ adam_list list, adam_consts k)
{
	/* the tensor whose CTA range holds blockIdx.x: binary search on first_cta */
	int lo = 0, hi = list.count - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (list.first_cta[mid] <= (int)blockIdx.x)
			lo = mid;
		else
			hi = mid - 1;
	}
	int64_t chunk = (int64_t)blockIdx.x - list.first_cta[lo];
	int64_t e0 = chunk * ADAM_CHUNK;
	int64_t e1 = e0 + ADAM_CHUNK < list.n[lo] ? e0 + ADAM_CHUNK : list.n[lo];
	adam_range(list.p[lo], NULL, NULL, list.g[lo], list.m[lo], list.v[lo], e0, e1, k);
}

void cuda_adamw_multi(const struct cuda_adamw_tensor *ts, int count,
		      const struct cuda_adamw_hparams *hp, int t, cudaStream_t st)
{
	adam_consts k = consts_of(hp, t);
	static adam_list list; /* large: kept off the stack */
	for (int start = 0; start < count; start += CUDA_ADAMW_MULTI_MAX) {
		int c = count - start < CUDA_ADAMW_MULTI_MAX ? count - start : CUDA_ADAMW_MULTI_MAX;
		memset(&list, 0, sizeof(list));
		int64_t ctas = 0;
		int used = 0;
		for (int i = 0; i < c; i++) {
			const struct cuda_adamw_tensor *x = &ts[start + i];
			if (x->n == 0)
				continue;
			list.p[used] = x->p;
			list.g[used] = x->g;
			list.m[used] = x->m;
			list.v[used] = x->v;
			list.n[used] = (int64_t)x->n;
			list.first_cta[used] = (int)ctas;
			ctas += cdiv((int64_t)x->n, ADAM_CHUNK);
			used++;
		}
		cuda_assert(ctas < (1ll << 31));
		if (used == 0)
			continue;
		list.first_cta[used] = (int)ctas;
		list.count = used;
		adam_multi_kernel<<<(unsigned)ctas, ADAM_THREADS, 0, st>>>(list, k);
		cudaCheck(cudaGetLastError());
	}
}
