/*
 * alloc.h - the device memory allocator of the runtimes, and the model of
 * it the simulator runs: one code for both, so that a prediction of peak
 * allocated and reserved memory is the runtime's own arithmetic.
 *
 * Memory comes in segments the allocator reserves through a callback (the
 * runtime backs them with device memory; the simulator passes none and
 * gets addresses only). A request is rounded up to `round` bytes and served
 * from a free block by best fit; the rest of the block is split off when
 * it is large enough; a freed block merges with its free neighbours in the
 * segment. Two behaviours, chosen by the runtime spec:
 *   - arena (the testbed runtime): a contiguous region per lifetime class
 *     (core/memory.c: brief buffers such as op scratch; buffers that die
 *     within their microbatch; buffers that outlive it, such as gradients
 *     accumulated across microbatches). A region has no end: it reserves
 *     up to the highest byte ever granted in it, rounded up to
 *     segment_bytes, and the runtime preallocates it at that size, which a
 *     dry run of this allocator gives. Brief buffers take the high end of
 *     the best-fitting hole, the others the lowest hole that fits, so that
 *     classes of lifetimes do not split each other's holes;
 *   - caching (PyTorch's CUDACachingAllocator): a pool per stream and per
 *     size class; requests of 1 MiB or less share 2 MiB segments, requests
 *     under 10 MiB take a 20 MiB segment, larger ones a segment rounded up
 *     to segment_bytes (c10/cuda/CUDACachingAllocator.cpp: kSmallSize,
 *     kSmallBuffer, kMinLargeAlloc, kLargeBuffer, kRoundLarge); a block is
 *     split when at least 512 bytes (small) or 1 MiB (large) would be left.
 *
 * Stream-ordered reuse. Requests and frees arrive in issue order, from the
 * one thread that issues a step's ops, while the ops themselves run later
 * on their streams. A freed block therefore carries the vector clock of
 * the op that freed it (core/schedule.h). The schedule guarantees that
 * every user of a buffer happens before the op that frees it; so a block
 * is safe for an op that happens after the freeing op, and for any other
 * op once it waits for the freeing op (like cudaMallocAsync's pools, which
 * insert such dependencies). A request takes a block that is safe
 * already; failing that, one freed at least wait_age ops earlier (by then
 * its freeing op has long finished, so the wait costs nothing), and the
 * caller makes the op wait for the ops that freed it (`wait`); failing
 * that, new memory. A recently freed block is never waited for: that
 * would stall, say, a backward on the reduce-scatter of the unit before. Adjacent free blocks merge when their
 * clocks are equal, and a request may span a run of adjacent free blocks;
 * a merged block keeps the later of the clocks, stream by stream. Given
 * the same requests, the allocator makes the same decisions: the
 * simulator's peaks and waits equal the runtime's, byte for byte.
 *
 * The device's capacity (caching only; the arena has none). PyTorch's
 * allocator, when cudaMalloc of a new segment fails, synchronizes the
 * device, returns every cached segment that is entirely free to CUDA and
 * tries cudaMalloc once more (CUDACachingAllocator.cpp, malloc():
 * alloc_block, release_available_cached_blocks, which does nothing unless
 * max_split_size is set, then release_cached_blocks and alloc_block with
 * isRetry, which counts num_alloc_retries); if that fails too it raises
 * OutOfMemoryError (num_ooms). Here, a new segment that would take the
 * reserved bytes above `capacity` does the same: a flush (every op issued
 * so far has completed: free blocks lose their clocks and merge; the free
 * blocks that span their segment are released, large pools before small,
 * each by size), counted as a retry; if the segment still does not fit,
 * it is counted as an OOM and reserved all the same, past the capacity,
 * which rises to the reserved bytes (PyTorch would have stopped there;
 * the allocator goes on as on a device with the memory the run has
 * needed, so that the caller learns about how much that is). The caller
 * makes the requesting op wait for the device to drain (core/memory.h:
 * sync).
 *
 * Expandable segments (caching, cfg.expandable: PyTorch's
 * PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which torchtitan's
 * launch script sets). A pool (a stream and a size class) reserves a
 * virtual range instead of whole segments: the device's memory and an
 * eighth more, in pages of 2 MiB (small pool) or 20 MiB (large pool)
 * (CUDACachingAllocator.cpp: ExpandableSegment's constructor, max_handles_;
 * find_expandable_block, kSmallBuffer or kLargeBuffer). The range starts
 * as one unmapped block. A request is served by best fit among the mapped
 * free blocks as ever (get_free_block, where a block followed by unmapped
 * pages counts them in its size, expandable_size); failing that, by the
 * lowest unmapped block of the pool, from the free block before it when
 * there is one, whose chain of free and unmapped blocks holds the request
 * (find_expandable_block): its pages are mapped, just those the request
 * needs, whole (try_allocate_expandable_block, map_block). Reserved is the
 * mapped bytes. A block is split whenever 512 bytes or more would be left,
 * in the large pool too (should_split). A flush unmaps the whole pages
 * inside every free block, and a range left entirely unmapped is released
 * (release_blocks, unmap_block, release_expandable_segment). Pages are
 * mapped only through the simulator: an allocator with a reserve callback
 * has no expandable mode.
 */
