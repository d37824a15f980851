/*
 * test_calibration.c - calibration files: sessions of one world size
 * merge only on one fabric.
 *
 * Three sessions of 8 ranks are appended to a fresh file, each with one
 * collective point of its own: on a real fabric, then rank 0 of an
 * emulated 8-rank job, then real again. Reading 8 ranks gives the newest
 * session's fabric and the points of the sessions on it only; a 2-rank
 * session is never mixed in. A measured run asks for its own fabric's
 * sessions (an older one on it, not the newer on the other), and a world
 * size measured only on the other fabric is refused.
 *
 * Sessions of a series (a calibration repeated in separate processes)
 * give each point, and each scalar, as the median of their measurements.
 * A memory-bound op is priced by the pass of its traffic; a host-device
 * copy by the copies measured in its direction.
 *
 * Only a calibration file (HDF5 with /calibration) or an empty HDF5 file
 * is added to: a results file, another HDF5 file or a text file is
 * refused before (calibration_refusal) and when writing, byte for byte
 * as it was.
 *
 * Reading checks every value of every session (a damaged file is refused
 * naming the session, table, row and field), that the sessions that merge
 * are one machine, and merges in the order of first appearance, newest
 * session first (tests/e2e_calibration.sh damages a real file).
 */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>

#include "calibration.h"
#include "testutil.h"

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

static void append_series(const char *fabric, const char *series, int ranks, uint64_t bytes, double ns)
{
	struct calibration c;
	struct cal_coll coll = { OP_ALLGATHER, ranks, bytes, ns, ns };
	struct cal_pass pass = { 4096, 1e3 };

	memset(&c, 0, sizeof c);
	c.passes = &pass;
	c.npasses = 1;
	c.adamw_ns_per_elem = c.host_adamw_ns_per_elem = 1.0;
	snprintf(c.series, sizeof c.series, "%s", series);
	snprintf(c.hardware, sizeof c.hardware, "test");
	snprintf(c.backend, sizeof c.backend, "cpu");
	snprintf(c.fabric, sizeof c.fabric, "%s", fabric);
	c.ranks = ranks;
	c.colls = &coll;
	c.ncolls = 1;
	c.dispatch_ns = ns;
	CU_ASSERT_FATAL(calibration_write(path, &c) == 0);
}

static void append(const char *fabric, int ranks, uint64_t bytes, double ns)
{
	append_series(fabric, "", ranks, bytes, ns);
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

	/* a measured run asks for its own fabric: the older emulated session, not the newer real ones */
	CU_ASSERT_FATAL(calibration_read_on(path, 8, "emulated", &c, err, sizeof err) == 0);
	CU_ASSERT_STRING_EQUAL(c.fabric, "emulated");
	CU_ASSERT(c.sessions == 1 && has_point(&c, 2048) && !has_point(&c, 8192));
	CU_ASSERT_EQUAL(c.dispatch_ns, 2.0);
	calibration_release(&c);
	CU_ASSERT_FATAL(calibration_read_on(path, 8, "real", &c, err, sizeof err) == 0);
	CU_ASSERT(c.sessions == 2 && has_point(&c, 8192) && has_point(&c, 1024) && !has_point(&c, 2048));
	calibration_release(&c);
	CU_ASSERT_FATAL(calibration_read_on(path, 8, "", &c, err, sizeof err) == 0); /* "": the newest's */
	CU_ASSERT_STRING_EQUAL(c.fabric, "real");
	calibration_release(&c);
	/* a world size measured on the other fabric only is refused, saying how to calibrate it */
	CU_ASSERT_EQUAL(calibration_read_on(path, 2, "emulated", &c, err, sizeof err), -1);
	CU_ASSERT(strstr(err, "no calibration measured with 2 ranks on an emulated fabric") != NULL);
	CU_ASSERT(strstr(err, "1 session of 2 ranks on a real one") != NULL);
	CU_ASSERT(strstr(err, "gpu_run --calibrate --emulate-world 2") != NULL);

	CU_ASSERT_FATAL(calibration_read(path, 2, &c, err, sizeof err) == 0);
	CU_ASSERT(c.sessions == 1 && has_point(&c, 4096));
	calibration_release(&c);
	CU_ASSERT_EQUAL(calibration_read(path, 16, &c, err, sizeof err), -1);
	CU_ASSERT(strstr(err, "16 ranks") != NULL);
	CU_ASSERT_EQUAL(calibration_read_on(path, 16, "real", &c, err, sizeof err), -1);
	CU_ASSERT(strstr(err, "no calibration measured with 16 ranks (its sessions have") != NULL);
}

static double point_ns(const struct calibration *c, uint64_t bytes)
{
	for (int i = 0; i < c->ncolls; i++)
		if (c->colls[i].bytes == bytes)
			return c->colls[i].ns;
	return -1;
}

static void test_series_median(void)
{
	struct calibration c;
	char err[256];

	/* older sessions alone, then three repeats of series "v" measuring one point 10, 20 and 40 */
	append("real", 4, 1024, 100.0);
	append("real", 4, 512, 7.0);
	append_series("real", "v", 4, 1024, 10.0);
	append_series("real", "v", 4, 1024, 20.0);
	append_series("real", "v", 4, 1024, 40.0);
	CU_ASSERT_FATAL(calibration_read(path, 4, &c, err, sizeof err) == 0);
	CU_ASSERT_STRING_EQUAL(c.series, "v");
	CU_ASSERT_EQUAL(point_ns(&c, 1024), 20.0); /* the series' median, not the newest (40) */
	CU_ASSERT_EQUAL(point_ns(&c, 512), 7.0);   /* a point the series lacks: the older session's */
	CU_ASSERT_EQUAL(c.colls[0].ns_busy, 20.0);
	CU_ASSERT_EQUAL(c.dispatch_ns, 20.0);
	calibration_release(&c);

	/* a fourth repeat, 15: the median of 10, 15, 20, 40 is 17.5, which no session measured */
	append_series("real", "v", 4, 1024, 15.0);
	CU_ASSERT_FATAL(calibration_read(path, 4, &c, err, sizeof err) == 0);
	CU_ASSERT_EQUAL(point_ns(&c, 1024), 17.5);
	CU_ASSERT_EQUAL(c.dispatch_ns, 17.5);
	calibration_release(&c);

	/* a session of no series after them: it alone, newest, prices its point and its scalars */
	append("real", 4, 1024, 50.0);
	CU_ASSERT_FATAL(calibration_read(path, 4, &c, err, sizeof err) == 0);
	CU_ASSERT_STRING_EQUAL(c.series, "");
	CU_ASSERT_EQUAL(point_ns(&c, 1024), 50.0);
	CU_ASSERT_EQUAL(c.dispatch_ns, 50.0);
	calibration_release(&c);
}

