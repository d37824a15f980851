/*
 * exec.h - execute the step schedule with the CPU backend: the fp32
 * reference kernels (gpu/ref) for compute, MPI for collectives.
 *
 * The executor does not re-derive any policy. It walks s->ops in issue
 * order on one thread (streams serialise; the array is a topological
 * order, so every dependency is met) and does what each op says, with
 * memory that follows the schedule's buffer table: a buffer is allocated
 * (zeroed) at the op that allocates it and freed at the op that frees it;
 * a map buffer id -> memory finds it in between. Buffers alive for the
 * whole step (parameter shards, Adam moments) are allocated once.
 *
 * Gradient scaling, once and the same for every policy: each gradient
 * collective averages over its group (sum, then divide by the group size,
 * as DDP and FSDP do), so after the reduce-scatter and the hsdp
 * all-reduce, or the ddp all-reduce, a gradient is the mean over the
 * data-parallel ranks; the optimizer divides the sum over microbatches by
 * M. The step so follows the mean loss of the global batch. Averaging in
 * the collective (not a 1/(world M) loss scale) is what keeps ddp's
 * in-place all-reduce of a gradient that keeps accumulating across
 * microbatches (sync-each) right: the already-averaged part is equal on
 * every rank and passes through the average unchanged.
 */
#ifndef GPU_RUN_EXEC_H
#define GPU_RUN_EXEC_H

#include <stdint.h>

#include "comm.h"
#include "memtrack.h"
#include "results.h"
#include "schedule.h"

struct exec;

/*
 * Set up the executor for schedule s on this rank: the full model is
 * initialised from run.seed identically on every rank and each rank keeps
 * its shards. s and c must outlive it. Allocates the persistent buffers.
 */
struct exec *exec_new(const struct schedule *s, const struct comm *c);
void exec_free(struct exec *x);

/*
 * Run optimizer step `step` (1-based; AdamW's t) over the schedule.
 * timings (s->nops entries, ns from the step's start) are filled; the
 * memory timeline of the step is recorded in exec_memtrack(). Returns the
 * sum over this rank's microbatches of their mean loss.
 */
double exec_step(struct exec *x, int step, struct op_timing *timings);

const struct memtrack *exec_memtrack(const struct exec *x);
/* Bytes of the runtime's own workspace (counted as MEM_TRANSIENT in the timeline). */
uint64_t exec_workspace_bytes(const struct exec *x);

/*
 * Sum and sum of squares of every parameter of the model (the master
 * copy), over all shards: the same numbers on every rank. Collective.
 */
void exec_param_sums(const struct exec *x, double *sum, double *sumsq);

#endif
