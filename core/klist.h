/*
 * klist.h - a kernel list being filled: what core/model.c (this project's
 * kernels) and core/recipe.c (the frameworks' recipes) both build their
 * lists with. Internal to core/.
 */
#ifndef CORE_KLIST_H
#define CORE_KLIST_H

#include "model.h"

struct klist {
	struct kernel *k;
	int n, max;
};

/* Append one kernel (the list must have room). */
void klist_put(struct klist *l, const char *name, enum kernel_kind kind, int64_t m, int64_t n, int64_t k,
	       uint64_t flops, uint64_t bytes);

/* A GEMM (m x k) by (k x n) at `a` bytes an element: both operands read, the output written. */
void klist_gemm(struct klist *l, const char *name, int64_t m, int64_t n, int64_t k, int a);

#endif
