/*
 * alloc.c - reserved-memory models (see alloc.h).
 */
#include "alloc.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define SMALL_BYTES (1ull << 20)      /* requests below this share small segments */
#define SMALL_SEGMENT (2ull << 20)
#define SPLIT_MIN (1ull << 20)        /* a cached block is split when this much is left */

void alloc_init(struct allocator *a, const struct runtime_spec *rt, int nbufs)
{
	memset(a, 0, sizeof(*a));
	a->caching = rt->caching_allocator;
	a->round = rt->alloc_round_bytes > 0 ? (uint64_t)rt->alloc_round_bytes : 512;
	a->segment = rt->segment_bytes > 0 ? (uint64_t)rt->segment_bytes : SMALL_SEGMENT;
	a->granted = calloc(nbufs > 0 ? nbufs : 1, sizeof(uint64_t));
	assert(a->granted);
}

void alloc_release(struct allocator *a)
{
	for (int i = 0; i < ST_COUNT; i++)
		free(a->pools[i].free);
	free(a->granted);
	memset(a, 0, sizeof(*a));
}

static uint64_t round_up(uint64_t x, uint64_t r)
{
	return (x + r - 1) / r * r;
}

static void pool_push(struct alloc_pool *p, uint64_t size)
{
	if (p->n == p->cap) {
		p->cap = p->cap ? 2 * p->cap : 64;
		p->free = realloc(p->free, sizeof(uint64_t) * p->cap);
		assert(p->free);
	}
	p->free[p->n++] = size;
}

void alloc_get(struct allocator *a, int buf, uint64_t bytes, int stream)
{
	uint64_t r = round_up(bytes ? bytes : 1, a->round);
	struct alloc_pool *p = &a->pools[stream];
	int best = -1;

	if (!a->caching) {
		a->granted[buf] = r;
		a->allocated += r;
		if (a->allocated > a->reserved)
			a->reserved = a->allocated;
		return;
	}
	for (int i = 0; i < p->n; i++)
		if (p->free[i] >= r && (best < 0 || p->free[i] < p->free[best]))
			best = i;
	if (best >= 0) {
		uint64_t got = p->free[best];
		p->free[best] = p->free[--p->n];
		if (got - r >= SPLIT_MIN)
			pool_push(p, got - r);
		else
			r = got;
	} else {
		uint64_t seg = r < SMALL_BYTES ? SMALL_SEGMENT : round_up(r, a->segment);
		a->reserved += seg;
		if (seg - r >= a->round)
			pool_push(p, seg - r);
	}
	a->granted[buf] = r;
	a->allocated += r;
}

void alloc_put(struct allocator *a, int buf, int stream)
{
	uint64_t r = a->granted[buf];

	assert(a->allocated >= r);
	a->allocated -= r;
	a->granted[buf] = 0;
	if (a->caching)
		pool_push(&a->pools[stream], r);
}
