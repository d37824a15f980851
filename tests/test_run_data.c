/*
 * test_run_data.c - gpu_run's synthetic dataset (gpu/run/data.h): targets
 * are the tokens shifted by one; every token is one of the first 32 of the
 * vocabulary; about seven transitions in eight walk by the stride of 7 (the
 * rest a random token); each sequence is a function of (seed, step, sample,
 * its index) alone, so that the sequences of a microbatch differ and a
 * sequence does not depend on how many others its microbatch holds.
 */
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "run/data.h"

enum { B = 8, T = 512, V = 256 };

static void test_shape(void)
{
	int *tok = malloc(sizeof(int) * B * T), *tgt = malloc(sizeof(int) * B * T);
	int outside = 0, shifted = 0, walks = 0, moves = 0, seen[32] = { 0 }, kinds = 0;

	data_batch(tok, tgt, 1234, 3, 5, B, T, V);
	for (int b = 0; b < B; b++)
		for (int i = 0; i < T; i++) {
			int x = tok[b * T + i], y = tgt[b * T + i];
			outside += x < 0 || x >= 32 || y < 0 || y >= 32;
			if (i + 1 < T)
				shifted += tok[b * T + i + 1] != y;
			walks += y == (x + 7) % 32;
			moves++;
			if (x >= 0 && x < 32 && !seen[x]++)
				kinds++;
		}
	CU_ASSERT_EQUAL(outside, 0);
	CU_ASSERT_EQUAL(shifted, 0);
	CU_ASSERT_EQUAL(kinds, 32);
	/* 7/8 + 1/8 x 1/32 = 0.879 of the moves, over 4,096 of them */
	CU_ASSERT(walks > 0.85 * moves && walks < 0.91 * moves);
	/* a vocabulary smaller than the alphabet bounds the tokens */
	data_batch(tok, tgt, 1234, 3, 5, 1, T, 5);
	outside = 0;
	for (int i = 0; i < T; i++)
		outside += tok[i] >= 5 || tgt[i] >= 5;
	CU_ASSERT_EQUAL(outside, 0);
	free(tok);
	free(tgt);
}

static int same_seq(const int *a, const int *b)
{
	return !memcmp(a, b, sizeof(int) * T);
}

static void test_independence(void)
{
	int *x = malloc(sizeof(int) * B * T), *y = malloc(sizeof(int) * B * T), *t = malloc(sizeof(int) * B * T);
	int alike = 0;

	data_batch(x, t, 1234, 3, 5, B, T, V);
	for (int b = 1; b < B; b++)
		alike += same_seq(x, x + b * T);
	CU_ASSERT_EQUAL(alike, 0); /* the sequences of a microbatch differ */
	data_batch(y, t, 1234, 3, 5, 2, T, V);
	CU_ASSERT(same_seq(x, y) && same_seq(x + T, y + T)); /* whatever the microbatch's size */
	data_batch(y, t, 1234, 3, 5, B, T, V);
	CU_ASSERT_EQUAL(memcmp(x, y, sizeof(int) * B * T), 0); /* the same again */
	data_batch(y, t, 1234, 4, 5, 1, T, V);
	CU_ASSERT(!same_seq(x, y)); /* another step */
	data_batch(y, t, 1234, 3, 6, 1, T, V);
	CU_ASSERT(!same_seq(x, y)); /* another sample */
	data_batch(y, t, 4321, 3, 5, 1, T, V);
	CU_ASSERT(!same_seq(x, y)); /* another seed */
	free(x);
	free(y);
	free(t);
}

void suite_run_data(void)
{
	CU_pSuite s = CU_add_suite("run_data", NULL, NULL);
	CU_add_test(s, "targets shifted, 32 tokens, a stride of 7 about 7 moves in 8", test_shape);
	CU_add_test(s, "a sequence is (seed, step, sample, index)'s alone", test_independence);
}
