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
#include "parts.h"
#include "ref.h"

/* One step over t[0..count-1]; threads >= 1 (the caller's thread is one of them; more than PARTS_MAX taken as PARTS_MAX). */
void host_adamw(const struct optim_tensor *t, int count, const struct ref_adamw_hparams *hp, int step, float scale,
		int threads);

#endif