/*
 * A pass labelled b moves 1.5 b (dst += src over b / 8 floats): an op whose
 * bytes count 1.5 b of traffic, as an accumulation of b / 8 fp32 elements
 * does (3 x 4 bytes each), costs what that pass measured; an op of b bytes
 * of traffic, less.
 */
static void test_pass_traffic(void)
{
	struct cal_pass p[] = { { 1 << 20, 100e3 }, { 4 << 20, 400e3 }, { 16 << 20, 1600e3 } };
	struct calibration c;
	struct kernel k = { .kind = K_ELEMENTWISE, .bytes = 6 << 20 };
	int exact;

	memset(&c, 0, sizeof c);
	c.passes = p;
	c.npasses = 3;
	CU_ASSERT_DOUBLE_EQUAL(calibration_pass_ns(&c, 6 << 20), 400e3, 1.0);        /* 3 x 4 bytes x (4 MiB / 8) */
	CU_ASSERT_DOUBLE_EQUAL(calibration_pass_ns(&c, 3 << 20), 200e3, 1.0);        /* between two points, log-log */
	CU_ASSERT_DOUBLE_EQUAL(calibration_kernel_ns(&c, &k, 0, &exact), 400e3, 1.0); /* a kernel of no measured name */
	CU_ASSERT_EQUAL(exact, 0);
}

