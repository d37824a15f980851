/*
 * alloc.c - best-fit allocator over reserved segments, reuse gated by
 * happens-before (see alloc.h).
 *
 * Blocks tile their segment: each knows its neighbours, so a freed block
 * merges with free ones beside it. Free blocks sit in their pool's list,
 * which a request scans for the smallest block that is large enough and
 * ready for the requesting op (ties: the lowest segment, then offset, so
 * the choice never depends on list order). A step has a few thousand
 * requests and pools hold tens of free blocks: a scan is cheap enough.
 */
#include "alloc.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "xalloc.h"

/* PyTorch's CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp) */
#define SMALL_SIZE (1ull << 20)       /* kSmallSize: requests below this use the small pool */
#define SMALL_BUFFER (2ull << 20)     /* kSmallBuffer: a small pool's segment */
#define MIN_LARGE_ALLOC (10ull << 20) /* kMinLargeAlloc: below this a large request takes... */
#define LARGE_BUFFER (20ull << 20)    /* kLargeBuffer: ...a 20 MiB segment */
#define MIN_BLOCK 512ull              /* kMinBlockSize: smallest split-off remainder, small pool */

#define NPOOLS (2 * ST_COUNT)

struct block {
	uint64_t off, size;
	int seg;
	int pool;
	int prev, next;   /* neighbours in the segment, -1 at its ends */
	int slot;         /* index in its pool's free list, -1 while in use */
	uint32_t ready[ST_COUNT]; /* free: the clock an op must have reached to take it */
	uint32_t freed_op;        /* free: issue index of the (latest) op that freed it */
};

struct pool {
	int *free;
	int n, cap;
};

struct alloc_seg {
	void *ptr;
	uint64_t bytes;
};

struct allocator {
	struct alloc_cfg cfg;
	alloc_reserve_fn reserve;
	void *ctx;
	struct block *blocks;
	int nblocks, cap_blocks;
	int *spare;          /* block slots released by merging */
	int nspare, cap_spare;
	struct pool pools[NPOOLS];
	struct alloc_seg *segs;
	int nsegs, cap_segs;
	int *buf_block;      /* per buffer: its block, -1 */
	int region[NPOOLS];  /* arena: each pool's one segment, -1 until it has one */
	int region_end[NPOOLS]; /* arena: the block at the end of that segment */
	int nbufs;
	uint64_t allocated, reserved;
};

static uint64_t round_up(uint64_t x, uint64_t r)
{
	return (x + r - 1) / r * r;
}

struct allocator *alloc_new(const struct alloc_cfg *cfg, int nbufs, alloc_reserve_fn reserve, void *ctx)
{
	struct allocator *a = xcalloc(1, sizeof(*a));

	a->cfg = *cfg;
	if (a->cfg.round < 1)
		a->cfg.round = 512;
	if (a->cfg.segment < 1)
		a->cfg.segment = 2ull << 20;
	a->reserve = reserve;
	a->ctx = ctx;
	a->nbufs = nbufs;
	a->buf_block = xmalloc(sizeof(int) * (size_t)(nbufs > 0 ? nbufs : 1));
	for (int i = 0; i < nbufs; i++)
		a->buf_block[i] = -1;
	for (int p = 0; p < NPOOLS; p++)
		a->region[p] = -1;
	return a;
}

void alloc_free(struct allocator *a)
{
	if (!a)
		return;
	for (int p = 0; p < NPOOLS; p++)
		free(a->pools[p].free);
	free(a->blocks);
	free(a->spare);
	free(a->segs);
	free(a->buf_block);
	free(a);
}

static int block_new(struct allocator *a)
{
	if (a->nspare)
		return a->spare[--a->nspare];
	if (a->nblocks == a->cap_blocks) {
		a->cap_blocks = a->cap_blocks ? 2 * a->cap_blocks : 256;
		a->blocks = xrealloc(a->blocks, sizeof(*a->blocks) * (size_t)a->cap_blocks);
	}
	return a->nblocks++;
}

static void block_release(struct allocator *a, int b)
{
	if (a->nspare == a->cap_spare) {
		a->cap_spare = a->cap_spare ? 2 * a->cap_spare : 64;
		a->spare = xrealloc(a->spare, sizeof(int) * (size_t)a->cap_spare);
	}
	a->spare[a->nspare++] = b;
}