#ifndef CORE_ALLOC_H
#define CORE_ALLOC_H

#include <stdint.h>

#include "schedule.h"

struct alloc_cfg {
	int caching;       /* 1: per-stream caching pools; 0: arena regions */
	uint64_t round;    /* requests are rounded up to this */
	uint64_t segment;  /* segment granularity */
	uint32_t wait_age; /* a block not yet safe is taken (with a wait) only when freed this many ops ago */
	uint64_t capacity; /* caching: the device's bytes, beyond which a new segment flushes the cache; 0: none */
	int expandable;    /* caching: expandable segments (pages mapped into one range per pool); 0: whole segments */
};

/* One request: which pool, for which op. */
struct alloc_req {
	int pool;              /* caching: the op's stream; arena: the lifetime class, 0 to 2 */
	int brief;             /* the buffer lives for a few ops only */
	uint32_t op;           /* the requesting op's issue index */
	const uint32_t *clock; /* its vector clock (ST_COUNT); NULL: every earlier op has completed */
};

/*
 * Backs bytes [offset, offset + bytes) of segment seg: a new segment at
 * offset 0 (an arena region asks first with bytes 0), then an arena region
 * growing at its end (its memory must follow what came before). Returns the
 * segment's base address, NULL when out of memory. The simulator passes no
 * callback.
 */
typedef void *(*alloc_reserve_fn)(void *ctx, int seg, uint64_t offset, uint64_t bytes);
/*
 * Segment seg is released by a flush (its memory goes back to the device:
 * the owner frees it, after synchronizing the device). Its index is never
 * given to another segment.
 */
typedef void (*alloc_release_fn)(void *ctx, int seg);

struct allocator;

/* An allocator for buffers 0..nbufs-1; reserve may be NULL (no memory behind the addresses). */
struct allocator *alloc_new(const struct alloc_cfg *cfg, int nbufs, alloc_reserve_fn reserve, void *ctx);
/* Frees the allocator's own tables, not the segments (their owner releases those); NULL is a no-op. */
void alloc_free(struct allocator *a);
/* Called for each segment a flush releases (with alloc_new's ctx); none by default. */
void alloc_set_release(struct allocator *a, alloc_release_fn release);

/*
 * Give buffer `buf` a block of at least `bytes` for request rq. wait[t]
 * (ST_COUNT entries, raised, never lowered) is the number of ops of stream
 * t the op must wait for before it may use the block; it exceeds
 * rq->clock[t] only when the block came from an op the schedule does not
 * already order before this one. 0, or -1 when memory could not be
 * reserved.
 */