/* Attribute key of group /calibration/<session> of file f set to v (what a session written elsewhere may carry). */
static void set_attr(const char *f, const char *session, const char *key, double v)
{
	char g[64];
	hid_t file = H5Fopen(f, H5F_ACC_RDWR, H5P_DEFAULT), grp, sp, at;

	CU_ASSERT_FATAL(file >= 0);
	snprintf(g, sizeof g, "/calibration/%s", session);
	grp = H5Gopen2(file, g, H5P_DEFAULT);
	sp = H5Screate(H5S_SCALAR);
	at = H5Acreate2(grp, key, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
	CU_ASSERT_FATAL(at >= 0);
	H5Awrite(at, H5T_NATIVE_DOUBLE, &v);
	H5Aclose(at);
	H5Sclose(sp);
	H5Gclose(grp);
	H5Fclose(file);
}

static void good_session(struct calibration *c, int ranks, struct cal_pass *pass, struct cal_coll *coll);
static void assert_refused(const char *f, int ranks, const char *const *want);

/*
 * A session whose passes count their traffic otherwise (pass_traffic:
 * experiments/pytorch/microbench.py's of 2026-11-27 labelled an in-place
 * multiply by the bytes it read and wrote, 1.0) reads as the schema's
 * passes: an op of b bytes of traffic costs the pass that moved b. Merged
 * with a session of the schema's passes, each keeps its own meaning.
 * PyTorch's fused AdamW per element (adamw_fused_ns_per_elem) is read
 * where a session has it, 0 where none does.
 */
static void test_pass_traffic_attr(void)
{
	struct calibration c, r;
	struct cal_pass pass, two[2] = { { 3000, 1e3 }, { 30000, 10e3 } };
	struct cal_coll coll;
	char f[160], err[512];

	snprintf(f, sizeof f, "%s/traffic.h5", dir);
	good_session(&c, 2, &pass, &coll);
	c.passes = two;
	c.npasses = 2;
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
	CU_ASSERT_FATAL(calibration_read(f, 2, &r, err, sizeof err) == 0);
	CU_ASSERT_DOUBLE_EQUAL(calibration_pass_ns(&r, 4500), 1e3, 1e-6); /* 1.5 x 3000 */
	CU_ASSERT_EQUAL(r.adamw_fused_ns_per_elem, 0);                    /* not measured */
	calibration_release(&r);
	set_attr(f, "000000", "pass_traffic", 1.0);
	CU_ASSERT_FATAL(calibration_read(f, 2, &r, err, sizeof err) == 0);
	CU_ASSERT_EQUAL_FATAL(r.npasses, 2);
	CU_ASSERT_EQUAL(r.passes[0].bytes, 2000); /* labelled as the schema's pass of 3000 bytes of traffic */
	CU_ASSERT_EQUAL(r.passes[1].bytes, 20000);
	CU_ASSERT_DOUBLE_EQUAL(calibration_pass_ns(&r, 3000), 1e3, 1e-6);
	CU_ASSERT_DOUBLE_EQUAL(calibration_pass_ns(&r, 30000), 10e3, 1e-6);
	calibration_release(&r);

	/* a newer session of the schema's passes, and fused AdamW measured */
	good_session(&c, 2, &pass, &coll);
	pass = (struct cal_pass){ 60000, 20e3 };
	c.adamw_fused_ns_per_elem = 0.5;
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
	CU_ASSERT_FATAL(calibration_read(f, 2, &r, err, sizeof err) == 0);
	CU_ASSERT_EQUAL_FATAL(r.npasses, 3);
	CU_ASSERT_DOUBLE_EQUAL(calibration_pass_ns(&r, 90000), 20e3, 1e-6);
	CU_ASSERT_DOUBLE_EQUAL(calibration_pass_ns(&r, 3000), 1e3, 1e-6);
	CU_ASSERT_EQUAL(r.adamw_fused_ns_per_elem, 0.5);
	CU_ASSERT_EQUAL(r.adamw_ns_per_elem, 2.0);
	calibration_release(&r);

	set_attr(f, "000001", "pass_traffic", 9.0);
	assert_refused(f, 2, (const char *const[]){ "/calibration/000001: attribute pass_traffic = 9 (allowed: above 0 "
						     "and at most 8", NULL });
	unlink(f);
}

/*
 * The build of gpu_run that measured a session (binary, a hash of its
 * executable): written where known, read back from the newest session;
 * a session that does not say reads as "".
 */
static void test_binary_attr(void)
{
	struct calibration c, r;
	struct cal_pass pass;
	struct cal_coll coll;
	char f[160], err[512];

	snprintf(f, sizeof f, "%s/binary.h5", dir);
	good_session(&c, 2, &pass, &coll);
	snprintf(c.binary, sizeof c.binary, "0123456789abcdef");
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
	CU_ASSERT_FATAL(calibration_read(f, 2, &r, err, sizeof err) == 0);
	CU_ASSERT_STRING_EQUAL(r.binary, "0123456789abcdef");
	calibration_release(&r);
	good_session(&c, 2, &pass, &coll); /* newer, and silent */
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
	CU_ASSERT_FATAL(calibration_read(f, 2, &r, err, sizeof err) == 0);
	CU_ASSERT_STRING_EQUAL(r.binary, "");
	calibration_release(&r);
	unlink(f);
}

/*
 * The optimizer's cost per call (gpu_run times it at two sizes): written
 * where measured and read back, each of the device's and the host's its
 * own; a session from before has none (0, the slope alone); a call
 * priced as call_ns + ns_per_elem x elements, fused AdamW (PyTorch's)
 * per element alone; a negative cost per call refused by name.
 */
/*
 * The optimizer's two sizes: the first H200 session's host optimizer, 2.9
 * ns an element at 2^20 elements mostly its threads' start, is a call
 * cost and 0.68 ns an element; a line that would make the call cost
 * negative, or a larger size no slower, gives no call cost.
 */
static void test_optimizer_fit(void)
{
	double call, per;
	double n0 = 1 << 20, n1 = 1 << 27, t0 = 2.2e6 + 0.68 * n0, t1 = 2.2e6 + 0.68 * n1;

	calibration_adamw_fit(n0, t0, n1, t1, &call, &per);
	CU_ASSERT_DOUBLE_EQUAL(call, 2.2e6, 1e-3);
	CU_ASSERT_DOUBLE_EQUAL(per, 0.68, 1e-12);
	/* below the line at the small size: the call would cost -1 ms */
	calibration_adamw_fit(n0, 0.68 * n0 - 1e6, n1, 0.68 * n1 - 1e6, &call, &per);
	CU_ASSERT_EQUAL(call, 0);
	CU_ASSERT_DOUBLE_EQUAL(per, (0.68 * n1 - 1e6) / n1, 1e-12);
	/* the larger size no slower (noise): its time over its elements */
	calibration_adamw_fit(n0, 5e7, n1, 4e7, &call, &per);
	CU_ASSERT_EQUAL(call, 0);
	CU_ASSERT_DOUBLE_EQUAL(per, 4e7 / n1, 1e-12);
	calibration_adamw_fit(n0, 4e7, n1, 4e7, &call, &per);
	CU_ASSERT_EQUAL(call, 0);
	CU_ASSERT_DOUBLE_EQUAL(per, 4e7 / n1, 1e-12);
	/* a line through zero: all per element */
	calibration_adamw_fit(1000, 7000, 16000, 112000, &call, &per);
	CU_ASSERT_EQUAL(call, 0);
	CU_ASSERT_DOUBLE_EQUAL(per, 7.0, 1e-12);
}

static void test_optimizer_per_call(void)
{
	struct calibration c, r;
	struct cal_pass pass;
	struct cal_coll coll;
	char f[160], err[512];

	snprintf(f, sizeof f, "%s/percall.h5", dir);
	good_session(&c, 2, &pass, &coll); /* a session from before: no cost per call */
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
	CU_ASSERT_FATAL(calibration_read(f, 2, &r, err, sizeof err) == 0);
	CU_ASSERT_EQUAL(r.adamw_call_ns, 0);
	CU_ASSERT_EQUAL(r.host_adamw_call_ns, 0);
	CU_ASSERT_DOUBLE_EQUAL(calibration_adamw_ns(&r, OPT_FOREACH, 0, 1e6), 1e6 * r.adamw_ns_per_elem, 1e-6);
	calibration_release(&r);

	good_session(&c, 2, &pass, &coll);
	c.adamw_ns_per_elem = 0.01;
	c.adamw_call_ns = 9e3;
	c.host_adamw_ns_per_elem = 0.7;
	c.host_adamw_call_ns = 2.2e6;
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
	CU_ASSERT_FATAL(calibration_read(f, 2, &r, err, sizeof err) == 0);
	CU_ASSERT_DOUBLE_EQUAL(r.adamw_call_ns, 9e3, 0);
	CU_ASSERT_DOUBLE_EQUAL(r.host_adamw_call_ns, 2.2e6, 0);
	CU_ASSERT_DOUBLE_EQUAL(calibration_adamw_ns(&r, OPT_FOREACH, 0, 1.2e8), 9e3 + 0.01 * 1.2e8, 1e-3);
	CU_ASSERT_DOUBLE_EQUAL(calibration_adamw_ns(&r, OPT_FOREACH, 1, 1.2e8), 2.2e6 + 0.7 * 1.2e8, 1e-3);
	/* a fused step not measured (0): priced as the foreach one, not free */
	r.adamw_fused_ns_per_elem = 0;
	CU_ASSERT_DOUBLE_EQUAL(calibration_adamw_ns(&r, OPT_FUSED, 0, 1.2e8), 9e3 + 0.01 * 1.2e8, 1e-3);
	r.adamw_fused_ns_per_elem = 0.005;
	CU_ASSERT_DOUBLE_EQUAL(calibration_adamw_ns(&r, OPT_FUSED, 0, 1e8), 0.005 * 1e8, 1e-3);
	CU_ASSERT_DOUBLE_EQUAL(calibration_adamw_ns(&r, OPT_FUSED, 1, 1e8), 2.2e6 + 0.7 * 1e8, 1e-3);
	calibration_release(&r);

	set_attr(f, "000000", "host_adamw_call_ns", -5.0); /* the older session: every session read is checked */
	assert_refused(f, 2, (const char *const[]){ "/calibration/000000: attribute host_adamw_call_ns = -5", NULL });
	unlink(f);
}

/*
 * A memory-bound op with no kernel list (FSDP2's copies) is priced by the
 * kernels row of its name and bytes where one was measured (alone, beside
 * a collective, beside two, beside an all-reduce), else by the pass of its
 * traffic; a row of another size or name does not price it. Beside two
 * collectives or an all-reduce where only one collective was measured
 * beside: the time beside one.
 */
static void test_named_op(void)
{
	struct cal_pass p[] = { { 1 << 20, 100e3 }, { 16 << 20, 1600e3 } };
	struct cal_kernel k[] = {
		{ "copy_in", K_ELEMENTWISE, 0, 0, 0, 0, 3 << 20, 900e3, 1200e3, 1500e3, 1300e3 },
		{ "copy_out", K_ELEMENTWISE, 0, 0, 0, 0, 3 << 20, 500e3, 0, 0, 0 },
		{ "copy", K_ELEMENTWISE, 0, 0, 0, 0, 5 << 20, 700e3, 800e3, 0, 0 },
	};
	struct calibration c;

	memset(&c, 0, sizeof c);
	c.passes = p;
	c.npasses = 2;
	c.kernels = k;
	c.nkernels = 3;
	CU_ASSERT_DOUBLE_EQUAL(calibration_op_ns(&c, "copy_in", 3 << 20, 0), 900e3, 1e-6);
	CU_ASSERT_DOUBLE_EQUAL(calibration_op_ns(&c, "copy_in", 3 << 20, 1), 1200e3, 1e-6);
	CU_ASSERT_DOUBLE_EQUAL(calibration_op_ns(&c, "copy_in", 3 << 20, CAL_BESIDE_TWO), 1500e3, 1e-6);
	CU_ASSERT_DOUBLE_EQUAL(calibration_op_ns(&c, "copy_in", 3 << 20, CAL_BESIDE_ALLREDUCE), 1300e3, 1e-6);
	CU_ASSERT_DOUBLE_EQUAL(calibration_op_ns(&c, "copy", 5 << 20, CAL_BESIDE_TWO), 800e3, 1e-6); /* not measured */
	CU_ASSERT_DOUBLE_EQUAL(calibration_op_ns(&c, "copy", 5 << 20, CAL_BESIDE_ALLREDUCE), 800e3, 1e-6);
	CU_ASSERT_DOUBLE_EQUAL(calibration_op_ns(&c, "copy_out", 3 << 20, 1), 500e3, 1e-6); /* none measured beside */
	CU_ASSERT_DOUBLE_EQUAL(calibration_op_ns(&c, "copy_out", 3 << 20, CAL_BESIDE_TWO), 500e3, 1e-6);
	CU_ASSERT_DOUBLE_EQUAL(calibration_op_ns(&c, "copy_in", 6 << 20, 0), calibration_pass_ns(&c, 6 << 20), 1e-6);
	CU_ASSERT_DOUBLE_EQUAL(calibration_op_ns(&c, "copy", 3 << 20, 0), calibration_pass_ns(&c, 3 << 20), 1e-6);
	CU_ASSERT(calibration_pass_ns(&c, 3 << 20) < 400e3); /* the pass would have been much cheaper */
}

/*
 * Host-device copies are priced by direction from their own table, which a
 * series gives as its medians; a calibration without them (files from
 * before) prices a copy as a pass reading and writing its bytes.
 */
static void test_copies(void)
{
	struct cal_copy y[] = { { OP_H2D, 1 << 20, 100e3 }, { OP_H2D, 4 << 20, 400e3 }, { OP_D2H, 1 << 20, 300e3 },
				{ OP_D2H, 4 << 20, 1200e3 } };
	struct cal_pass p[] = { { 1 << 20, 10e3 }, { 16 << 20, 160e3 } };
	struct calibration c, r;
	char err[256];

	memset(&c, 0, sizeof c);
	snprintf(c.series, sizeof c.series, "copies");
	snprintf(c.hardware, sizeof c.hardware, "test");
	snprintf(c.backend, sizeof c.backend, "cpu");
	c.ranks = 3;
	c.adamw_ns_per_elem = c.host_adamw_ns_per_elem = 1.0;
	c.passes = p;
	c.npasses = 2;
	c.copies = y;
	c.ncopies = 4;
	CU_ASSERT_FATAL(calibration_write(path, &c) == 0);
	y[0].ns = 300e3; /* a repeat of the series measures the first point 100, 300 and 200: median 200 */
	CU_ASSERT_FATAL(calibration_write(path, &c) == 0);
	y[0].ns = 200e3;
	CU_ASSERT_FATAL(calibration_write(path, &c) == 0);
	CU_ASSERT_FATAL(calibration_read(path, 3, &r, err, sizeof err) == 0);
	CU_ASSERT_EQUAL(r.ncopies, 4);
	CU_ASSERT_DOUBLE_EQUAL(calibration_copy_ns(&r, OP_H2D, 1 << 20), 200e3, 1.0);
	CU_ASSERT_DOUBLE_EQUAL(calibration_copy_ns(&r, OP_D2H, 4 << 20), 1200e3, 1.0);
	CU_ASSERT_DOUBLE_EQUAL(calibration_copy_ns(&r, OP_D2H, 2 << 20), 600e3, 1.0); /* log-log between */
	calibration_release(&r);
	/* none measured: a pass of 2 x 6 MiB of traffic, the one labelled 8 MiB (10 ns per KiB of label) */
	c.ncopies = 0;
	CU_ASSERT_DOUBLE_EQUAL(calibration_copy_ns(&c, OP_H2D, 6 << 20), 80e3, 1.0);
}


/* An HDF5 file at p with one group at its root (NULL: none). */
static void make_hdf5(const char *p, const char *group)
{
	hid_t f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);

	CU_ASSERT_FATAL(f >= 0);
	if (group)
		H5Gclose(H5Gcreate2(f, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
	H5Fclose(f);
}

static void test_foreign_files_refused(void)
{
	static const char *const names[] = { "runs.h5", "other.h5", "text.h5" };
	char p[3][160], empty[160];
	struct calibration c;
	FILE *f;

	memset(&c, 0, sizeof c);
	snprintf(c.hardware, sizeof c.hardware, "test");
	snprintf(c.backend, sizeof c.backend, "cpu");
	c.ranks = 1;
	for (int i = 0; i < 3; i++)
		snprintf(p[i], sizeof p[i], "%s/%s", dir, names[i]);
	make_hdf5(p[0], "runs");
	make_hdf5(p[1], "x");
	f = fopen(p[2], "w");
	CU_ASSERT_FATAL(f != NULL);
	fputs("not a calibration\n", f);
	fclose(f);
	CU_ASSERT_STRING_EQUAL(calibration_refusal(p[0]), "is an HDF5 file without /calibration, not a calibration file");
	CU_ASSERT_STRING_EQUAL(calibration_refusal(p[1]), "is an HDF5 file without /calibration, not a calibration file");
	CU_ASSERT_STRING_EQUAL(calibration_refusal(p[2]), "exists and is not an HDF5 file");
	for (int i = 0; i < 3; i++) {
		size_t nb = 0, na = 0;
		char *before = test_slurp(p[i], &nb), *after;
		CU_ASSERT_EQUAL(calibration_write(p[i], &c), -1);
		after = test_slurp(p[i], &na);
		CU_ASSERT_FATAL(before && after);
		CU_ASSERT(na == nb && memcmp(before, after, na) == 0);
		free(before);
		free(after);
		unlink(p[i]);
	}
	/* an empty HDF5 file is a calibration file yet; after a session, still one */
	snprintf(empty, sizeof empty, "%s/empty.h5", dir);
	make_hdf5(empty, NULL);
	CU_ASSERT_PTR_NULL(calibration_refusal(empty));
	CU_ASSERT_EQUAL(calibration_write(empty, &c), 0);
	CU_ASSERT_PTR_NULL(calibration_refusal(empty));
	unlink(empty);
}

/* A session of `ranks` on its own file: one pass, one collective, the scalars; the tests damage it. */
static void good_session(struct calibration *c, int ranks, struct cal_pass *pass, struct cal_coll *coll)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->hardware, sizeof c->hardware, "test");
	snprintf(c->backend, sizeof c->backend, "cpu");
	c->ranks = ranks;
	*pass = (struct cal_pass){ 4096, 1e3 };
	*coll = (struct cal_coll){ OP_ALLREDUCE, ranks, 4096, 5e3, 6e3 };
	c->passes = pass;
	c->npasses = 1;
	c->colls = coll;
	c->ncolls = 1;
	c->dispatch_ns = c->issue_ns = c->wake_ns = 0; /* too small to see: allowed */
	c->adamw_ns_per_elem = c->host_adamw_ns_per_elem = 2.0;
}