static void pool_add(struct allocator *a, int b)
{
	struct pool *p = &a->pools[a->blocks[b].pool];

	if (p->n == p->cap) {
		p->cap = p->cap ? 2 * p->cap : 16;
		p->free = xrealloc(p->free, sizeof(int) * (size_t)p->cap);
	}
	a->blocks[b].slot = p->n;
	p->free[p->n++] = b;
}

static void pool_remove(struct allocator *a, int b)
{
	struct pool *p = &a->pools[a->blocks[b].pool];
	int slot = a->blocks[b].slot, last = p->free[--p->n];

	assert(slot >= 0 && p->free[slot] == b);
	p->free[slot] = last;
	a->blocks[last].slot = slot;
	a->blocks[b].slot = -1;
}

static int ready_for(const struct block *k, const uint32_t *clock)
{
	if (!clock)
		return 1;
	for (int t = 0; t < ST_COUNT; t++)
		if (k->ready[t] > clock[t])
			return 0;
	return 1;
}

/*
 * A free block this request may take a part of: ready for the op, or, with
 * old_enough, freed at least wait_age ops before it.
 */
static int usable(const struct allocator *a, int b, const struct alloc_req *rq, int old_enough)
{
	const struct block *k = &a->blocks[b < 0 ? 0 : b];

	if (b < 0 || k->slot < 0)
		return 0;
	if (ready_for(k, rq->clock))
		return 1;
	return old_enough && a->cfg.wait_age && rq->op >= k->freed_op + a->cfg.wait_age;
}

/*
 * The run at b better than the best so far: smaller (best fit), then lower
 * segment and offset; or, first_fit, simply lower.
 */
static int fits_better(const struct block *k, uint64_t run, const struct block *best, uint64_t best_run,
		       int first_fit)
{
	if (!best)
		return 1;
	if (!first_fit && run != best_run)
		return run < best_run;
	return k->seg != best->seg ? k->seg < best->seg : k->off < best->off;
}

/*
 * An arena pool's segment grows at its end: the free block there (when the
 * request may use it) and new memory after it make one block of at least r
 * bytes; -1 when out of memory.
 */
static int arena_grow(struct allocator *a, uint64_t r, int pool, const struct alloc_req *rq)
{
	int seg = a->region[pool], end = a->region_end[pool], b;
	struct alloc_seg *g = &a->segs[seg];
	uint64_t have = usable(a, end, rq, 1) ? a->blocks[end].size : 0;
	uint64_t grow = round_up(r - have, a->cfg.segment);

	if (a->reserve && !a->reserve(a->ctx, seg, g->bytes, grow))
		return -1;
	a->reserved += grow;
	g->bytes += grow;
	if (have) {
		a->blocks[end].size += grow;
		return end;
	}
	b = block_new(a);
	memset(&a->blocks[b], 0, sizeof(a->blocks[b]));
	a->blocks[b].off = g->bytes - grow;
	a->blocks[b].size = grow;
	a->blocks[b].seg = seg;
	a->blocks[b].pool = pool;
	a->blocks[b].next = -1;
	a->blocks[b].prev = end;
	a->blocks[end].next = b;
	a->region_end[pool] = b;
	pool_add(a, b);
	return b;
}

/* New memory for a request of r bytes in pool p, as one free block; -1 when out of memory. */
static int segment_new(struct allocator *a, uint64_t r, int pool, const struct alloc_req *rq)
{
	uint64_t bytes;
	void *ptr = NULL;
	int b;

	if (!a->cfg.caching && a->region[pool] >= 0)
		return arena_grow(a, r, pool, rq);
	if (!a->cfg.caching)
		bytes = round_up(r, a->cfg.segment);
	else if (r < SMALL_SIZE)
		bytes = SMALL_BUFFER;
	else if (r < MIN_LARGE_ALLOC)
		bytes = LARGE_BUFFER;
	else
		bytes = round_up(r, a->cfg.segment);
	if (a->reserve && !(ptr = a->reserve(a->ctx, a->nsegs, 0, bytes)))
		return -1;
	if (a->nsegs == a->cap_segs) {
		a->cap_segs = a->cap_segs ? 2 * a->cap_segs : 16;
		a->segs = xrealloc(a->segs, sizeof(*a->segs) * (size_t)a->cap_segs);
	}
	a->segs[a->nsegs] = (struct alloc_seg){ ptr, bytes };
	a->reserved += bytes;
	b = block_new(a);
	memset(&a->blocks[b], 0, sizeof(a->blocks[b]));
	a->blocks[b].size = bytes;
	a->blocks[b].seg = a->nsegs;
	a->blocks[b].pool = pool;
	a->blocks[b].prev = a->blocks[b].next = -1;
	if (!a->cfg.caching) {
		a->region[pool] = a->nsegs;
		a->region_end[pool] = b;
	}
	a->nsegs++;
	pool_add(a, b);
	return b;
}

