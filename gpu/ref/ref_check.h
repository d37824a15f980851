/*
 * ref_check.h - finite-difference gradient checks for the reference's
 * tests: compare an analytic gradient with central differences of a scalar
 * objective, entry by entry.
 */
#ifndef GPU_REF_CHECK_H
#define GPU_REF_CHECK_H

#include <stddef.h>

/* The scalar objective at the current inputs, e.g. sum(out * r) in double. */
typedef double (*ref_objective)(void *ctx);

struct ref_check {
	float eps;        /* step of the central difference */
	double rtol;      /* allowed error relative to the entry ... */
	double atol;      /* ... plus this fraction of the largest |analytic| entry */
	size_t max_points; /* check at most this many entries, evenly spread; 0: all */
};

/*
 * Perturb x[i] by +-eps, evaluate f(ctx) twice, restore x[i], and compare
 * (f+ - f-) / 2 eps with analytic[i]: an entry passes when
 *   |a - fd| <= rtol * max(|a|, |fd|) + atol * max_j |analytic[j]|.
 * Returns the number of failing entries; prints the worst one when any
 * fails (or always, with REF_CHECK_VERBOSE set in the environment).
 * Costs 2 evaluations per checked entry.
 */
int ref_check_grad(const char *name, float *x, const float *analytic, size_t n, ref_objective f,
		   void *ctx, const struct ref_check *c);

#endif