/* Read f with `ranks`: refused, the message holding each of want[] (NULL-terminated), nothing kept. */
static void assert_refused(const char *f, int ranks, const char *const *want)
{
	struct calibration c;
	char err[512];

	CU_ASSERT_EQUAL_FATAL(calibration_read(f, ranks, &c, err, sizeof err), -1);
	CU_ASSERT(c.passes == NULL && c.colls == NULL && c.npasses == 0);
	for (int i = 0; want[i]; i++)
		if (!strstr(err, want[i])) {
			fprintf(stderr, "\n  '%s' lacks '%s'\n", err, want[i]);
			CU_FAIL("message");
		}
	CU_ASSERT_EQUAL(calibration_check(f, err, sizeof err), -1);
}

/*
 * Every value read is checked: a time that is no measurement (NaN,
 * infinite, negative, zero where 0 is not allowed, over an hour), a size
 * of 0, a kind the table does not hold, a collective over more ranks than
 * the session had, a file without passes. The message names the file,
 * the session group, the table, row and field, and what is allowed. A bad
 * session of another world size refuses the file too: it is checked
 * whole.
 */
static void test_values_checked(void)
{
	static const struct {
		const char *what;
		const char *want[3];
	} cases[] = {
		{ "pass ns nan", { "/calibration/000000: passes row 1: ns = nan", "allowed: finite, > 0" } },
		{ "pass bytes 0", { "passes row 1: bytes = 0", "allowed: 1 to" } },
		{ "wake_ns -1", { "/calibration/000000: attribute wake_ns = -1", ">= 0 and at most 3.6e+12 ns" } },
		{ "issue_ns inf", { "attribute issue_ns = inf" } },
		{ "adamw 0", { "attribute adamw_ns_per_elem = 0", "> 0 and at most 1e+06 ns per element" } },
		{ "collective 1e300", { "collectives row 0: ns = 1e+300", "an hour" } },
		{ "collective kind", { "collectives row 0: kind = 2", "0 allgather, 8 reduce_scatter, 9 allreduce" } },
		{ "collective ranks", { "collectives row 0: ranks = 9", "allowed: 2 to the session's 4" } },
		{ "ns_busy -1", { "collectives row 0: ns_busy = -1", ">= 0" } },
		{ "copy kind", { "copies row 0: kind = 3", "11 d2h, 12 h2d" } },
		{ "no passes", { "sessions of 4 ranks hold no passes" } },
	};
	char f[160];

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct calibration c;
		struct cal_pass pass[2];
		struct cal_coll coll;
		struct cal_copy copy = { OP_H2D, 4096, 1e3 };
		const char *w = cases[i].what;

		snprintf(f, sizeof f, "%s/bad%zu.h5", dir, i);
		good_session(&c, 4, pass, &coll);
		pass[1] = (struct cal_pass){ 8192, 2e3 };
		c.npasses = 2;
		c.copies = &copy;
		c.ncopies = 1;
		if (!strcmp(w, "pass ns nan"))
			pass[1].ns = NAN;
		else if (!strcmp(w, "pass bytes 0"))
			pass[1].bytes = 0;
		else if (!strcmp(w, "wake_ns -1"))
			c.wake_ns = -1;
		else if (!strcmp(w, "issue_ns inf"))
			c.issue_ns = INFINITY;
		else if (!strcmp(w, "adamw 0"))
			c.adamw_ns_per_elem = 0;
		else if (!strcmp(w, "collective 1e300"))
			coll.ns = 1e300;
		else if (!strcmp(w, "collective kind"))
			coll.kind = OP_FORWARD;
		else if (!strcmp(w, "collective ranks"))
			coll.ranks = 9;
		else if (!strcmp(w, "ns_busy -1"))
			coll.ns_busy = -1;
		else if (!strcmp(w, "copy kind"))
			copy.kind = OP_RECOMPUTE;
		else if (!strcmp(w, "no passes"))
			c.npasses = 0;
		CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
		assert_refused(f, 4, cases[i].want);
		unlink(f);
	}

	/* a good session of 2 ranks reads; a bad one of 4 beside it refuses the file for 2 ranks too */
	{
		struct calibration c, r;
		struct cal_pass pass;
		struct cal_coll coll;
		char err[512];

		snprintf(f, sizeof f, "%s/other.h5", dir);
		good_session(&c, 2, &pass, &coll);
		CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
		CU_ASSERT_FATAL(calibration_read(f, 2, &r, err, sizeof err) == 0);
		CU_ASSERT(r.dispatch_ns == 0 && r.wake_ns == 0 && r.adamw_ns_per_elem == 2.0 && r.ncolls == 1);
		calibration_release(&r);
		CU_ASSERT_EQUAL(calibration_check(f, err, sizeof err), 0);
		good_session(&c, 4, &pass, &coll);
		pass.ns = -5;
		CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
		assert_refused(f, 2, (const char *const[]){ "/calibration/000001: passes row 0: ns = -5", NULL });
		unlink(f);
	}
}

