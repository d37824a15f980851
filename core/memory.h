/*
 * memory.h - the device memory of a step, as the runtime allocates it:
 * the schedule's buffers through the allocator (core/alloc.h), in issue
 * order, with the bytes by category, their peaks and a timeline.
 *
 * Both binaries drive it the same way, so the simulator's predicted peaks
 * are the runtime's measured ones, byte for byte:
 *   memory_new; memory_persistent (parameter shards, optimizer state, once);
 *   per step: memory_step_begin; memory_issue for each op in issue order
 *   (at the time the op is issued); memory_step_end.
 * memory_issue grants an op's new buffers, samples (the op's buffers are
 * all alive while it runs), then frees the buffers the op frees, and
 * samples again. Bytes are the allocator's block sizes (requests rounded
 * up). Host buffers (offload) and aliases hold no device memory. When an
 * op's memory comes from a block freed by an op the schedule does not
 * order before it, the op must also wait for that op (memory.wait): the
 * runtime makes its stream wait, the simulator adds the dependency.
 *
 * PyTorch's caching allocator has the GPU's memory (the GPU spec's
 * hbm_gib) as its capacity: an op whose new segment would not fit
 * flushes the cache (core/alloc.h), which synchronizes the device
 * (memory.sync): its issue waits until every op issued before it has
 * finished. The counts of flushes and of segments reserved past the
 * capacity even so are kept per step.
 */
#ifndef CORE_MEMORY_H
#define CORE_MEMORY_H

#include <stdint.h>

#include "alloc.h"
#include "results.h"
#include "schedule.h"

/* Peaks over every step so far, and what the allocator did at its capacity. */
struct mem_peaks {
	uint64_t alloc;                 /* bytes granted */
	uint64_t reserved;              /* bytes of the segments reserved */
	uint64_t by_cat[MEM_CAT_COUNT]; /* the categories at the allocated peak */
	uint32_t retries;               /* flushes of the cache over every step (PyTorch's num_alloc_retries) */
	uint32_t ooms;                  /* segments reserved past the capacity even so, over every step (num_ooms) */
	uint32_t step_retries;          /* flushes in the last step begun */
	/*
	 * memory_predict, a caching allocator: the segments reserved when the
	 * run ends, by pool, 2 * stream + 1 for requests of 1 MiB and more
	 * (PyTorch's large pool), 2 * stream for the others; what
	 * torch.cuda.memory_snapshot() gives at a run's end (its reserved
	 * peak, but for flushes)
	 */
	uint64_t end_by_pool[2 * ST_COUNT];
	/*
	 * memory_predict: bytes allocated and reserved once the persistent
	 * buffers are (after[0]: the build, before a step) and at the end of
	 * each of the first nafter - 1 steps (after[k]: step k's), what
	 * torch.cuda.memory_allocated() and memory_reserved() give there: a
	 * PyTorch run's memory_by_step
	 */
	struct mem_after after[MEM_AFTER_MAX];
	int nafter;
	/* memory_predict's work: the ops it issued to the allocator, and those of repeated microbatches it skipped */
	uint64_t ops_issued, ops_skipped;
};

/*
 * Whether a step with these peaks fits a device of gpu_bytes: its
 * reserved memory within them, and no segment reserved past the
 * capacity (which leaves the reserved bytes above it).
 */
static inline int mem_peaks_fit(const struct mem_peaks *p, uint64_t gpu_bytes)
{
	return p->reserved <= gpu_bytes && !p->ooms;
}

