/*
 * memtrack.h - the bytes gpu_run holds, by memory category, over time.
 *
 * The executor reports every allocation and free of the schedule's
 * buffers (and of its own workspace) here; memtrack keeps the current and
 * peak totals by category and, while recording, a timeline in the
 * results schema (struct mem_sample, ns from the start of the step).
 * On the CPU there is no caching allocator: reserved equals allocated.
 */
#ifndef GPU_RUN_MEMTRACK_H
#define GPU_RUN_MEMTRACK_H

#include <stdint.h>

#include "results.h"

struct memtrack {
	uint64_t cur[MEM_CAT_COUNT];      /* bytes allocated now, by category */
	uint64_t total;                   /* their sum */
	uint64_t peak;                    /* largest total seen */
	uint64_t peak_by_cat[MEM_CAT_COUNT]; /* the categories at that peak */
	struct mem_sample *samples;       /* the timeline being recorded */
	int nsamples, cap;
};

void memtrack_init(struct memtrack *m);
void memtrack_release(struct memtrack *m);

void memtrack_alloc(struct memtrack *m, int cat, uint64_t bytes);
void memtrack_free(struct memtrack *m, int cat, uint64_t bytes);
/* Append the current state at t_ns (merged with the last sample when at the same time). */
void memtrack_sample(struct memtrack *m, uint64_t t_ns);
/* Drop the recorded timeline (a new step starts). */
void memtrack_clear_samples(struct memtrack *m);

#endif