/*
 * Sessions that merge (one world size, one fabric) come from one machine:
 * another hardware or backend among them is refused, naming both
 * sessions; a session of another world size may be another machine's.
 */
static void test_one_machine(void)
{
	struct calibration c, r;
	struct cal_pass pass;
	struct cal_coll coll;
	char f[160], err[512];

	snprintf(f, sizeof f, "%s/machines.h5", dir);
	good_session(&c, 4, &pass, &coll);
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
	good_session(&c, 2, &pass, &coll);
	snprintf(c.hardware, sizeof c.hardware, "h100");
	snprintf(c.backend, sizeof c.backend, "cuda");
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
	CU_ASSERT_FATAL(calibration_read(f, 4, &r, err, sizeof err) == 0);
	CU_ASSERT_STRING_EQUAL(r.hardware, "test");
	calibration_release(&r);
	good_session(&c, 4, &pass, &coll);
	snprintf(c.backend, sizeof c.backend, "cuda");
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
	assert_refused(f, 4, (const char *const[]){ "/calibration/000002 (test, cuda)",
						     "/calibration/000000 (test, cpu)", "different machines", NULL });
	CU_ASSERT_FATAL(calibration_read(f, 2, &r, err, sizeof err) == 0); /* the 2-rank session merges with none */
	CU_ASSERT_STRING_EQUAL(r.backend, "cuda");
	calibration_release(&r);
	unlink(f);
}

