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
 *   - arena (the testbed runtime): one pool for every stream; a new
 *     segment is the request rounded up to segment_bytes;
 *   - caching (PyTorch's CUDACachingAllocator): a pool per stream and per
 *     size class; requests under 1 MiB share 2 MiB segments, requests
 *     under 10 MiB take a 20 MiB segment, larger ones a segment rounded up
 *     to segment_bytes (c10/cuda/CUDACachingAllocator.cpp: kSmallSize,
 *     kSmallBuffer, kMinLargeAlloc, kLargeBuffer, kRoundLarge); a block is
 *     split when at least 512 bytes (small) or 1 MiB (large) would be left.
 *
 * Reuse without waiting. Requests and frees arrive in issue order, from
 * the one thread that issues a step's ops, while the ops themselves run
 * later on their streams. A freed block therefore carries the vector clock
 * of the op that freed it (core/schedule.h): only an op that happens after
 * that one may be given the block. The schedule guarantees that every user
 * of a buffer happens before the op that frees it, so the new owner can
 * never touch memory an old owner still uses, and nobody has to wait on an
 * event. Merged blocks keep the later of their clocks, stream by stream.
 * Given the same requests, the allocator makes the same decisions: the
 * simulator's peaks equal the runtime's byte for byte.
 */
#ifndef CORE_ALLOC_H
#define CORE_ALLOC_H

#include <stdint.h>

#include "schedule.h"

struct alloc_cfg {
	int caching;       /* 1: per-stream caching pools; 0: one arena */
	uint64_t round;    /* requests are rounded up to this */
	uint64_t segment;  /* segment granularity */
};

/* Backs a new segment of `bytes` (NULL: out of memory). The simulator passes no callback. */
typedef void *(*alloc_reserve_fn)(void *ctx, uint64_t bytes);

struct allocator;

/* An allocator for buffers 0..nbufs-1; reserve may be NULL (no memory behind the addresses). */
struct allocator *alloc_new(const struct alloc_cfg *cfg, int nbufs, alloc_reserve_fn reserve, void *ctx);
/* Frees the allocator's own tables, not the segments (their owner releases those); NULL is a no-op. */
void alloc_free(struct allocator *a);

/*
 * Give buffer `buf` a block of at least `bytes` for an op on `stream`
 * whose vector clock is `clock` (ST_COUNT entries; NULL: every earlier op
 * has completed). 0, or -1 when a segment could not be reserved.
 */
int alloc_get(struct allocator *a, int buf, uint64_t bytes, int stream, const uint32_t *clock);
/* Buffer `buf` is freed by the op at position `pos` of stream `stream`. */
void alloc_put(struct allocator *a, int buf, int stream, uint32_t pos);
/* Every op issued so far has completed (a step ended): freed blocks are free for anyone. */
void alloc_settle(struct allocator *a);

/* The block size buffer buf holds (0 when none), its memory (NULL without a reserve callback). */
uint64_t alloc_granted(const struct allocator *a, int buf);
void *alloc_ptr(const struct allocator *a, int buf);
/* Bytes granted now, bytes of the segments reserved, and the number of segments. */
uint64_t alloc_allocated(const struct allocator *a);
uint64_t alloc_reserved(const struct allocator *a);
int alloc_segments(const struct allocator *a);
/* The memory of segment i (NULL without a reserve callback): for its owner to release. */
void *alloc_segment_ptr(const struct allocator *a, int i);

#endif
