/*
 * testutil.c - helpers the suites share (see testutil.h).
 */
#include "testutil.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <CUnit/CUnit.h>

#include "config.h"

static void experimentv(struct experiment *e, va_list ap)
{
	const char *kv;

	config_init(e);
	while ((kv = va_arg(ap, const char *)))
		CU_ASSERT_FATAL(config_set(e, kv, "test") == 0);
	CU_ASSERT_FATAL(config_resolve(e) == 0);
}

void test_experiment(struct experiment *e, ...)
{
	va_list ap;

	va_start(ap, e);
	experimentv(e, ap);
	va_end(ap);
}

struct schedule *test_schedulev(struct experiment *e, va_list settings)
{
	char err[256];
	struct schedule *s;

	experimentv(e, settings);
	s = schedule_new(e, err, sizeof(err));
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	return s;
}

struct schedule *test_schedule(struct experiment *e, ...)
{
	va_list ap;
	struct schedule *s;

	va_start(ap, e);
	s = test_schedulev(e, ap);
	va_end(ap);
	return s;
}

gsl_rng *test_rng(unsigned long seed)
{
	gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);

	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	gsl_rng_set(r, seed);
	return r;
}

double test_max_abs_diff(const float *a, const float *b, size_t n)
{
	double m = 0.0;

	for (size_t i = 0; i < n; i++)
		m = fmax(m, fabs((double)a[i] - b[i]));
	return m;
}

double test_max_abs(const float *a, size_t n)
{
	double m = 0.0;

	for (size_t i = 0; i < n; i++)
		m = fmax(m, fabs(a[i]));
	return m;
}

char *test_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n + 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	if (buf) {
		buf[n] = '\0';
		*len = (size_t)n;
	}
	return buf;
}