/*
 * FILE@NNNNNN is the file as it stood when session NNNNNN was appended:
 * the sessions after it are neither merged nor checked (a later session
 * of another machine, which refuses the whole file, leaves it readable),
 * and its prices are that session's. calibration_pin names either way of
 * reading as such; a session the file lacks is refused, naming the last.
 */
static void test_sessions_up_to(void)
{
	struct calibration c, r;
	struct cal_pass pass;
	struct cal_coll coll;
	char f[160], spec[200], out[CONFIG_PATH_MAX], err[512], file[64], upto[CAL_SESSION_LEN];

	/* the name's two parts */
	CU_ASSERT_EQUAL(calibration_file("a/b.h5@000012", file, sizeof file, upto), 1);
	CU_ASSERT_STRING_EQUAL(file, "a/b.h5");
	CU_ASSERT_STRING_EQUAL(upto, "000012");
	CU_ASSERT_EQUAL(calibration_file("a/b@x.h5", file, sizeof file, upto), 0);
	CU_ASSERT_STRING_EQUAL(file, "a/b@x.h5");
	CU_ASSERT_STRING_EQUAL(upto, "");
	CU_ASSERT_EQUAL(calibration_file("b.h5@12", file, sizeof file, upto), 0); /* six digits, or a file's name */
	CU_ASSERT_EQUAL(calibration_file("b.h5@0000x1", file, sizeof file, upto), 0);
	CU_ASSERT_EQUAL(calibration_file("x@1@000003", file, sizeof file, upto), 1);
	CU_ASSERT_STRING_EQUAL(file, "x@1");
	CU_ASSERT_EQUAL(calibration_file("0123456789.h5@000001", file, 8, upto), -1);

	snprintf(f, sizeof f, "%s/upto.h5", dir);
	good_session(&c, 4, &pass, &coll); /* 000000: the all-reduce at 5 us */
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
	good_session(&c, 4, &pass, &coll); /* 000001: at 7 us, and the pass slower */
	coll.ns = 7e3;
	pass.ns = 3e3;
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
	snprintf(spec, sizeof spec, "%s@000000", f);
	CU_ASSERT_FATAL(calibration_read(spec, 4, &r, err, sizeof err) == 0);
	CU_ASSERT(r.sessions == 1 && !strcmp(r.session, "000000") && r.colls[0].ns == 5e3 && r.passes[0].ns == 1e3);
	CU_ASSERT_STRING_EQUAL(r.path, f);
	calibration_release(&r);
	CU_ASSERT_FATAL(calibration_read(f, 4, &r, err, sizeof err) == 0);
	CU_ASSERT(r.sessions == 2 && r.colls[0].ns == 7e3);
	calibration_release(&r);
	CU_ASSERT_EQUAL(calibration_pin(f, out, sizeof out, err, sizeof err), 0);
	snprintf(spec, sizeof spec, "%s@000001", f);
	CU_ASSERT_STRING_EQUAL(out, spec);

	/* a later session of another backend refuses the file, not the file as it stood before it */
	good_session(&c, 4, &pass, &coll);
	snprintf(c.backend, sizeof c.backend, "cuda");
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
	assert_refused(f, 4, (const char *const[]){ "different machines", NULL });
	CU_ASSERT_EQUAL(calibration_check(spec, err, sizeof err), 0);
	CU_ASSERT_FATAL(calibration_read(spec, 4, &r, err, sizeof err) == 0);
	CU_ASSERT(r.sessions == 2 && !strcmp(r.session, "000001") && r.colls[0].ns == 7e3 && r.passes[0].ns == 3e3);
	calibration_release(&r);
	CU_ASSERT_EQUAL(calibration_pin(spec, out, sizeof out, err, sizeof err), 0);
	CU_ASSERT_STRING_EQUAL(out, spec);
	CU_ASSERT_EQUAL(calibration_access(spec), 0);

	/* a session the file does not have */
	snprintf(spec, sizeof spec, "%s@000007", f);
	assert_refused(spec, 4, (const char *const[]){ "no session /calibration/000007",
						       "its sessions end at /calibration/000002", NULL });
	CU_ASSERT_EQUAL(calibration_pin(spec, out, sizeof out, err, sizeof err), -1);
	snprintf(spec, sizeof spec, "%s/none.h5@000001", dir);
	CU_ASSERT_EQUAL(calibration_access(spec), -1);
	unlink(f);
}

/*
 * Merging keeps each point's newest measurement, in the order of first
 * appearance, newest session first (the first of two rows of one point
 * in a session); a series gives the median of its sessions' first rows.
 */
static void test_merge_order(void)
{
	struct cal_pass older[] = { { 1024, 1 }, { 2048, 2 }, { 3072, 3 } };
	struct cal_pass newer[] = { { 3072, 30 }, { 5120, 50 }, { 3072, 99 }, { 1024, 10 } };
	static const uint64_t bytes[] = { 3072, 5120, 1024, 2048 };
	static const double ns[] = { 30, 50, 10, 2 };
	struct calibration c, r;
	struct cal_pass pass;
	struct cal_coll coll;
	char f[160], err[512];

	snprintf(f, sizeof f, "%s/order.h5", dir);
	good_session(&c, 4, &pass, &coll);
	c.passes = older;
	c.npasses = 3;
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
	c.passes = newer;
	c.npasses = 4;
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
	CU_ASSERT_FATAL(calibration_read(f, 4, &r, err, sizeof err) == 0);
	CU_ASSERT_EQUAL_FATAL(r.npasses, 4);
	for (int i = 0; i < 4; i++) {
		CU_ASSERT_EQUAL(r.passes[i].bytes, bytes[i]);
		CU_ASSERT_EQUAL(r.passes[i].ns, ns[i]);
	}
	calibration_release(&r);
	/* two repeats of series "s" after them: 3072 measured 30 (the first row), 40 and 60 gives 40 */
	snprintf(c.series, sizeof c.series, "s");
	c.passes = newer;
	c.npasses = 4;
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
	newer[0].ns = 40;
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
	newer[0].ns = 60;
	newer[2].ns = 1; /* a second row of the point: not the session's measurement of it */
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
	CU_ASSERT_FATAL(calibration_read(f, 4, &r, err, sizeof err) == 0);
	CU_ASSERT_EQUAL_FATAL(r.npasses, 4);
	CU_ASSERT(r.passes[0].bytes == 3072 && r.passes[0].ns == 40);
	CU_ASSERT(r.passes[3].bytes == 2048 && r.passes[3].ns == 2);
	calibration_release(&r);
	unlink(f);
}

