/*
 * test_results.c - the HDF5 results file and the Chrome trace writer.
 *
 * A hand-built schedule of six ops on four streams, a three-sample memory
 * timeline and a filled summary are appended twice to a fresh file; the
 * file is then read back through the HDF5 API, independently of
 * results.c's own types: exact op rows, enum member names, memory rows,
 * summary and configuration attributes. Failure cases check that the
 * original file stays byte-identical and no temporary is left behind.
 * The trace file is checked with a small JSON validator.
 */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hdf5.h>

#include "json.h"
#include "outfile.h"
#include "results.h"
#include "trace.h"
#include "testutil.h"

#define NOPS 6
#define NMEM 3
#define LABEL_BYTES 64

static char dir[64];
static struct experiment cfg;
static struct unit units[1];
static struct segment segs[1];
static struct op ops[NOPS];
static struct schedule sched;
static struct op_timing timing[NOPS];
static struct mem_sample mem[NMEM];

static void path_in_dir(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", dir, name);
}

static void fill_op(int i, enum op_kind k, enum stream_id st, int unit, int seg, int micro,
		    uint64_t bytes, uint64_t flops)
{
	ops[i].kind = (uint8_t)k;
	ops[i].stream = (uint8_t)st;
	ops[i].unit = unit;
	ops[i].seg = seg;
	ops[i].micro = (int16_t)micro;
	ops[i].ktab = -1;
	ops[i].bytes = bytes;
	ops[i].flops = flops;
	/* values above 2^53 and 2^32 catch narrowing anywhere on the way */
	timing[i].start_ns = 1000u * (uint64_t)i + 7;
	timing[i].end_ns = timing[i].start_ns + (i == 5 ? 0 : 123456789012ull + (uint64_t)i);
}

