/*
 * host_adamw.h - the host optimizer's AdamW step (offload), for both
 * backends: ref_adamw's arithmetic over a list of tensors whose
 * parameters, gradients and states are each fp32 or bf16, the gradients
 * scaled first, split over threads by element ranges.
 *
 * Every element is updated once, by the same arithmetic, whatever thread
 * takes it: the result does not depend on the number of threads. A
 * worker flushes subnormals where the caller's thread does (x86: MXCSR is
 * per thread), so that no thread is a hundred times slower on them.
 */
#ifndef GPU_RUN_HOST_ADAMW_H
#define GPU_RUN_HOST_ADAMW_H

#include "backend.h"
#include "ref.h"

/* One step over t[0..count-1]; threads >= 1 (the caller's thread is one of them). */
void host_adamw(const struct optim_tensor *t, int count, const struct ref_adamw_hparams *hp, int step, float scale,
		int threads);

/*
 * The threads a rank's host optimizer takes: the CPUs this process may run
 * on (its affinity), shared by the `local_ranks` ranks of its node, at
 * least 1 and at most HOST_ADAMW_THREADS_MAX.
 */
#define HOST_ADAMW_THREADS_MAX 64
int host_adamw_threads(int local_ranks);

#endif
