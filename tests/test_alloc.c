/*
 * test_alloc.c - the allocator both binaries share (core/alloc.c) and the
 * issue-order memory of a step (core/memory.c): rounding, best fit,
 * splitting, merging, segment sizes, per-stream pools, reuse gated by
 * happens-before, and the peaks a step reaches.
 */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "config.h"
#include "memory.h"
#include "schedule.h"
#include "testutil.h"

#define MIB (1ull << 20)

static const struct alloc_cfg arena = { 0, 512, 2 * MIB, 0, 0, 0 };
static const struct alloc_cfg caching = { 1, 512, 2 * MIB, 0, 0, 0 };
static const struct alloc_cfg expandable = { 1, 512, 2 * MIB, 0, 0, 1 };

/* Fake memory behind the segments, to check addresses: a base per segment, never dereferenced. */
static void *fake_reserve(void *ctx, int seg, uint64_t offset, uint64_t bytes)
{
	(void)ctx;
	(void)offset;
	(void)bytes;
	return (void *)((uintptr_t)(seg + 1) << 40);
}

static uint32_t no_wait[ST_COUNT];

/* A request from pool p by op `op` with clock c (NULL: everything before has completed). */
static int get(struct allocator *a, int buf, uint64_t bytes, int p, uint32_t op, const uint32_t *c)
{
	struct alloc_req rq = { p, 0, op, c };
	return alloc_get(a, buf, bytes, &rq, no_wait);
}

static uintptr_t addr(const struct allocator *a, int buf)
{
	return (uintptr_t)alloc_ptr(a, buf);
}

/*
 * A recorded trace (alloc_replay): thousands of blocks on two streams,
 * addresses given out again once freed and colliding in the address map,
 * make the decisions the allocator makes when the same requests and frees
 * come by buffer; the trace's own peaks are its requests' and segments'.
 */
static void test_replay(void)
{
	enum { N = 6000, LIVE = 300 };
	struct alloc_event *ev = calloc(3 * N, sizeof(*ev));
	struct allocator *a = alloc_new(&caching, N, NULL, NULL);
	struct alloc_replay r;
	uint64_t bytes[N], live_addr[LIVE], peak_alloc = 0, peak_res = 0, req = 0, peak_req = 0;
	int live_buf[LIVE] = { 0 }, nev = 0, nb = 0;
	char err[128];
	unsigned seed = 7;

	memset(live_addr, 0, sizeof(live_addr));
	for (int i = 0; i < N; i++) {
		int k = (int)(rand_r(&seed) % LIVE), st = k & 1;
		if (live_addr[k]) { /* its slot's block goes back first */
			ev[nev++] = (struct alloc_event){ ALLOC_EV_FREE, (uint8_t)st, bytes[live_buf[k]], live_addr[k] };
			alloc_put(a, live_buf[k], st, (uint32_t)nev, (uint32_t)nev);
			req -= bytes[live_buf[k]];
		}
		/*
		 * sizes small and large; addresses a slot's, reused, 8 MiB apart:
		 * all of them in three chains of the address map (its 16,384
		 * slots, hashed from address / 512), which frees cut short
		 */
		bytes[nb] = rand_r(&seed) % 3 ? 512ull * (1 + rand_r(&seed) % 4000) : MIB * (1 + rand_r(&seed) % 24);
		live_addr[k] = ((uint64_t)k << 23) + 512 * (uint64_t)(i % 3) + 512;
		live_buf[k] = nb;
		ev[nev++] = (struct alloc_event){ ALLOC_EV_ALLOC, (uint8_t)st, bytes[nb], live_addr[k] };
		CU_ASSERT_EQUAL_FATAL(get(a, nb, bytes[nb], st, (uint32_t)nev, NULL), 0);
		req += bytes[nb++];
		if (req > peak_req)
			peak_req = req;
		if (alloc_allocated(a) > peak_alloc)
			peak_alloc = alloc_allocated(a);
		if (alloc_reserved(a) > peak_res)
			peak_res = alloc_reserved(a);
	}
	ev[nev++] = (struct alloc_event){ ALLOC_EV_SEGMENT_ALLOC, 0, 64 * MIB, 1 };
	ev[nev++] = (struct alloc_event){ ALLOC_EV_SEGMENT_ALLOC, 1, 2 * MIB, 2 };
	ev[nev++] = (struct alloc_event){ ALLOC_EV_SEGMENT_FREE, 0, 64 * MIB, 1 };
	ev[nev++] = (struct alloc_event){ ALLOC_EV_FREE, 0, 512, 12345 }; /* a block from before the trace */
	CU_ASSERT_EQUAL_FATAL(alloc_replay(&caching, ev, (size_t)nev, &r, err, sizeof err), 0);
	CU_ASSERT_EQUAL(r.requests, N);
	CU_ASSERT_EQUAL(r.unmatched, 1);
	CU_ASSERT_EQUAL(r.replayed_alloc, peak_alloc);
	CU_ASSERT_EQUAL(r.replayed_reserved, peak_res);
	CU_ASSERT_EQUAL(r.traced_alloc, peak_req);
	CU_ASSERT_EQUAL(r.traced_reserved, 66 * MIB);
	/* an address given out twice without a free between, a stream with no pool */
	ev[1] = ev[0];
	ev[1].action = ALLOC_EV_ALLOC;
	CU_ASSERT_EQUAL(alloc_replay(&caching, ev, 2, &r, err, sizeof err), -1);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "given out again before it was freed"));
	ev[0].stream = ST_COUNT;
	CU_ASSERT_EQUAL(alloc_replay(&caching, ev, 1, &r, err, sizeof err), -1);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "stream 6 (allowed: a stream below 6)"));
	alloc_free(a);
	free(ev);
}

static void test_rounding_and_growth(void)
{
	struct allocator *a = alloc_new(&arena, 4, NULL, NULL);

	CU_ASSERT_EQUAL(get(a, 0, 1, 0, 0, NULL), 0);
	CU_ASSERT_EQUAL(alloc_granted(a, 0), 512);
	CU_ASSERT_EQUAL(get(a, 1, 513, 0, 0, NULL), 0);
	CU_ASSERT_EQUAL(alloc_granted(a, 1), 1024);
	CU_ASSERT_EQUAL(alloc_allocated(a), 1536);
	/* both fit the first 2 MiB of the region */
	CU_ASSERT_EQUAL(alloc_reserved(a), 2 * MIB);
	/* 3 MiB more: the region grows at its end, the free tail plus 2 MiB, and stays one segment */
	CU_ASSERT_EQUAL(get(a, 2, 3 * MIB, 0, 0, NULL), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 4 * MIB);
	CU_ASSERT_EQUAL(alloc_segments(a), 1);
	/* another lifetime class has a region of its own */
	CU_ASSERT_EQUAL(get(a, 3, 100, 1, 0, NULL), 0);
	CU_ASSERT_EQUAL(alloc_segments(a), 2);
	CU_ASSERT_EQUAL(alloc_reserved(a), 6 * MIB);
	CU_ASSERT_PTR_NULL(alloc_ptr(a, 0)); /* no memory behind the simulator's addresses */
	alloc_free(a);
}

