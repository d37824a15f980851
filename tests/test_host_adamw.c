/*
 * test_host_adamw.c - the host optimizer's AdamW step (gpu/run/host_adamw.h):
 * the same numbers on any number of threads, ref_adamw's where everything
 * is fp32, and the gradients scaled first.
 */
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
	CU_add_test(s, "threads: the CPUs shared by the node's ranks", test_thread_count);
}