static void merge(struct allocator *a, int into, int b);

/*
 * A run of adjacent usable blocks that holds r bytes: the smallest (best
 * fit), or the lowest (first_fit). Blocks freed by different ops stay
 * apart while their clocks differ, so that each is given out as soon as
 * its own op allows; a request may span several of them. Runs are scanned
 * from their first block only, so each free block is looked at once.
 * Returns one block of r bytes or more made from the run's low end, or
 * with `high` from its high end; -1 when no run holds r bytes.
 */
static int find_run(struct allocator *a, const struct pool *p, uint64_t r, const struct alloc_req *rq,
		    int old_enough, int first_fit, int high)
{
	int best = -1, k;
	uint64_t best_run = 0;

	for (int i = 0; i < p->n; i++) {
		int b = p->free[i];
		uint64_t run = 0;
		if (!usable(a, b, rq, old_enough) || usable(a, a->blocks[b].prev, rq, old_enough))
			continue;
		for (k = b; usable(a, k, rq, old_enough); k = a->blocks[k].next)
			run += a->blocks[k].size;
		if (run >= r && fits_better(&a->blocks[b], run, best >= 0 ? &a->blocks[best] : NULL, best_run,
					    first_fit)) {
			best = b;
			best_run = run;
		}
	}
	if (best < 0)
		return -1;
	if (!high) {
		while (a->blocks[best].size < r)
			merge(a, best, a->blocks[best].next);
		return best;
	}
	for (k = best; usable(a, a->blocks[k].next, rq, old_enough); k = a->blocks[k].next)
		;
	while (a->blocks[k].size < r) {
		int prev = a->blocks[k].prev;
		merge(a, prev, k);
		k = prev;
	}
	return k;
}

int alloc_get(struct allocator *a, int buf, uint64_t bytes, const struct alloc_req *rq, uint32_t *wait)
{
	uint64_t r = round_up(bytes ? bytes : 1, a->cfg.round), split_min;
	int small = a->cfg.caching && r < SMALL_SIZE;
	int pool = a->cfg.caching ? 2 * rq->pool + !small : rq->pool, best;
	/* the arena keeps brief buffers at the high end of holes and the others low, first fit */
	int high = !a->cfg.caching && rq->brief, first_fit = !a->cfg.caching && !rq->brief;
	struct block *k;

	assert(buf >= 0 && buf < a->nbufs && a->buf_block[buf] < 0 && pool >= 0 && pool < NPOOLS);
	best = find_run(a, &a->pools[pool], r, rq, 0, first_fit, high);
	if (best < 0) /* a block freed long enough ago, for a wait on the ops that freed it */
		best = find_run(a, &a->pools[pool], r, rq, 1, first_fit, high);
	if (best < 0 && (best = segment_new(a, r, pool, rq)) < 0)
		return -1;
	for (int t = 0; t < ST_COUNT; t++)
		if (a->blocks[best].ready[t] > wait[t])
			wait[t] = a->blocks[best].ready[t];
	pool_remove(a, best);
	k = &a->blocks[best];
	split_min = !a->cfg.caching ? a->cfg.round : small ? MIN_BLOCK : SMALL_SIZE + 1;
	if (k->size - r >= split_min && !high) {
		/* the rest of the block, after it, stays free */
		int rest = block_new(a);
		k = &a->blocks[best]; /* block_new may have moved the table */
		a->blocks[rest] = *k;
		a->blocks[rest].off = k->off + r;
		a->blocks[rest].size = k->size - r;
		a->blocks[rest].prev = best;
		if (k->next >= 0)
			a->blocks[k->next].prev = rest;
		k->next = rest;
		k->size = r;
		if (!a->cfg.caching && a->region_end[k->pool] == best)
			a->region_end[k->pool] = rest;
		pool_add(a, rest);
	} else if (k->size - r >= split_min) {
		/* the rest of the block, before it, stays free */
		int rest = block_new(a);
		k = &a->blocks[best];
		a->blocks[rest] = *k;
		a->blocks[rest].size = k->size - r;
		a->blocks[rest].next = best;
		if (k->prev >= 0)
			a->blocks[k->prev].next = rest;
		k->prev = rest;
		k->off += k->size - r;
		k->size = r;
		pool_add(a, rest);
	}
	a->buf_block[buf] = best;
	a->allocated += k->size;
	return 0;
}

