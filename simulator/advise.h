/*
 * advise.h - `./sim --advise`: which configuration to run, and why.
 *
 * From the rows of a sweep (explore.h; the policy walk around an
 * experiment, or a sweep file's configurations): the fastest
 * configuration that fits its memory budget, what dominates its critical
 * path and its exposed communication; the runners-up, each with what to
 * change to get it and what that costs, in step time (the components that
 * move most: exposed all-gather, reduce-scatter, all-reduce, host copies,
 * recompute, forward, backward, optimizer) and memory; the Pareto front of
 * step time against peak memory. With a resource swept (the sweep's
 * what_if axis, or --what-if): the fastest configuration at each value,
 * the fastest of each sharding family, and the values between which the
 * fastest changes. The best and the runners-up are simulated again, alone,
 * for their details: the rows hold summaries only.
 */
#ifndef SIM_ADVISE_H
#define SIM_ADVISE_H

#include <stdio.h>

#include "explore.h"
#include "sweep.h"

struct advise_opts {
	int top;   /* runners-up shown; 0: 5 */
	int json;  /* one JSON object instead of the text */
	int interrupted; /* the sweep was stopped: its rows are those done before (advise_print sets it) */
};

/*
 * Print the advice of sweep sw from its rows (res->rows, every row). 0;
 * 1 when no configuration was timed.
 */
int advise_print(const struct sweep *sw, const struct explore_result *res, const struct advise_opts *o, FILE *f);

/*
 * The rows of the Pareto front of step time against peak reserved memory
 * among rows[0..n) that were timed: each faster than every row that needs
 * no more memory. Their indices into rows, by increasing memory, into out
 * (n entries); returns how many.
 */
size_t advise_pareto(const struct sweep_row *rows, size_t n, size_t *out);

#endif
