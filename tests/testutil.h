/*
 * testutil.h - what several CUnit suites need: experiments from
 * `section.key=value` settings, a seeded random generator, float
 * comparisons, a file's bytes. Failures of the setup itself are fatal CUnit assertions.
 */
#ifndef TESTS_TESTUTIL_H
#define TESTS_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>

#include <gsl/gsl_rng.h>

#include "experiment.h"
#include "schedule.h"

/*
 * A resolved experiment: the defaults, then each `section.key=value`
 * setting (a NULL-terminated list), then config_resolve. Release it with
 * config_release.
 */
void test_experiment(struct experiment *e, ...);
/* The same, and its schedule (schedule_free, then config_release); and with a va_list of settings. */
struct schedule *test_schedule(struct experiment *e, ...);
struct schedule *test_schedulev(struct experiment *e, va_list settings);

/* An mt19937 generator seeded with seed (gsl_rng_free). */
gsl_rng *test_rng(unsigned long seed);

/* The whole file at path in a malloc'ed NUL-terminated buffer, its size in *len; NULL when unreadable. */
char *test_slurp(const char *path, size_t *len);

/* max |a[i] - b[i]| and max |a[i]| over n floats. */
double test_max_abs_diff(const float *a, const float *b, size_t n);
double test_max_abs(const float *a, size_t n);

#endif
