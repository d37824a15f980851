/*
 * engine.h - the discrete-event simulation of one step's op graph.
 *
 * The engine owns an integer nanosecond clock that only moves forward.
 * Streams are in-order queues; an op starts when it heads its stream, its
 * dependencies have finished and the CPU thread has launched it. The CPU
 * thread launches in schedule order, and blocks while the op's stream
 * holds as many launched, unfinished kernels as the runtime's queue takes. Running
 * ops are activities that share rates: collectives and copies share links,
 * NCCL kernels hold SMs and HBM bandwidth, and kernels on different streams
 * share the SMs and HBM. Whenever the set of activities changes, every
 * activity's rate is recomputed and its finish event rescheduled. Same
 * schedule, same result, bit for bit.
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
	int32_t *launch_by;         /* per op: the op whose end let its launch begin (a full queue), -1 */
	struct mem_sample *mem;     /* memory timeline at the ops' issue times (when recorded) */
	int nmem;
	uint64_t step_ns;
	struct mem_peaks peaks;     /* the allocator's, over the run's steps */
	uint64_t events;            /* events processed */
	int cap;                    /* ops the arrays hold: a result is reused by engine_simulate */
};

/*
 * What simulating a schedule needs before its clock starts, and which does
 * not depend on the links' or the GPU's speeds: the launch thread's issue
 * times, the allocator run in issue order (peaks and the waits it adds)
 * and the op graph with those waits. Configurations that differ only in
 * the cluster's bandwidths or latencies, or the GPU spec's speeds, share
 * one schedule and one prep (simulator/explore.c).
 */
struct engine_prep {
	const struct schedule *s;     /* the schedule prepared */
	int record_memory;
	int no_pred;                  /* set by the caller: r->pred is not wanted (no critical path) */
	int used;                     /* simulated at least once */
	struct op_timing *launch;     /* per op: the CPU thread launching it */
	struct mem_peaks peaks;       /* the allocator's, over the run's steps */
	struct memory *mem;           /* record_memory: the step, ended by the one simulation */
	uint8_t *sync;                /* per op: its issue waits for the device to drain (a flush of the cache), or NULL: none */
	int *deps_left;               /* per op: what it waits for, before anything ran */
	int *pred_first, *pred;       /* CSR of what each op waits for */
	int *succ_first, *succ;       /* CSR of dependents */
	int *stream_ops[ST_COUNT];    /* each stream's ops in order */
	int stream_n[ST_COUNT];
	/* kept across its simulations: what each one starts from scratch */
	int *scratch;                 /* 2 (nops + 1) ints */
	struct eq *q;                 /* the event queue's storage */
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

/*
 * engine_run in two parts. engine_prepare: the prep of schedule s (NULL
 * with a message in err when its calibration cannot be used); free it with
 * engine_prep_free. engine_simulate: one simulation of schedule s with
 * prep p, priced by s->exp. s may be the prepared schedule itself, or the
 * same graph for an experiment whose schedule inputs (schedule_same_inputs)
 * and runtime agree with the prepared one's. A prep that records memory
 * serves one simulation (the timeline moves to the result). r is filled as
 * engine_run fills it, and may hold a previous result of this function,
 * whose arrays are reused; 0, or -1 with a message in err.
 */
struct engine_prep *engine_prepare(const struct schedule *s, int record_memory, char *err, int errlen);
void engine_prep_free(struct engine_prep *p);
int engine_simulate(struct engine_prep *p, const struct schedule *s, struct sim_result *r, char *err, int errlen);

#endif
