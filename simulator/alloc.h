/*
 * alloc.h - the memory a GPU runtime reserves for what it allocates.
 *
 * Two models, chosen by the runtime spec: a preallocated arena (this
 * project's runtime: it reserves the peak of what is allocated, each buffer
 * rounded up), and a caching allocator like PyTorch's: requests rounded up,
 * large ones served from segments of at least segment_bytes, freed blocks
 * kept in a pool of the stream that allocated them and reused by best fit,
 * split when the remainder is large. Without addresses it cannot coalesce
 * neighbours, so it may overstate fragmentation a little.
 */
#ifndef SIM_ALLOC_H
#define SIM_ALLOC_H

#include <stdint.h>
#include "hw.h"
#include "schedule.h"

struct alloc_pool {
	uint64_t *free;   /* sizes of cached free blocks */
	int n, cap;
};

struct allocator {
	int caching;
	uint64_t round, segment;
	uint64_t allocated;     /* rounded bytes in use */
	uint64_t reserved;
	uint64_t *granted;      /* per buffer: the block size it holds */
	struct alloc_pool pools[ST_COUNT];
};

void alloc_init(struct allocator *a, const struct runtime_spec *rt, int nbufs);
void alloc_release(struct allocator *a);
void alloc_get(struct allocator *a, int buf, uint64_t bytes, int stream);
void alloc_put(struct allocator *a, int buf, int stream);

#endif
