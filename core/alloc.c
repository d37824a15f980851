/*
 * alloc.c - best-fit and first-fit allocation over segments, reuse gated
 * by happens-before (see alloc.h).
 *
 * Blocks tile their segment: each knows its neighbours, so a freed block
 * merges with the free ones beside it when their clocks agree. A request
 * asks of free blocks how they can serve it (ready, old enough to wait
 * for, not at all) and takes a run of adjacent usable blocks (ties: the
 * lowest segment, then offset). An arena's pools hold about ten free
 * blocks each, listed in offset order, so that a run of adjacent free
 * blocks is a stretch of the list: a request walks the list once, summing
 * the runs as it goes (first fit stops at the first run that serves it
 * ready). A caching pool holds a hundred or more (every segment PyTorch
 * ever reserved stays in it), so it keeps its free blocks ordered by size,
 * apart by how they can serve its stream (struct pool), and a list of the
 * free blocks whose next block is free: a request looks at the blocks
 * large enough that serve it best, from the smallest up, and at the runs
 * of several blocks, which finds the run the scan of every block would. A
 * step has a few thousand requests; a caching allocator's peaks take up to
 * warmup + steps of them (core/memory.c).
 *
 * An arena region is a segment whose last block is free and unbounded:
 * the region is as large as the highest byte ever granted in it, rounded
 * up to segment_bytes, and that is what it reserves. So every step starts
 * from the same state (the persistent blocks, everything else free) and
 * one step tells what every step does.
 *
 * A caching allocator has the device's capacity (alloc.h). A new segment
 * that would take the reserved bytes above it flushes the cache as
 * PyTorch's malloc() does when cudaMalloc fails (CUDACachingAllocator.cpp:
 * alloc_block fails; release_available_cached_blocks, which releases
 * nothing unless max_split_size is set, its default being unlimited;
 * release_cached_blocks: synchronize_and_free_events, then release_blocks
 * of large_blocks and small_blocks, every block with no neighbour, i.e.
 * the segments entirely free; alloc_block again with isRetry, counting
 * num_alloc_retries; failing that, num_ooms and OutOfMemoryError). The
 * flush (flush()): the device has drained, so every free block loses its
 * clock and merges with its free neighbours (drain(), as at a step's
 * end); each pool's free blocks, all ready now, are ordered by size at
 * once (drained()); the blocks that span their segment are released,
 * large pools before small; then the segment is reserved without a new
 * search of the pool, as PyTorch goes straight to cudaMalloc. A released
 * segment's index is never reused: a new segment takes the next one, so
 * that ties still fall to the older segment. When the segment still does
 * not fit, PyTorch would raise; here it is an OOM, and the segment is
 * reserved past the capacity, which rises to the reserved bytes: from
 * then on the allocator is that of a device with just the memory the run
 * has needed, and flushes at that limit. So "reserved" past the GPU's
 * capacity is about the memory a device would need to run the step with
 * PyTorch's flushes, and a step fits when no allocation failed, that is
 * when reserved stays within the GPU's memory.
 *
 * Expandable segments (cfg.expandable, alloc.h) keep the caching pools and
 * their levels: a range is a segment whose blocks are the free and live
 * blocks of its mapped pages and unmapped blocks (buf UNMAPPED, in no free
 * list, so that nothing merges with them but unmapped neighbours), listed
 * per pool by address (struct pool: unmapped). When no free block serves
 * a request, expand() maps the pages of the lowest chain that holds it
 * (chain_find; the capacity is checked, and the cache flushed, before
 * anything is mapped: PyTorch's map_block would fail and malloc() retries
 * after release_cached_blocks) and merges what the request needs, as
 * find_run does. A flush unmaps the pages of every free block after
 * drain() (unmap_block). A range's bytes are the mapped ones; its state
 * (alloc_state) holds its unmapped blocks too.
 */
#include "alloc.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xalloc.h"

/* PyTorch's CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp) */
#define SMALL_SIZE (1ull << 20)       /* kSmallSize: requests of at most this use the small pool (get_pool: size <= kSmallSize) */
#define SMALL_BUFFER (2ull << 20)     /* kSmallBuffer: a small pool's segment */
#define MIN_LARGE_ALLOC (10ull << 20) /* kMinLargeAlloc: below this a large request takes... */
#define LARGE_BUFFER (20ull << 20)    /* kLargeBuffer: ...a 20 MiB segment */
#define MIN_BLOCK 512ull              /* kMinBlockSize: smallest split-off remainder, small pool */

#define NPOOLS (2 * ST_COUNT)
#define UNBOUNDED (1ull << 62)        /* the size of an arena region's free end */
#define UNMAPPED (-3)                 /* a block's buf: pages of an expandable range not mapped */
#define RANGE_MEMORY (64ull << 30)    /* expandable, without a capacity: the device memory a range is sized for */
#define COMPACT_AT 16                 /* free blocks in a pool beyond which old ones are merged */
#define AT_SHIFT 41                   /* a key's place: segment << AT_SHIFT | offset (segments below 2^23) */

struct block {
	uint64_t off, size;
	int seg;
	int pool;
	int prev, next;   /* neighbours in the segment, -1 at its ends */
	int slot;         /* free: its index in a caching pool's free list, 0 in an arena's; -1 while in use */
	int buf;          /* the buffer it holds; -1 free; -2 released, its slot spare; UNMAPPED */
	int lslot;        /* index in its pool's linked list (free, and so is its next block), -1 */
	int fprev, fnext; /* arena, free: the free blocks before and after it in its pool's list, -1 at the ends */
	uint32_t ready[ST_COUNT]; /* free: the clock an op must have reached to take it */
	uint32_t waits;           /* free: the streams t whose ready[t] is above 0, a bit each */
	uint32_t freed_op;        /* free: issue index of the (latest) op that freed it */
	uint32_t mark;            /* caching: a search's stamp, (search << 2) | usability */
	uint32_t gen;             /* caching: changes when a free block's key or clock changes, or it leaves its pool */
	int level;                /* caching, free: in its pool's order of level 2 (ready), 1 (old), or 0 (neither) */
};

/*
 * A pool's free blocks: a caching pool's in no order (free[], a block's
 * slot), and those whose next block in the segment is free too (linked[]:
 * the starts of the runs of more than one block); an arena pool's, whose
 * blocks all lie in its one region, in a list by offset (head, a block's
 * fprev and fnext), which a search walks once and a merge or a split
 * changes where it happens.
 *
 * A caching pool serves the ops of one stream in issue order, so the
 * clocks and issue indices of its requests only grow: a free block, once
 * ready for a request (level 2), or old enough to wait for (level 1),
 * stays so for every later request until it changes. So the pool keeps
 * the clock and issue index of its last request, and orders its free
 * blocks at level 2 by size (ready[], ascending (size, segment, offset):
 * a best-fit search starts at the first block large enough, as PyTorch's
 * allocator does with its std::set and lower_bound), and those at level 1
 * likewise (old[]). A block below level 2 waits in the heap of a stream
 * whose clock it waits for (watch[t], by the position it waits for), and
 * below level 1 also in the heap of ages (aging, by the issue index at
 * which it becomes old): a request whose clock or index passes that
 * position looks at the block again. So a search looks at the blocks of
 * its level, not at the many blocks freed by ops of other streams that
 * this stream never waits for, and a block freed recently enters no order
 * until it could serve (llama3-70b, pytorch, 8 microbatches: a few blocks
 * looked at per request, of a hundred or more free).
 */
struct skey {
	uint64_t size, at; /* at: (segment << AT_SHIFT) | offset */
	int b;
};

/*
 * Free blocks ascending by key, in chunks of at most OCHUNK keys, the
 * chunks in order (none empty): an insertion or a removal moves the keys
 * of one chunk, not of the whole order (a caching pool holds 100 to 350
 * free blocks). A place in an order is an int, chunk << OCHUNK_SHIFT |
 * index, valid until the order changes; past the last key it is the
 * number of chunks << OCHUNK_SHIFT.
 */
#define OCHUNK_SHIFT 5
#define OCHUNK (1 << OCHUNK_SHIFT)
#define OCHUNK_FILL (3 * OCHUNK / 4) /* keys per chunk when an order is loaded whole */

struct ochunk {
	int n;
	struct skey v[OCHUNK];
};

struct order {
	struct ochunk **c;
	int nc, capc;
	int n;                 /* keys in all */
	struct ochunk **spare; /* emptied chunks, for the next ones */
	int nspare, capspare;
};

static void order_release(struct order *o);

/* A free block below a level, waiting for position `at` of a stream (or issue index `at`). */
struct watch {
	uint32_t at, gen; /* gen: the block's when it was watched; stale once the block's differs */
	int b;
};

struct heap {
	struct watch *v;
	int n, cap;
};

struct pool {
	int *free;        /* caching: the free blocks */
	int n, cap;       /* n: the free blocks, in either kind */
	int head, tail;   /* arena: the first and last free block by offset, -1 when none */
	int *linked;
	int nlinked, caplinked;
	struct order ready, old;  /* caching: the free blocks at level 2 and 1 */
	uint32_t clk[ST_COUNT];   /* caching: the last request's clock and issue index */
	uint32_t op;
	struct heap watch[ST_COUNT], aging;
	int *unmapped;    /* expandable: the unmapped blocks, by (segment, offset) */
	int nunmapped, capunmapped;
};

struct alloc_seg {
	void *ptr;
	uint64_t bytes;   /* reserved: caching, its size; arena, the high water rounded up */
	uint64_t high;    /* arena: the highest byte granted + 1 */
	int pool;
	int released;     /* caching: a flush gave it back to the device */
	uint64_t page;    /* expandable: the bytes of a page (bytes counts the mapped ones); 0, a whole segment */
};

struct allocator {
	struct alloc_cfg cfg;
	alloc_reserve_fn reserve;
	alloc_release_fn release;
	void *ctx;
	struct block *blocks;
	int nblocks, cap_blocks;
	int *spare;          /* block slots released by merging */
	int nspare, cap_spare;
	struct pool pools[NPOOLS];
	struct alloc_seg *segs;
	int nsegs, cap_segs;
	int region[NPOOLS];  /* arena: each pool's segment, -1 until it has one */
	int *buf_block;      /* per buffer: its block, -1 */
	int nbufs;
	struct alloc_counts n;  /* bytes granted and reserved, flushes of the cache, segments reserved past the capacity even so */
	uint64_t capacity;      /* the capacity, raised by each segment reserved past it */
	uint32_t search;     /* searches so far, for the stamps */
	int draining;        /* drain(): merged blocks stay out of the levels until drain puts every block at 2 */
	int flushed;         /* caching: nothing freed since the last flush (nor a step settled) */
	int at_b, at_i;      /* the block a search chose and its place in its order, a guess (order_remove) */
	struct skey *keys;   /* drain(): scratch, the blocks entering ready[] */
	int capkeys;
	struct skey *whole;  /* drain(): the free blocks that span their segment, pool by pool */
	int nwhole, capwhole;
	int whole_at[NPOOLS + 1]; /* pool p's in whole[whole_at[p], whole_at[p + 1]) */
	const struct alloc_req *rq; /* the request being searched for */
	int *first;          /* alloc_state(): scratch, each segment's first block */
	int capfirst;
};

/* x rounded up to a multiple of r (a power of two, as usual, without a division) */
static inline uint64_t round_up(uint64_t x, uint64_t r)
{
	if (!(r & (r - 1)))
		return (x + r - 1) & ~(r - 1);
	return (x + r - 1) / r * r;
}

