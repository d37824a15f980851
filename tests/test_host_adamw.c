/*
 * test_host_adamw.c - the host optimizer's AdamW step (gpu/run/host_adamw.h):
 * the same numbers on any number of threads, ref_adamw's where everything
 * is fp32, and the gradients scaled first.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "run/host_adamw.h"

#define NT 3
static const size_t sizes[NT] = { 1000, 7, 513 };

/* Values in [-1, 1) from a hash; moments' second half (v) non-negative. */
static void fill(float *x, size_t n, uint32_t seed, int nonneg)
{
	for (size_t i = 0; i < n; i++) {
		float u = (float)(((uint32_t)i * 2654435761u ^ seed) % 20000u) / 10000.0f - 1.0f;
		x[i] = nonneg ? u * u : u;
	}
}

/* fp32 tensors: p, g, m, v, one block each, filled the same for every copy. */
static float *make(struct optim_tensor *t)
{
	size_t total = 0, at = 0;
	float *buf;
	for (int i = 0; i < NT; i++)
		total += 4 * sizes[i];
	buf = malloc(sizeof(float) * total);
	for (int i = 0; i < NT; i++) {
		size_t n = sizes[i];
		t[i] = (struct optim_tensor){ buf + at, buf + at + n, buf + at + 2 * n, buf + at + 3 * n, n, ELEM_FP32,
					      ELEM_FP32, ELEM_FP32, i };
		fill(t[i].p, n, 11u + (uint32_t)i, 0);
		fill(t[i].g, n, 23u + (uint32_t)i, 0);
		fill(t[i].m, n, 37u + (uint32_t)i, 0);
		fill(t[i].v, n, 41u + (uint32_t)i, 1);
		at += 4 * n;
	}
	return buf;
}

static size_t bytes_all(void)
{
	size_t b = 0;
	for (int i = 0; i < NT; i++)
		b += 4 * sizes[i] * sizeof(float);
	return b;
}

static void test_threads_agree(void)
{
	const struct ref_adamw_hparams hp = { 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f };
	struct optim_tensor a[NT], b[NT];
	float *x = make(a), *y = make(b);

	/* 1 thread against 1 to 9 (more threads than some tensors have elements), three steps each */
	for (int threads = 2; threads <= 9; threads++) {
		for (int step = 1; step <= 3; step++) {
			host_adamw(a, NT, &hp, step, 0.5f, 1);
			host_adamw(b, NT, &hp, step, 0.5f, threads);
		}
		CU_ASSERT_EQUAL(memcmp(x, y, bytes_all()), 0);
	}
	free(x);
	free(y);
}

static void test_ref_arithmetic(void)
{
	const struct ref_adamw_hparams hp = { 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f };
	struct optim_tensor a[NT], b[NT];
	float *x = make(a), *y = make(b);

	host_adamw(a, NT, &hp, 2, 0.25f, 4);
	for (int i = 0; i < NT; i++) { /* by hand: the gradient scaled, then ref_adamw */
		float *g = b[i].g;
		for (size_t j = 0; j < b[i].n; j++)
			g[j] *= 0.25f;
		ref_adamw(b[i].p, g, b[i].m, b[i].v, b[i].n, &hp, 2);
	}
	CU_ASSERT_EQUAL(memcmp(x, y, bytes_all()), 0);
	/* and the parameters moved */
	{
		struct optim_tensor c[NT];
		float *z = make(c);
		CU_ASSERT_NOT_EQUAL(memcmp(x, z, sizes[0] * sizeof(float)), 0);
		free(z);
	}
	free(x);
	free(y);
}

static void test_bf16_threads_agree(void)
{
	const struct ref_adamw_hparams hp = { 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f };
	size_t n = 1001;
	uint16_t *p[2], *g[2];
	float *mom[2];
	struct optim_tensor t[2];

	for (int k = 0; k < 2; k++) {
		float tmp[1001];
		p[k] = malloc(n * 2);
		g[k] = malloc(n * 2);
		mom[k] = malloc(2 * n * sizeof(float));
		fill(tmp, n, 5u, 0);
		for (size_t j = 0; j < n; j++) {
			uint32_t u;
			memcpy(&u, &tmp[j], 4);
			p[k][j] = (uint16_t)(u >> 16);
			g[k][j] = (uint16_t)((u >> 16) ^ 0x0100u);
		}
		fill(mom[k], n, 7u, 0);
		fill(mom[k] + n, n, 9u, 1);
		t[k] = (struct optim_tensor){ p[k], g[k], mom[k], mom[k] + n, n, ELEM_BF16, ELEM_BF16, ELEM_FP32, 0 };
	}
	host_adamw(&t[0], 1, &hp, 1, 1.0f, 1);
	host_adamw(&t[1], 1, &hp, 1, 1.0f, 6);
	CU_ASSERT_EQUAL(memcmp(p[0], p[1], n * 2), 0);
	CU_ASSERT_EQUAL(memcmp(mom[0], mom[1], 2 * n * sizeof(float)), 0);
	for (int k = 0; k < 2; k++) {
		free(p[k]);
		free(g[k]);
		free(mom[k]);
	}
}

