/*
 * parts.h - host work split over threads: n parts of one job, each run by
 * a thread of its own, part 0 by the caller's (the host optimizer's steps,
 * host_adamw.c; a shard's initial parameters, layout.c).
 */
#ifndef GPU_RUN_PARTS_H
#define GPU_RUN_PARTS_H

#include <stddef.h>

#define PARTS_MAX 64

/*
 * run(parts + i * size) for i in [0, n), 1 <= n <= PARTS_MAX, on n threads
 * (the caller's one of them); returns when all have. A part no thread could
 * be made for runs on the caller's thread.
 */
void parts_run(void *(*run)(void *), void *parts, size_t size, int n);

/*
 * The parts to split `total` elements into on at most `threads` threads,
 * each part at least `per` elements (>= 1) but for the last: 1 to
 * PARTS_MAX.
 */
int parts_count(int threads, size_t total, size_t per);

/*
 * The threads a rank's host work takes: the CPUs this process may run on
 * (its affinity), shared by the `local_ranks` ranks of its node, at least 1
 * and at most PARTS_MAX.
 */
int parts_threads(int local_ranks);

#endif