int alloc_get(struct allocator *a, int buf, uint64_t bytes, const struct alloc_req *rq, uint32_t *wait);
/* Buffer `buf` is freed by op `op` (issue index), at position `pos` of stream `stream`; returns its block's size. */
uint64_t alloc_put(struct allocator *a, int buf, int stream, uint32_t pos, uint32_t op);
/* Every op issued so far has completed (a step ended): freed blocks are free for anyone. */
void alloc_settle(struct allocator *a);
/*
 * 1 when every step starts from the same state once settled (the arena:
 * its regions have no end, so the first step already sees what later ones
 * see): one step then tells what every step does.
 */
int alloc_steps_repeat(const struct allocator *a);

/* The block size buffer buf holds (0 when none), its memory (NULL without a reserve callback). */
uint64_t alloc_granted(const struct allocator *a, int buf);
void *alloc_ptr(const struct allocator *a, int buf);
/*
 * Bytes granted now, bytes of the segments reserved (expandable: mapped),
 * and the number of segments ever reserved (released ones too).
 */
uint64_t alloc_allocated(const struct allocator *a);
uint64_t alloc_reserved(const struct allocator *a);
int alloc_segments(const struct allocator *a);
/*
 * The memory of segment i (NULL without a reserve callback, or once
 * released): for its owner to release; its size (a released one's, the
 * size it had; an expandable one's, its mapped bytes); its pool, -1 once
 * released.
 */
void *alloc_segment_ptr(const struct allocator *a, int i);
uint64_t alloc_segment_bytes(const struct allocator *a, int i);
int alloc_segment_pool(const struct allocator *a, int i);
/*
 * The counts of alloc_allocated, alloc_reserved, alloc_retries and
 * alloc_ooms, kept up to date in place for as long as the allocator
 * lives: a caller that reads them per request saves the calls.
 */
struct alloc_counts {
	uint64_t allocated, reserved;
	uint32_t retries, ooms;
};
const struct alloc_counts *alloc_counts(const struct allocator *a);
/* Flushes of the cache so far (PyTorch's num_alloc_retries), and new segments reserved past the capacity (num_ooms). */
uint32_t alloc_retries(const struct allocator *a);
uint32_t alloc_ooms(const struct allocator *a);
/* The capacity now: cfg.capacity, raised to the reserved bytes by each segment past it (0: none). */
uint64_t alloc_capacity(const struct allocator *a);

/*
 * A caching allocator's state as numbers, everything its next decisions
 * depend on: the capacity; each pool's last request; each segment still
 * reserved, in order of index (ties fall to the older one), with its
 * blocks in offset order, the buffer each holds or, free, the op that
 * freed it and the clock an op needs to take it. Which indices segments
 * and blocks have is left out. Two allocators whose states are equal make
 * the same decisions on the same requests (core/memory.c compares steps
 * by it). Appended to st->v (len values taken, room for cap; grown as
 * needed).
 */
struct alloc_state {
	uint64_t *v;
	size_t len, cap;
};
void alloc_state(struct allocator *a, struct alloc_state *st);

/*
 * A stretch of requests that repeats (the microbatches of a step,
 * core/memory.c): the ops of one stretch are those of the stretch before,
 * issued dop later, each stream's dpos[t] positions later, allocating
 * and freeing the buffers numbered so many after theirs. Whether the
 * allocator then repeats too depends on its state at the stretches'
 * starts, seen each from its own start (alloc_frame): the op and stream
 * positions counted from there; a held buffer by the number `code`
 * gives it (one that moves with the stretches, or one that stays); a
 * free block's age and clock entries that every later request of its
 * pool has passed (its pool's requests come in issue order from one
 * stream: at or past the next one's clock, `next`) as such, whatever
 * they are. Two states equal so make the same
 * decisions on requests equal so: ages and clocks are only compared with
 * later requests' (passed ones are passed by all), and kept as the later
 * of two on a merge, where a passed entry never wins over one that is
 * not; a block just freed merges with a neighbour of equal clock, which
 * has one stream's entry alone, not passed. Caching allocators
 * (alloc_movable; with expandable segments too: pages are mapped with no
 * clock, and a flush unmaps only blocks it has cleared). Appended to st->v
 * as alloc_state.
 */