/* Merge free block b into its free neighbour `into` (adjacent, same segment). */
static void merge(struct allocator *a, int into, int b)
{
	struct block *x = &a->blocks[into], *y = &a->blocks[b];

	pool_remove(a, b);
	if (y->off < x->off)
		x->off = y->off;
	x->size += y->size;
	for (int t = 0; t < ST_COUNT; t++)
		if (y->ready[t] > x->ready[t])
			x->ready[t] = y->ready[t];
	if (y->freed_op > x->freed_op)
		x->freed_op = y->freed_op;
	if (x->prev == b)
		x->prev = y->prev;
	else
		x->next = y->next;
	if (x->prev >= 0)
		a->blocks[x->prev].next = into;
	if (x->next >= 0)
		a->blocks[x->next].prev = into;
	if (!a->cfg.caching && a->region_end[x->pool] == b)
		a->region_end[x->pool] = into;
	block_release(a, b);
}

static int same_clock(const struct block *x, const struct block *y)
{
	return memcmp(x->ready, y->ready, sizeof(x->ready)) == 0;
}

/* Merge free block b with its free neighbours that have the same clock. */
static void merge_neighbours(struct allocator *a, int b)
{
	int prev = a->blocks[b].prev, next;

	if (prev >= 0 && a->blocks[prev].slot >= 0 && same_clock(&a->blocks[prev], &a->blocks[b])) {
		merge(a, prev, b);
		b = prev;
	}
	next = a->blocks[b].next;
	if (next >= 0 && a->blocks[next].slot >= 0 && same_clock(&a->blocks[next], &a->blocks[b]))
		merge(a, b, next);
}

void alloc_put(struct allocator *a, int buf, int stream, uint32_t pos, uint32_t op)
{
	int b = a->buf_block[buf];
	struct block *k;

	assert(b >= 0);
	a->buf_block[buf] = -1;
	k = &a->blocks[b];
	a->allocated -= k->size;
	memset(k->ready, 0, sizeof(k->ready));
	k->ready[stream] = pos + 1;
	k->freed_op = op;
	pool_add(a, b);
	merge_neighbours(a, b);
}

void alloc_settle(struct allocator *a)
{
	for (int p = 0; p < NPOOLS; p++)
		for (int i = 0; i < a->pools[p].n; i++) {
			struct block *k = &a->blocks[a->pools[p].free[i]];
			memset(k->ready, 0, sizeof(k->ready));
			k->freed_op = 0;
		}
	/* with every clock cleared, each run of free blocks becomes one block (merging reorders the list) */
	for (int p = 0; p < NPOOLS; p++)
		for (int i = 0; i < a->pools[p].n; i++) {
			int b = a->pools[p].free[i], next = a->blocks[b].next;
			if (next >= 0 && a->blocks[next].slot >= 0) {
				merge(a, b, next);
				i = -1;
			}
		}
}

uint64_t alloc_granted(const struct allocator *a, int buf)
{
	int b = a->buf_block[buf];
	return b >= 0 ? a->blocks[b].size : 0;
}

void *alloc_ptr(const struct allocator *a, int buf)
{
	int b = a->buf_block[buf];
	char *base;

	if (b < 0 || !(base = a->segs[a->blocks[b].seg].ptr))
		return NULL;
	return base + a->blocks[b].off;
}

uint64_t alloc_allocated(const struct allocator *a)
{
	return a->allocated;
}

uint64_t alloc_segment_bytes(const struct allocator *a, int i)
{
	assert(i >= 0 && i < a->nsegs);
	return a->segs[i].bytes;
}

uint64_t alloc_reserved(const struct allocator *a)
{
	return a->reserved;
}

int alloc_segments(const struct allocator *a)
{
	return a->nsegs;
}

void *alloc_segment_ptr(const struct allocator *a, int i)
{
	assert(i >= 0 && i < a->nsegs);
	return a->segs[i].ptr;
}
