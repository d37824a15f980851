/*
 * exec.h - gpu_run's walker: executes the step schedule on a backend.
 *
 * The walker does not re-derive any policy and does not know the device.
 * For each op of s->ops, in issue order, it
 *   - grants the op's new buffers and frees the ones it frees through the
 *     runtime's allocator (core/memory.h), at the moment it issues the op,
 *     as the simulator models it;
 *   - makes the op's stream wait for the end events of its dependencies on
 *     other streams, records the op's start event, zero-fills the buffers
 *     that are accumulated into, launches the op's work with its operands'
 *     memory (the schedule names every operand), and records its end event;
 * then waits for the streams once and reads the op timings from the
 * events. Buffers alive for the whole run (parameter shards, optimizer
 * state) are granted once; host buffers (offload) are the backend's host
 * memory.
 *
 * Gradient scaling, once and the same for every policy: each gradient
 * collective averages over its group (sum, then divide by the group size,
 * as DDP and FSDP do), so after the reduce-scatter and the hsdp
 * all-reduce, or the ddp all-reduce, a gradient is the mean over the
 * data-parallel ranks; the optimizer divides the sum over microbatches by
 * M. The step so follows the mean loss of the global batch.
 */
#ifndef GPU_RUN_EXEC_H
#define GPU_RUN_EXEC_H

#include <stdint.h>

#include "backend.h"
#include "comm.h"
#include "memory.h"
#include "results.h"
#include "schedule.h"

struct exec;

/*
 * Set up the walker for schedule s on backend b: each rank makes its own
 * shards of the parameters from run.seed (layout_shard_init: the same
 * values as the slice of the whole model, whatever the sharding), with
 * zero optimizer state. s, c and b must outlive it. serialize: wait for each op to
 * finish before issuing the next (one op at a time, in issue order: the
 * blocking execution the streams must agree with). NULL with a message in
 * err when the device has too little memory for the persistent state.
 */
struct exec *exec_new(const struct schedule *s, struct comm *c, struct backend *b, int serialize, char *err,
		      int errlen);
void exec_free(struct exec *x);

/*
 * Run optimizer step `step` (1-based; AdamW's t) over the schedule.
 * timings (s->nops entries, ns from the step's start) are filled, and the
 * step's length. Returns the sum over this rank's microbatches of their
 * mean loss, or NAN after a message when the device ran out of memory.
 */
double exec_step(struct exec *x, int step, struct op_timing *timings, uint64_t *step_ns);
/* Whether a step ran out of device memory (its NAN is no loss). */
int exec_out_of_memory(const struct exec *x);

/* The device memory: peaks over the steps so far, the last step's timeline. */
const struct memory *exec_memory(const struct exec *x);

/*
 * Sum and sum of squares of every parameter of the model (the master
 * copy), over all shards: the same numbers on every rank. Collective.
 */
void exec_param_sums(const struct exec *x, double *sum, double *sumsq);

/*
 * Copy op i of s (OP_COPY_OUT, OP_CONCAT, OP_COPY_IN) launched on its
 * stream as a step launches it (lay: s's, layout_new), each operand buffer
 * where ptr(ctx, buf) says: the executor's memory, or gpu_run --calibrate's
 * buffers, which times a schedule's copies alone (FSDP2's per-tensor packs
 * are not passes: on the H200 they took 1.6 to 1.8 times a pass of their
 * bytes).
 */
struct backend_ops;
struct layout;
void exec_launch_copy(const struct backend_ops *b, struct backend *be, const struct schedule *s,
		      const struct layout *lay, int i, void *(*ptr)(void *ctx, int buf), void *ctx);

#endif
