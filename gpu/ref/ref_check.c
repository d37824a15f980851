/*
 * ref_check.c - finite-difference gradient checks (see ref_check.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ref_check.h"

int ref_check_grad(const char *name, float *x, const float *analytic, size_t n, ref_objective f,
		   void *ctx, const struct ref_check *c)
{
	double gmax = 0.0;
	for (size_t i = 0; i < n; i++)
		gmax = fmax(gmax, fabs(analytic[i]));
	size_t points = c->max_points && c->max_points < n ? c->max_points : n;
	int failed = 0;
	double worst = -1.0; /* error over its allowance */
	size_t worst_i = 0;
	double worst_a = 0.0, worst_fd = 0.0;
	for (size_t k = 0; k < points; k++) {
		size_t i = points == n ? k : k * n / points;
		float saved = x[i];
		x[i] = saved + c->eps;
		double fp = f(ctx);
		x[i] = saved - c->eps;
		double fm = f(ctx);
		x[i] = saved;
		/* the step actually taken, after rounding to float */
		double h = (double)(saved + c->eps) - (double)(saved - c->eps);
		double fd = (fp - fm) / h;
		double a = analytic[i];
		double allow = c->rtol * fmax(fabs(a), fabs(fd)) + c->atol * gmax;
		double ratio = fabs(a - fd) / (allow > 0.0 ? allow : 1e-300);
		if (ratio > 1.0)
			failed++;
		if (ratio > worst) {
			worst = ratio;
			worst_i = i;
			worst_a = a;
			worst_fd = fd;
		}
	}
	if (failed || getenv("REF_CHECK_VERBOSE"))
		printf("\n  %s: %d/%zu entries fail; worst [%zu] analytic %.6g fd %.6g "
		       "(|a-fd|/gmax %.2e, gmax %.3g, %.2f of allowance)\n",
		       name, failed, points, worst_i, worst_a, worst_fd,
		       gmax > 0.0 ? fabs(worst_a - worst_fd) / gmax : 0.0, gmax, worst);
	return failed;
}
