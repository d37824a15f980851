/*
 * data.h - the deterministic synthetic dataset gpu_run trains on.
 *
 * Sample i of step t is a function of (seed, t, i) only, i the global
 * data-parallel index of a microbatch (rank * M + micro) and the sequence
 * inside it: the global batch of a step is the same whatever the sharding,
 * wrapping or accumulation policy, as long as world * M is the same. That
 * is what lets the runs of different policies be compared loss for loss.
 *
 * The sequences are learnable, so a few optimizer steps lower the loss:
 * they use only the first 32 tokens of the vocabulary (a unigram the model
 * learns within steps), walking through them with a fixed stride from a
 * random start (a bigram it learns next), one token in eight replaced by a
 * random one (noise it cannot predict). Random numbers come from GSL
 * (mt19937).
 */
#ifndef GPU_RUN_DATA_H
#define GPU_RUN_DATA_H

#include <stdint.h>

/*
 * tokens and targets (B * T each) of one microbatch: B sequences of T + 1
 * tokens, targets the tokens shifted by one. sample = rank * M + micro.
 */
void data_batch(int *tokens, int *targets, unsigned long seed, int step, int sample, int B, int T,
		int V);

#endif
