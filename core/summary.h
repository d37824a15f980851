/*
 * summary.h - the figures of one step from its op timeline: step time,
 * tokens/s, MFU, compute and exposed communication, wire bytes, memory
 * peaks. One definition for both binaries: the simulator summarises its
 * predicted timeline, the runtime its measured one, the same way.
 *
 *   compute         time some op runs on the compute stream;
 *   exposed comm    time communication (op_is_comm: a collective over more
 *                   than one rank, a host-device copy) runs while no
 *                   compute op does;
 *   MFU             the schedule's model FLOPs / step time / the GPU's peak
 *                   in the compute dtype (schedule.peak_flops).
 */
#ifndef CORE_SUMMARY_H
#define CORE_SUMMARY_H

#include "memory.h"
#include "results.h"
#include "schedule.h"

/*
 * Fill out from a step's op timings (ns from its start), its length and the
 * memory peaks. The critical path (ncrit) is left empty: only the
 * simulator knows what bounded each start.
 */
void summary_of_step(const struct schedule *s, const struct op_timing *ops, uint64_t step_ns,
		     const struct mem_peaks *peaks, struct summary *out);

/*
 * Of n > 0 measured steps' times, the index of the one closest to their
 * median (GSL's: the mean of the middle two of an even count), the first
 * of those as close: the step whose ops a measured run records.
 */
int summary_median_step(const double *step_s, int n);

/*
 * What summarising a step needs of its schedule alone (which ops count as
 * communication or compute, the wire bytes), worked out once for the steps
 * of one schedule (the simulator's sweeps price one schedule many times).
 * The schedule must outlive it.
 */
struct summary_plan {
	const struct schedule *s;
	uint8_t *cls;          /* per op, in stream order (schedule.stream_ops): 1 communication | 2 compute */
	uint64_t wire_bytes;   /* what one GPU sends in the step */
};

void summary_plan_init(struct summary_plan *p, const struct schedule *s);
void summary_plan_release(struct summary_plan *p);
/* summary_of_step with a plan of the step's schedule (s->exp as it is now). */
void summary_of_step_planned(const struct summary_plan *p, const struct op_timing *ops, uint64_t step_ns,
			     const struct mem_peaks *peaks, struct summary *out);

/*
 * What the caching allocator did at the GPU's capacity, as one line
 * ("allocator: 3 cache flushes a step, 36 over the run's 12 steps ..."),
 * in buf; NULL when it never reached the capacity.
 */
const char *summary_allocator_line(const struct experiment *e, const struct summary *m, char *buf, int len);

/* Compute-busy and exposed-communication seconds of a timeline. O(ops). */
void summary_overlap(const struct schedule *s, const struct op_timing *ops, double *compute_s,
		     double *exposed_comm_s);
/*
 * The same, and exposed_by_kind_s[k] (NULL: not wanted): the time ops of
 * kind k communicate while no compute op runs. Kinds that run at once
 * both count, so the kinds may add up to more than exposed_comm_s.
 */
void summary_overlap_by_kind(const struct schedule *s, const struct op_timing *ops, double *compute_s,
			     double *exposed_comm_s, double exposed_by_kind_s[OP_KIND_COUNT]);

#endif