static int setup(void)
{
	strcpy(dir, "/tmp/test_results.XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	config_init(&cfg);
	/* a quote and a backslash in the path exercise the JSON escaping */
	snprintf(cfg.path, sizeof cfg.path, "exp/we\"ird\\name.ini");

	snprintf(units[0].name, sizeof units[0].name, "block0");
	segs[0].kind = SEG_BLOCK;
	segs[0].block = 0;
	segs[0].unit = 0;
	fill_op(0, OP_ALLGATHER, ST_ALLGATHER, 0, -1, 0, (1ull << 40) + 3, 0);
	fill_op(1, OP_FORWARD, ST_COMPUTE, 0, 0, 0, 4096, (1ull << 55) + 1);
	fill_op(2, OP_BACKWARD, ST_COMPUTE, 0, 0, 0, 8192, 3ull << 54);
	fill_op(3, OP_REDUCE_SCATTER, ST_REDUCE_SCATTER, 0, -1, 0, (1ull << 41) + 5, 0);
	fill_op(4, OP_OPTIM, ST_COMPUTE, 0, -1, -1, 12345, 67890);
	fill_op(5, OP_FREE, ST_COMPUTE, 0, -1, -1, 0, 0);
	sched.exp = &cfg;
	sched.world = sched.shard_n = 8;
	sched.replica_n = 1;
	sched.nunits = 1;
	sched.nsegs = 1;
	sched.units = units;
	sched.segs = segs;
	sched.nops = sched.cap_ops = NOPS;
	sched.ops = ops;

	for (int i = 0; i < NMEM; i++) {
		mem[i].t_ns = 500ull * (uint64_t)i + 1;
		for (int c = 0; c < MEM_CAT_COUNT; c++)
			mem[i].alloc[c] = (1ull << 33) * (uint64_t)(i + 1) + (uint64_t)c;
		mem[i].reserved = (1ull << 36) + (uint64_t)i;
	}
	return 0;
}

static int teardown(void)
{
	char cmd[128];

	config_release(&cfg);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static struct run_result make_run(const char *source, double step_s)
{
	struct run_result r = { 0 };

	r.source = source;
	r.exp = &cfg;
	r.sched = &sched;
	r.ops = timing;
	r.nmem = NMEM;
	r.mem = mem;
	r.sum.step_time_s = step_s;
	r.sum.tokens_per_s_per_gpu = 1234.5;
	r.sum.mfu = 0.4375;
	r.sum.compute_s = step_s * 0.75;
	r.sum.exposed_comm_s = step_s * 0.125;
	r.sum.comm_bytes_per_gpu = (1ull << 45) + 9;
	r.sum.peak_alloc_bytes = (1ull << 37) + 11;
	r.sum.peak_reserved_bytes = (1ull << 37) + 4096;
	for (int c = 0; c < MEM_CAT_COUNT; c++)
		r.sum.peak_by_cat[c] = (1ull << 34) + (uint64_t)c * 3;
	r.sum.gpu_bytes = 80ull << 30;
	r.sum.fits = 1;
	r.sum.alloc_retries = 36;
	r.sum.alloc_ooms = 0;
	r.sum.alloc_retries_step = 3;
	r.sum.ncrit = 2;
	snprintf(r.sum.crit_name[0], sizeof r.sum.crit_name[0], "backward");
	snprintf(r.sum.crit_name[1], sizeof r.sum.crit_name[1], "allgather");
	r.sum.crit_s[0] = 0.5;
	r.sum.crit_s[1] = 0.25;
	return r;
}


/* No `*.tmp.*` file is left in the test directory. */
static int no_tmp_left(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int clean = 1;

	while (d && (e = readdir(d)))
		if (strstr(e->d_name, ".tmp."))
			clean = 0;
	if (d)
		closedir(d);
	return clean;
}

/* ---- reading back with the HDF5 API ----------------------------------- */

static double read_f64_attr(hid_t loc, const char *name)
{
	double v = -1;
	hid_t a = H5Aopen(loc, name, H5P_DEFAULT);

	CU_ASSERT_FATAL(a >= 0);
	CU_ASSERT(H5Aread(a, H5T_NATIVE_DOUBLE, &v) >= 0);
	H5Aclose(a);
	return v;
}

static uint64_t read_u64_attr(hid_t loc, const char *name)
{
	uint64_t v = 0;
	hid_t a = H5Aopen(loc, name, H5P_DEFAULT);

	CU_ASSERT_FATAL(a >= 0);
	CU_ASSERT(H5Aread(a, H5T_NATIVE_UINT64, &v) >= 0);
	H5Aclose(a);
	return v;
}

/* A string attribute (scalar, variable length) into buf. */
static void read_str_attr(hid_t loc, const char *name, char *buf, size_t len)
{
	hid_t a = H5Aopen(loc, name, H5P_DEFAULT), t = H5Tcopy(H5T_C_S1);
	char *s = NULL;

	buf[0] = '\0';
	CU_ASSERT_FATAL(a >= 0);
	H5Tset_size(t, H5T_VARIABLE);
	H5Tset_cset(t, H5T_CSET_UTF8);
	CU_ASSERT(H5Aread(a, t, &s) >= 0);
	if (s)
		snprintf(buf, len, "%s", s);
	H5free_memory(s);
	H5Tclose(t);
	H5Aclose(a);
}

/* A string-array attribute: checks it has n elements equal to want[]. */
static void check_str_array_attr(hid_t loc, const char *name, int n, const char *const *want)
{
	hid_t a = H5Aopen(loc, name, H5P_DEFAULT), t = H5Tcopy(H5T_C_S1), sp;
	char *got[16] = { 0 };

	CU_ASSERT_FATAL(a >= 0 && n <= 16);
	sp = H5Aget_space(a);
	CU_ASSERT_EQUAL(H5Sget_simple_extent_npoints(sp), n);
	H5Tset_size(t, H5T_VARIABLE);
	H5Tset_cset(t, H5T_CSET_UTF8);
	CU_ASSERT(H5Aread(a, t, got) >= 0);
	for (int i = 0; i < n; i++) {
		CU_ASSERT_PTR_NOT_NULL_FATAL(got[i]);
		CU_ASSERT_STRING_EQUAL(got[i], want[i]);
		H5free_memory(got[i]);
	}
	H5Sclose(sp);
	H5Tclose(t);
	H5Aclose(a);
}

struct row_in {
	uint32_t op;
	uint8_t kind, stream;
	int32_t unit, seg, micro;
	char label[LABEL_BYTES];
	uint64_t start_ns, end_ns, bytes, flops;
};

/* A memory enum type with the same names, so HDF5 converts by name. */
static hid_t names_enum(int n, const char *(*name)(int))
{
	hid_t t = H5Tenum_create(H5T_NATIVE_UINT8);

	for (int i = 0; i < n; i++) {
		uint8_t v = (uint8_t)i;
		H5Tenum_insert(t, name(i), &v);
	}
	return t;
}

static const char *kind_name_i(int i) { return op_kind_name((enum op_kind)i); }
static const char *stream_name_i(int i) { return stream_name((enum stream_id)i); }

/* The enum member names of field `field` of compound type t equal name(0..n-1). */
static void check_enum_field(hid_t t, const char *field, int n, const char *(*name)(int))
{
	int idx = H5Tget_member_index(t, field);
	hid_t et;

	CU_ASSERT_FATAL(idx >= 0);
	et = H5Tget_member_type(t, (unsigned)idx);
	CU_ASSERT_EQUAL(H5Tget_class(et), H5T_ENUM);
	CU_ASSERT_EQUAL(H5Tget_nmembers(et), n);
	for (int i = 0; i < n && i < H5Tget_nmembers(et); i++) {
		char *m = H5Tget_member_name(et, (unsigned)i);
		uint8_t v = 255;
		CU_ASSERT_STRING_EQUAL(m, name(i));
		H5Tget_member_value(et, (unsigned)i, &v);
		CU_ASSERT_EQUAL(v, i);
		H5free_memory(m);
	}
	H5Tclose(et);
}

static void check_ops(hid_t run)
{
	struct row_in rows[NOPS + 1];
	hid_t d = H5Dopen2(run, "ops", H5P_DEFAULT), sp, ft, mt, kt, st, lt;

	CU_ASSERT_FATAL(d >= 0);
	sp = H5Dget_space(d);
	CU_ASSERT_EQUAL(H5Sget_simple_extent_npoints(sp), NOPS);
	ft = H5Dget_type(d);
	CU_ASSERT_EQUAL(H5Tget_nmembers(ft), 11);
	check_enum_field(ft, "kind", OP_KIND_COUNT, kind_name_i);
	check_enum_field(ft, "stream", ST_COUNT, stream_name_i);

	kt = names_enum(OP_KIND_COUNT, kind_name_i);
	st = names_enum(ST_COUNT, stream_name_i);
	lt = H5Tcopy(H5T_C_S1);
	H5Tset_size(lt, LABEL_BYTES);
	mt = H5Tcreate(H5T_COMPOUND, sizeof(struct row_in));
	H5Tinsert(mt, "op", HOFFSET(struct row_in, op), H5T_NATIVE_UINT32);
	H5Tinsert(mt, "kind", HOFFSET(struct row_in, kind), kt);
	H5Tinsert(mt, "stream", HOFFSET(struct row_in, stream), st);
	H5Tinsert(mt, "unit", HOFFSET(struct row_in, unit), H5T_NATIVE_INT32);
	H5Tinsert(mt, "seg", HOFFSET(struct row_in, seg), H5T_NATIVE_INT32);
	H5Tinsert(mt, "micro", HOFFSET(struct row_in, micro), H5T_NATIVE_INT32);
	H5Tinsert(mt, "label", HOFFSET(struct row_in, label), lt);
	H5Tinsert(mt, "start_ns", HOFFSET(struct row_in, start_ns), H5T_NATIVE_UINT64);
	H5Tinsert(mt, "end_ns", HOFFSET(struct row_in, end_ns), H5T_NATIVE_UINT64);
	H5Tinsert(mt, "bytes", HOFFSET(struct row_in, bytes), H5T_NATIVE_UINT64);
	H5Tinsert(mt, "flops", HOFFSET(struct row_in, flops), H5T_NATIVE_UINT64);
	memset(rows, 0xab, sizeof rows);
	CU_ASSERT_FATAL(H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) >= 0);
	for (int i = 0; i < NOPS; i++) {
		char label[LABEL_BYTES];
		CU_ASSERT_EQUAL(rows[i].op, (uint32_t)i);
		CU_ASSERT_EQUAL(rows[i].kind, ops[i].kind);
		CU_ASSERT_EQUAL(rows[i].stream, ops[i].stream);
		CU_ASSERT_EQUAL(rows[i].unit, ops[i].unit);
		CU_ASSERT_EQUAL(rows[i].seg, ops[i].seg);
		CU_ASSERT_EQUAL(rows[i].micro, ops[i].micro);
		CU_ASSERT_STRING_EQUAL(rows[i].label, op_label(&sched, i, label, sizeof label));
		CU_ASSERT_EQUAL(rows[i].start_ns, timing[i].start_ns);
		CU_ASSERT_EQUAL(rows[i].end_ns, timing[i].end_ns);
		CU_ASSERT_EQUAL(rows[i].bytes, ops[i].bytes);
		CU_ASSERT_EQUAL(rows[i].flops, ops[i].flops);
	}
	H5Tclose(mt);
	H5Tclose(lt);
	H5Tclose(st);
	H5Tclose(kt);
	H5Tclose(ft);
	H5Sclose(sp);
	H5Dclose(d);
}

static void check_memory(hid_t run)
{
	struct mem_sample got[NMEM];
	hid_t d = H5Dopen2(run, "memory", H5P_DEFAULT), mt;

	CU_ASSERT_FATAL(d >= 0);
	mt = H5Tcreate(H5T_COMPOUND, sizeof(struct mem_sample));
	/* fields inserted in reverse order: reading must go by name */
	H5Tinsert(mt, "reserved", HOFFSET(struct mem_sample, reserved), H5T_NATIVE_UINT64);
	for (int c = MEM_CAT_COUNT - 1; c >= 0; c--)
		H5Tinsert(mt, mem_cat_name((enum mem_cat)c),
			  HOFFSET(struct mem_sample, alloc) + (size_t)c * sizeof(uint64_t), H5T_NATIVE_UINT64);
	H5Tinsert(mt, "t_ns", HOFFSET(struct mem_sample, t_ns), H5T_NATIVE_UINT64);
	memset(got, 0, sizeof got);
	CU_ASSERT_FATAL(H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
	CU_ASSERT(memcmp(got, mem, sizeof got) == 0);
	H5Tclose(mt);
	H5Dclose(d);
}

static void check_summary(hid_t run, const struct summary *want)
{
	const char *cats[MEM_CAT_COUNT], *crit[RESULTS_CRIT_MAX];
	uint64_t by_cat[MEM_CAT_COUNT] = { 0 };
	double crit_s[RESULTS_CRIT_MAX] = { 0 };
	hid_t g = H5Gopen2(run, "summary", H5P_DEFAULT), a;

	CU_ASSERT_FATAL(g >= 0);
	CU_ASSERT_EQUAL(read_f64_attr(g, "step_time_s"), want->step_time_s);
	CU_ASSERT_EQUAL(read_f64_attr(g, "tokens_per_s_per_gpu"), want->tokens_per_s_per_gpu);
	CU_ASSERT_EQUAL(read_f64_attr(g, "mfu"), want->mfu);
	CU_ASSERT_EQUAL(read_f64_attr(g, "compute_s"), want->compute_s);
	CU_ASSERT_EQUAL(read_f64_attr(g, "exposed_comm_s"), want->exposed_comm_s);
	CU_ASSERT_EQUAL(read_u64_attr(g, "comm_bytes_per_gpu"), want->comm_bytes_per_gpu);
	CU_ASSERT_EQUAL(read_u64_attr(g, "peak_alloc_bytes"), want->peak_alloc_bytes);
	CU_ASSERT_EQUAL(read_u64_attr(g, "peak_reserved_bytes"), want->peak_reserved_bytes);
	CU_ASSERT_EQUAL(read_u64_attr(g, "gpu_bytes"), want->gpu_bytes);
	CU_ASSERT_EQUAL(read_u64_attr(g, "fits"), (uint64_t)want->fits);
	CU_ASSERT_EQUAL(read_u64_attr(g, "alloc_retries"), (uint64_t)want->alloc_retries);
	CU_ASSERT_EQUAL(read_u64_attr(g, "alloc_ooms"), (uint64_t)want->alloc_ooms);
	CU_ASSERT_EQUAL(read_u64_attr(g, "alloc_retries_step"), (uint64_t)want->alloc_retries_step);
	CU_ASSERT_EQUAL(read_u64_attr(g, "ncrit"), (uint64_t)want->ncrit);

	a = H5Aopen(g, "peak_by_cat_bytes", H5P_DEFAULT);
	CU_ASSERT_FATAL(a >= 0);
	CU_ASSERT(H5Aread(a, H5T_NATIVE_UINT64, by_cat) >= 0);
	CU_ASSERT(memcmp(by_cat, want->peak_by_cat, sizeof by_cat) == 0);
	H5Aclose(a);
	for (int c = 0; c < MEM_CAT_COUNT; c++)
		cats[c] = mem_cat_name((enum mem_cat)c);
	check_str_array_attr(g, "categories", MEM_CAT_COUNT, cats);

	for (int i = 0; i < want->ncrit; i++)
		crit[i] = want->crit_name[i];
	check_str_array_attr(g, "crit_names", want->ncrit, crit);
	a = H5Aopen(g, "crit_s", H5P_DEFAULT);
	CU_ASSERT_FATAL(a >= 0);
	CU_ASSERT(H5Aread(a, H5T_NATIVE_DOUBLE, crit_s) >= 0);
	for (int i = 0; i < want->ncrit; i++)
		CU_ASSERT_EQUAL(crit_s[i], want->crit_s[i]);
	H5Aclose(a);
	H5Gclose(g);
}

struct config_check {
	hid_t run;
	int nkeys;
};

static void check_config_attr(void *ctx, const char *section, const char *key, const char *value)
{
	struct config_check *c = ctx;
	char name[128], got[1024];

	snprintf(name, sizeof name, "%s.%s", section, key);
	read_str_attr(c->run, name, got, sizeof got);
	CU_ASSERT_STRING_EQUAL(got, value);
	c->nkeys++;
}

static void check_run_attrs(hid_t run, const char *source)
{
	struct config_check c = { run, 0 };
	char buf[256];
	H5O_info_t info;

	read_str_attr(run, "source", buf, sizeof buf);
	CU_ASSERT_STRING_EQUAL(buf, source);
	CU_ASSERT_EQUAL(read_u64_attr(run, "schema_version"), 1);
	read_str_attr(run, "created", buf, sizeof buf);
	CU_ASSERT_EQUAL(strlen(buf), 20);           /* 2025-01-31T12:00:00Z */
	CU_ASSERT(buf[4] == '-' && buf[10] == 'T' && buf[19] == 'Z');
	read_str_attr(run, "hostname", buf, sizeof buf);
	read_str_attr(run, "experiment", buf, sizeof buf);
	CU_ASSERT_STRING_EQUAL(buf, cfg.path);
	config_each(&cfg, check_config_attr, &c);
	/* nothing but the five fixed attributes and one per key */
	H5Oget_info(run, &info);
	CU_ASSERT_EQUAL(info.num_attrs, (hsize_t)(5 + c.nkeys));
}

/* ---- tests ------------------------------------------------------------ */

static void test_append_two_runs(void)
{
	struct run_result r0 = make_run("sim", 1.5), r1 = make_run("gpu_run", 2.25);
	char path[128];
	H5G_info_t gi;
	hid_t f, g, sg;

	/* a measured run of two steps keeps its percentiles; a prediction (no steps) has its step time as both */
	r1.sum.steps = 2;
	r1.sum.step_time_p10_s = 2.0;
	r1.sum.step_time_p90_s = 2.5;
	r0.sum.step_time_p10_s = r0.sum.step_time_p90_s = 99;

	path_in_dir(path, sizeof path, "two.h5");
	CU_ASSERT_EQUAL(results_count(path), -1);   /* no file yet */
	CU_ASSERT_EQUAL_FATAL(results_append(path, &r0), 0);
	CU_ASSERT_EQUAL(results_count(path), 1);
	CU_ASSERT_EQUAL_FATAL(results_append(path, &r1), 0);
	CU_ASSERT_EQUAL(results_count(path), 2);
	CU_ASSERT(no_tmp_left());

	f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	CU_ASSERT_FATAL(f >= 0);
	g = H5Gopen2(f, "runs", H5P_DEFAULT);
	CU_ASSERT_FATAL(g >= 0);
	CU_ASSERT(H5Gget_info(g, &gi) >= 0);
	CU_ASSERT_EQUAL(gi.nlinks, 2);
	H5Gclose(g);

	g = H5Gopen2(f, "runs/000000", H5P_DEFAULT);
	CU_ASSERT_FATAL(g >= 0);
	check_run_attrs(g, "sim");
	check_ops(g);
	check_memory(g);
	check_summary(g, &r0.sum);
	sg = H5Gopen2(g, "summary", H5P_DEFAULT);
	CU_ASSERT(read_f64_attr(sg, "step_time_p10_s") == 1.5 && read_f64_attr(sg, "step_time_p90_s") == 1.5);
	H5Gclose(sg);
	H5Gclose(g);

	g = H5Gopen2(f, "runs/000001", H5P_DEFAULT);
	CU_ASSERT_FATAL(g >= 0);
	check_run_attrs(g, "gpu_run");
	check_ops(g);
	check_summary(g, &r1.sum);
	sg = H5Gopen2(g, "summary", H5P_DEFAULT);
	CU_ASSERT_EQUAL(read_f64_attr(sg, "step_time_p10_s"), 2.0);
	CU_ASSERT_EQUAL(read_f64_attr(sg, "step_time_p90_s"), 2.5);
	CU_ASSERT_EQUAL(read_u64_attr(sg, "steps"), 2);
	H5Gclose(sg);
	H5Gclose(g);
	H5Fclose(f);
}

static void test_empty_run(void)
{
	struct run_result r = make_run("sim", 0.0);
	struct schedule empty = sched;
	char path[128];

	empty.nops = 0;
	r.sched = &empty;
	r.nmem = 0;
	r.sum.ncrit = 0;
	r.exp = NULL;
	path_in_dir(path, sizeof path, "empty.h5");
	CU_ASSERT_EQUAL_FATAL(results_append(path, &r), 0);
	CU_ASSERT_EQUAL(results_count(path), 1);
}

/* Appending to a file that is not HDF5 fails and leaves it byte for byte. */
static void test_not_hdf5_untouched(void)
{
	static const char text[] = "step,time\n1,2.5\n";
	struct run_result r = make_run("sim", 1.0);
	char path[128], *after;
	size_t len = 0;
	FILE *f;

	path_in_dir(path, sizeof path, "notes.csv");
	f = fopen(path, "wb");
	CU_ASSERT_FATAL(f != NULL);
	fputs(text, f);
	fclose(f);
	CU_ASSERT_EQUAL(results_append(path, &r), -1);
	CU_ASSERT_EQUAL(results_count(path), -1);
	after = test_slurp(path, &len);
	CU_ASSERT_FATAL(after != NULL);
	CU_ASSERT_EQUAL(len, strlen(text));
	CU_ASSERT(memcmp(after, text, len) == 0);
	CU_ASSERT(no_tmp_left());
	free(after);
}

/*
 * An HDF5 file whose /runs is a dataset, not a group: refused before a run
 * (results_refusal) and by the writer, after the copy; the original stays
 * byte for byte.
 */
static void test_hdf5_failure_untouched(void)
{
	struct run_result r = make_run("sim", 1.0);
	char path[128], *before, *after;
	size_t nb = 0, na = 0;
	hsize_t dim = 4;
	int data[4] = { 1, 2, 3, 4 };
	hid_t f, sp, d;

	path_in_dir(path, sizeof path, "odd.h5");
	f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	sp = H5Screate_simple(1, &dim, NULL);
	d = H5Dcreate2(f, "runs", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	CU_ASSERT_FATAL(d >= 0);
	H5Dwrite(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
	H5Dclose(d);
	H5Sclose(sp);
	H5Fclose(f);

	before = test_slurp(path, &nb);
	CU_ASSERT_FATAL(before != NULL);
	CU_ASSERT_STRING_EQUAL(results_refusal(path), "is an HDF5 file whose /runs is a dataset, not a group");
	CU_ASSERT_EQUAL(results_append(path, &r), -1);
	after = test_slurp(path, &na);
	CU_ASSERT_FATAL(after != NULL);
	CU_ASSERT_EQUAL(na, nb);
	CU_ASSERT(na == nb && memcmp(before, after, na) == 0);
	CU_ASSERT(no_tmp_left());
	free(before);
	free(after);
}

/*
 * A results file whose /runs holds the last index (/runs/999999): no run
 * can follow it, so it is refused before a run and by the writer; one
 * index short of it takes that last run.
 */
static void test_full_runs_refused(void)
{
	struct run_result r = make_run("sim", 1.0);
	char path[128], *before, *after;
	size_t nb = 0, na = 0;
	hid_t f, g;

	path_in_dir(path, sizeof path, "nearly-full.h5");
	f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	g = H5Gcreate2(f, "runs", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	CU_ASSERT_FATAL(g >= 0);
	H5Gclose(g);
	g = H5Gcreate2(f, "runs/999998", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	CU_ASSERT_FATAL(g >= 0);
	H5Gclose(g);
	H5Fclose(f);
	CU_ASSERT_PTR_NULL(results_refusal(path));
	CU_ASSERT_EQUAL(results_append(path, &r), 0); /* /runs/999999 */
	CU_ASSERT_EQUAL(results_count(path), 2);
	CU_ASSERT_STRING_EQUAL(results_refusal(path), "is an HDF5 file whose /runs is full (it holds /runs/999999, the "
						      "last index)");
	before = test_slurp(path, &nb);
	CU_ASSERT_EQUAL(results_append(path, &r), -1);
	after = test_slurp(path, &na);
	CU_ASSERT(before && after && na == nb && memcmp(before, after, na) == 0);
	CU_ASSERT(no_tmp_left());
	free(before);
	free(after);
}

/* A directory that does not exist: an error, nothing created. */
static void test_missing_dir(void)
{
	struct run_result r = make_run("sim", 1.0);
	char path[128];

	path_in_dir(path, sizeof path, "no/such/dir/x.h5");
	CU_ASSERT_EQUAL(results_append(path, &r), -1);
}

/* Two processes appending at once: every run lands. */
static void test_concurrent_writers(void)
{
	enum { PROCS = 3, EACH = 4 };
	char path[128];
	pid_t pids[PROCS];
	int ok = 1;

	path_in_dir(path, sizeof path, "shared.h5");
	fflush(NULL);
	for (int p = 0; p < PROCS; p++) {
		pids[p] = fork();
		CU_ASSERT_FATAL(pids[p] >= 0);
		if (pids[p] == 0) {
			struct run_result r = make_run(p ? "gpu_run" : "sim", 1.0 + p);
			int rc = 0;
			for (int i = 0; i < EACH; i++)
				rc |= results_append(path, &r);
			_exit(rc ? 1 : 0);
		}
	}
	for (int p = 0; p < PROCS; p++) {
		int status = 0;
		waitpid(pids[p], &status, 0);
		ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
	}
	CU_ASSERT(ok);
	CU_ASSERT_EQUAL(results_count(path), PROCS * EACH);
	CU_ASSERT(no_tmp_left());
}

/* ---- a minimal JSON validator for the trace --------------------------- */

static const char *json_value(const char *p, int depth);

static const char *json_ws(const char *p)
{
	while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
		p++;
	return p;
}

static const char *json_string(const char *p)
{
	if (*p++ != '"')
		return NULL;
	for (; *p != '"'; p++) {
		if ((unsigned char)*p < 0x20)
			return NULL;
		if (*p == '\\') {
			p++;
			if (*p == 'u') {
				for (int i = 1; i <= 4; i++)
					if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i])
						return NULL;
				p += 4;
			} else if (!*p || !strchr("\"\\/bfnrt", *p)) {
				return NULL;
			}
		}
	}
	return p + 1;
}

static const char *json_number(const char *p)
{
	const char *start;

	if (*p == '-')
		p++;
	start = p;
	while (*p >= '0' && *p <= '9')
		p++;
	if (p == start || (*start == '0' && p - start > 1))
		return NULL;
	if (*p == '.') {
		start = ++p;
		while (*p >= '0' && *p <= '9')
			p++;
		if (p == start)
			return NULL;
	}
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '+' || *p == '-')
			p++;
		start = p;
		while (*p >= '0' && *p <= '9')
			p++;
		if (p == start)
			return NULL;
	}
	return p;
}

/* An object or array: open, close and the value parser of its members. */
static const char *json_container(const char *p, int depth, char close, int keyed)
{
	p = json_ws(p + 1);
	if (*p == close)
		return p + 1;
	for (;;) {
		if (keyed) {
			p = json_string(p);
			if (!p || *(p = json_ws(p)) != ':')
				return NULL;
			p = json_ws(p + 1);
		}
		p = json_value(p, depth + 1);
		if (!p)
			return NULL;
		p = json_ws(p);
		if (*p == close)
			return p + 1;
		if (*p != ',')
			return NULL;
		p = json_ws(p + 1);
	}
}

static const char *json_value(const char *p, int depth)
{
	if (depth > 64)
		return NULL;
	switch (*p) {
	case '{': return json_container(p, depth, '}', 1);
	case '[': return json_container(p, depth, ']', 0);
	case '"': return json_string(p);
	case 't': return strncmp(p, "true", 4) ? NULL : p + 4;
	case 'f': return strncmp(p, "false", 5) ? NULL : p + 5;
	case 'n': return strncmp(p, "null", 4) ? NULL : p + 4;
	default:  return json_number(p);
	}
}

static int count_of(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

static void test_trace(void)
{
	struct run_result r = make_run("sim", 1.0);
	char path[128], *text, ts[64];
	const char *end;
	size_t len = 0;

	path_in_dir(path, sizeof path, "run.trace.json");
	CU_ASSERT_EQUAL_FATAL(trace_write(path, &r), 0);
	CU_ASSERT(no_tmp_left());
	text = test_slurp(path, &len);
	CU_ASSERT_FATAL(text != NULL);
	CU_ASSERT_EQUAL(text[0], '{');
	end = json_value(text, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(end);
	CU_ASSERT_EQUAL(*json_ws(end), '\0');
	CU_ASSERT_EQUAL(count_of(text, "\"ph\":\"X\""), NOPS);
	CU_ASSERT_EQUAL(count_of(text, "\"ph\":\"C\""), 2 * NMEM);
	CU_ASSERT_EQUAL(count_of(text, "\"name\":\"thread_name\""), ST_COUNT);
	/* op 1: start 1007 ns, duration 123456789013 ns, exact in microseconds */
	CU_ASSERT(strstr(text, "\"ts\":1.007,\"dur\":123456789.013,") != NULL);
	snprintf(ts, sizeof ts, "\"ts\":5.007,\"dur\":0.000,");
	CU_ASSERT(strstr(text, ts) != NULL);
	CU_ASSERT(strstr(text, "we\\\"ird\\\\name.ini") != NULL);
	free(text);

	path_in_dir(path, sizeof path, "no/such/dir/run.json");
	CU_ASSERT_EQUAL(trace_write(path, &r), -1);
}

/*
 * json_str, the one string writer of every JSON output: each byte 1-255
 * written, the literal valid JSON, the escapes as named, ASCII as is, and
 * each byte of 128-255 alone (none of them a UTF-8 sequence in this order:
 * a continuation byte with no lead, a lead followed by another lead) as
 * the replacement character.
 */
static void test_json_str(void)
{
	char in[256], *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	CU_ASSERT_FATAL(f != NULL);
	for (int i = 1; i < 256; i++)
		in[i - 1] = (char)i;
	in[255] = '\0';
	json_str(f, in);
	fclose(f);
	CU_ASSERT_PTR_EQUAL(json_string(text), text + len);
	CU_ASSERT_NSTRING_EQUAL(text, "\"\\u0001\\u0002", 13);
	CU_ASSERT(strstr(text, "\\u0008\\t\\n\\u000b\\u000c\\r\\u000e") != NULL);
	CU_ASSERT(strstr(text, "\\u001f !\\\"#") != NULL);
	CU_ASSERT(strstr(text, "[\\\\]") != NULL);
	CU_ASSERT(strstr(text, "}~\\u007f\\ufffd\\ufffd") != NULL);
	CU_ASSERT(strstr(text, "\\ufffd\"") == text + len - 7);
	/* the quotes, then 1 byte each but 6 for 28 control characters, DEL and the 128 bytes past it, 2 for tab,
	 * newline, return, quote, backslash */
	CU_ASSERT_EQUAL(len, 2 + 255 + 5 * (29 + 128) + 1 * 5);
	free(text);
}

/*
 * json_str keeps well-formed UTF-8 as it is, and replaces each byte of a
 * malformed sequence (RFC 3629): an overlong form, a surrogate, a code
 * point past U+10FFFF, a sequence cut short by another byte or by the
 * string's end.
 */
static void test_json_utf8(void)
{
	static const struct { const char *in, *out; } cases[] = {
		{ "caf\xc3\xa9.h5", "\"caf\xc3\xa9.h5\"" },                 /* U+00E9 */
		{ "\xe2\x82\xac \xf0\x9f\x98\x80", "\"\xe2\x82\xac \xf0\x9f\x98\x80\"" }, /* U+20AC, U+1F600 */
		{ "\xef\xbf\xbf\xf4\x8f\xbf\xbf", "\"\xef\xbf\xbf\xf4\x8f\xbf\xbf\"" }, /* U+FFFF, U+10FFFF */
		{ "lat\xe9.h5", "\"lat\\ufffd.h5\"" },                        /* Latin-1 */
		{ "\xc0\xaf", "\"\\ufffd\\ufffd\"" },                          /* overlong '/' */
		{ "\xe0\x80\xaf", "\"\\ufffd\\ufffd\\ufffd\"" },              /* overlong, 3 bytes */
		{ "\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\"" },              /* a surrogate */
		{ "\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\"" },   /* past U+10FFFF */
		{ "\xe2\x82", "\"\\ufffd\\ufffd\"" },                          /* cut short by the end */
		{ "\xe2\x82x", "\"\\ufffd\\ufffdx\"" },                        /* cut short by ASCII */
	};

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char *text = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&text, &len);
		CU_ASSERT_FATAL(f != NULL);
		json_str(f, cases[i].in);
		fclose(f);
		CU_ASSERT_STRING_EQUAL(text, cases[i].out);
		free(text);
	}
}

/* ---- outputs: stale temporaries, symbolic links, foreign files ------------- */

/* The pid of a process that has exited (and been reaped): no process has it, for now. */
static pid_t dead_pid(void)
{
	pid_t p = fork();

	CU_ASSERT_FATAL(p >= 0);
	if (p == 0)
		_exit(0);
	waitpid(p, NULL, 0);
	return p;
}

static void touch(const char *path, const char *text)
{
	FILE *f = fopen(path, "wb");

	CU_ASSERT_FATAL(f != NULL);
	fputs(text, f);
	fclose(f);
}

static int exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

/*
 * A writer killed mid-append leaves `<file>.tmp.<pid>`: the next append
 * removes it under the lock (and the next trace its own); a live
 * process's temporary and another file's stay.
 */
static void test_stale_tmp_removed(void)
{
	struct run_result r = make_run("sim", 1.0);
	char path[128], stale[160], live[160], other[160], tpath[128], tstale[200];
	pid_t dead = dead_pid();

	path_in_dir(path, sizeof path, "stale.h5");
	snprintf(stale, sizeof stale, "%s.tmp.%ld", path, (long)dead);
	snprintf(live, sizeof live, "%s.tmp.1", path); /* init is alive */
	path_in_dir(other, sizeof other, "other.h5.tmp.");
	snprintf(other + strlen(other), sizeof other - strlen(other), "%ld", (long)dead);
	touch(stale, "a copy a killed writer left");
	touch(live, "a live writer's");
	touch(other, "another file's");
	CU_ASSERT_EQUAL(results_append(path, &r), 0);
	CU_ASSERT(!exists(stale));
	CU_ASSERT(exists(live));
	CU_ASSERT(exists(other));
	CU_ASSERT_EQUAL(results_count(path), 1);
	/* a failed append removes them too: it is the lock, not success, that makes them stale */
	touch(stale, "again");
	CU_ASSERT_EQUAL(outfile_remove_stale("test", path), 1);
	CU_ASSERT(!exists(stale));
	unlink(live);
	unlink(other);

	path_in_dir(tpath, sizeof tpath, "stale.json");
	snprintf(tstale, sizeof tstale, "%s.tmp.%ld", tpath, (long)dead);
	touch(tstale, "half a trace");
	CU_ASSERT_EQUAL(trace_write(tpath, &r), 0);
	CU_ASSERT(!exists(tstale));
	CU_ASSERT(no_tmp_left());
}

/*
 * An output that is a symbolic link: the link's target gets the run (a
 * temporary beside the target, renamed over it) and the link stays a
 * link; relative links are relative to the link's directory; a dangling
 * link creates its target; a loop is an error.
 */
static void test_symlink_followed(void)
{
	struct run_result r = make_run("sim", 1.0);
	char sub[128], real[160], link[128], link2[128], tlink[128], treal[160], loop[128], dangling[128],
		dtarget[160], target[256];
	struct stat st;

	path_in_dir(sub, sizeof sub, "sub");
	CU_ASSERT_FATAL(mkdir(sub, 0755) == 0);
	snprintf(real, sizeof real, "%s/real.h5", sub);
	path_in_dir(link, sizeof link, "link.h5");
	CU_ASSERT_FATAL(symlink("sub/real.h5", link) == 0);  /* relative to the link */
	path_in_dir(link2, sizeof link2, "link2.h5");
	CU_ASSERT_FATAL(symlink(link, link2) == 0);          /* a link to a link */
	CU_ASSERT_EQUAL(outfile_resolve(link2, target, sizeof target), 0);
	CU_ASSERT_STRING_EQUAL(target, real);

	CU_ASSERT_EQUAL(results_append(link, &r), 0);       /* creates the target */
	CU_ASSERT_EQUAL(results_append(link2, &r), 0);
	CU_ASSERT(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
	CU_ASSERT(lstat(link2, &st) == 0 && S_ISLNK(st.st_mode));
	CU_ASSERT_EQUAL(results_count(real), 2);
	CU_ASSERT(no_tmp_left());

	snprintf(treal, sizeof treal, "%s/real.json", sub);
	path_in_dir(tlink, sizeof tlink, "trace-link.json");
	CU_ASSERT_FATAL(symlink(treal, tlink) == 0);        /* absolute */
	CU_ASSERT_EQUAL(trace_write(tlink, &r), 0);
	CU_ASSERT_EQUAL(trace_write(tlink, &r), 0);         /* a trace it wrote: replaced */
	CU_ASSERT(lstat(tlink, &st) == 0 && S_ISLNK(st.st_mode));
	CU_ASSERT(stat(treal, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 100);

	path_in_dir(dangling, sizeof dangling, "dangling.h5");
	snprintf(dtarget, sizeof dtarget, "%s/made.h5", sub);
	CU_ASSERT_FATAL(symlink("sub/made.h5", dangling) == 0);
	CU_ASSERT_EQUAL(results_append(dangling, &r), 0);
	CU_ASSERT_EQUAL(results_count(dtarget), 1);

	path_in_dir(loop, sizeof loop, "loop.h5");
	CU_ASSERT_FATAL(symlink("loop.h5", loop) == 0);
	CU_ASSERT_EQUAL(outfile_resolve(loop, target, sizeof target), -1);
	CU_ASSERT_EQUAL(results_append(loop, &r), -1);
	CU_ASSERT_EQUAL(trace_write(loop, &r), -1);
	CU_ASSERT(no_tmp_left());
}

/*
 * What an output may replace or add to: a results file (HDF5 with /runs,
 * or an empty HDF5 file) for results, a trace this testbed wrote for
 * traces; any other file is left byte for byte.
 */
static void test_foreign_files_untouched(void)
{
	struct run_result r = make_run("sim", 1.0);
	char h5[128], empty[128], json[128], ours[128], *before, *after;
	size_t nb = 0, na = 0;
	hid_t f, g;

	path_in_dir(h5, sizeof h5, "foreign.h5");
	f = H5Fcreate(h5, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	g = H5Gcreate2(f, "data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	H5Gclose(g);
	H5Fclose(f);
	before = test_slurp(h5, &nb);
	CU_ASSERT_STRING_EQUAL(results_refusal(h5), "is an HDF5 file without /runs or /sweeps, not a results file");
	CU_ASSERT_EQUAL(results_append(h5, &r), -1);
	after = test_slurp(h5, &na);
	CU_ASSERT(na == nb && memcmp(before, after, na) == 0);
	free(before);
	free(after);

	path_in_dir(empty, sizeof empty, "empty-hdf5.h5");
	f = H5Fcreate(empty, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	H5Fclose(f);
	CU_ASSERT_PTR_NULL(results_refusal(empty));
	CU_ASSERT_EQUAL(results_append(empty, &r), 0);
	CU_ASSERT_PTR_NULL(results_refusal(empty));
	CU_ASSERT_EQUAL(results_count(empty), 1);

	path_in_dir(json, sizeof json, "notes.json");
	touch(json, "{\"mine\": true}\n");
	CU_ASSERT_STRING_EQUAL(trace_refusal(json), "exists and is not a Chrome trace this testbed wrote");
	CU_ASSERT_EQUAL(trace_write(json, &r), -1);
	before = test_slurp(json, &nb);
	CU_ASSERT(nb == strlen("{\"mine\": true}\n") && memcmp(before, "{\"mine\": true}\n", nb) == 0);
	free(before);
	CU_ASSERT_STRING_EQUAL(trace_refusal(empty), "exists and is not a Chrome trace this testbed wrote");
	CU_ASSERT_STRING_EQUAL(results_refusal(json), "exists and is not an HDF5 file");

	path_in_dir(ours, sizeof ours, "ours.json");
	CU_ASSERT_EQUAL(trace_write(ours, &r), 0);
	CU_ASSERT_PTR_NULL(trace_refusal(ours));
	CU_ASSERT(no_tmp_left());
}

/* The checks before a run: each rule refuses, and nothing is created. */
static void test_outfile_check(void)
{
	struct run_result r = make_run("sim", 1.0);
	char res[128], tr[128], input[128], nodir[128], ilink[128], fifo[128], ro[128], rofile[160];
	const char *inputs[] = { input, NULL };

	path_in_dir(res, sizeof res, "check.h5");
	path_in_dir(tr, sizeof tr, "check.json");
	path_in_dir(input, sizeof input, "exp.ini");
	touch(input, "[model]\nlayers = 2\n");
#define CHECK(rc, outpath, refusal) \
	CU_ASSERT_EQUAL(outfile_check((struct outfile[]){ { "out", outpath, refusal } }, 1, inputs), rc)
	CHECK(0, res, results_refusal);                     /* new, in an existing directory */
	CHECK(0, "", results_refusal);                      /* none */
	CHECK(-1, input, results_refusal);                  /* the input */
	CHECK(-1, input, NULL);                             /* the input, whatever the kind */
	CHECK(-1, dir, results_refusal);                    /* a directory */
	path_in_dir(nodir, sizeof nodir, "none/x.h5");
	CHECK(-1, nodir, results_refusal);                  /* no directory */
	CU_ASSERT(!exists(nodir));
	path_in_dir(ilink, sizeof ilink, "input-link.json");
	CU_ASSERT_FATAL(symlink("exp.ini", ilink) == 0);
	CHECK(-1, ilink, trace_refusal);                     /* a link to the input */
	path_in_dir(fifo, sizeof fifo, "fifo.json");
	CU_ASSERT_FATAL(mkfifo(fifo, 0600) == 0);
	CHECK(-1, fifo, trace_refusal);                     /* not a regular file (and never opened) */
	CU_ASSERT_EQUAL(results_append(res, &r), 0);
	CU_ASSERT_EQUAL(trace_write(tr, &r), 0);
	CHECK(0, res, results_refusal);
	CHECK(-1, res, trace_refusal);                      /* a results file as a trace */
	CHECK(-1, tr, results_refusal);                     /* a trace as a results file */
	CHECK(0, tr, trace_refusal);
#undef CHECK
	/* two outputs, one file: by name before it exists, by inode after (a hard link) */
	path_in_dir(rofile, sizeof rofile, "both.h5");
	CU_ASSERT_EQUAL(outfile_check((struct outfile[]){ { "a", rofile, NULL }, { "b", rofile, NULL } }, 2,
				      inputs), -1);
	path_in_dir(rofile, sizeof rofile, "hard.h5");
	CU_ASSERT_FATAL(link(res, rofile) == 0);
	CU_ASSERT_EQUAL(outfile_check((struct outfile[]){ { "a", res, results_refusal },
							  { "b", rofile, results_refusal } }, 2, inputs), -1);
	if (geteuid() != 0) { /* root writes anywhere */
		path_in_dir(ro, sizeof ro, "readonly");
		CU_ASSERT_FATAL(mkdir(ro, 0555) == 0);
		snprintf(rofile, sizeof rofile, "%s/x.h5", ro);
		CU_ASSERT_EQUAL(outfile_check((struct outfile[]){ { "a", rofile, NULL } }, 1, inputs), -1);
		chmod(ro, 0755);
	}
	unlink(fifo);
	unlink(ilink);
}

void suite_results(void)
{
	CU_pSuite s = CU_add_suite("results", setup, teardown);

	CU_add_test(s, "append two runs, read back", test_append_two_runs);
	CU_add_test(s, "a run with no ops, samples or config", test_empty_run);
	CU_add_test(s, "non-HDF5 file left untouched", test_not_hdf5_untouched);
	CU_add_test(s, "HDF5 failure leaves original untouched", test_hdf5_failure_untouched);
	CU_add_test(s, "a full /runs is refused", test_full_runs_refused);
	CU_add_test(s, "missing directory", test_missing_dir);
	CU_add_test(s, "concurrent writers lose no run", test_concurrent_writers);
	CU_add_test(s, "trace is valid JSON with one event per op", test_trace);
	CU_add_test(s, "JSON strings: every byte escaped or kept", test_json_str);
	CU_add_test(s, "JSON strings: UTF-8 kept, malformed bytes replaced", test_json_utf8);
	CU_add_test(s, "temporaries of dead writers are removed", test_stale_tmp_removed);
	CU_add_test(s, "symbolic links are followed, the link stays", test_symlink_followed);
	CU_add_test(s, "files of another kind are left untouched", test_foreign_files_untouched);
	CU_add_test(s, "output paths checked before a run", test_outfile_check);
}