/* bf16 bits of f rounded to the nearest, ties to the even one: by comparing the two neighbours, not by bit tricks */
static uint16_t nearest_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
	float flo, fhi;
	uint32_t a = (uint32_t)lo << 16, b = (uint32_t)hi << 16;
	memcpy(&flo, &a, 4);
	memcpy(&fhi, &b, 4);
	double dlo = fabs((double)f - flo), dhi = fabs((double)f - fhi);
	if (dlo != dhi)
		return dlo < dhi ? lo : hi;
	return (lo & 1) ? hi : lo;
}

static float from_bf16(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/*
 * bf16 parameters and gradients with fp32 moments, then fp32 parameters
 * and gradients with bf16 moments: every element as ref_adamw steps its
 * fp32 values (the gradient scaled first), each bf16 result rounded to
 * the nearest.
 */
static void test_bf16_arithmetic(void)
{
	const struct ref_adamw_hparams hp = { 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f };
	enum { N = 777 };
	float x[N], y[N], m[N], v[N], m0[N], v0[N];
	uint16_t p16[N], g16[N], m16[N], v16[N];
	int bad = 0, moved = 0;

	fill(x, N, 3u, 0);
	fill(y, N, 13u, 0);
	fill(m0, N, 17u, 0);
	fill(v0, N, 19u, 1);
	for (int j = 0; j < N; j++) {
		p16[j] = nearest_bf16(x[j]);
		g16[j] = nearest_bf16(y[j]);
	}
	memcpy(m, m0, sizeof m);
	memcpy(v, v0, sizeof v);
	struct optim_tensor t = { p16, g16, m, v, N, ELEM_BF16, ELEM_BF16, ELEM_FP32, 0 };
	host_adamw(&t, 1, &hp, 3, 0.5f, 3);
	for (int j = 0; j < N; j++) {
		float p = from_bf16(nearest_bf16(x[j])), g = from_bf16(nearest_bf16(y[j])) * 0.5f;
		float mm = m0[j], vv = v0[j];
		ref_adamw(&p, &g, &mm, &vv, 1, &hp, 3);
		bad += p16[j] != nearest_bf16(p) || m[j] != mm || vv != v[j];
		moved += p16[j] != nearest_bf16(x[j]);
	}
	CU_ASSERT_EQUAL(bad, 0);
	CU_ASSERT(moved > N / 2);

	for (int j = 0; j < N; j++) {
		m16[j] = nearest_bf16(m0[j]);
		v16[j] = nearest_bf16(v0[j]);
	}
	memcpy(m, x, sizeof m); /* the parameters, fp32 */
	memcpy(v, y, sizeof v); /* the gradients, fp32 */
	t = (struct optim_tensor){ m, v, m16, v16, N, ELEM_FP32, ELEM_FP32, ELEM_BF16, 0 };
	host_adamw(&t, 1, &hp, 2, 2.0f, 2);
	bad = 0;
	for (int j = 0; j < N; j++) {
		float p = x[j], g = y[j] * 2.0f, mm = from_bf16(nearest_bf16(m0[j])), vv = from_bf16(nearest_bf16(v0[j]));
		ref_adamw(&p, &g, &mm, &vv, 1, &hp, 2);
		bad += m[j] != p || m16[j] != nearest_bf16(mm) || v16[j] != nearest_bf16(vv);
	}
	CU_ASSERT_EQUAL(bad, 0);
}

/*
 * bf16 moments round to the nearest, ties to even: with beta1 = 0 the
 * first moment stored is the gradient itself, rounded.
 */
static void test_bf16_ties(void)
{
	const struct ref_adamw_hparams hp = { 0.0f, 0.0f, 0.0f, 1e-8f, 0.0f };
	static const uint32_t g_bits[] = { 0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0xbf808000u, 0xbf818000u };
	static const uint16_t want[] = { 0x3f80u, 0x3f82u, 0x3f81u, 0x3f80u, 0xbf80u, 0xbf82u };
	enum { N = sizeof g_bits / sizeof g_bits[0] };
	float p[N] = { 0 }, g[N];
	uint16_t m16[N] = { 0 }, v16[N] = { 0 };

	memcpy(g, g_bits, sizeof g);
	struct optim_tensor t = { p, g, m16, v16, N, ELEM_FP32, ELEM_FP32, ELEM_BF16, 0 };
	host_adamw(&t, 1, &hp, 1, 1.0f, 1);
	for (int j = 0; j < N; j++)
		CU_ASSERT_EQUAL(m16[j], want[j]);
}

static void test_thread_count(void)
{
	int one = parts_threads(1);
	CU_ASSERT(one >= 1 && one <= PARTS_MAX);
	CU_ASSERT_EQUAL(parts_threads(1 << 20), 1); /* more ranks than CPUs: one each */
	CU_ASSERT(parts_threads(2) <= one);
}

void suite_host_adamw(void)
{
	CU_pSuite s = CU_add_suite("host_adamw", NULL, NULL);
	CU_add_test(s, "the same numbers on 1 to 9 threads, three steps", test_threads_agree);
	CU_add_test(s, "ref_adamw's arithmetic after the gradients' scaling", test_ref_arithmetic);
	CU_add_test(s, "bf16 parameters and gradients: the same on 1 and 6 threads", test_bf16_threads_agree);
	CU_add_test(s, "bf16 parameters, gradients or moments: ref_adamw's arithmetic, rounded", test_bf16_arithmetic);
	CU_add_test(s, "bf16 rounds to the nearest, ties to even", test_bf16_ties);
	CU_add_test(s, "threads: the CPUs shared by the node's ranks", test_thread_count);
}