/* A caching allocator's pool for a request of r bytes, rounded, by an op of `stream`: its small or its large pool. */
static inline int caching_pool(int stream, uint64_t r)
{
	return 2 * stream + !(r <= SMALL_SIZE);
}

struct allocator *alloc_new(const struct alloc_cfg *cfg, int nbufs, alloc_reserve_fn reserve, void *ctx)
{
	struct allocator *a = xcalloc(1, sizeof(*a));

	assert(!cfg->expandable || (cfg->caching && !reserve)); /* pages are mapped by the simulator only */
	a->cfg = *cfg;
	if (a->cfg.round < 1)
		a->cfg.round = 512;
	if (a->cfg.segment < 1)
		a->cfg.segment = 2ull << 20;
	a->reserve = reserve;
	a->ctx = ctx;
	a->capacity = a->cfg.caching ? a->cfg.capacity : 0;
	a->nbufs = nbufs;
	a->buf_block = xmalloc(sizeof(int) * (size_t)(nbufs > 0 ? nbufs : 1));
	for (int i = 0; i < nbufs; i++)
		a->buf_block[i] = -1;
	for (int p = 0; p < NPOOLS; p++) {
		a->region[p] = -1;
		a->pools[p].head = a->pools[p].tail = -1;
	}
	return a;
}

void alloc_set_release(struct allocator *a, alloc_release_fn release)
{
	a->release = release;
}

void alloc_free(struct allocator *a)
{
	if (!a)
		return;
	for (int p = 0; p < NPOOLS; p++) {
		free(a->pools[p].free);
		free(a->pools[p].linked);
		order_release(&a->pools[p].ready);
		order_release(&a->pools[p].old);
		for (int t = 0; t < ST_COUNT; t++)
			free(a->pools[p].watch[t].v);
		free(a->pools[p].aging.v);
		free(a->pools[p].unmapped);
	}
	free(a->keys);
	free(a->whole);
	free(a->first);
	free(a->blocks);
	free(a->spare);
	free(a->segs);
	free(a->buf_block);
	free(a);
}

/* ---- blocks and pools ------------------------------------------------------ */

/*
 * A block's place in the table, a released one first, with the gen the
 * block takes (a released one's moves on: its watches, if any, stay
 * stale); the caller sets every field. The table may move.
 */
static int block_slot(struct allocator *a, uint32_t *gen)
{
	if (a->nspare) {
		int b = a->spare[--a->nspare];
		*gen = a->blocks[b].gen + 1;
		return b;
	}
	if (a->nblocks == a->cap_blocks) {
		a->cap_blocks = a->cap_blocks ? 2 * a->cap_blocks : 256;
		a->blocks = xrealloc(a->blocks, sizeof(*a->blocks) * (size_t)a->cap_blocks);
	}
	*gen = 0;
	return a->nblocks++;
}

static int block_new(struct allocator *a)
{
	uint32_t gen;
	int b = block_slot(a, &gen);

	a->blocks[b] = (struct block){ .prev = -1, .next = -1, .slot = -1, .buf = -1, .lslot = -1, .fprev = -1,
				       .fnext = -1, .gen = gen };
	return b;
}

static void block_release(struct allocator *a, int b)
{
	if (a->nspare == a->cap_spare) {
		a->cap_spare = a->cap_spare ? 2 * a->cap_spare : 64;
		a->spare = xrealloc(a->spare, sizeof(int) * (size_t)a->cap_spare);
	}
	a->blocks[b].buf = -2;
	a->spare[a->nspare++] = b;
}

/*
 * A block's place in the size order: (size, segment, offset), unique while
 * the block exists (segment_new asserts that the segment and offset fit).
 */
static struct skey key_of(const struct allocator *a, int b)
{
	const struct block *k = &a->blocks[b];

	return (struct skey){ k->size, (uint64_t)k->seg << AT_SHIFT | k->off, b };
}

static inline int key_less(const struct skey *x, const struct skey *y)
{
	return ((unsigned __int128)x->size << 64 | x->at) < ((unsigned __int128)y->size << 64 | y->at);
}