/* The kernels' fields files from before them lack. */
static int later_field(const char *name)
{
	return !strcmp(name, "ns_comm2") || !strcmp(name, "ns_ar");
}

/*
 * Session `session` of file f with its kernels table rewritten as files
 * from before ns_comm2 and ns_ar hold it: every field but those.
 */
static void drop_later_fields(const char *f, const char *session)
{
	char g[64];
	hid_t file = H5Fopen(f, H5F_ACC_RDWR, H5P_DEFAULT), grp, d, ft, mem, disk, sp;
	void *rows;

	CU_ASSERT_FATAL(file >= 0);
	snprintf(g, sizeof g, "/calibration/%s", session);
	grp = H5Gopen2(file, g, H5P_DEFAULT);
	d = H5Dopen2(grp, "kernels", H5P_DEFAULT);
	ft = H5Dget_type(d);
	sp = H5Dget_space(d);
	CU_ASSERT_FATAL(H5Tget_member_index(ft, "ns_comm2") >= 0);
	/* the row type less those: in memory at the same offsets, on disk packed */
	mem = H5Tcreate(H5T_COMPOUND, H5Tget_size(ft));
	for (int i = 0; i < H5Tget_nmembers(ft); i++) {
		char *name = H5Tget_member_name(ft, (unsigned)i);
		hid_t mt = H5Tget_member_type(ft, (unsigned)i);
		if (!later_field(name))
			H5Tinsert(mem, name, H5Tget_member_offset(ft, (unsigned)i), mt);
		H5Tclose(mt);
		H5free_memory(name);
	}
	disk = H5Tcopy(mem);
	H5Tpack(disk);
	rows = calloc((size_t)H5Sget_simple_extent_npoints(sp) + 1, H5Tget_size(ft));
	CU_ASSERT_FATAL(H5Dread(d, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) >= 0);
	H5Dclose(d);
	CU_ASSERT_FATAL(H5Ldelete(grp, "kernels", H5P_DEFAULT) >= 0);
	d = H5Dcreate2(grp, "kernels", disk, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	CU_ASSERT_FATAL(d >= 0);
	CU_ASSERT_FATAL(H5Dwrite(d, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) >= 0);
	H5Dclose(d);
	free(rows);
	H5Tclose(disk);
	H5Tclose(mem);
	H5Tclose(ft);
	H5Sclose(sp);
	H5Gclose(grp);
	H5Fclose(file);
}

/*
 * A kernel beside two collectives at once (ns_comm2) and beside an
 * all-reduce (ns_ar): read where a session measured them, 0 in a session
 * from before (a kernels table without the fields reads, its other fields
 * intact); a series gives the median of the sessions that measured them
 * (a session without is no measurement of 0). A kernel beside two is
 * priced at ns_comm2, beside an all-reduce at ns_ar, beside one other
 * collective at ns_comm; one priced from the GEMM grid is slowed by the
 * kernels' median of each.
 */
static void test_beside_two(void)
{
	struct calibration c, r;
	struct cal_pass pass;
	struct cal_coll coll;
	struct cal_kernel k[] = {
		{ "qkv", K_GEMM, 64, 192, 64, 1572864, 4096, 100e3, 120e3, 160e3, 130e3 },
		{ "attn_norm", K_ELEMENTWISE, 0, 0, 0, 0, 8192, 10e3, 11e3, 13e3, 15e3 },
	};
	struct cal_kernel grid = { "gemm", K_GEMM, 128, 128, 128, 4194304, 4096, 200e3, 200e3, 0, 0 };
	struct kernel other = { .kind = K_GEMM, .m = 128, .n = 128, .k = 128, .flops = 4194304, .bytes = 4096 };
	char f[160], err[512];
	int exact;

	snprintf(other.name, sizeof other.name, "wo");
	snprintf(f, sizeof f, "%s/beside2.h5", dir);
	good_session(&c, 2, &pass, &coll);
	c.kernels = k;
	c.nkernels = 2;
	c.gemm = &grid;
	c.ngemm = 1;
	snprintf(c.series, sizeof c.series, "b");
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0); /* 000000: to be made a file from before ns_comm2 */
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0); /* 000001: qkv beside two 160 us */
	k[0].ns_comm2 = 200e3;
	k[0].ns_ar = 150e3;
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0); /* 000002: 200 us, beside an all-reduce 150 */
	drop_later_fields(f, "000000");

	CU_ASSERT_FATAL(calibration_read(f, 2, &r, err, sizeof err) == 0);
	CU_ASSERT_EQUAL_FATAL(r.nkernels, 2);
	for (int i = 0; i < 2; i++) {
		const struct cal_kernel *x = &r.kernels[i];
		if (!strcmp(x->name, "qkv")) {
			CU_ASSERT_EQUAL(x->ns, 100e3);
			CU_ASSERT_EQUAL(x->ns_comm, 120e3);
			CU_ASSERT_EQUAL(x->ns_comm2, 180e3); /* of 160 and 200; with the old session's 0 it would be 160 */
			CU_ASSERT_EQUAL(x->ns_ar, 140e3);    /* of 130 and 150 */
		} else {
			CU_ASSERT_EQUAL(x->ns_comm2, 13e3);
			CU_ASSERT_EQUAL(x->ns_ar, 15e3);
		}
	}
	{
		struct kernel q = { .kind = K_GEMM, .m = 64, .n = 192, .k = 64, .flops = 1572864, .bytes = 4096 };
		snprintf(q.name, sizeof q.name, "qkv");
		CU_ASSERT_DOUBLE_EQUAL(calibration_kernel_ns(&r, &q, 0, &exact), 100e3, 1e-6);
		CU_ASSERT_DOUBLE_EQUAL(calibration_kernel_ns(&r, &q, 1, &exact), 120e3, 1e-6);
		CU_ASSERT_DOUBLE_EQUAL(calibration_kernel_ns(&r, &q, CAL_BESIDE_TWO, &exact), 180e3, 1e-6);
		CU_ASSERT_DOUBLE_EQUAL(calibration_kernel_ns(&r, &q, CAL_BESIDE_ALLREDUCE, &exact), 140e3, 1e-6);
		CU_ASSERT(exact);
	}
	/*
	 * a GEMM of no measured name: the grid's time, times the median slowdown
	 * (1.2 and 1.1; 1.8 and 1.3; 1.4 and 1.5)
	 */
	CU_ASSERT_DOUBLE_EQUAL(calibration_kernel_ns(&r, &other, 0, &exact), 200e3, 1e-6);
	CU_ASSERT(!exact);
	CU_ASSERT_DOUBLE_EQUAL(calibration_kernel_ns(&r, &other, CAL_BESIDE_ONE, &exact), 200e3 * 1.15, 1e-3);
	CU_ASSERT_DOUBLE_EQUAL(calibration_kernel_ns(&r, &other, CAL_BESIDE_TWO, &exact), 200e3 * 1.55, 1e-3);
	CU_ASSERT_DOUBLE_EQUAL(calibration_kernel_ns(&r, &other, CAL_BESIDE_ALLREDUCE, &exact), 200e3 * 1.45, 1e-3);
	calibration_release(&r);

	/* only the session from before: beside two is priced as beside one */
	snprintf(f, sizeof f, "%s/beside2-old.h5", dir);
	c.series[0] = '\0';
	CU_ASSERT_FATAL(calibration_write(f, &c) == 0);
	drop_later_fields(f, "000000");
	CU_ASSERT_FATAL(calibration_read(f, 2, &r, err, sizeof err) == 0);
	for (int i = 0; i < r.nkernels; i++)
		CU_ASSERT(r.kernels[i].ns_comm2 == 0 && r.kernels[i].ns_ar == 0);
	CU_ASSERT_DOUBLE_EQUAL(calibration_kernel_ns(&r, &other, CAL_BESIDE_TWO, &exact), 200e3 * 1.15, 1e-3);
	CU_ASSERT_DOUBLE_EQUAL(calibration_kernel_ns(&r, &other, CAL_BESIDE_ALLREDUCE, &exact), 200e3 * 1.15, 1e-3);
	calibration_release(&r);
	unlink(f);
	snprintf(f, sizeof f, "%s/beside2.h5", dir);
	unlink(f);
}