static void test_first_fit_split_merge(void)
{
	struct allocator *a = alloc_new(&arena, 8, fake_reserve, NULL);
	uintptr_t base;

	/* 0 | 1 | 2 | 3 laid out in order */
	for (int i = 0; i < 4; i++)
		CU_ASSERT_EQUAL(get(a, i, 4096, 0, 0, NULL), 0);
	base = addr(a, 0);
	CU_ASSERT_EQUAL(addr(a, 1), base + 4096);
	CU_ASSERT_EQUAL(addr(a, 3), base + 3 * 4096);
	/* free 1 and 2 (the same op: the same clock): one 8 KiB hole, which a 6 KiB request takes */
	alloc_put(a, 1, ST_COMPUTE, 0, 0);
	alloc_put(a, 2, ST_COMPUTE, 0, 0);
	CU_ASSERT_EQUAL(get(a, 4, 6144, 0, 1, NULL), 0);
	CU_ASSERT_EQUAL(addr(a, 4), base + 4096);
	/* the 2 KiB left after it is split off and serves the next small request */
	CU_ASSERT_EQUAL(get(a, 5, 2048, 0, 2, NULL), 0);
	CU_ASSERT_EQUAL(addr(a, 5), base + 4096 + 6144);
	CU_ASSERT_EQUAL(alloc_reserved(a), 2 * MIB);
	CU_ASSERT_EQUAL(alloc_allocated(a), 4 * 4096);
	/* everything freed merges back at a step's end: 2 MiB fits at the base again */
	for (int i = 0; i < 6; i++)
		if (i != 1 && i != 2)
			alloc_put(a, i, ST_COMPUTE, (uint32_t)(10 + i), (uint32_t)(10 + i));
	alloc_settle(a);
	CU_ASSERT_EQUAL(get(a, 6, 2 * MIB, 0, 0, NULL), 0);
	CU_ASSERT_EQUAL(addr(a, 6), base);
	CU_ASSERT_EQUAL(alloc_segments(a), 1);
	alloc_free(a);
}

/* A brief buffer takes the high end of the best-fitting hole; a long-lived one the lowest hole. */
static void test_brief_high_long_low(void)
{
	struct allocator *a = alloc_new(&arena, 8, fake_reserve, NULL);
	struct alloc_req brief = { 0, 1, 0, NULL };
	uintptr_t base;

	CU_ASSERT_EQUAL(get(a, 0, MIB, 0, 0, NULL), 0);
	base = addr(a, 0);
	alloc_put(a, 0, ST_COMPUTE, 0, 0);
	CU_ASSERT_EQUAL(alloc_get(a, 1, 4096, &brief, no_wait), 0);
	CU_ASSERT_EQUAL(addr(a, 1), base + MIB - 4096); /* the hole the 1 MiB block left */
	CU_ASSERT_EQUAL(get(a, 2, 4096, 0, 0, NULL), 0);
	CU_ASSERT_EQUAL(addr(a, 2), base);
	alloc_free(a);
}

/* A block freed by an op the requester is not ordered after: not at all while recent, with a wait once old. */
static void test_reuse_waits_for_happens_before(void)
{
	struct alloc_cfg aged = arena;
	struct allocator *a;
	uint32_t before[ST_COUNT] = { 0 }, after[ST_COUNT] = { 0 }, wait[ST_COUNT] = { 0 };
	struct alloc_req rq = { 0, 0, 0, before };

	aged.wait_age = 10;
	a = alloc_new(&aged, 8, NULL, NULL);
	CU_ASSERT_EQUAL(get(a, 0, 2 * MIB, 0, 0, NULL), 0);
	/* freed by op 20, at position 5 of the reduce-scatter stream */
	alloc_put(a, 0, ST_REDUCE_SCATTER, 5, 20);
	/* op 25 has seen only 5 ops of that stream (positions 0..4): new memory, no wait */
	before[ST_REDUCE_SCATTER] = 5;
	rq.op = 25;
	CU_ASSERT_EQUAL(alloc_get(a, 1, 2 * MIB, &rq, wait), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 4 * MIB);
	CU_ASSERT_EQUAL(wait[ST_REDUCE_SCATTER], 0);
	/* op 31, ten ops later, still not ordered after it: the block, and a wait for position 5 */
	rq.op = 31;
	CU_ASSERT_EQUAL(alloc_get(a, 2, 2 * MIB, &rq, wait), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 4 * MIB);
	CU_ASSERT_EQUAL(wait[ST_REDUCE_SCATTER], 6);
	/* an op ordered after the freeing op takes such a block at once, without a wait */
	alloc_put(a, 2, ST_REDUCE_SCATTER, 7, 40);
	after[ST_REDUCE_SCATTER] = 8;
	rq.clock = after;
	rq.op = 41;
	memset(wait, 0, sizeof(wait));
	CU_ASSERT_EQUAL(alloc_get(a, 3, 2 * MIB, &rq, wait), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 4 * MIB);
	CU_ASSERT_EQUAL(wait[ST_REDUCE_SCATTER], 8);
	alloc_free(a);
}