/* The first position of the n ascending keys v whose key is not below k. */
static int keys_lower(const struct skey *v, int n, const struct skey *k)
{
	int lo = 0, hi = n;

	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (key_less(&v[mid], k))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The key at place i of o (a place holding one). */
static inline struct skey *order_key(const struct order *o, int i)
{
	return &o->c[i >> OCHUNK_SHIFT]->v[i & (OCHUNK - 1)];
}

/* Whether place i of o holds a key (else it is past the last). */
static inline int order_valid(const struct order *o, int i)
{
	return (i >> OCHUNK_SHIFT) < o->nc;
}

/* The place after i. */
static inline int order_next(const struct order *o, int i)
{
	int c = i >> OCHUNK_SHIFT, j = (i & (OCHUNK - 1)) + 1;

	return j < o->c[c]->n ? i + 1 : (c + 1) << OCHUNK_SHIFT;
}

/* The first chunk of o whose last key is not below k (o->nc when none). */
static int chunk_lower(const struct order *o, const struct skey *k)
{
	int lo = 0, hi = o->nc;

	while (lo < hi) {
		int mid = (lo + hi) / 2;
		const struct ochunk *x = o->c[mid];
		if (key_less(&x->v[x->n - 1], k))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The first place of o whose key is not below k. */
static int order_lower(const struct order *o, const struct skey *k)
{
	int c = chunk_lower(o, k);

	if (c == o->nc)
		return c << OCHUNK_SHIFT;
	return c << OCHUNK_SHIFT | keys_lower(o->c[c]->v, o->c[c]->n, k);
}

/* A chunk enters o at position c of its chunks, empty. */
static struct ochunk *chunk_add(struct order *o, int c)
{
	struct ochunk *x = o->nspare ? o->spare[--o->nspare] : xmalloc(sizeof(*x));

	if (o->nc == o->capc) {
		o->capc = o->capc ? 2 * o->capc : 8;
		o->c = xrealloc(o->c, sizeof(*o->c) * (size_t)o->capc);
	}
	memmove(o->c + c + 1, o->c + c, sizeof(*o->c) * (size_t)(o->nc - c));
	o->c[c] = x;
	o->nc++;
	x->n = 0;
	return x;
}

/* Chunk c leaves o (kept for the next). */
static void chunk_drop(struct order *o, int c)
{
	if (o->nspare == o->capspare) {
		o->capspare = o->capspare ? 2 * o->capspare : 8;
		o->spare = xrealloc(o->spare, sizeof(*o->spare) * (size_t)o->capspare);
	}
	o->spare[o->nspare++] = o->c[c];
	memmove(o->c + c, o->c + c + 1, sizeof(*o->c) * (size_t)(o->nc - c - 1));
	o->nc--;
}

/* o empty, its chunks kept. */
static void order_clear(struct order *o)
{
	while (o->nc)
		chunk_drop(o, o->nc - 1);
	o->n = 0;
}

static void order_release(struct order *o)
{
	for (int c = 0; c < o->nc; c++)
		free(o->c[c]);
	for (int c = 0; c < o->nspare; c++)
		free(o->spare[c]);
	free(o->c);
	free(o->spare);
}

/* o holds the n ascending keys v, and nothing else. */
static void order_load(struct order *o, const struct skey *v, int n)
{
	order_clear(o);
	for (int at = 0; at < n;) {
		int m = n - at < OCHUNK ? n - at : OCHUNK_FILL;
		struct ochunk *x = chunk_add(o, o->nc);
		memcpy(x->v, v + at, sizeof(*v) * (size_t)m);
		x->n = m;
		at += m;
	}
	o->n = n;
}

/* Block b enters o with key k (the caller sets the block's level); its key must not change while there. */
static void order_insert(struct order *o, struct skey k)
{
	int c = chunk_lower(o, &k), i;
	struct ochunk *x;

	if (c == o->nc) /* above every key: the last chunk's end */
		c = o->nc ? o->nc - 1 : 0;
	x = c < o->nc ? o->c[c] : chunk_add(o, c);
	i = keys_lower(x->v, x->n, &k);
	if (x->n == OCHUNK) { /* full: its upper half becomes a chunk after it */
		struct ochunk *y = chunk_add(o, c + 1);
		y->n = OCHUNK / 2;
		memcpy(y->v, x->v + OCHUNK / 2, sizeof(*x->v) * (OCHUNK / 2));
		x->n = OCHUNK / 2;
		if (i > OCHUNK / 2) {
			x = y;
			i -= OCHUNK / 2;
		}
	}
	memmove(x->v + i + 1, x->v + i, sizeof(*x->v) * (size_t)(x->n - i));
	x->v[i] = k;
	x->n++;
	o->n++;
}

/*
 * Block b leaves o. The search that chose the block to give out knows its
 * place (a->at_b, a->at_i): a guess, right when the key at at_i is b's;
 * else the search finds it.
 */
static int order_find(const struct allocator *a, const struct order *o, int b)
{
	int i = a->at_i;

	if (a->at_b != b || !order_valid(o, i) || (i & (OCHUNK - 1)) >= o->c[i >> OCHUNK_SHIFT]->n ||
	    order_key(o, i)->b != b) {
		struct skey k = key_of(a, b);
		i = order_lower(o, &k);
	}
	assert(order_valid(o, i) && order_key(o, i)->b == b);
	return i;
}

/* The key at place i leaves o; a chunk left empty goes, one left small joins the next when both fit in half of one. */
static void order_drop(struct order *o, int i)
{
	int c = i >> OCHUNK_SHIFT, j = i & (OCHUNK - 1);
	struct ochunk *x = o->c[c];

	memmove(x->v + j, x->v + j + 1, sizeof(*x->v) * (size_t)(x->n - j - 1));
	x->n--;
	o->n--;
	if (!x->n) {
		chunk_drop(o, c);
	} else if (c + 1 < o->nc && x->n + o->c[c + 1]->n <= OCHUNK / 2) {
		struct ochunk *y = o->c[c + 1];
		memcpy(x->v + x->n, y->v, sizeof(*y->v) * (size_t)y->n);
		x->n += y->n;
		chunk_drop(o, c + 1);
	}
}

static void order_remove(struct allocator *a, struct order *o, int b)
{
	order_drop(o, order_find(a, o, b));
}

/* The key at place i takes key k, above its own (a merged block, larger), and moves to its place. */
static void order_grow(struct order *o, int i, struct skey k)
{
	order_drop(o, i);
	order_insert(o, k);
}

/* ---- the levels of a caching pool's free blocks ----------------------------------- */

static int ready_for(const struct block *k, const uint32_t *clock)
{
	if (!clock)
		return 1;
	for (uint32_t w = k->waits; w; w &= w - 1) {
		int t = __builtin_ctz(w);
		if (k->ready[t] > clock[t])
			return 0;
	}
	return 1;
}

static void heap_push(struct heap *h, uint32_t at, int b, uint32_t gen)
{
	int i;

	if (h->n == h->cap) {
		h->cap = h->cap ? 2 * h->cap : 16;
		h->v = xrealloc(h->v, sizeof(*h->v) * (size_t)h->cap);
	}
	for (i = h->n++; i > 0 && h->v[(i - 1) / 2].at > at; i = (i - 1) / 2)
		h->v[i] = h->v[(i - 1) / 2];
	h->v[i] = (struct watch){ at, gen, b };
}

static struct watch heap_pop(struct heap *h)
{
	struct watch top = h->v[0], last = h->v[--h->n];
	int i = 0;

	for (;;) {
		int c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && h->v[c + 1].at < h->v[c].at)
			c++;
		if (h->v[c].at >= last.at)
			break;
		h->v[i] = h->v[c];
		i = c;
	}
	h->v[i] = last;
	return top;
}

/*
 * Free block b, at level 0 or 1, looked at for its pool's last request:
 * into the order of its level, watched on a stream it waits for while
 * below 2, and with `age`, on its age while below 1 (without, a block
 * below 1 is watched on its age already).
 */
static void level_enter(struct allocator *a, int b, int age)
{
	struct block *k = &a->blocks[b];
	struct pool *p = &a->pools[k->pool];

	assert(k->slot >= 0 && k->level < 2);
	for (uint32_t w = k->waits; w; w &= w - 1) {
		int t = __builtin_ctz(w);
		if (k->ready[t] > p->clk[t]) {
			heap_push(&p->watch[t], k->ready[t], b, k->gen);
			if (k->level || !a->cfg.wait_age || !age)
				return;
			if (p->op >= k->freed_op + a->cfg.wait_age) {
				order_insert(&p->old, key_of(a, b));
				k->level = 1;
			} else {
				heap_push(&p->aging, k->freed_op + a->cfg.wait_age, b, k->gen);
			}
			return;
		}
	}
	if (k->level == 1)
		order_remove(a, &p->old, b);
	order_insert(&p->ready, key_of(a, b));
	k->level = 2;
}

/* Free block b leaves the order of its level and its watches (they go stale). */
static void level_leave(struct allocator *a, int b)
{
	struct block *k = &a->blocks[b];
	struct pool *p = &a->pools[k->pool];

	if (k->level == 2)
		order_remove(a, &p->ready, b);
	else if (k->level == 1)
		order_remove(a, &p->old, b);
	k->level = 0;
	k->gen++;
}

static int key_cmp(const void *x, const void *y)
{
	return key_less(x, y) ? -1 : key_less(y, x);
}

/*
 * Every free block of pool p looked at again, for the pool's last request
 * as it is now: those ready for it sorted at once (after a step or a
 * flush, every block), the others entering their levels one by one.
 */
static void level_rebuild(struct allocator *a, struct pool *p)
{
	int nb = 0;

	order_clear(&p->ready);
	order_clear(&p->old);
	p->aging.n = 0;
	for (int t = 0; t < ST_COUNT; t++)
		p->watch[t].n = 0;
	if (a->capkeys < p->n) {
		a->capkeys = p->n;
		a->keys = xrealloc(a->keys, sizeof(*a->keys) * (size_t)a->capkeys);
	}
	for (int i = 0; i < p->n; i++) {
		int b = p->free[i];
		struct block *k = &a->blocks[b];
		k->level = 0;
		k->gen++;
		if (ready_for(k, p->clk)) {
			a->keys[nb++] = key_of(a, b);
			k->level = 2;
		} else {
			level_enter(a, b, 1); /* never into ready[]: it waits for some stream */
		}
	}
	if (nb > 1) /* none: a->keys may still be NULL, which qsort must not get */
		qsort(a->keys, (size_t)nb, sizeof(*a->keys), key_cmp);
	order_load(&p->ready, a->keys, nb);
}

/*
 * A request of pool p by op `op` at `clock`: the blocks whose watched
 * position the clock or the index has passed are looked at again. A clock
 * or index below the pool's last (not one stream's ops in issue order)
 * looks at every block again.
 */
static void level_advance(struct allocator *a, struct pool *p, const uint32_t *clock, uint32_t op)
{
	int back = op < p->op;

	for (int t = 0; t < ST_COUNT; t++)
		back |= clock[t] < p->clk[t];
	memcpy(p->clk, clock, sizeof(p->clk));
	p->op = op;
	if (back) {
		level_rebuild(a, p);
		return;
	}
	for (int t = 0; t < ST_COUNT; t++)
		while (p->watch[t].n && p->watch[t].v[0].at <= clock[t]) {
			struct watch w = heap_pop(&p->watch[t]);
			struct block *k = &a->blocks[w.b];
			if (k->gen == w.gen && k->slot >= 0 && k->level < 2)
				level_enter(a, w.b, 0); /* ready now, or watched on a stream it still waits for */
		}
	while (p->aging.n && p->aging.v[0].at <= op) {
		struct watch w = heap_pop(&p->aging);
		struct block *k = &a->blocks[w.b];
		if (k->gen == w.gen && k->slot >= 0 && k->level == 0) {
			order_insert(&p->old, key_of(a, w.b));
			k->level = 1;
		}
	}
}

/* Block b enters its pool's linked list (`in`) or leaves it. */
static void relink_set(struct allocator *a, int b, int in)
{
	struct block *k = &a->blocks[b];
	struct pool *p = &a->pools[k->pool];

	if (in) {
		if (p->nlinked == p->caplinked) {
			p->caplinked = p->caplinked ? 2 * p->caplinked : 16;
			p->linked = xrealloc(p->linked, sizeof(int) * (size_t)p->caplinked);
		}
		k->lslot = p->nlinked;
		p->linked[p->nlinked++] = b;
	} else {
		int last = p->linked[--p->nlinked];
		p->linked[k->lslot] = last;
		a->blocks[last].lslot = k->lslot;
		k->lslot = -1;
	}
}

/*
 * Block b (or none, -1) is in its pool's linked list exactly when it and
 * its next block are free. Mostly it is already where it should be: that
 * is checked inline.
 */
static inline void relink(struct allocator *a, int b)
{
	const struct block *k;
	int want;

	if (b < 0 || !a->cfg.caching)
		return;
	k = &a->blocks[b];
	want = k->slot >= 0 && k->next >= 0 && a->blocks[k->next].slot >= 0;
	if (want != (k->lslot >= 0))
		relink_set(a, b, want);
}

/*
 * Caching: block b enters its pool's free list, at the end. Apart from
 * pool_add (noinline): inlined there, the relinks slow its arena path.
 */
static __attribute__((noinline)) void cache_add(struct allocator *a, int b)
{
	struct block *k = &a->blocks[b];
	struct pool *p = &a->pools[k->pool];

	if (p->n == p->cap) {
		p->cap = p->cap ? 2 * p->cap : 16;
		p->free = xrealloc(p->free, sizeof(int) * (size_t)p->cap);
	}
	k->slot = p->n;
	p->free[p->n++] = b;
	level_enter(a, b, 1);
	relink(a, b);
	relink(a, k->prev);
}

/* Arena: the blocks around b in its pool's list (its fprev and fnext, or the list's ends) point to b. */
static inline __attribute__((always_inline)) void list_link(struct allocator *a, struct pool *p, int b)
{
	const struct block *k = &a->blocks[b];

	if (k->fprev >= 0)
		a->blocks[k->fprev].fnext = b;
	else
		p->head = b;
	if (k->fnext >= 0)
		a->blocks[k->fnext].fprev = b;
	else
		p->tail = b;
}

/*
 * Arena: block b enters its pool's free list, in offset order (its blocks
 * all lie in its one region): right after its previous block or before
 * its next one when that is free (a split's rest, a freed block beside a
 * hole), else where a walk from the first free block finds its place.
 */
static inline __attribute__((always_inline)) void arena_add(struct allocator *a, int b)
{
	struct pool *p = &a->pools[a->blocks[b].pool];
	struct block *k = &a->blocks[b];
	int after;

	if (k->prev >= 0 && a->blocks[k->prev].slot >= 0) {
		after = k->prev;
	} else if (k->next >= 0 && a->blocks[k->next].slot >= 0) {
		after = a->blocks[k->next].fprev;
	} else {
		int before = p->head;
		for (after = -1; before >= 0 && a->blocks[before].off < k->off; before = a->blocks[before].fnext)
			after = before;
	}
	assert(after < 0 || a->blocks[after].off < k->off);
	k->slot = 0;
	k->fprev = after;
	k->fnext = after >= 0 ? a->blocks[after].fnext : p->head;
	list_link(a, p, b);
	p->n++;
}

/* Block b enters its pool's free list: a caching pool's at the end, an arena's in offset order. */
static void pool_add(struct allocator *a, int b)
{
	if (a->cfg.caching)
		cache_add(a, b);
	else
		arena_add(a, b);
}

/* Arena: free block b leaves its pool's list. */
static inline __attribute__((always_inline)) void arena_unlink(struct allocator *a, int b)
{
	struct block *k = &a->blocks[b];
	struct pool *p = &a->pools[k->pool];

	if (k->fprev >= 0)
		a->blocks[k->fprev].fnext = k->fnext;
	else
		p->head = k->fnext;
	if (k->fnext >= 0)
		a->blocks[k->fnext].fprev = k->fprev;
	else
		p->tail = k->fprev;
	k->slot = k->fprev = k->fnext = -1;
	p->n--;
}

/* Block b leaves its pool's free list (a caching pool's last block takes its slot). */
static void pool_remove(struct allocator *a, int b)
{
	struct pool *p = &a->pools[a->blocks[b].pool];
	struct block *k = &a->blocks[b];
	int slot = k->slot, last;

	assert(slot >= 0);
	if (!a->cfg.caching) {
		arena_unlink(a, b);
		return;
	}
	assert(p->free[slot] == b);
	level_leave(a, b);
	last = p->free[--p->n];
	p->free[slot] = last;
	a->blocks[last].slot = slot;
	a->blocks[b].slot = -1;
	relink(a, b);
	relink(a, a->blocks[b].prev);
}

/* Arena: free block b leaves its pool's list, and block `rest` beside it (split off it) takes its place there. */
static inline __attribute__((always_inline)) void pool_replace(struct allocator *a, int b, int rest)
{
	struct pool *p = &a->pools[a->blocks[b].pool];
	struct block *k = &a->blocks[b], *x = &a->blocks[rest];

	assert(!a->cfg.caching && k->slot >= 0 && x->slot < 0 && (x->prev == b || x->next == b));
	x->slot = 0;
	x->fprev = k->fprev;
	x->fnext = k->fnext;
	list_link(a, p, rest);
	k->slot = k->fprev = k->fnext = -1;
}

/* A free block's key (size, offset) or clock is about to change: out of its level until key_changed. */
static void key_changing(struct allocator *a, int b)
{
	if (a->cfg.caching && a->blocks[b].slot >= 0)
		level_leave(a, b);
}

static void key_changed(struct allocator *a, int b)
{
	if (a->cfg.caching && a->blocks[b].slot >= 0 && !a->draining)
		level_enter(a, b, 1);
}

/* Caching: the order of free block k's level, 2 or 1. */
static struct order *level_order(struct allocator *a, const struct block *k)
{
	return k->level == 2 ? &a->pools[k->pool].ready : &a->pools[k->pool].old;
}

/*
 * Caching: free block b is about to merge with a neighbour. Returns its
 * place in the order of its level, where merge_enter looks for it (its
 * key only grows); at level 0, -1, and it leaves its level as for any
 * change of key.
 */
static int merge_leave(struct allocator *a, int b)
{
	const struct block *k = &a->blocks[b];

	if (!k->level) {
		key_changing(a, b);
		return -1;
	}
	return order_find(a, level_order(a, k), b);
}

/*
 * Caching: free block b has merged, its entry (if any) at i in the order
 * of its level: it takes its level again as level_leave and level_enter
 * would, with the same watches. compact()'s merges, of old blocks, mostly
 * keep the level, and the entry moves up in place. While draining, a
 * block at level 2 stays there, where drained() would put it.
 */
static void merge_enter(struct allocator *a, int b, int i)
{
	struct block *k = &a->blocks[b];
	struct pool *p = &a->pools[k->pool];
	struct order *o;
	int level = 2, t = 0;

	if (i < 0) {
		key_changed(a, b);
		return;
	}
	o = level_order(a, k);
	for (uint32_t w = k->waits; w; w &= w - 1) {
		t = __builtin_ctz(w);
		if (k->ready[t] > p->clk[t]) {
			level = a->cfg.wait_age && p->op >= k->freed_op + a->cfg.wait_age;
			break;
		}
	}
	k->gen++;
	if (a->draining ? k->level != 2 : level != k->level) {
		order_drop(o, i);
		k->level = 0;
		key_changed(a, b);
		return;
	}
	if (level < 2 && !a->draining)
		heap_push(&p->watch[t], k->ready[t], b, k->gen);
	order_grow(o, i, key_of(a, b));
}

/*
 * Free block x takes free block y's clock too, stream by stream the later
 * of the two, and the later of the ops that freed them.
 */
static inline __attribute__((always_inline)) void clock_join(struct block *x, const struct block *y)
{
	for (uint32_t w = y->waits; w; w &= w - 1) { /* the streams whose ready[] is above 0 */
		int t = __builtin_ctz(w);
		if (y->ready[t] > x->ready[t])
			x->ready[t] = y->ready[t];
	}
	x->waits |= y->waits;
	if (y->freed_op > x->freed_op)
		x->freed_op = y->freed_op;
}

/* Block `into` takes in its neighbour b (their bytes, and b's place between its neighbours in the segment). */
static inline __attribute__((always_inline)) void span_join(struct allocator *a, int into, int b)
{
	struct block *x = &a->blocks[into], *y = &a->blocks[b];

	if (y->off < x->off)
		x->off = y->off;
	x->size += y->size;
	if (x->prev == b)
		x->prev = y->prev;
	else
		x->next = y->next;
	if (x->prev >= 0)
		a->blocks[x->prev].next = into;
	if (x->next >= 0)
		a->blocks[x->next].prev = into;
}

/* Merge free block b into its free neighbour `into`; the later of the clocks stays. */
static void merge(struct allocator *a, int into, int b)
{
	struct block *x = &a->blocks[into], *y = &a->blocks[b];
	int i = -1;

	pool_remove(a, b);
	if (a->cfg.caching)
		i = merge_leave(a, into);
	clock_join(x, y);
	span_join(a, into, b);
	if (a->cfg.caching)
		merge_enter(a, into, i);
	relink(a, into);
	relink(a, x->prev);
	block_release(a, b);
}

/*
 * Split block b after its first r bytes: b keeps them, the rest becomes a
 * new block after it (returned, not in any pool, with b's clock).
 */
static int split(struct allocator *a, int b, uint64_t r)
{
	uint32_t gen;
	int rest = block_slot(a, &gen);
	struct block *k = &a->blocks[b]; /* block_slot may have moved the table */

	key_changing(a, b);
	a->blocks[rest] = *k;
	a->blocks[rest].slot = -1;
	a->blocks[rest].buf = -1;
	a->blocks[rest].lslot = -1;
	a->blocks[rest].fprev = a->blocks[rest].fnext = -1;
	a->blocks[rest].level = 0;
	a->blocks[rest].gen = gen;
	a->blocks[rest].off = k->off + r;
	a->blocks[rest].size = k->size - r;
	a->blocks[rest].prev = b;
	if (k->next >= 0)
		a->blocks[k->next].prev = rest;
	k->next = rest;
	k->size = r;
	key_changed(a, b);
	relink(a, b);
	return rest;
}

/* Arena: merge (as merge()) free block b into its free neighbour `into`, which has no level nor links to keep. */
static inline __attribute__((always_inline)) void arena_merge(struct allocator *a, int into, int b)
{
	struct block *x = &a->blocks[into], *y = &a->blocks[b];

	arena_unlink(a, b);
	clock_join(x, y);
	span_join(a, into, b);
	if (a->nspare < a->cap_spare) {
		y->buf = -2;
		a->spare[a->nspare++] = b;
	} else {
		block_release(a, b);
	}
}

/* Arena: split (as split()) block b after its first r bytes; the rest, returned, is in no pool. */
static inline __attribute__((always_inline)) int arena_split(struct allocator *a, int b, uint64_t r)
{
	uint32_t gen;
	int rest;
	struct block *k, *x;

	if (a->nspare) { /* block_slot's first case, inline */
		rest = a->spare[--a->nspare];
		gen = a->blocks[rest].gen + 1;
	} else {
		rest = block_slot(a, &gen);
	}
	k = &a->blocks[b]; /* block_slot may have moved the table */
	x = &a->blocks[rest];
	*x = *k;
	x->slot = x->buf = x->lslot = x->fprev = x->fnext = -1;
	x->level = 0;
	x->gen = gen;
	x->off = k->off + r;
	x->size = k->size - r;
	x->prev = b;
	if (k->next >= 0)
		a->blocks[k->next].prev = rest;
	k->next = rest;
	k->size = r;
	return rest;
}

/* ---- segments ------------------------------------------------------------------ */

/* A new segment of `bytes` (UNBOUNDED: an arena region) for pool p, as one free block; -1 when out of memory. */
static int segment_new(struct allocator *a, uint64_t bytes, int pool)
{
	void *ptr = NULL;
	int b, unbounded = bytes == UNBOUNDED;

	assert(!a->cfg.caching || (a->nsegs < (1 << 23) && bytes < (1ull << AT_SHIFT))); /* key_of */
	if (a->reserve && !(ptr = a->reserve(a->ctx, a->nsegs, 0, unbounded ? 0 : bytes)))
		return -1;
	if (a->nsegs == a->cap_segs) {
		a->cap_segs = a->cap_segs ? 2 * a->cap_segs : 16;
		a->segs = xrealloc(a->segs, sizeof(*a->segs) * (size_t)a->cap_segs);
	}
	a->segs[a->nsegs] = (struct alloc_seg){ ptr, unbounded ? 0 : bytes, 0, pool, 0, 0 };
	if (!unbounded)
		a->n.reserved += bytes;
	b = block_new(a);
	a->blocks[b].size = bytes;
	a->blocks[b].seg = a->nsegs++;
	a->blocks[b].pool = pool;
	pool_add(a, b);
	return b;
}

/* An arena region reserves up to its highest granted byte, rounded up; 0, or -1 when out of memory. */
static inline __attribute__((always_inline)) int region_cover(struct allocator *a, const struct block *k)
{
	struct alloc_seg *g = &a->segs[k->seg];
	uint64_t end = k->off + k->size, bytes;

	if (end <= g->high)
		return 0;
	bytes = round_up(end, a->cfg.segment);
	if (bytes > g->bytes) {
		if (a->reserve && !a->reserve(a->ctx, k->seg, g->bytes, bytes - g->bytes))
			return -1;
		a->n.reserved += bytes - g->bytes;
		g->bytes = bytes;
	}
	g->high = end;
	return 0;
}

/* ---- search ---------------------------------------------------------------------- */

/*
 * How a free block serves this request: 2 when ready for the op, 1 when
 * not yet but freed at least wait_age ops before it, 0 when not at all.
 */
static inline int usability(const struct allocator *a, const struct block *k, const struct alloc_req *rq)
{
	if (ready_for(k, rq->clock))
		return 2;
	return a->cfg.wait_age && rq->op >= k->freed_op + a->cfg.wait_age;
}

static int unbounded(const struct block *k)
{
	return k->size >= UNBOUNDED / 2;
}

/*
 * Block b is free and serves this search's request at level `need` or
 * better; the level is stamped on the block the first time the search asks.
 */
static inline __attribute__((always_inline)) int usable(struct allocator *a, int b, int need)
{
	struct block *k;

	if (b < 0 || a->blocks[b].slot < 0)
		return 0;
	k = &a->blocks[b];
	if (k->mark >> 2 != a->search)
		k->mark = a->search << 2 | (uint32_t)(unbounded(k) ? 0 : usability(a, k, a->rq));
	return (int)(k->mark & 3) >= need;
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
 * Expandable: a free block's size for best fit, with the unmapped pages
 * after it, into which it could grow (get_free_block's expandable_size).
 */
static uint64_t expandable_size(const struct allocator *a, int b)
{
	int next = a->blocks[b].next;

	return a->blocks[b].size + (next >= 0 && a->blocks[next].buf == UNMAPPED ? a->blocks[next].size : 0);
}

/*
 * Expandable: best fit over the lone blocks at level 2 from place i of
 * ready[], where lone block b lies, as get_free_block walks the blocks by
 * size: on to the next lone block while it is smaller counting the pages
 * it could grow into (so the block before a range's unmapped end is taken
 * only when no other fits). Returns the block, its place in *at.
 */
static int expandable_walk(struct allocator *a, const struct order *o, int i, int b, int *at)
{
	*at = i;
	for (int j = order_next(o, i); order_valid(o, j); j = order_next(o, j)) {
		int x = order_key(o, j)->b;
		if (usable(a, a->blocks[x].prev, 2) || usable(a, a->blocks[x].next, 2))
			continue;
		if (expandable_size(a, x) >= expandable_size(a, b))
			break;
		b = x;
		*at = j;
	}
	return b;
}

/*
 * The best-fit run of a caching pool, which has no region end: the first
 * block by size from r up whose neighbours do not extend its run, against
 * every run of more than one block (they start at a linked block). The
 * same run as a scan of every free block finds, in fewer steps: a pool
 * holds a hundred or more free blocks, of which a few are large enough.
 * Returns the run's first block and its level in *level, or -1.
 */
static int find_best_fit(struct allocator *a, const struct pool *p, uint64_t r, int *level)
{
	struct skey key = { r, 0, -1 }, k, bk = { 0, 0, -1 };
	int best[3] = { -1, -1, -1 };
	uint64_t best_run[3] = { 0, 0, 0 };

	if (!a->rq->clock) {
		/* every free block is ready (the persistent buffers, at the start): the smallest lone one */
		for (int i = 0; i < p->n; i++) {
			int b = p->free[i];
			k = key_of(a, b);
			if (k.size >= r && (bk.b < 0 || key_less(&k, &bk)) && !usable(a, a->blocks[b].prev, 2) &&
			    !usable(a, a->blocks[b].next, 2))
				bk = k;
		}
		best[2] = bk.b;
		best_run[2] = bk.size;
	} else {
		/* the first lone block at level 2 by size */
		for (int i = order_lower(&p->ready, &key); order_valid(&p->ready, i) && best[2] < 0;
		     i = order_next(&p->ready, i)) {
			int b = order_key(&p->ready, i)->b;
			assert(usable(a, b, 2));
			if (!usable(a, a->blocks[b].prev, 2) && !usable(a, a->blocks[b].next, 2)) {
				int at = i;
				if (a->cfg.expandable)
					b = expandable_walk(a, &p->ready, i, b, &at);
				a->at_b = b;
				a->at_i = at;
				best[2] = b;
				best_run[2] = a->blocks[b].size;
			}
		}
	}
	for (int need = 2; need >= 1; need--) {
		for (int j = 0; j < p->nlinked; j++) {
			int h = p->linked[j], blk;
			uint64_t run = 0;
			if (!usable(a, h, need) || usable(a, a->blocks[h].prev, need) ||
			    !usable(a, a->blocks[h].next, need))
				continue;
			for (blk = h; usable(a, blk, need); blk = a->blocks[blk].next)
				run += a->blocks[blk].size;
			if (run >= r && fits_better(&a->blocks[h], run, best[need] >= 0 ? &a->blocks[best[need]] : NULL,
						    best_run[need], 0)) {
				best[need] = h;
				best_run[need] = run;
			}
		}
		if (best[need] >= 0) {
			*level = need;
			return best[need];
		}
		if (need == 2 && a->rq->clock) {
			/* none at level 2: the first lone block at level 1 or 2 by size, in the two orders */
			const struct order *x = &p->ready, *y = &p->old;
			int i = order_lower(x, &key), j = order_lower(y, &key);
			while (best[1] < 0 && (order_valid(x, i) || order_valid(y, j))) {
				int in_x = !order_valid(y, j) ||
					   (order_valid(x, i) && key_less(order_key(x, i), order_key(y, j)));
				int b = in_x ? order_key(x, i)->b : order_key(y, j)->b;
				a->at_b = b;
				a->at_i = in_x ? i : j;
				if (in_x)
					i = order_next(x, i);
				else
					j = order_next(y, j);
				assert(usable(a, b, 1));
				if (!usable(a, a->blocks[b].prev, 1) && !usable(a, a->blocks[b].next, 1)) {
					best[1] = b;
					best_run[1] = a->blocks[b].size;
				}
			}
		}
	}
	return -1;
}

/* A clock at which every block is ready (a request without a clock: every earlier op has completed). */
_Static_assert(ST_COUNT == 6, "never_waits: one entry per stream");
static const uint32_t never_waits[ST_COUNT] = { UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX };

/* An arena's free block is ready for a request at `clock` (ready_for()). */
static inline __attribute__((always_inline)) int arena_ready(const struct block *k, const uint32_t *clock)
{
	for (uint32_t w = k->waits; w; w &= w - 1) {
		int t = __builtin_ctz(w);
		if (k->ready[t] > clock[t])
			return 0;
	}
	return 1;
}

/* usability() of an arena's free block for a request at `clock` by op `op`, wait_age `age`. */
static inline __attribute__((always_inline)) int arena_level(const struct block *k, const uint32_t *clock, uint32_t op,
							      uint32_t age)
{
	for (uint32_t w = k->waits; w; w &= w - 1) {
		int t = __builtin_ctz(w);
		if (k->ready[t] > clock[t])
			return age && op >= k->freed_op + age;
	}
	return 2;
}

/*
 * Best fit over the runs of an arena pool's free blocks at `level` (2:
 * ready for the op; 1: ready, or old enough to wait for), in one pass in
 * offset order: the smallest run of r bytes or more, the lowest of equal
 * ones (a later run wins only when smaller, so the pass stops at a run of
 * exactly r). Returns its first block, its last in *last, or -1 when none
 * holds r; then *prev is the list's block before the region's end and
 * *open the first block of the run that reaches it (-1, none).
 */
static inline __attribute__((always_inline)) int best_run(const struct block *blocks, const struct pool *p, uint64_t r,
							   int level, const uint32_t *clock, uint32_t op,
							   uint32_t age, int *last, int *open, int *prev)
{
	int s = -1, best = -1, e = -1, before = -1, b, end = p->tail;
	uint64_t n = 0, bn = UINT64_MAX;

	for (b = p->head; b != end; before = b, b = blocks[b].fnext) {
		const struct block *k = &blocks[b];
		int in = level == 2 ? arena_ready(k, clock) : arena_level(k, clock, op, age) > 0;
		if (s >= 0 && (!in || k->prev != before)) {
			/* the run ended at the block before */
			if (n >= r && n < bn) {
				best = s;
				e = before;
				bn = n;
				if (n == r)
					break; /* exactly r: no later run is smaller, and ties go to the lowest */
			}
			s = -1;
		}
		if (in) {
			if (s < 0) {
				s = b;
				n = 0;
			}
			n += k->size;
		}
	}
	/* the run still open ends at the block before the region's end (none did, after an exact fit) */
	if (s >= 0 && n >= r && n < bn) {
		best = s;
		e = before;
	}
	*last = e;
	*open = s;
	*prev = before;
	return best;
}

/*
 * The run of an arena pool that holds r bytes, in passes over its free
 * blocks in offset order: a run of adjacent free blocks is a stretch of
 * the list (a block is adjacent to the one before it in the list when
 * that is its previous block), so the runs at level 2 (blocks ready for
 * the op) and at level 1 (ready or old) are sums kept as a pass goes.
 * First fit takes the first run that reaches r at level 2, where its one
 * pass stops, else the first at level 1 (each block's level computed
 * once); best fit the smallest, the lowest of equal ones (a later run wins
 * only when smaller), with its last block in *last: a pass over the runs
 * at level 2, which stops at a run of exactly r bytes, and only when none
 * holds r a second one over those at level 1 (about a third of the
 * requests). When no run holds r: the region's end (the list's last
 * block), from the first block of the run at level 1 just before it, and
 * *grow is set. A pool has ten free blocks or so, mostly adjacent ones
 * freed by different ops; a step has a few thousand requests.
 */
static inline __attribute__((always_inline)) int arena_run(const struct allocator *a, const struct pool *p,
							    uint64_t r, const struct alloc_req *rq, int first_fit,
							    int *last, int *grow)
{
	const struct block *blocks = a->blocks;
	int s2 = -1, s1 = -1;    /* the first blocks of the runs being summed at levels 2 and 1; -1, none */
	uint64_t n2 = 0, n1 = 0; /* their bytes so far */
	int b1 = -1;             /* the run found */
	int prev = -1, b, end = p->tail;
	const uint32_t *clock = rq->clock ? rq->clock : never_waits;
	uint32_t op = rq->op, age = a->cfg.wait_age;

	assert(unbounded(&blocks[end])); /* the region's end, always free */
	if (first_fit) {
		for (b = p->head; b != end; prev = b, b = blocks[b].fnext) {
			const struct block *k = &blocks[b];
			int level = arena_level(k, clock, op, age);
			if (k->prev != prev)
				s2 = s1 = -1;
			if (level == 2) {
				if (s2 < 0) {
					s2 = b;
					n2 = 0;
				}
				if ((n2 += k->size) >= r)
					return s2;
			} else {
				s2 = -1;
			}
			if (level == 0) {
				s1 = -1;
			} else if (b1 < 0) {
				if (s1 < 0) {
					s1 = b;
					n1 = 0;
				}
				if ((n1 += k->size) >= r)
					b1 = s1;
			}
		}
		if (b1 >= 0)
			return b1;
		*grow = 1;
		return blocks[end].prev == prev && s1 >= 0 ? s1 : end;
	}
	/* best fit: the runs at level 2 first, in a pass that looks at no other level; only when none holds r, level 1 */
	if ((b1 = best_run(blocks, p, r, 2, clock, op, age, last, &s1, &prev)) >= 0 ||
	    (b1 = best_run(blocks, p, r, 1, clock, op, age, last, &s1, &prev)) >= 0)
		return b1;
	*grow = 1;
	return blocks[end].prev == prev && s1 >= 0 ? s1 : end;
}

/*
 * A run of adjacent usable blocks that holds r bytes: the smallest (best
 * fit), or the lowest (first_fit); runs of blocks ready for the op first,
 * else runs that may include blocks old enough to wait for; only when none
 * holds r, the end of an arena region, with the usable blocks just before
 * it (the region grows). Blocks freed by different ops stay apart while
 * their clocks differ, so that each is given out as soon as its own op
 * allows; a request may span several of them. Returns one block of r
 * bytes or more made from the run's low end, or with `high` from its high
 * end (never from a region's end); -1 when no run holds r.
 */
/*
 * Free block b, the first of a run of adjacent free blocks, takes in the
 * run's next blocks until it holds r bytes; only what r needs is merged:
 * the part split off the last block stays free with that block's own clock.
 */
static void merge_run(struct allocator *a, int b, uint64_t r)
{
	while (a->blocks[b].size < r) {
		int next = a->blocks[b].next;
		uint64_t want = r - a->blocks[b].size;
		if (a->blocks[next].size > want)
			pool_add(a, split(a, next, want));
		merge(a, b, next);
	}
}

static inline __attribute__((always_inline)) int find_run(struct allocator *a, const struct pool *p, uint64_t r,
							   const struct alloc_req *rq, int first_fit, int high)
{
	int best, k = -1, need, grow = 0;

	if (a->cfg.caching) {
		assert(!first_fit && !high);
		a->search = (a->search + 1) & 0x3fffffff;
		a->rq = rq;
		if ((best = find_best_fit(a, p, r, &need)) < 0)
			return -1;
	} else {
		best = arena_run(a, p, r, rq, first_fit, &k, &grow);
		high &= !grow;
	}
	if (!high) {
		merge_run(a, best, r);
		return best;
	}
	while (a->blocks[k].size < r) {
		int prev = a->blocks[k].prev;
		uint64_t want = r - a->blocks[k].size;
		if (a->blocks[prev].size > want) {
			/*
			 * the top `want` bytes of prev join k: what a split of
			 * prev and a merge of its upper part with k would give
			 * (the later of the clocks), k keeping its place
			 */
			struct block *x = &a->blocks[k], *y = &a->blocks[prev];
			y->size -= want;
			x->off -= want;
			x->size += want;
			clock_join(x, y);
			break;
		}
		arena_merge(a, prev, k); /* `high`: an arena's request */
		k = prev;
	}
	return k;
}

/*
 * Merge runs of adjacent free blocks that are all old for op `op` (freed
 * wait_age ops or more before it): any later request may take them, with a
 * wait on ops long finished, so keeping their clocks apart gains nothing
 * and lengthens the searches. Each such run becomes its first block
 * whatever the order of the merges (a merged block is old too), so an
 * arena's list, in offset order, is walked once, each block merging with
 * the next entry while that is its neighbour and old; a caching pool's
 * (linked, reordered by merging) is scanned again after each merge.
 */
static inline __attribute__((always_inline)) void compact(struct allocator *a, struct pool *p, uint32_t op)
{
	int n = p->nlinked;

	if (!a->cfg.caching) {
		for (int b = p->head, next; b >= 0 && (next = a->blocks[b].fnext) >= 0;)
			if (a->blocks[b].next == next && op >= a->blocks[b].freed_op + a->cfg.wait_age &&
			    op >= a->blocks[next].freed_op + a->cfg.wait_age && !unbounded(&a->blocks[next]))
				arena_merge(a, b, next);
			else
				b = next;
		return;
	}
	for (int i = 0; i < n; i++) {
		int b = p->linked[i], next = a->blocks[b].next;
		if (next >= 0 && a->blocks[next].slot >= 0 && op >= a->blocks[b].freed_op + a->cfg.wait_age &&
		    op >= a->blocks[next].freed_op + a->cfg.wait_age && !unbounded(&a->blocks[next])) {
			merge(a, b, next);
			n = p->nlinked;
			i = -1;
		}
	}
}

/* ---- expandable segments ---------------------------------------------------------- */

/* Block b holds unmapped pages of an expandable range (b may be -1). */
static int unmapped(const struct allocator *a, int b)
{
	return b >= 0 && a->blocks[b].buf == UNMAPPED;
}

/* The place of unmapped block b in its pool's list (by segment, then offset): where it is or would go. */
static int unmapped_place(const struct allocator *a, const struct pool *p, int b)
{
	const struct block *k = &a->blocks[b];
	int i = 0;

	while (i < p->nunmapped) {
		const struct block *x = &a->blocks[p->unmapped[i]];
		if (x->seg > k->seg || (x->seg == k->seg && x->off >= k->off))
			break;
		i++;
	}
	return i;
}

/*
 * Unmapped block b enters its pool's list, or leaves it. A pool holds a
 * range or two, each with a few unmapped stretches: a short list.
 */
static void unmapped_insert(struct allocator *a, int b)
{
	struct pool *p = &a->pools[a->blocks[b].pool];
	int i = unmapped_place(a, p, b);

	if (p->nunmapped == p->capunmapped) {
		p->capunmapped = p->capunmapped ? 2 * p->capunmapped : 8;
		p->unmapped = xrealloc(p->unmapped, sizeof(int) * (size_t)p->capunmapped);
	}
	memmove(p->unmapped + i + 1, p->unmapped + i, sizeof(int) * (size_t)(p->nunmapped - i));
	p->unmapped[i] = b;
	p->nunmapped++;
}

static void unmapped_remove(struct allocator *a, int b)
{
	struct pool *p = &a->pools[a->blocks[b].pool];
	int i = unmapped_place(a, p, b);

	assert(i < p->nunmapped && p->unmapped[i] == b);
	memmove(p->unmapped + i, p->unmapped + i + 1, sizeof(int) * (size_t)(p->nunmapped - i - 1));
	p->nunmapped--;
}

/* The page of pool p's ranges: 2 MiB for a small pool, 20 MiB for a large one (find_expandable_block). */
static uint64_t pool_page(int p)
{
	return p & 1 ? LARGE_BUFFER : SMALL_BUFFER;
}

/*
 * A new range for pool p, one unmapped block (returned): the device's
 * memory and an eighth more, in whole pages (ExpandableSegment's
 * constructor, max_handles_), or r bytes where a request of r needs more:
 * PyTorch maps the range whole, which fails, and raises OutOfMemoryError;
 * here mapping it counts an OOM (expand), as a segment past the capacity
 * does, and the allocator goes on. It reserves nothing until pages are
 * mapped.
 */
static int range_new(struct allocator *a, int p, uint64_t r)
{
	uint64_t page = pool_page(p), mem = a->cfg.capacity ? a->cfg.capacity : RANGE_MEMORY;
	uint64_t bytes = round_up(mem + mem / 8, page), most = ((1ull << AT_SHIFT) - page) / page * page;
	int b;

	if (bytes < r)
		bytes = round_up(r, page);
	assert(r <= most); /* requests below 2^40 (schedule.c: a buffer of at most 1 TiB) */
	if (bytes > most)
		bytes = most; /* key_of's offsets; past it a pool takes a second range */
	assert(a->nsegs < (1 << 23));
	if (a->nsegs == a->cap_segs) {
		a->cap_segs = a->cap_segs ? 2 * a->cap_segs : 16;
		a->segs = xrealloc(a->segs, sizeof(*a->segs) * (size_t)a->cap_segs);
	}
	a->segs[a->nsegs] = (struct alloc_seg){ .pool = p, .page = page };
	b = block_new(a);
	a->blocks[b].size = bytes;
	a->blocks[b].seg = a->nsegs++;
	a->blocks[b].pool = p;
	a->blocks[b].buf = UNMAPPED;
	unmapped_insert(a, b);
	return b;
}

/*
 * The first `bytes` (whole pages) of unmapped block b are mapped: they
 * become a free block (b, returned), ready for any op, the rest of b
 * stays unmapped (map_block; the caller merges what the request needs).
 * Reserved grows by the bytes.
 */
static int map_pages(struct allocator *a, int b, uint64_t bytes)
{
	struct block *k = &a->blocks[b];
	struct alloc_seg *g = &a->segs[k->seg];

	assert(unmapped(a, b) && bytes && bytes <= k->size && bytes % g->page == 0 && k->off % g->page == 0);
	unmapped_remove(a, b);
	if (bytes < k->size) {
		int rest = split(a, b, bytes);
		a->blocks[rest].buf = UNMAPPED;
		unmapped_insert(a, rest);
	}
	k = &a->blocks[b]; /* split may have moved the table */
	k->buf = -1;
	k->level = 0;
	memset(k->ready, 0, sizeof(k->ready));
	k->waits = 0;
	k->freed_op = 0;
	a->n.reserved += bytes;
	g->bytes += bytes;
	pool_add(a, b);
	return b;
}

/* Unmapped block b takes in its unmapped neighbour x (in its pool's list); b is not in the list. */
static void unmapped_join(struct allocator *a, int b, int x)
{
	unmapped_remove(a, x);
	span_join(a, b, x);
	block_release(a, x);
}

/*
 * A flush: free block b, ready for any op, gives back the whole pages
 * inside it (unmap_block): what lies before and after them stays free,
 * the pages join the unmapped blocks beside them; a range left entirely
 * unmapped is released (release_blocks, release_expandable_segment).
 * Reserved shrinks by the pages.
 */
static void unmap_block(struct allocator *a, int b)
{
	struct block *k = &a->blocks[b];
	struct alloc_seg *g = &a->segs[k->seg];
	uint64_t lo = round_up(k->off, g->page), hi = (k->off + k->size) / g->page * g->page;
	int prev, next, listed = 0;

	if (lo >= hi)
		return;
	pool_remove(a, b);
	if (lo > a->blocks[b].off) {
		int pages = split(a, b, lo - a->blocks[b].off);
		pool_add(a, b);
		b = pages;
	}
	if (a->blocks[b].size > hi - lo)
		pool_add(a, split(a, b, hi - lo));
	k = &a->blocks[b];
	assert(k->off == lo && k->size == hi - lo);
	k->buf = UNMAPPED;
	k->level = 0;
	a->n.reserved -= hi - lo;
	g->bytes -= hi - lo;
	if (unmapped(a, (prev = k->prev))) {
		span_join(a, prev, b); /* prev, in the list, keeps its place there */
		block_release(a, b);
		b = prev;
		listed = 1;
	}
	if (unmapped(a, (next = a->blocks[b].next)))
		unmapped_join(a, b, next);
	if (!listed)
		unmapped_insert(a, b);
	k = &a->blocks[b];
	if (k->prev < 0 && k->next < 0) {
		unmapped_remove(a, b);
		block_release(a, b);
		g->released = 1;
	}
}

/* ---- the device's capacity -------------------------------------------------------- */

/*
 * After drain's merges, every free block of caching pool p is ready for
 * any op: its clock cleared, each at level 2, in ready[]. Those at level 2
 * already stay where they are; the others (below 2 before, or merged)
 * enter one by one when few, else sorted and merged in. The blocks that
 * span their segment are noted in whole[] (flush() releases them).
 */
static void drained(struct allocator *a, struct pool *p)
{
	struct order *o = &p->ready;
	int nb = 0, i, j;

	order_clear(&p->old);
	p->aging.n = 0;
	for (int t = 0; t < ST_COUNT; t++)
		p->watch[t].n = 0;
	if (a->capkeys < 2 * p->n) { /* the keys entering, then the whole order */
		a->capkeys = 2 * p->n;
		a->keys = xrealloc(a->keys, sizeof(*a->keys) * (size_t)a->capkeys);
	}
	if (a->capwhole < a->nwhole + p->n) {
		a->capwhole = 2 * (a->nwhole + p->n);
		a->whole = xrealloc(a->whole, sizeof(*a->whole) * (size_t)a->capwhole);
	}
	for (i = 0; i < p->n; i++) {
		int b = p->free[i];
		struct block *k = &a->blocks[b];
		memset(k->ready, 0, sizeof(k->ready));
		k->waits = 0;
		k->freed_op = 0;
		if (k->prev < 0 && k->next < 0)
			a->whole[a->nwhole++] = key_of(a, b);
		if (k->level != 2) {
			k->level = 2;
			k->gen++;
			a->keys[nb++] = key_of(a, b);
		}
	}
	assert(o->n + nb == p->n);
	if (nb * 8 <= o->n) {
		for (j = 0; j < nb; j++)
			order_insert(o, a->keys[j]);
		return;
	}
	qsort(a->keys, (size_t)nb, sizeof(*a->keys), key_cmp);
	{
		/* merged with the order's keys into keys[nb..], then loaded whole */
		struct skey *m = a->keys + nb;
		int k = 0; /* the order's first place (its end when empty) */
		for (i = 0, j = 0; i < p->n; i++)
			if (j < nb && (!order_valid(o, k) || key_less(&a->keys[j], order_key(o, k)))) {
				m[i] = a->keys[j++];
			} else {
				m[i] = *order_key(o, k);
				k = order_next(o, k);
			}
		order_load(o, m, p->n);
	}
}

/*
 * Every op issued so far has completed: each free block is free for any
 * op, and each run of adjacent free blocks becomes one block. A caching
 * pool's free blocks are all at level 2 then (drained()).
 */
static void drain(struct allocator *a)
{
	a->nwhole = 0;
	if (a->cfg.caching) {
		/*
		 * each run of free blocks becomes one block (the pool knows
		 * the free blocks whose next is free: linked); the merged
		 * blocks' clocks are cleared after, as every other's
		 */
		a->draining = 1;
		for (int p = 0; p < NPOOLS; p++) {
			struct pool *q = &a->pools[p];
			while (q->nlinked)
				merge(a, q->linked[0], a->blocks[q->linked[0]].next);
			a->whole_at[p] = a->nwhole;
			drained(a, q);
		}
		a->whole_at[NPOOLS] = a->nwhole;
		a->draining = 0;
		return;
	}
	for (int p = 0; p < NPOOLS; p++)
		for (int b = a->pools[p].head; b >= 0; b = a->blocks[b].fnext) {
			struct block *k = &a->blocks[b];
			memset(k->ready, 0, sizeof(k->ready));
			k->waits = 0;
			k->freed_op = 0;
		}
	/* with every clock cleared, each run of free blocks (a stretch of the list, in offset order) becomes one block */
	for (int p = 0; p < NPOOLS; p++) {
		struct pool *q = &a->pools[p];
		for (int b = q->head, next; b >= 0 && (next = a->blocks[b].fnext) >= 0;)
			if (a->blocks[b].next == next)
				merge(a, b, next);
			else
				b = next;
	}
}

/* Free block b spans its segment: the segment goes back to the device. */
static void segment_release(struct allocator *a, int b)
{
	int seg = a->blocks[b].seg;
	struct alloc_seg *g = &a->segs[seg];

	assert(a->blocks[b].prev < 0 && a->blocks[b].next < 0 && !g->released);
	pool_remove(a, b);
	block_release(a, b);
	a->n.reserved -= g->bytes;
	g->released = 1;
	if (a->release)
		a->release(a->ctx, seg);
	g->ptr = NULL;
}

/*
 * PyTorch's release_cached_blocks: the device is synchronized (its
 * outstanding events too), so every free block is free for any op and
 * merges with its free neighbours; then every free block that spans its
 * segment is released, walking the large pools before the small ones, as
 * PyTorch walks large_blocks then small_blocks, each by size. (The order
 * only decides the order of the release callbacks: every such segment
 * goes, so without a callback, as in the simulator, they go unsorted:
 * which slot a later block takes changes, none of the decisions.)
 * Segments with a live block stay.
 */
static void flush(struct allocator *a)
{
	if (a->flushed && !a->cfg.expandable)
		/*
		 * nothing freed since the last flush: every free block is
		 * still ready and alone in its run, and no segment is
		 * entirely free (each reserved since went to a request), so
		 * draining and releasing would change nothing
		 */
		return;
	a->flushed = 1;
	drain(a); /* every free block ready; those that span their segment in whole[] */
	if (a->cfg.expandable) {
		/* each free block gives back its whole pages, pool by pool (the keys: drain's scratch, done with) */
		for (int small = 0; small < 2; small++)
			for (int t = 0; t < ST_COUNT; t++) {
				struct pool *q = &a->pools[2 * t + !small];
				int n = q->n;
				for (int i = 0; i < n; i++)
					a->keys[i] = key_of(a, q->free[i]);
				if (n > 1) /* none: a->keys may still be NULL, which qsort must not get */
					qsort(a->keys, (size_t)n, sizeof(*a->keys), key_cmp);
				for (int i = 0; i < n; i++)
					unmap_block(a, a->keys[i].b);
			}
		return;
	}
	for (int small = 0; small < 2; small++)
		for (int t = 0; t < ST_COUNT; t++) {
			int p = 2 * t + !small, lo = a->whole_at[p], n = a->whole_at[p + 1] - lo;
			if (n > 1 && a->release)
				qsort(a->whole + lo, (size_t)n, sizeof(*a->whole), key_cmp);
			for (int i = 0; i < n; i++)
				segment_release(a, a->whole[lo + i].b);
		}
}

/* ---- requests ---------------------------------------------------------------------- */

/*
 * Expandable: the chain for r bytes in pool p, lowest first, as
 * find_expandable_block finds it: from each unmapped block of the pool in
 * order of address (the free block before it, when ready for the op),
 * the first whose run of ready free and unmapped blocks holds r; failing
 * that, the first block of a new range. The pages of its unmapped blocks
 * the request needs are counted in *bytes (try_allocate_expandable_block:
 * map_block maps whole pages, each time of what is still missing).
 */
static int chain_find(struct allocator *a, int p, uint64_t r, uint64_t *bytes)
{
	const struct pool *q = &a->pools[p];
	uint64_t n = 0;
	int c = -1;

	for (int i = 0; i < q->nunmapped && c < 0; i++) {
		int b = q->unmapped[i], x;
		n = 0;
		if (usable(a, a->blocks[b].prev, 2))
			b = a->blocks[b].prev;
		for (x = b; n < r && (unmapped(a, x) || usable(a, x, 2)); x = a->blocks[x].next)
			n += a->blocks[x].size;
		if (n >= r)
			c = b;
	}
	if (c < 0)
		c = range_new(a, p, r);
	*bytes = 0;
	n = 0;
	for (int x = c; n < r; x = a->blocks[x].next) {
		uint64_t size = a->blocks[x].size;
		if (unmapped(a, x)) {
			size = round_up(r - n, a->segs[a->blocks[x].seg].page);
			if (size > a->blocks[x].size)
				size = a->blocks[x].size;
			*bytes += size;
		}
		n += size;
	}
	return c;
}

/*
 * Expandable: no free block serves r bytes of pool p: map the pages of
 * the chain chain_find finds, flushing the cache first when they would
 * take the reserved bytes above the capacity (then the search is made
 * again, as malloc() calls alloc_block again), and merge the chain from
 * its first block up to r bytes (the part split off the last block keeps
 * that block's own clock). Returns the block.
 */
static int expand(struct allocator *a, int p, uint64_t r)
{
	uint64_t bytes, n = 0;
	int c = chain_find(a, p, r, &bytes);

	if (a->capacity && a->n.reserved + bytes > a->capacity) {
		/* map_block would fail: flush the cache and retry */
		flush(a);
		a->n.retries++;
		a->search = (a->search + 1) & 0x3fffffff; /* every block's usability anew */
		c = chain_find(a, p, r, &bytes);
		if (a->n.reserved + bytes > a->capacity) {
			a->n.ooms++;
			a->capacity = a->n.reserved + bytes;
		}
	}
	for (int x = c; n < r; x = a->blocks[x].next) {
		if (unmapped(a, x)) {
			uint64_t size = round_up(r - n, a->segs[a->blocks[x].seg].page);
			map_pages(a, x, size < a->blocks[x].size ? size : a->blocks[x].size);
		}
		n += a->blocks[x].size;
	}
	merge_run(a, c, r);
	return c;
}

/*
 * A request of an allocator that is `caching` or not. alloc_get calls a
 * copy for each kind, each compiled knowing its kind, with the helpers a
 * request runs through inlined (always_inline: called from two copies,
 * the compiler would keep them apart): about 2% fewer instructions for a
 * caching allocator than one function for both.
 */
static inline __attribute__((always_inline)) int get(struct allocator *a, int buf, uint64_t bytes,
						      const struct alloc_req *rq, uint32_t *wait, int caching)
{
	uint64_t r = round_up(bytes ? bytes : 1, a->cfg.round), split_min;
	int small = a->cfg.caching && r <= SMALL_SIZE;
	int pool = a->cfg.caching ? caching_pool(rq->pool, r) : rq->pool, best;
	/* the arena keeps brief buffers at the high end of holes and the others low, first fit */
	int high = !a->cfg.caching && rq->brief, first_fit = !a->cfg.caching && !rq->brief;
	struct block *k;

	if (a->cfg.caching != caching)
		__builtin_unreachable();
	assert(buf >= 0 && buf < a->nbufs && a->buf_block[buf] < 0 && pool >= 0 && pool < NPOOLS);
	if (!a->cfg.caching && a->region[pool] < 0) {
		if (segment_new(a, UNBOUNDED, pool) < 0)
			return -1;
		a->region[pool] = a->nsegs - 1;
	}
	if (a->cfg.caching && rq->clock)
		level_advance(a, &a->pools[pool], rq->clock, rq->op);
	if (a->cfg.wait_age && a->pools[pool].n > COMPACT_AT && rq->clock)
		compact(a, &a->pools[pool], rq->op);
	best = find_run(a, &a->pools[pool], r, rq, first_fit, high);
	if (best < 0 && a->cfg.expandable) {
		best = expand(a, pool, r);
	} else if (best < 0) {
		uint64_t seg_bytes = small ? SMALL_BUFFER : r < MIN_LARGE_ALLOC ? LARGE_BUFFER : round_up(r, a->cfg.segment);
		assert(a->cfg.caching); /* an arena always has room at its end */
		if (a->capacity && a->n.reserved + seg_bytes > a->capacity) {
			/* cudaMalloc would fail: flush the cache and retry (no new search of the pool, as in PyTorch) */
			flush(a);
			a->n.retries++;
			if (a->n.reserved + seg_bytes > a->capacity) {
				/* PyTorch raises here; from now on, a device with just the memory the run has needed */
				a->n.ooms++;
				a->capacity = a->n.reserved + seg_bytes;
			}
		}
		if ((best = segment_new(a, seg_bytes, pool)) < 0)
			return -1;
	}
	k = &a->blocks[best];
	for (uint32_t w = k->waits; w; w &= w - 1) { /* the streams whose ready[] is above 0 */
		int t = __builtin_ctz(w);
		if (k->ready[t] > wait[t])
			wait[t] = k->ready[t];
	}
	/* should_split: expandable segments split at 512 bytes in the large pool too */
	split_min = !a->cfg.caching ? a->cfg.round : small || a->cfg.expandable ? MIN_BLOCK : SMALL_SIZE + 1;
	if (!a->cfg.caching) {
		/* the rest of the block stays free where it is in the list: after the part given out, or before it with `high` */
		if (k->size - r < split_min)
			arena_unlink(a, best);
		else if (high && !unbounded(k))
			best = arena_split(a, best, k->size - r);
		else
			pool_replace(a, best, arena_split(a, best, r));
	} else {
		pool_remove(a, best);
		if (k->size - r >= split_min)
			pool_add(a, split(a, best, r)); /* the rest of the block stays free, after it */
	}
	k = &a->blocks[best];
	if (!a->cfg.caching && region_cover(a, k) != 0) {
		pool_add(a, best);
		return -1;
	}
	a->buf_block[buf] = best;
	k->buf = buf;
	a->n.allocated += k->size;
	return 0;
}

static __attribute__((noinline)) int get_arena(struct allocator *a, int buf, uint64_t bytes,
					       const struct alloc_req *rq, uint32_t *wait)
{
	return get(a, buf, bytes, rq, wait, 0);
}

static __attribute__((noinline)) int get_caching(struct allocator *a, int buf, uint64_t bytes,
						 const struct alloc_req *rq, uint32_t *wait)
{
	return get(a, buf, bytes, rq, wait, 1);
}

int alloc_get(struct allocator *a, int buf, uint64_t bytes, const struct alloc_req *rq, uint32_t *wait)
{
	return a->cfg.caching ? get_caching(a, buf, bytes, rq, wait) : get_arena(a, buf, bytes, rq, wait);
}

/* Merge free block b with its free neighbours whose clocks equal its own. */
static void merge_neighbours(struct allocator *a, int b)
{
	int prev = a->blocks[b].prev, next;

	if (prev >= 0 && a->blocks[prev].slot >= 0 &&
	    !memcmp(a->blocks[prev].ready, a->blocks[b].ready, sizeof(a->blocks[b].ready))) {
		merge(a, prev, b);
		b = prev;
	}
	next = a->blocks[b].next;
	if (next >= 0 && a->blocks[next].slot >= 0 &&
	    !memcmp(a->blocks[next].ready, a->blocks[b].ready, sizeof(a->blocks[b].ready)))
		merge(a, b, next);
}

uint64_t alloc_put(struct allocator *a, int buf, int stream, uint32_t pos, uint32_t op)
{
	int b = a->buf_block[buf];
	struct block *k;
	uint64_t size;

	assert(b >= 0);
	a->buf_block[buf] = -1;
	k = &a->blocks[b];
	k->buf = -1;
	size = k->size;
	a->n.allocated -= size;
	memset(k->ready, 0, sizeof(k->ready));
	k->ready[stream] = pos + 1;
	k->waits = 1u << stream;
	k->freed_op = op;
	a->flushed = 0;
	if (a->cfg.caching)
		cache_add(a, b);
	else
		arena_add(a, b);
	merge_neighbours(a, b);
	return size;
}

void alloc_settle(struct allocator *a)
{
	a->flushed = 0; /* the step's end: segments left entirely free stay until a flush */
	drain(a);
	/* the next step's clocks start again from 0: every free block is ready for them */
	if (a->cfg.caching)
		for (int p = 0; p < NPOOLS; p++) {
			memset(a->pools[p].clk, 0, sizeof(a->pools[p].clk));
			a->pools[p].op = 0;
		}
}

int alloc_steps_repeat(const struct allocator *a)
{
	return !a->cfg.caching;
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

const struct alloc_counts *alloc_counts(const struct allocator *a)
{
	return &a->n;
}

uint64_t alloc_allocated(const struct allocator *a)
{
	return a->n.allocated;
}

uint64_t alloc_reserved(const struct allocator *a)
{
	return a->n.reserved;
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

uint64_t alloc_segment_bytes(const struct allocator *a, int i)
{
	assert(i >= 0 && i < a->nsegs);
	return a->segs[i].bytes;
}

int alloc_segment_pool(const struct allocator *a, int i)
{
	assert(i >= 0 && i < a->nsegs);
	return a->segs[i].released ? -1 : a->segs[i].pool;
}

/*
 * Room in st for `room` more values, and each reserved segment's first
 * block (a->first), found in one pass over the table. Returns where the
 * state goes on.
 */
static uint64_t *state_begin(struct allocator *a, struct alloc_state *st, size_t room)
{
	assert(a->cfg.caching && !a->draining);
	if (st->len + room > st->cap) {
		st->cap = 2 * (st->len + room);
		st->v = xrealloc(st->v, sizeof(*st->v) * st->cap);
	}
	if (a->capfirst < a->nsegs) {
		a->capfirst = 2 * a->nsegs;
		a->first = xrealloc(a->first, sizeof(int) * (size_t)a->capfirst);
	}
	for (int b = 0; b < a->nblocks; b++)
		if (a->blocks[b].buf != -2 && a->blocks[b].prev < 0)
			a->first[a->blocks[b].seg] = b;
	return st->v + st->len;
}

void alloc_state(struct allocator *a, struct alloc_state *st)
{
	uint64_t *w = state_begin(a, st, 2 + NPOOLS * (ST_COUNT + 1) + 2 * (size_t)a->nsegs +
						 (3 + ST_COUNT) * (size_t)a->nblocks);

	*w++ = a->capacity;
	for (int p = 0; p < NPOOLS; p++) {
		for (int t = 0; t < ST_COUNT; t++)
			*w++ = a->pools[p].clk[t];
		*w++ = a->pools[p].op;
	}
	for (int i = 0; i < a->nsegs; i++) {
		if (a->segs[i].released)
			continue;
		*w++ = (uint64_t)a->segs[i].pool << 48 | a->segs[i].bytes; /* bytes below 2^41 (segment_new, range_new) */
		for (int b = a->first[i]; b >= 0; b = a->blocks[b].next) {
			const struct block *k = &a->blocks[b];
			*w++ = k->size;
			*w++ = (uint64_t)(int64_t)k->buf;
			if (k->buf < 0) { /* free: the op that freed it, and the streams it waits for, at which ops */
				*w++ = (uint64_t)k->freed_op << 32 | k->waits;
				for (uint32_t m = k->waits; m; m &= m - 1)
					*w++ = k->ready[__builtin_ctz(m)];
			}
		}
	}
	st->len = (size_t)(w - st->v);
	assert(st->len <= st->cap);
}

/* ---- a recorded trace --------------------------------------------------------- */

/* Open addressing from a block's address to the buffer that holds it (address + 1 as the key: 0 is empty). */
struct addr_map {
	uint64_t *key;
	int *buf;
	size_t cap;
};

/* The slot an address hashes to (blocks are 512-byte aligned: the bits above those, multiplied by 2^64 / phi). */
static size_t addr_home(const struct addr_map *m, uint64_t addr)
{
	return (size_t)((addr >> 9) * 0x9E3779B97F4A7C15ull) & (m->cap - 1);
}

/* The slot of addr, or the empty slot where it would go. */
static size_t addr_slot(const struct addr_map *m, uint64_t addr)
{
	size_t i = addr_home(m, addr);

	while (m->key[i] && m->key[i] != addr + 1)
		i = (i + 1) & (m->cap - 1);
	return i;
}

static void addr_remove(struct addr_map *m, size_t i)
{
	/* backward-shift deletion keeps every later key reachable from its home slot */
	size_t j = i;

	m->key[i] = 0;
	for (;;) {
		size_t home;
		j = (j + 1) & (m->cap - 1);
		if (!m->key[j])
			return;
		home = addr_home(m, m->key[j] - 1);
		if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
			m->key[i] = m->key[j];
			m->buf[i] = m->buf[j];
			m->key[j] = 0;
			i = j;
		}
	}
}

int alloc_replay(const struct alloc_cfg *cfg, const struct alloc_event *ev, size_t n, struct alloc_replay *out,
		 char *err, size_t errlen)
{
	struct addr_map map = { NULL, NULL, 64 };
	struct allocator *a;
	uint64_t alloc = 0, reserved = 0;
	int nbufs = 0, rc = 0;

	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < n; i++)
		nbufs += ev[i].action == ALLOC_EV_ALLOC;
	while (map.cap < 2 * (size_t)nbufs + 2)
		map.cap *= 2;
	map.key = xcalloc(map.cap, sizeof(*map.key));
	map.buf = xcalloc(map.cap, sizeof(*map.buf));
	a = alloc_new(cfg, nbufs > 0 ? nbufs : 1, NULL, NULL);
	for (size_t i = 0; i < n && !rc; i++) {
		const struct alloc_event *e = &ev[i];
		uint32_t wait[ST_COUNT] = { 0 };
		size_t slot;

		if (e->stream >= ST_COUNT || e->action >= ALLOC_EV_COUNT) {
			snprintf(err, errlen, "event %zu: %s %u (allowed: %s below %d)", i,
				 e->stream >= ST_COUNT ? "stream" : "action", e->stream >= ST_COUNT ? e->stream : e->action,
				 e->stream >= ST_COUNT ? "a stream" : "an action", e->stream >= ST_COUNT ? ST_COUNT : ALLOC_EV_COUNT);
			rc = -1;
			break;
		}
		switch (e->action) {
		case ALLOC_EV_ALLOC: {
			struct alloc_req rq = { e->stream, 0, (uint32_t)i, NULL };
			slot = addr_slot(&map, e->addr);
			if (map.key[slot]) {
				snprintf(err, errlen, "event %zu: address %#llx given out again before it was freed", i,
					 (unsigned long long)e->addr);
				rc = -1;
				break;
			}
			map.key[slot] = e->addr + 1;
			map.buf[slot] = out->requests;
			if (alloc_get(a, out->requests++, e->bytes, &rq, wait) != 0) {
				snprintf(err, errlen, "event %zu: the allocator could not serve %llu bytes", i,
					 (unsigned long long)e->bytes);
				rc = -1;
				break;
			}
			alloc += e->bytes;
			break;
		}
		case ALLOC_EV_FREE:
			slot = addr_slot(&map, e->addr);
			if (!map.key[slot]) {
				out->unmatched++; /* given out before the trace began */
				break;
			}
			alloc_put(a, map.buf[slot], e->stream, (uint32_t)i, (uint32_t)i);
			alloc = alloc > e->bytes ? alloc - e->bytes : 0;
			addr_remove(&map, slot);
			break;
		case ALLOC_EV_SEGMENT_ALLOC:
		case ALLOC_EV_SEGMENT_MAP:
			reserved += e->bytes;
			break;
		default: /* a segment released or unmapped */
			reserved = reserved > e->bytes ? reserved - e->bytes : 0;
			break;
		}
		if (alloc > out->traced_alloc)
			out->traced_alloc = alloc;
		if (reserved > out->traced_reserved)
			out->traced_reserved = reserved;
		if (a->n.allocated > out->replayed_alloc)
			out->replayed_alloc = a->n.allocated;
		if (a->n.reserved > out->replayed_reserved)
			out->replayed_reserved = a->n.reserved;
	}
	out->retries = a->n.retries;
	alloc_free(a);
	free(map.key);
	free(map.buf);
	return rc;
}

uint32_t alloc_retries(const struct allocator *a)
{
	return a->n.retries;
}

uint32_t alloc_ooms(const struct allocator *a)
{
	return a->n.ooms;
}

uint64_t alloc_capacity(const struct allocator *a)
{
	return a->capacity;
}

/* ---- a repeating stretch of requests ------------------------------------------------ */

/*
 * Free block k has a clock entry for stream t that every later request of
 * its pool has passed, given the clock of the next (`next`: its pool's
 * requests come in issue order from one stream, their clocks only grow);
 * or was freed long enough before its pool's last request to be old for
 * every later one.
 */
static int passed(const uint32_t *next, const struct block *k, int t)
{
	return k->ready[t] <= next[t];
}

static int aged(const struct allocator *a, const struct pool *p, const struct block *k)
{
	return a->cfg.wait_age && p->op >= k->freed_op + a->cfg.wait_age;
}

int alloc_pool(const struct allocator *a, int stream, uint64_t bytes)
{
	return caching_pool(stream, round_up(bytes ? bytes : 1, a->cfg.round));
}

int alloc_movable(const struct allocator *a)
{
	return a->cfg.caching;
}

void alloc_state_from(struct allocator *a, struct alloc_state *st, const struct alloc_frame *f)
{
	uint64_t *w = state_begin(a, st, 2 + 2 * (size_t)a->nsegs + (3 + ST_COUNT) * (size_t)a->nblocks);

	*w++ = a->capacity;
	*w++ = (uint64_t)a->flushed;
	for (int i = 0; i < a->nsegs; i++) {
		if (a->segs[i].released)
			continue;
		*w++ = (uint64_t)a->segs[i].pool << 48 | a->segs[i].bytes;
		for (int b = a->first[i]; b >= 0; b = a->blocks[b].next) {
			const struct block *k = &a->blocks[b];
			const struct pool *p = &a->pools[k->pool];
			*w++ = k->size;
			*w++ = k->buf >= 0 ? f->code(f->ctx, k->buf) : (uint64_t)(int64_t)k->buf;
			if (k->buf >= 0)
				continue;
			/* free: its age and clock as the frame sees them, those every later request has passed as such */
			*w++ = (uint64_t)(!a->cfg.wait_age ? 0 : aged(a, p, k) ? UINT32_MAX : k->freed_op - f->op) << 32 |
			       k->waits;
			for (uint32_t m = k->waits; m; m &= m - 1) {
				int t = __builtin_ctz(m);
				*w++ = passed(f->next[k->pool], k, t) ? UINT64_MAX :
									(uint64_t)(uint32_t)(k->ready[t] - f->pos[t]);
			}
		}
	}
	st->len = (size_t)(w - st->v);
	assert(st->len <= st->cap);
}

void alloc_move(struct allocator *a, const struct alloc_move *mv)
{
	int moved[NPOOLS];

	assert(alloc_movable(a) && !a->draining);
	for (int p = 0; p < NPOOLS; p++)
		moved[p] = a->pools[p].op >= mv->since;
	for (int b = 0; b < a->nblocks; b++) {
		struct block *k = &a->blocks[b];
		const struct pool *p = &a->pools[k->pool];
		if (k->buf == -2)
			continue;
		if (k->buf >= 0) { /* held: by the buffer of the ops moved to */
			int nb = mv->buf(mv->ctx, k->buf);
			if (nb != k->buf) {
				a->buf_block[k->buf] = -1;
				k->buf = -4 - nb; /* below every mark of a block without one (-3): set in a second pass, as two may trade */
			}
			continue;
		}
		/* free: what the moved ops freed moves with them; what every later request has passed stays */
		for (uint32_t m = k->waits; m; m &= m - 1) {
			int t = __builtin_ctz(m);
			if (!passed(mv->next[k->pool], k, t))
				k->ready[t] += mv->dpos[t];
		}
		if (a->cfg.wait_age && !aged(a, p, k))
			k->freed_op += mv->dop;
	}
	for (int b = 0; b < a->nblocks; b++) {
		struct block *k = &a->blocks[b];
		if (k->buf < -3) {
			k->buf = -4 - k->buf;
			a->buf_block[k->buf] = b;
		}
	}
	for (int p = 0; p < NPOOLS; p++) {
		struct pool *q = &a->pools[p];
		if (moved[p]) { /* its last request: the one as many windows on */
			q->op += mv->dop;
			memcpy(q->clk, mv->clock(mv->ctx, q->op), sizeof(q->clk));
		}
		level_rebuild(a, q);
	}
	a->n.retries += mv->retries;
}