struct alloc_frame {
	uint32_t op;               /* issue index the state is seen from */
	uint32_t pos[ST_COUNT];    /* each stream's ops issued before it */
	uint64_t (*code)(void *ctx, int buf);
	void *ctx;
	/* each pool's next request's clock (UINT32_MAX: none), below which entries are passed */
	const uint32_t (*next)[ST_COUNT];
};
int alloc_movable(const struct allocator *a);
/* The pool a request of `bytes` by an op of `stream` draws on (caching: 2 * stream, + 1 from 1 MiB up). */
int alloc_pool(const struct allocator *a, int stream, uint64_t bytes);
void alloc_state_from(struct allocator *a, struct alloc_state *st, const struct alloc_frame *f);

/*
 * The allocator as it would be after the same stretch again, some times
 * over (the caller found it in the same state at the start of two
 * stretches, and skips the stretches between): each free block's age and
 * clock entries not yet passed move dop and dpos[t] later, as the ops
 * that freed it do; each pool requested at or after op `since` (within
 * the stretches repeated) has its last request moved so; each buffer held
 * becomes the one `buf` names; the flushes of the stretches skipped are
 * counted. A pool's last request moves as a whole, its clock the op's
 * (`clock`): a stream whose positions a pool's requests do not follow
 * (they never depend on its ops) keeps its place in their clocks.
 */
struct alloc_move {
	uint32_t dop, dpos[ST_COUNT];
	uint32_t since;
	int (*buf)(void *ctx, int buf);
	const uint32_t *(*clock)(void *ctx, uint32_t op); /* an op's clock (the moved last requests') */
	void *ctx;
	const uint32_t (*next)[ST_COUNT];                 /* the frame's (alloc_frame.next) */
	uint32_t retries;
};
void alloc_move(struct allocator *a, const struct alloc_move *mv);

/*
 * PyTorch's own requests, as its caching allocator recorded them
 * (torch.cuda.memory._record_memory_history; a PyTorch run's alloc_trace,
 * experiments/pytorch/fsdp_bench.py): a block given out (ALLOC_EV_ALLOC,
 * the bytes asked for, which the allocator rounds and places as its own
 * request, and the block's address), a block back in its pool
 * (ALLOC_EV_FREE: PyTorch's free_completed, once the streams that used it
 * are done), and the segments PyTorch reserved and released, or mapped
 * and unmapped with expandable segments. stream: the pool's stream
 * (< ST_COUNT).
 */
enum alloc_event_kind {
	ALLOC_EV_ALLOC, ALLOC_EV_FREE, ALLOC_EV_SEGMENT_ALLOC, ALLOC_EV_SEGMENT_FREE, ALLOC_EV_SEGMENT_MAP,
	ALLOC_EV_SEGMENT_UNMAP, ALLOC_EV_COUNT
};
struct alloc_event {
	uint8_t action;  /* enum alloc_event_kind */
	uint8_t stream;
	uint64_t bytes;
	uint64_t addr;
};
struct alloc_replay {
	uint64_t traced_alloc, traced_reserved;     /* the peaks over the trace of the bytes its requests asked
						       for and of its segments' bytes (PyTorch's reserved) */
	uint64_t replayed_alloc, replayed_reserved; /* this allocator's on the same requests */
	uint32_t retries;                           /* its flushes of the cache */
	int requests, unmatched;                    /* blocks given out; frees of blocks given out before the trace */
};
/*
 * The requests of a trace served in its order by an allocator of cfg
 * (caching), every block ready once freed (the trace's frees come when
 * PyTorch's did, after the streams that used it): whether this allocator
 * makes PyTorch's decisions on PyTorch's requests, apart from the
 * schedule that predicts those requests. 0, or -1 with err set (a stream
 * out of range, an action it does not know, an address given out twice).
 */
int alloc_replay(const struct alloc_cfg *cfg, const struct alloc_event *ev, size_t n, struct alloc_replay *out,
		 char *err, size_t errlen);

#endif