/* PyTorch's caching allocator: size classes, per-stream pools. */
static void test_caching_pools(void)
{
	struct allocator *a = alloc_new(&caching, 8, NULL, NULL);

	/* small requests share a 2 MiB segment; a 5 MiB one takes 20 MiB; 30 MiB + 1 rounds to 32 MiB */
	CU_ASSERT_EQUAL(get(a, 0, 1000, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(get(a, 1, 1000, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 2 * MIB);
	CU_ASSERT_EQUAL(get(a, 2, 5 * MIB, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 22 * MIB);
	CU_ASSERT_EQUAL(get(a, 3, 30 * MIB + 1, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 54 * MIB);
	/* a block freed on the compute stream's pool does not serve the all-gather stream... */
	alloc_put(a, 3, ST_COMPUTE, 0, 0);
	CU_ASSERT_EQUAL(get(a, 4, 30 * MIB, ST_ALLGATHER, 1, NULL), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 84 * MIB);
	/* ...but does serve the compute stream again */
	CU_ASSERT_EQUAL(get(a, 5, 30 * MIB, ST_COMPUTE, 2, NULL), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 84 * MIB);
	/* kMinLargeAlloc, 10 MiB: just below, a 20 MiB segment; at it, its own size rounded to 2 MiB */
	CU_ASSERT_EQUAL(get(a, 6, 10 * MIB - 512, ST_REDUCE_SCATTER, 3, NULL), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 104 * MIB);
	CU_ASSERT_EQUAL(get(a, 7, 10 * MIB, ST_ALLREDUCE, 4, NULL), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 114 * MIB);
	alloc_free(a);

	/*
	 * kSmallSize, 1 MiB: a request of exactly it is small (get_pool and
	 * get_allocation_size: size <= kSmallSize), a 2 MiB segment of the small
	 * pool, which a second one fills; 512 bytes more is large, a 20 MiB segment
	 */
	a = alloc_new(&caching, 8, NULL, NULL);
	CU_ASSERT_EQUAL(get(a, 0, MIB, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 2 * MIB);
	CU_ASSERT_EQUAL(get(a, 1, MIB, ST_COMPUTE, 1, NULL), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 2 * MIB);
	CU_ASSERT_EQUAL(get(a, 2, MIB + 512, ST_COMPUTE, 2, NULL), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 22 * MIB);
	alloc_free(a);
}

/*
 * A caching pool's free blocks by how they serve its stream: the smallest
 * block ready for the op, even when a smaller one is not; a block becomes
 * ready once the stream's clock passes the op that freed it, and old once
 * wait_age ops have passed; after a step's end, everything is ready again.
 */
static void test_caching_levels(void)
{
	struct alloc_cfg aged = caching;
	struct allocator *a;
	uint32_t clock[ST_COUNT] = { 0 }, wait[ST_COUNT] = { 0 };
	struct alloc_req rq = { ST_COMPUTE, 0, 0, clock };

	aged.wait_age = 8;
	a = alloc_new(&aged, 8, fake_reserve, NULL);
	/* four segments, one per request: A 40 MiB, B 60, C 80, D 36 */
	CU_ASSERT_EQUAL(get(a, 0, 40 * MIB, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(get(a, 1, 60 * MIB, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(get(a, 2, 80 * MIB, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(get(a, 3, 36 * MIB, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 216 * MIB);
	alloc_put(a, 0, ST_ALLREDUCE, 3, 10); /* A: ready once the op has seen 4 all-reduces */
	alloc_put(a, 1, ST_COMPUTE, 5, 11);   /* B: once it has seen 6 compute ops */
	alloc_put(a, 2, ST_ALLREDUCE, 9, 12); /* C: 10 all-reduces */
	alloc_put(a, 3, ST_ALLREDUCE, 20, 13); /* D: 21 all-reduces */
	/* op 14 after B's free only: B (60), not the smaller A or D; the rest of B stays free */
	clock[ST_COMPUTE] = 6;
	rq.op = 14;
	CU_ASSERT_EQUAL(alloc_get(a, 4, 30 * MIB, &rq, wait), 0);
	CU_ASSERT_EQUAL(addr(a, 4), (uintptr_t)2 << 40);
	CU_ASSERT_EQUAL(wait[ST_ALLREDUCE], 0);
	/* op 15 has seen 4 all-reduces: A is ready now, and serves 35 MiB without a wait or new memory */
	clock[ST_COMPUTE] = 7;
	clock[ST_ALLREDUCE] = 4;
	rq.op = 15;
	CU_ASSERT_EQUAL(alloc_get(a, 5, 35 * MIB, &rq, wait), 0);
	CU_ASSERT_EQUAL(addr(a, 5), (uintptr_t)1 << 40);
	CU_ASSERT_EQUAL(alloc_reserved(a), 216 * MIB);
	CU_ASSERT_EQUAL(wait[ST_ALLREDUCE], 4);
	/* op 30: nothing ready holds 70 MiB; C, freed 18 ops before, is old: taken, with a wait for it */
	clock[ST_COMPUTE] = 8;
	rq.op = 30;
	CU_ASSERT_EQUAL(alloc_get(a, 6, 70 * MIB, &rq, wait), 0);
	CU_ASSERT_EQUAL(addr(a, 6), (uintptr_t)3 << 40);
	CU_ASSERT_EQUAL(alloc_reserved(a), 216 * MIB);
	CU_ASSERT_EQUAL(wait[ST_ALLREDUCE], 10);
	/* the next step starts with every clock at 0, and every free block ready: D is the best fit */
	alloc_settle(a);
	memset(clock, 0, sizeof(clock));
	memset(wait, 0, sizeof(wait));
	rq.op = 1;
	CU_ASSERT_EQUAL(alloc_get(a, 7, 33 * MIB, &rq, wait), 0);
	CU_ASSERT_EQUAL(addr(a, 7), (uintptr_t)4 << 40);
	CU_ASSERT_EQUAL(wait[ST_ALLREDUCE], 0);
	alloc_free(a);
}

/*
 * A caching pool with hundreds of free blocks (a PyTorch step's pools
 * hold 100 to 350), freed and taken again in a shuffled order, across a
 * step's end: each request gets the block a scan of every free block
 * would give, the smallest that holds it and among equal ones the lowest
 * segment, and no new memory. (The pool's order of free blocks is kept in
 * chunks that split and join as it grows and shrinks.)
 */
#define NMANY 300

static void test_caching_many_free_blocks(void)
{
	struct allocator *a = alloc_new(&caching, NMANY, fake_reserve, NULL);
	uint64_t size[NMANY], reserved;
	int seg_free[NMANY], buf_seg[NMANY]; /* segment x free; the segment buffer b holds, -1 */
	uint32_t clock[ST_COUNT] = { 0 }, now = 0, lcg = 12345;
	int checked = 0, wrong = 0;

	/* segment i, buffer i's at first: 10 MiB and up in steps of 2 MiB, each size twice */
	for (int i = 0; i < NMANY; i++) {
		size[i] = (10 + 2 * (uint64_t)((i * 37) % (NMANY / 2))) * MIB;
		CU_ASSERT_EQUAL_FATAL(get(a, i, size[i], ST_COMPUTE, 0, NULL), 0);
		CU_ASSERT_EQUAL_FATAL(addr(a, i), (uintptr_t)(i + 1) << 40);
	}
	reserved = alloc_reserved(a);
	for (int i = 0; i < NMANY; i++) {
		alloc_put(a, i, ST_COMPUTE, now, now);
		now++;
		seg_free[i] = 1;
		buf_seg[i] = -1;
	}
	for (int round = 0; round < 6000; round++) {
		int b, nfree = 0;
		lcg = lcg * 1103515245u + 12345u;
		if (round == 3000) { /* a step's end: every free block ready for the next step's clocks, from 0 */
			alloc_settle(a);
			now = 0;
		}
		for (int x = 0; x < NMANY; x++)
			nfree += seg_free[x];
		b = (int)((lcg >> 8) % NMANY);
		if (buf_seg[b] >= 0) {
			if (nfree < 40 || (lcg >> 4) % 3) { /* freed */
				alloc_put(a, b, ST_COMPUTE, now, now);
				now++;
				seg_free[buf_seg[b]] = 1;
				buf_seg[b] = -1;
			}
			continue;
		}
		{
			/* a request for a free block's size, less up to a MiB (too little to split off) */
			int pick = (int)((lcg >> 12) % (uint32_t)nfree), n = 0, want = -1;
			uint64_t r;
			for (int x = 0; x < NMANY && want < 0; x++)
				if (seg_free[x] && n++ == pick)
					want = x;
			r = size[want] - 512 * ((lcg >> 3) % 2048);
			for (int x = 0; x < want; x++) /* the lowest free segment of that size */
				if (seg_free[x] && size[x] == size[want]) {
					want = x;
					break;
				}
			clock[ST_COMPUTE] = now;
			CU_ASSERT_EQUAL_FATAL(get(a, b, r, ST_COMPUTE, now, clock), 0);
			now++;
			checked++;
			wrong += addr(a, b) != (uintptr_t)(want + 1) << 40;
			seg_free[want] = 0;
			buf_seg[b] = want;
		}
	}
	CU_ASSERT(checked > 1000);
	CU_ASSERT_EQUAL(wrong, 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), reserved);
	alloc_free(a);
}

/* The segments a flush released, in order. */
static int released[8], nreleased;

static void record_release(void *ctx, int seg)
{
	(void)ctx;
	if (nreleased < 8)
		released[nreleased++] = seg;
}

/*
 * A caching allocator at its capacity (PyTorch's malloc when cudaMalloc
 * fails): a new segment that would take the reserved bytes above it
 * flushes the cache first: the device is synchronized, so blocks freed by
 * ops the request does not wait for are free now, and the segments that
 * are entirely free go back (large pools before small); segments with a
 * live block stay. Then the segment is reserved, without a second search
 * of the pool. When even that does not fit, it is an OOM: reserved all the
 * same, and the capacity rises to it.
 */
static void test_caching_capacity(void)
{
	struct alloc_cfg capped = caching;
	struct allocator *a;
	uint32_t clock[ST_COUNT] = { 0 }, wait[ST_COUNT] = { 0 };
	struct alloc_req rq = { ST_COMPUTE, 0, 0, clock };

	capped.capacity = 100 * MIB;
	a = alloc_new(&capped, 8, fake_reserve, NULL);
	alloc_set_release(a, record_release);
	nreleased = 0;
	/* seg 0: 40 MiB; seg 1: 30 MiB; seg 2: 20 MiB holding two 5 MiB blocks; seg 3: a small 2 MiB one */
	CU_ASSERT_EQUAL(get(a, 0, 40 * MIB, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(get(a, 1, 30 * MIB, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(get(a, 2, 5 * MIB, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(get(a, 3, 5 * MIB, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(get(a, 4, 1000, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 92 * MIB);
	CU_ASSERT_EQUAL(alloc_segments(a), 4);
	/* freed by an all-reduce the compute stream has not waited for: not ready for its ops */
	alloc_put(a, 1, ST_ALLREDUCE, 9, 10);
	alloc_put(a, 3, ST_ALLREDUCE, 9, 10);
	alloc_put(a, 4, ST_ALLREDUCE, 9, 10);
	/* 12 MiB: nothing ready holds it; 12 MiB more would make 104 > 100: flush, then it fits */
	rq.op = 11;
	CU_ASSERT_EQUAL(alloc_get(a, 5, 12 * MIB, &rq, wait), 0);
	CU_ASSERT_EQUAL(alloc_retries(a), 1);
	CU_ASSERT_EQUAL(alloc_ooms(a), 0);
	CU_ASSERT_EQUAL(nreleased, 2);
	CU_ASSERT_EQUAL(released[0], 1); /* the large pool's free 30 MiB segment, then the small one */
	CU_ASSERT_EQUAL(released[1], 3);
	CU_ASSERT_EQUAL(alloc_segment_pool(a, 1), -1);
	CU_ASSERT_EQUAL(alloc_segment_pool(a, 3), -1);
	CU_ASSERT_PTR_NULL(alloc_segment_ptr(a, 1));
	CU_ASSERT_EQUAL(alloc_segment_pool(a, 0), 2 * ST_COMPUTE + 1); /* live blocks: kept */
	CU_ASSERT_EQUAL(alloc_segment_pool(a, 2), 2 * ST_COMPUTE + 1);
	CU_ASSERT_EQUAL(alloc_reserved(a), 92 * MIB - 30 * MIB - 2 * MIB + 12 * MIB);
	CU_ASSERT_EQUAL(alloc_segments(a), 5); /* a new index: a released one is never reused */
	CU_ASSERT_EQUAL(addr(a, 5), (uintptr_t)5 << 40);
	CU_ASSERT_EQUAL(alloc_capacity(a), 100 * MIB);
	/* the flush synchronized the device: the all-reduce's block in seg 2 (merged, 15 MiB) serves at once */
	rq.op = 12;
	CU_ASSERT_EQUAL(alloc_get(a, 6, 15 * MIB, &rq, wait), 0);
	CU_ASSERT_EQUAL(addr(a, 6), ((uintptr_t)3 << 40) + 5 * MIB);
	CU_ASSERT_EQUAL(wait[ST_ALLREDUCE], 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 72 * MIB);
	/* 40 MiB more would make 112: a flush releases nothing (every segment has a live block): an OOM */
	rq.op = 13;
	CU_ASSERT_EQUAL(alloc_get(a, 7, 40 * MIB, &rq, wait), 0);
	CU_ASSERT_EQUAL(alloc_retries(a), 2);
	CU_ASSERT_EQUAL(alloc_ooms(a), 1);
	CU_ASSERT_EQUAL(nreleased, 2);
	CU_ASSERT_EQUAL(alloc_reserved(a), 112 * MIB);
	CU_ASSERT_EQUAL(alloc_capacity(a), 112 * MIB); /* from now on, a device with the memory it needed */
	alloc_free(a);
}

/*
 * Expandable segments: a pool maps whole pages of one range, 2 MiB in the
 * small pool and 20 MiB in the large one, as requests need them; a second
 * request extends the range, from the free block before its unmapped end,
 * instead of reserving a segment of its own; a block is split whenever
 * 512 bytes would be left, in the large pool too.
 */
static void test_expandable_pages(void)
{
	struct allocator *a = alloc_new(&expandable, 8, NULL, NULL), *d = alloc_new(&caching, 8, NULL, NULL);

	CU_ASSERT_EQUAL(get(a, 0, 1000, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 2 * MIB);
	CU_ASSERT_EQUAL(get(a, 1, 5 * MIB, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 22 * MIB);
	CU_ASSERT_EQUAL(alloc_segments(a), 2);
	/* 30 MiB: the free 15 MiB after the 5 and one more page of 20 MiB, in the same range */
	CU_ASSERT_EQUAL(get(a, 2, 30 * MIB, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(alloc_granted(a, 2), 30 * MIB);
	CU_ASSERT_EQUAL(alloc_reserved(a), 42 * MIB);
	CU_ASSERT_EQUAL(alloc_segments(a), 2);
	CU_ASSERT_EQUAL(alloc_segment_bytes(a, 1), 40 * MIB);
	CU_ASSERT_EQUAL(alloc_segment_pool(a, 1), 2 * ST_COMPUTE + 1);
	/* 3 MiB fit the 5 MiB left mapped after it: nothing mapped */
	CU_ASSERT_EQUAL(get(a, 3, 3 * MIB, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 42 * MIB);
	/* the large pool splits at 512 bytes: 5 MiB less 512 from the freed 5 MiB block leaves 512 free */
	alloc_put(a, 1, ST_COMPUTE, 0, 1);
	CU_ASSERT_EQUAL(get(a, 4, 5 * MIB - 512, ST_COMPUTE, 2, NULL), 0);
	CU_ASSERT_EQUAL(alloc_granted(a, 4), 5 * MIB - 512);
	CU_ASSERT_EQUAL(alloc_reserved(a), 42 * MIB);
	/* whole segments: a 20 MiB segment for 5 MiB, 30 MiB for 30, and the large pool keeps 1 MiB or less unsplit */
	CU_ASSERT_EQUAL(get(d, 0, 1000, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(get(d, 1, 5 * MIB, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(get(d, 2, 30 * MIB, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(alloc_reserved(d), 52 * MIB);
	CU_ASSERT_EQUAL(alloc_segments(d), 3);
	alloc_put(d, 1, ST_COMPUTE, 0, 1);
	CU_ASSERT_EQUAL(get(d, 4, 5 * MIB - 512, ST_COMPUTE, 2, NULL), 0);
	CU_ASSERT_EQUAL(alloc_granted(d, 4), 5 * MIB);
	alloc_free(d);
	alloc_free(a);
}

/*
 * Expandable segments at the capacity: a flush unmaps the whole pages
 * inside each free block (reserved drops by them), releases a range left
 * entirely unmapped, and the search is made again, from the lowest
 * unmapped block whose chain holds the request.
 */
static void test_expandable_flush(void)
{
	struct alloc_cfg capped = expandable;
	struct allocator *a;
	uint32_t clock[ST_COUNT] = { 0 }, wait[ST_COUNT] = { 0 };
	struct alloc_req rq = { ST_COMPUTE, 0, 20, clock };

	capped.capacity = 102 * MIB;
	a = alloc_new(&capped, 8, NULL, NULL);
	/* the small pool's range (segment 0) maps a page; its block is freed */
	CU_ASSERT_EQUAL(get(a, 0, 1000, ST_COMPUTE, 0, NULL), 0);
	alloc_put(a, 0, ST_COMPUTE, 0, 0);
	/* the large range (segment 1): A [0, 30) MiB, B [30, 60), C [60, 70), [70, 80) free; 80 MiB mapped */
	CU_ASSERT_EQUAL(get(a, 1, 30 * MIB, ST_COMPUTE, 1, NULL), 0);
	CU_ASSERT_EQUAL(get(a, 2, 30 * MIB, ST_COMPUTE, 2, NULL), 0);
	CU_ASSERT_EQUAL(get(a, 3, 10 * MIB, ST_COMPUTE, 3, NULL), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 82 * MIB);
	CU_ASSERT_EQUAL(alloc_segments(a), 2);
	/* B freed by an all-reduce the compute stream has not waited for */
	alloc_put(a, 2, ST_ALLREDUCE, 9, 10);
	/* 40 MiB: [70, 80) and two pages more would make 122 MiB > 102: a flush first */
	CU_ASSERT_EQUAL(alloc_get(a, 4, 40 * MIB, &rq, wait), 0);
	CU_ASSERT_EQUAL(alloc_retries(a), 1);
	CU_ASSERT_EQUAL(alloc_ooms(a), 0);
	/* B's page [40, 60) was unmapped (its [30, 40) shares a page with A), the small range released */
	CU_ASSERT_EQUAL(alloc_segment_pool(a, 0), -1);
	CU_ASSERT_EQUAL(alloc_segment_bytes(a, 0), 0);
	/* then [70, 80) and two new pages, [80, 120), since [30, 60) is too short: 60 + 40 MiB */
	CU_ASSERT_EQUAL(alloc_reserved(a), 100 * MIB);
	CU_ASSERT_EQUAL(alloc_segment_bytes(a, 1), 100 * MIB);
	CU_ASSERT_EQUAL(alloc_segments(a), 2);
	CU_ASSERT_EQUAL(alloc_granted(a, 4), 40 * MIB);
	CU_ASSERT_EQUAL(wait[ST_ALLREDUCE], 0);
	/* 30 MiB: [30, 40) and the page [40, 60) mapped again, the lowest chain that holds it */
	rq.op = 21;
	CU_ASSERT_EQUAL(alloc_get(a, 5, 30 * MIB, &rq, wait), 0);
	CU_ASSERT_EQUAL(alloc_reserved(a), 120 * MIB); /* past the capacity: an OOM, the capacity rises */
	CU_ASSERT_EQUAL(alloc_retries(a), 2);
	CU_ASSERT_EQUAL(alloc_ooms(a), 1);
	CU_ASSERT_EQUAL(alloc_capacity(a), 120 * MIB);
	CU_ASSERT_EQUAL(alloc_segments(a), 2);
	alloc_free(a);
}

/*
 * Expandable segments: a request larger than a range (the device's memory
 * and an eighth) gets a range of its own size, mapped past the capacity
 * as an OOM (PyTorch raises OutOfMemoryError); without a capacity, a range
 * of its size and no OOM. (A range of the usual size would end before the
 * request: the chain walked off its end.)
 */
static void test_expandable_huge(void)
{
	struct alloc_cfg capped = expandable;
	struct allocator *a;

	capped.capacity = 100 * MIB; /* ranges of 120 MiB: 112.5 in 20 MiB pages */
	a = alloc_new(&capped, 8, NULL, NULL);
	CU_ASSERT_EQUAL(get(a, 0, 30 * MIB, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(alloc_segment_bytes(a, 0), 40 * MIB);
	CU_ASSERT_EQUAL(get(a, 1, 250 * MIB, ST_COMPUTE, 1, NULL), 0);
	CU_ASSERT_EQUAL(alloc_granted(a, 1), 250 * MIB);
	CU_ASSERT_EQUAL(alloc_segments(a), 2);
	CU_ASSERT_EQUAL(alloc_segment_bytes(a, 1), 260 * MIB); /* its own range, mapped in whole pages */
	CU_ASSERT_EQUAL(alloc_reserved(a), 300 * MIB);
	CU_ASSERT_EQUAL(alloc_retries(a), 1);
	CU_ASSERT_EQUAL(alloc_ooms(a), 1);
	CU_ASSERT_EQUAL(alloc_capacity(a), 300 * MIB);
	alloc_free(a);

	a = alloc_new(&expandable, 8, NULL, NULL); /* no capacity: ranges of 72 GiB */
	CU_ASSERT_EQUAL(get(a, 0, 100ull << 30, ST_COMPUTE, 0, NULL), 0);
	CU_ASSERT_EQUAL(alloc_granted(a, 0), 100ull << 30);
	CU_ASSERT_EQUAL(alloc_reserved(a), 100ull << 30); /* 5,120 pages of 20 MiB */
	CU_ASSERT_EQUAL(alloc_ooms(a), 0);
	CU_ASSERT_EQUAL(alloc_segments(a), 1);
	alloc_free(a);
}

/* The step's memory in issue order: the peak is the largest live sum, and steps repeat. */
static void test_memory_of_a_step(void)
{
	struct experiment e;
	struct schedule *s;
	struct memory *m, *again;
	uint64_t live = 0, peak = 0, persistent, *issue;

	s = test_schedule(&e, "policy.precision=fp32", NULL);
	/* the same peak by hand: persistent buffers, then each op's grants before its frees, rounded to 512 */
	for (int b = 0; b < s->nbufs; b++)
		if (s->bufs[b].alloc_op < 0 && !s->bufs[b].host && s->bufs[b].alias_of < 0)
			live += (s->bufs[b].bytes + 511) / 512 * 512;
	peak = persistent = live;
	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		for (int k = 0; k < o->nalloc; k++)
			live += (s->bufs[s->bufrefs[o->buf_first + k]].bytes + 511) / 512 * 512;
		if (live > peak)
			peak = live;
		for (int k = 0; k < o->nfree; k++)
			live -= (s->bufs[s->bufrefs[o->buf_first + o->nalloc + k]].bytes + 511) / 512 * 512;
	}
	issue = calloc((size_t)s->nops, sizeof(uint64_t));
	for (int i = 0; i < s->nops; i++)
		issue[i] = 1000 * (uint64_t)i;
	m = memory_new(s, 1, NULL, NULL);
	memory_predict(m, issue);
	memory_step_end(m, 1000 * (uint64_t)s->nops);
	CU_ASSERT_EQUAL(m->peaks.alloc, peak);
	CU_ASSERT(m->peaks.reserved >= m->peaks.alloc);
	CU_ASSERT(m->nsamples > 2);
	/* after the build, the persistent buffers alone; after a step, the same (it frees all it grants) */
	CU_ASSERT_EQUAL(m->peaks.after[0].alloc, persistent);
	CU_ASSERT_EQUAL(m->peaks.after[1].alloc, persistent);
	CU_ASSERT(m->peaks.after[1].reserved >= peak && m->peaks.after[1].reserved <= m->peaks.reserved);
	/* a second step from the first step's end reserves nothing new */
	again = memory_new(s, 0, NULL, NULL);
	CU_ASSERT_EQUAL(memory_persistent(again), 0);
	for (int step = 0; step < 3; step++) {
		memory_step_begin(again);
		for (int i = 0; i < s->nops; i++)
			CU_ASSERT_EQUAL(memory_issue(again, i, issue[i]), 0);
		memory_step_end(again, 0);
		CU_ASSERT_EQUAL(again->total, persistent); /* a step frees all it grants */
	}
	CU_ASSERT_EQUAL(again->peaks.reserved, m->peaks.reserved);
	CU_ASSERT_EQUAL(again->peaks.alloc, m->peaks.alloc);
	memory_free(again);
	memory_free(m);
	free(issue);
	schedule_free(s);
	config_release(&e);
}

/*
 * memory_predict against every step of the run simulated in full: a step
 * that meets the step before at a checkpoint goes on as that one did, so
 * the peaks, the flushes over the run, the last step's waits and syncs and
 * its timeline are the same, and the step ends with the same bytes.
 */
/* x predicted what `full` simulated op by op: peaks, flushes, waits and syncs, the bytes after each step and now */
static void same_run(const struct memory *x, const struct memory *full, const struct mem_after *after, int nops)
{
	CU_ASSERT(!memcmp(x->peaks.after, after, sizeof(after[0]) * (size_t)x->peaks.nafter));
	CU_ASSERT_EQUAL(x->peaks.alloc, full->peaks.alloc);
	CU_ASSERT_EQUAL(x->peaks.reserved, full->peaks.reserved);
	CU_ASSERT(!memcmp(x->peaks.by_cat, full->peaks.by_cat, sizeof(x->peaks.by_cat)));
	CU_ASSERT_EQUAL(x->peaks.retries, full->peaks.retries);
	CU_ASSERT_EQUAL(x->peaks.step_retries, full->peaks.step_retries);
	CU_ASSERT_EQUAL(x->peaks.ooms, full->peaks.ooms);
	CU_ASSERT(!memcmp(x->wait, full->wait, sizeof(*x->wait) * (size_t)nops * ST_COUNT));
	CU_ASSERT(!memcmp(x->sync, full->sync, (size_t)nops));
	CU_ASSERT(!memcmp(x->cur, full->cur, sizeof(x->cur)));
	CU_ASSERT_EQUAL(x->total, full->total);
}

static void memory_steps_met(const char *model, const char *nodes, const char *mb, const char *policy, int replays,
			     int skips)
{
	struct experiment e;
	struct schedule *s = test_schedule(&e, model, "cluster.gpu=h100-sxm", nodes, "cluster.gpus_per_node=8",
					   "policy.runtime=pytorch", mb, policy, NULL);
	int steps = e.run.warmup + e.run.steps;
	uint64_t *issue = calloc((size_t)s->nops, sizeof(uint64_t)), end = 1000 * (uint64_t)s->nops;
	struct memory *m = memory_new(s, 1, NULL, NULL), *full = memory_new(s, 1, NULL, NULL);
	struct memory *quick = memory_new(s, 0, NULL, NULL); /* no timeline: windows skipped */
	struct mem_after after[MEM_AFTER_MAX];

	memset(after, 0, sizeof(after));
	for (int i = 0; i < s->nops; i++)
		issue[i] = 1000 * (uint64_t)(i / 3); /* ops issued at the same time share a sample */
	memory_predict(m, issue);
	CU_ASSERT_EQUAL(m->replayed, replays); /* the case takes the checkpoints' shortcut, or ends at a step's end */
	CU_ASSERT_EQUAL(m->peaks.ops_skipped, 0);
	memory_step_end(m, end);
	memory_predict(quick, issue);
	CU_ASSERT_EQUAL(quick->peaks.ops_skipped > 0, skips); /* the case skips windows, or finds none that repeat */
	memory_step_end(quick, end);
	CU_ASSERT_EQUAL_FATAL(memory_persistent(full), 0);
	after[0] = (struct mem_after){ full->total, full->counts->reserved };
	for (int k = 0; k < steps; k++) {
		if (k)
			memory_step_end(full, 0);
		if (k && k < MEM_AFTER_MAX) /* step k - 1 ended: its buffers freed */
			after[k] = (struct mem_after){ full->total, full->counts->reserved };
		memory_step_begin(full);
		for (int i = 0; i < s->nops; i++)
			CU_ASSERT_EQUAL(memory_issue(full, i, issue[i]), 0);
	}
	memory_step_end(full, end);
	if (steps < MEM_AFTER_MAX)
		after[steps] = (struct mem_after){ full->total, full->counts->reserved };
	/* memory after the build and each step: the steps not simulated end as the step they repeat did */
	CU_ASSERT_EQUAL(m->peaks.nafter, steps + 1 < MEM_AFTER_MAX ? steps + 1 : MEM_AFTER_MAX);
	CU_ASSERT(after[2].reserved > after[0].reserved);
	same_run(m, full, after, s->nops);
	CU_ASSERT_EQUAL(m->nsamples, full->nsamples);
	if (m->nsamples == full->nsamples)
		CU_ASSERT(!memcmp(m->samples, full->samples, sizeof(*m->samples) * (size_t)m->nsamples));
	/* windows skipped: the same, but for the timeline it does not keep */
	CU_ASSERT_EQUAL(quick->peaks.nafter, m->peaks.nafter);
	same_run(quick, full, after, s->nops);
	memory_free(quick);
	memory_free(full);
	memory_free(m);
	free(issue);
	schedule_free(s);
	config_release(&e);
}

/*
 * The optimizer's state made at the first step (PyTorch): granted once,
 * at the first step's optimizer op, and kept; after the build only the
 * persistent buffers are allocated, after the first step those and the
 * state, as after every later step.
 */
static void test_memory_lazy_state(void)
{
	struct experiment e;
	struct schedule *s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2",
					   "policy.runtime=pytorch", NULL);
	uint64_t *issue = calloc((size_t)s->nops, sizeof(uint64_t)), state = 0;
	struct memory *m = memory_new(s, 0, NULL, NULL);

	for (int b = 0; b < s->nbufs; b++)
		if (s->bufs[b].once)
			state += (s->bufs[b].bytes + 511) / 512 * 512;
	for (int i = 0; i < s->nops; i++)
		issue[i] = 1000 * (uint64_t)i;
	CU_ASSERT(state > 0);
	memory_predict(m, issue);
	CU_ASSERT_EQUAL(m->once_total, state);
	CU_ASSERT(m->peaks.nafter >= 3);
	CU_ASSERT_EQUAL(m->peaks.after[1].alloc, m->peaks.after[0].alloc + state);
	CU_ASSERT_EQUAL(m->peaks.after[2].alloc, m->peaks.after[1].alloc);
	CU_ASSERT_EQUAL(m->peaks.by_cat[MEM_OPTIM_STATE], state);
	memory_free(m);
	free(issue);
	schedule_free(s);
	config_release(&e);
}

/*
 * A first step that makes the optimizer's state in free blocks of the
 * segments it already has (tiny, ddp, one step per parameter: no
 * temporaries) ends with the segments it began with, and is no repeat of
 * itself: the second step runs with the state alive through its forward.
 * The run's peak is the one every step simulated in full reaches.
 */
static void test_memory_state_in_place(void)
{
	struct experiment e;
	struct schedule *s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=4",
					   "policy.sharding=ddp", "policy.optim=per-param", "policy.runtime=pytorch",
					   "policy.precision=fp32", "run.warmup=0", "run.steps=3", NULL);
	uint64_t *issue = calloc((size_t)s->nops, sizeof(uint64_t));
	struct memory *m = memory_new(s, 0, NULL, NULL), *full = memory_new(s, 0, NULL, NULL);

	for (int i = 0; i < s->nops; i++)
		issue[i] = 1000 * (uint64_t)i;
	memory_predict(m, issue);
	CU_ASSERT_EQUAL_FATAL(memory_persistent(full), 0);
	for (int k = 0; k < 3; k++) {
		if (k)
			memory_step_end(full, 0);
		memory_step_begin(full);
		for (int i = 0; i < s->nops; i++)
			CU_ASSERT_EQUAL(memory_issue(full, i, issue[i]), 0);
	}
	CU_ASSERT_EQUAL(m->peaks.after[1].reserved, m->peaks.after[0].reserved); /* no segment of its own */
	CU_ASSERT(m->once_total > 0);
	CU_ASSERT(full->peaks.by_cat[MEM_OPTIM_STATE] == m->once_total && full->peaks.by_cat[MEM_ACTIVATIONS] > 0);
	CU_ASSERT_EQUAL(m->peaks.alloc, full->peaks.alloc);
	CU_ASSERT_EQUAL(m->peaks.reserved, full->peaks.reserved);
	CU_ASSERT(!memcmp(m->peaks.by_cat, full->peaks.by_cat, sizeof(m->peaks.by_cat)));
	memory_free(full);
	memory_free(m);
	free(issue);
	schedule_free(s);
	config_release(&e);
}

/*
 * The microbatches that repeat: those between the first (which reduces
 * into fresh gradients) and the last (the optimizer follows), a stretch of
 * ops each, whose buffers and stream positions move by a microbatch's;
 * none without a caching allocator or with a timeline kept.
 */
static void test_memory_series(void)
{
	struct experiment e, t;
	struct schedule *s = test_schedule(&e, "model.name=llama3-8b", "cluster.gpu=h100-sxm", "cluster.nodes=2",
					   "cluster.gpus_per_node=8", "policy.runtime=pytorch", "policy.microbatches=8", NULL);
	struct schedule *tb = test_schedule(&t, "model.name=llama3-8b", "cluster.gpu=h100-sxm", "cluster.nodes=2",
					    "cluster.gpus_per_node=8", "policy.microbatches=8", NULL);
	struct memory *m = memory_new(s, 0, NULL, NULL), *rec = memory_new(s, 1, NULL, NULL);
	struct memory *tarena = memory_new(tb, 0, NULL, NULL);
	const struct mem_series *x = &m->series;
	uint32_t sum = 0;
	int first = -1, mb = -1;

	CU_ASSERT(m->skip && !rec->skip && !tarena->skip);
	CU_ASSERT_FATAL(x->n >= 2 && x->n <= 6);
	CU_ASSERT(x->dbuf > 0);
	for (int st = 0; st < ST_COUNT; st++)
		sum += x->dpos[st];
	CU_ASSERT_EQUAL(sum, (uint32_t)x->len);
	/* a window is a microbatch, from its first op, neither the first microbatch nor the last */
	mb = s->ops[x->first].micro;
	CU_ASSERT(mb >= 1 && mb + x->n <= 7);
	CU_ASSERT(s->ops[x->first - 1].micro == mb - 1);
	for (int i = x->first; i < x->first + x->n * x->len; i++) {
		CU_ASSERT_EQUAL(s->ops[i].micro, mb + (i - x->first) / x->len);
		if (first < 0 && s->ops[i].nalloc)
			first = i;
	}
	/* each window allocates the buffers of the one before, dbuf numbers on */
	CU_ASSERT_FATAL(first >= 0);
	CU_ASSERT_EQUAL((int)s->bufrefs[s->ops[first + x->len].buf_first], (int)s->bufrefs[s->ops[first].buf_first] + x->dbuf);
	memory_free(tarena);
	memory_free(rec);
	memory_free(m);
	schedule_free(tb);
	schedule_free(s);
	config_release(&t);
	config_release(&e);
}

static void test_memory_steps_met(void)
{
	/* fits: the second step begins as the first ended, reserving nothing new (no checkpoint met) */
	memory_steps_met("model.name=llama3-70b", "cluster.nodes=16", "policy.microbatches=4", "policy.ac=full", 0, 0);
	/* flushes every step and segments past the GPU's memory: a step meets the one before at a checkpoint */
	memory_steps_met("model.name=llama3-8b", "cluster.nodes=1", "policy.microbatches=4", "policy.ac=none", 1, 0);
	memory_steps_met("model.name=llama3-70b", "cluster.nodes=16", "policy.microbatches=4", "policy.ac=per-op", 1, 0);
	/* (four microbatches: the first and last differ from the others, two windows too few to skip one) */
	/* the same with expandable segments */
	memory_steps_met("model.name=llama3-8b", "cluster.nodes=1", "policy.microbatches=4",
			 "policy.expandable_segments=true", 1, 0);
	memory_steps_met("model.name=llama3-70b", "cluster.nodes=16", "policy.microbatches=4",
			 "policy.expandable_segments=true", 1, 0);
	/*
	 * eight microbatches: windows skipped, fitting (fsdp) and past the
	 * memory (hsdp, with an all-reduce stream no op waits for)
	 */
	memory_steps_met("model.name=llama3-8b", "cluster.nodes=2", "policy.microbatches=8", "policy.sharding=fsdp", 1, 1);
	memory_steps_met("model.name=llama3-70b", "cluster.nodes=128", "policy.microbatches=8", "policy.sharding=hsdp", 1, 1);
	memory_steps_met("model.name=llama3-8b", "cluster.nodes=2", "policy.microbatches=8", "policy.expandable_segments=true",
			 1, 1);
	memory_steps_met("model.name=llama3-70b", "cluster.nodes=16", "policy.microbatches=12",
			 "policy.expandable_segments=true", 1, 1);
	/*
	 * a cycle of two steps (flushes release and reserve segments every
	 * other step): the steps not simulated end as the step two before
	 */
	memory_steps_met("model.name=llama3-70b", "cluster.nodes=2", "policy.microbatches=1",
			 "policy.runtime=pytorch-compile", 0, 0);
}

/*
 * End to end: a step that fragments whole segments (llama3-8b on one node,
 * past the GPU's memory with PyTorch's default allocator) reserves less
 * with expandable segments, no less than it allocates.
 */
static void test_expandable_step(void)
{
	struct experiment e, x;
	struct schedule *s = test_schedule(&e, "model.name=llama3-8b", "cluster.gpu=h100-sxm", "cluster.nodes=1",
					   "cluster.gpus_per_node=8", "policy.runtime=pytorch",
					   "policy.microbatches=4", NULL);
	struct schedule *t = test_schedule(&x, "model.name=llama3-8b", "cluster.gpu=h100-sxm", "cluster.nodes=1",
					   "cluster.gpus_per_node=8", "policy.runtime=pytorch",
					   "policy.microbatches=4", "policy.expandable_segments=true", NULL);
	uint64_t *issue = calloc((size_t)s->nops, sizeof(uint64_t));
	struct memory *m = memory_new(s, 0, NULL, NULL), *n = memory_new(t, 0, NULL, NULL);

	CU_ASSERT_EQUAL_FATAL(s->nops, t->nops);
	for (int i = 0; i < s->nops; i++)
		issue[i] = 1000 * (uint64_t)i;
	memory_predict(m, issue);
	memory_predict(n, issue);
	/* blocks split at 512 bytes in the large pool too: no more granted than with whole segments */
	CU_ASSERT(n->peaks.alloc <= m->peaks.alloc);
	CU_ASSERT(n->peaks.reserved < m->peaks.reserved);
	CU_ASSERT(n->peaks.reserved >= n->peaks.alloc);
	memory_free(n);
	memory_free(m);
	free(issue);
	schedule_free(t);
	schedule_free(s);
	config_release(&x);
	config_release(&e);
}

void suite_alloc(void)
{
	CU_pSuite s = CU_add_suite("alloc", NULL, NULL);
	CU_add_test(s, "a recorded trace replayed: its frees found by address", test_replay);
	CU_add_test(s, "rounding and growth", test_rounding_and_growth);
	CU_add_test(s, "first fit, split, merge", test_first_fit_split_merge);
	CU_add_test(s, "brief buffers high, long-lived low", test_brief_high_long_low);
	CU_add_test(s, "reuse waits for happens-before", test_reuse_waits_for_happens_before);
	CU_add_test(s, "caching pools", test_caching_pools);
	CU_add_test(s, "caching pools: blocks by how they serve the stream", test_caching_levels);
	CU_add_test(s, "caching pools at the device's capacity: flush, retry, OOM", test_caching_capacity);
	CU_add_test(s, "a caching pool of hundreds of free blocks: best fit", test_caching_many_free_blocks);
	CU_add_test(s, "expandable segments: pages, one range per pool, split at 512", test_expandable_pages);
	CU_add_test(s, "expandable segments at the capacity: free pages unmapped", test_expandable_flush);
	CU_add_test(s, "expandable segments: a request larger than a range", test_expandable_huge);
	CU_add_test(s, "memory of a step in issue order", test_memory_of_a_step);
	CU_add_test(s, "memory over a run: a step that meets the step before goes on as it did", test_memory_steps_met);
	CU_add_test(s, "memory over a step: the microbatches that repeat", test_memory_series);
	CU_add_test(s, "the optimizer's state made once, at the first step", test_memory_lazy_state);
	CU_add_test(s, "the first step's optimizer state in the segments it has: no repeat of itself", test_memory_state_in_place);
	CU_add_test(s, "expandable segments reserve less for a step that fragments", test_expandable_step);
}