/*
 * Past the largest size measured, a collective costs that size's time plus
 * the marginal cost of its bytes (the slope from the largest point at or
 * below half its size): the latency is not paid again per byte, as a
 * whole model's all-gather priced from a block's would pay it. Where the
 * slope does not rise, the largest point's time per byte.
 */
static void test_extrapolation(void)
{
	struct cal_coll cs[] = {
		{ OP_ALLGATHER, 16, 1024, 100e3, 0 },
		{ OP_ALLGATHER, 16, 1 << 20, 200e3, 0 },
		{ OP_ALLGATHER, 16, 3 << 19, 260e3, 0 }, /* 1.5 MiB: above half the largest, not the slope's */
		{ OP_ALLGATHER, 16, 2 << 20, 300e3, 0 },
		{ OP_REDUCE_SCATTER, 16, 1 << 20, 300e3, 0 },
		{ OP_REDUCE_SCATTER, 16, 2 << 20, 300e3, 0 },
	};
	struct calibration c;

	memset(&c, 0, sizeof c);
	c.colls = cs;
	c.ncolls = 6;
	c.ranks = 16;
	CU_ASSERT_DOUBLE_EQUAL(calibration_collective_ns(&c, OP_ALLGATHER, 16, 2 << 20, 0), 300e3, 1e-6);
	/* 300 us + 2 MiB at 100 us per MiB, where the largest's time per byte would give 600 us */
	CU_ASSERT_DOUBLE_EQUAL(calibration_collective_ns(&c, OP_ALLGATHER, 16, 4 << 20, 0), 500e3, 1e-6);
	CU_ASSERT_DOUBLE_EQUAL(calibration_collective_ns(&c, OP_ALLGATHER, 16, 10 << 20, 0), 1100e3, 1e-6);
	/* a flat top: per byte */
	CU_ASSERT_DOUBLE_EQUAL(calibration_collective_ns(&c, OP_REDUCE_SCATTER, 16, 4 << 20, 0), 600e3, 1e-6);
	/*
	 * beside compute (busy): each point's time measured beside a block's
	 * kernels where it has one (ns_busy), its time alone where not (0);
	 * alone, never the busy time
	 */
	cs[4].ns_busy = 450e3;
	cs[5].ns_busy = 500e3;
	CU_ASSERT_DOUBLE_EQUAL(calibration_collective_ns(&c, OP_REDUCE_SCATTER, 16, 2 << 20, 1), 500e3, 1e-6);
	CU_ASSERT_DOUBLE_EQUAL(calibration_collective_ns(&c, OP_REDUCE_SCATTER, 16, 2 << 20, 0), 300e3, 1e-6);
	CU_ASSERT_DOUBLE_EQUAL(calibration_collective_ns(&c, OP_ALLGATHER, 16, 2 << 20, 1), 300e3, 1e-6);
}

void suite_calibration(void)
{
	CU_pSuite s = CU_add_suite("calibration", setup, teardown);

	CU_add_test(s, "sessions merge on one fabric only", test_fabrics_do_not_merge);
	CU_add_test(s, "a series gives its medians", test_series_median);
	CU_add_test(s, "a pass is priced at its traffic", test_pass_traffic);
	CU_add_test(s, "host-device copies by direction", test_copies);
	CU_add_test(s, "a session's pass_traffic, fused AdamW", test_pass_traffic_attr);
	CU_add_test(s, "the optimizer per call and per element", test_optimizer_per_call);
	CU_add_test(s, "the optimizer's line from two sizes", test_optimizer_fit);
	CU_add_test(s, "the build that measured a session", test_binary_attr);
	CU_add_test(s, "a memory-bound op priced by its name where measured", test_named_op);
	CU_add_test(s, "a file that is not a calibration file is left alone", test_foreign_files_refused);
	CU_add_test(s, "every value read is checked", test_values_checked);
	CU_add_test(s, "sessions that merge are one machine", test_one_machine);
	CU_add_test(s, "FILE@NNNNNN: the file as it stood then", test_sessions_up_to);
	CU_add_test(s, "merging keeps the newest, in order", test_merge_order);
	CU_add_test(s, "kernels beside two collectives, beside an all-reduce", test_beside_two);
	CU_add_test(s, "past the largest size measured", test_extrapolation);
}
