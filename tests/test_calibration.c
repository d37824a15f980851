/*
 * test_calibration.c - calibration files: sessions of one world size
 * merge only on one fabric.
 *
 * Three sessions of 8 ranks are appended to a fresh file, each with one
 * collective point of its own: on a real fabric, then rank 0 of an
 * emulated 8-rank job, then real again. Reading 8 ranks gives the newest
 * session's fabric and the points of the sessions on it only; a 2-rank
 * session is never mixed in.
 */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calibration.h"

static char dir[64], path[128];

static int setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/test_calibration.XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof path, "%s/cal.h5", dir);
	return 0;
}

static int teardown(void)
{
	unlink(path);
	return rmdir(dir);
}

static void append(const char *fabric, int ranks, uint64_t bytes, double ns)
{
	struct calibration c;
	struct cal_coll coll = { OP_ALLGATHER, ranks, bytes, ns, ns };

	memset(&c, 0, sizeof c);
	snprintf(c.hardware, sizeof c.hardware, "test");
	snprintf(c.backend, sizeof c.backend, "cpu");
	snprintf(c.fabric, sizeof c.fabric, "%s", fabric);
	c.ranks = ranks;
	c.colls = &coll;
	c.ncolls = 1;
	c.dispatch_ns = ns;
	CU_ASSERT_FATAL(calibration_write(path, &c) == 0);
}

static int has_point(const struct calibration *c, uint64_t bytes)
{
	for (int i = 0; i < c->ncolls; i++)
		if (c->colls[i].bytes == bytes)
			return 1;
	return 0;
}

static void test_fabrics_do_not_merge(void)
{
	struct calibration c;
	char err[256];

	append("real", 8, 1024, 1.0);
	append("emulated", 8, 2048, 2.0);
	append("real", 2, 4096, 3.0);
	CU_ASSERT_FATAL(calibration_read(path, 8, &c, err, sizeof err) == 0);
	CU_ASSERT_STRING_EQUAL(c.fabric, "emulated");
	CU_ASSERT_EQUAL(c.sessions, 1);
	CU_ASSERT(has_point(&c, 2048) && !has_point(&c, 1024) && !has_point(&c, 4096));
	CU_ASSERT_EQUAL(c.dispatch_ns, 2.0);
	calibration_release(&c);

	append("real", 8, 8192, 4.0);
	CU_ASSERT_FATAL(calibration_read(path, 8, &c, err, sizeof err) == 0);
	CU_ASSERT_STRING_EQUAL(c.fabric, "real");
	CU_ASSERT_EQUAL(c.sessions, 2);
	CU_ASSERT(has_point(&c, 8192) && has_point(&c, 1024) && !has_point(&c, 2048));
	CU_ASSERT_EQUAL(c.dispatch_ns, 4.0);
	calibration_release(&c);

	CU_ASSERT_FATAL(calibration_read(path, 2, &c, err, sizeof err) == 0);
	CU_ASSERT(c.sessions == 1 && has_point(&c, 4096));
	calibration_release(&c);
	CU_ASSERT_EQUAL(calibration_read(path, 16, &c, err, sizeof err), -1);
	CU_ASSERT(strstr(err, "16 ranks") != NULL);
}

void suite_calibration(void)
{
	CU_pSuite s = CU_add_suite("calibration", setup, teardown);

	CU_add_test(s, "sessions merge on one fabric only", test_fabrics_do_not_merge);
}