struct memory {
	const struct schedule *s;
	struct allocator *a;
	const struct alloc_counts *counts;   /* the allocator's, read in place */
	uint64_t cur[MEM_CAT_COUNT];         /* bytes granted now, by category */
	uint64_t total;
	struct mem_peaks peaks;
	int record;                          /* keep the timeline of the current step */
	struct mem_sample *samples;
	int nsamples, cap;
	/*
	 * wait[op * ST_COUNT + t]: the op of stream t that `op` must wait for
	 * because its memory comes from a block that op freed, and the
	 * schedule does not already order them; -1 when none (this step).
	 */
	int32_t *wait;
	/* sync[op]: 1 when the op's grants flushed the cache (this step): it issues once the device has drained */
	uint8_t *sync;
	uint32_t step_ooms;                  /* this step's segments past the capacity */
	/*
	 * memory_predict: the bytes at the current step's beginning (the
	 * persistent buffers), and 1 once the step was found to go on as the
	 * step before it did: the allocator then stopped where the two met,
	 * and memory_step_end takes the step's end from those bytes.
	 */
	uint64_t begin_cur[MEM_CAT_COUNT], begin_total, begin_reserved;
	int replayed;
	int steps;                           /* steps begun (memory_step_begin) */
	uint64_t once_total;                 /* bytes granted to buffers made once, in the first step (buffer.once) */
	/*
	 * memory_predict: the microbatches whose ops repeat, those of one
	 * microbatch the ones of the microbatch before (memory_new finds
	 * the longest such run): n windows of len ops from op `first`, each
	 * window's ops `len` later than the window before's, its buffers
	 * dbuf numbers later, each stream t's positions dpos[t] later (pos[t]
	 * before the first window). n = 0: none.
	 */
	struct mem_series {
		int first, len, n, dbuf;
		uint32_t dpos[ST_COUNT], pos[ST_COUNT];
		/*
		 * next[j][p]: the clock of pool p's first request from window
		 * j's start on (UINT32_MAX: none; a buffer made once counts,
		 * the requests after it have later clocks): alloc_frame.next
		 */
		uint32_t (*next)[2 * ST_COUNT][ST_COUNT];
	} series;
	/*
	 * memory_predict skips windows (on when memory_new finds a series, the
	 * allocator can move (alloc_movable) and no timeline is kept): where
	 * the allocator, seen from a window's start, is as it was at the start
	 * of the window before (or of the one before that), every later
	 * window goes as those did, and the allocator moves past them at
	 * once (the ops skipped: peaks.ops_skipped)
	 */
	int skip;
};

/*
 * Memory for schedule s (which must outlive it). The allocator's behaviour
 * comes from the experiment's runtime spec; reserve backs its segments
 * (NULL in the simulator). record: keep each step's timeline.
 */
struct memory *memory_new(const struct schedule *s, int record, alloc_reserve_fn reserve, void *ctx);
/* The allocator an experiment's runtime has (memory_new's; ./sim --compare replays a PyTorch trace with it). */
void memory_alloc_cfg(const struct experiment *e, struct alloc_cfg *cfg);
void memory_free(struct memory *m);
/*
 * NULL when schedule s's allocator can be backed by real memory (memory_new
 * with a reserve callback, as a runtime does); else why not, a sentence:
 * PyTorch's expandable segments map pages into a range, which only the
 * model of the allocator does.
 */
const char *memory_unbacked(const struct schedule *s);

/* Grant the buffers alive for the whole run. 0, or -1 when out of memory. */
int memory_persistent(struct memory *m);
/* A step begins: everything issued before has completed; the timeline restarts. */
void memory_step_begin(struct memory *m);
/*
 * Op `op` is issued at t_ns (from the step's start): memory_grant gives it
 * its new buffers (0, or -1 when out of memory), memory_release frees the
 * ones it frees; memory_issue does both. A runtime takes the op's operand
 * memory between the two.
 */
int memory_grant(struct memory *m, int op, uint64_t t_ns);
/*
 * Whether buffer buf, allocated by an op, is made in the step begun: every
 * step, but the first only for what the first step makes to keep
 * (buffer.once, the optimizer's state of PyTorch's runtimes).
 */
static inline int memory_makes(const struct memory *m, int buf)
{
	return !m->s->bufs[buf].once || m->steps <= 1;
}
void memory_release(struct memory *m, int op, uint64_t t_ns);
int memory_issue(struct memory *m, int op, uint64_t t_ns);
/* The step ends at t_ns: buffers the schedule leaves alive die with it. */
void memory_step_end(struct memory *m, uint64_t t_ns);

/* The device memory of buffer buf (aliases resolved); NULL without a reserve callback or when not live. */
void *memory_ptr(const struct memory *m, int buf);

/*
 * Simulate the allocator over the steps of a run (run.warmup + run.steps,
 * stopping early once a step ends with the segments it began with, in
 * pools, sizes and order, and with the capacity it began with: every later
 * step is then the same, and its counts of flushes are added for each; or
 * once a step, at one of its checkpoints, is in the state the step before
 * it was in there: the rest of it is the rest of that one; and within a
 * step, without a timeline, skipping the microbatches that repeat once
 * the allocator is seen in the same state at two of their starts:
 * memory.skip), recording the last step's timeline at the op issue times
 * `issue_ns`: what the runtime measures over the same run. The last step
 * is left open (its waits in m->wait) for the caller to end with
 * memory_step_end once it knows when the step ends.
 */
void memory_predict(struct memory *m, const uint64_t *issue_ns);

#endif
