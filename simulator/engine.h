/*
 * engine.h - the discrete-event simulation of one step's op graph.
 *
 * The engine owns an integer nanosecond clock that only moves forward.
 * Streams are in-order queues; an op starts when it heads its stream, its
 * dependencies have finished and the CPU thread has launched it. Running
 * ops are activities that share rates: collectives and copies share links,
 * NCCL kernels hold SMs and HBM bandwidth, and kernels on different streams
 * share the SMs and HBM. Whenever the set of activities changes, every
 * activity's rate is recomputed and its finish event rescheduled (stale
 * events are recognised by a version number). Same schedule, same result,
 * bit for bit.
 */
#ifndef SIM_ENGINE_H
#define SIM_ENGINE_H

#include <stdint.h>
#include "memory.h"
#include "results.h"
#include "schedule.h"

struct sim_result {
	struct op_timing *ops;      /* per op: start and end */
	struct op_timing *launch;   /* per op: the CPU thread launching it */
	int32_t *pred;              /* per op: the op whose end let it start; -1 none, -2 its launch */
	struct mem_sample *mem;     /* memory timeline at the ops' issue times (when recorded) */
	int nmem;
	uint64_t step_ns;
	struct mem_peaks peaks;     /* the allocator's, over the run's steps */
	uint64_t events;            /* events processed */
};

/*
 * Simulate the schedule. Memory is the runtime's allocator (core/memory.h)
 * driven in issue order at the launch thread's times. Prices are the
 * catalog's, or with cluster.calibration the calibration's (cost.h).
 * record_memory: keep the memory timeline (the peaks are always computed).
 * Fills *r (release it with sim_result_release); 0, or -1 with a message
 * in err when the calibration cannot be used.
 */
int engine_run(const struct schedule *s, int record_memory, struct sim_result *r, char *err, int errlen);
void sim_result_release(struct sim_result *r);

#endif
