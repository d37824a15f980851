/*
 * data.c - the synthetic dataset (see data.h).
 */
#include "data.h"

#include <assert.h>
#include <stdlib.h>

#include <gsl/gsl_rng.h>

#include "xalloc.h"

#define DATA_ALPHABET 32   /* tokens a sequence uses: the first 32 of the vocabulary */
#define DATA_STRIDE 7      /* the step a sequence walks by, coprime with the alphabet */
#define DATA_NOISE_ONE_IN 8

/* splitmix64: a well-mixed 64-bit seed from the (seed, step, sample, sequence) tuple */
static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

void data_batch(int *tokens, int *targets, unsigned long seed, int step, int sample, int B, int T,
		int V)
{
	gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
	int *seq = xmalloc(sizeof(int) * (size_t)(T + 1));
	int A = DATA_ALPHABET;

	assert(r);
	if (A > V)
		A = V;
	for (int b = 0; b < B; b++) {
		uint64_t k = mix(mix(mix(mix(seed) ^ (uint64_t)step) ^ (uint64_t)sample) ^ (uint64_t)b);
		/* mt19937 takes a 32-bit seed; 0 means its default, so avoid it */
		gsl_rng_set(r, (unsigned long)(k & 0xffffffffu) | 1u);
		seq[0] = (int)gsl_rng_uniform_int(r, (unsigned long)A);
		for (int i = 1; i <= T; i++) {
			if (gsl_rng_uniform_int(r, DATA_NOISE_ONE_IN) == 0)
				seq[i] = (int)gsl_rng_uniform_int(r, (unsigned long)A);
			else
				seq[i] = (seq[i - 1] + DATA_STRIDE) % A;
		}
		for (int i = 0; i < T; i++) {
			tokens[b * T + i] = seq[i];
			targets[b * T + i] = seq[i + 1];
		}
	}
	free(seq);
	gsl_rng_free(r);
}
