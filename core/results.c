/*
 * results.c - append one run to an HDF5 results file (schema: data/README.md).
 *
 * The file is never written in place: results_append() adds the new group
 * /runs/NNNNNN through h5file_append() (core/h5file.h: a copy renamed over
 * the original under a directory lock), so a failure at any point leaves
 * the original as it was and concurrent writers take turns. A failed HDF5
 * call is reported once, as one line.
 */
#include "results.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "h5file.h"

#include "text.h"
#include "xalloc.h"

#define SCHEMA_VERSION 1

/* What writes a run (its source attribute; data/README.md). */
static const char *const results_sources[] = { "sim", "gpu_run", "pytorch", "published", NULL };
#define LABEL_BYTES 64     /* fixed string size of the ops.label field, NUL included */

/* One row of the ops dataset, in memory. */
struct op_row {
	uint32_t op;
	uint8_t kind;      /* enum op_kind */
	uint8_t stream;    /* enum stream_id */
	int32_t unit;
	int32_t seg;
	int32_t micro;
	char label[LABEL_BYTES];
	uint64_t start_ns;
	uint64_t end_ns;
	uint64_t bytes;
	uint64_t flops;
};

/* ---- attributes ------------------------------------------------------ */

struct config_ctx {
	struct h5file_session *s;
	hid_t loc;
};

static void config_attr(void *ctx, const char *section, const char *key, const char *value)
{
	struct config_ctx *c = ctx;
	char name[128];

	snprintf(name, sizeof name, "%s.%s", section, key);
	h5file_attr_str(c->s, c->loc, name, value);
}

/* ---- datasets -------------------------------------------------------- */

/* The ops row compound in memory layout, or -1. Caller closes. */
static hid_t op_row_type(struct h5file_session *s)
{
	const char *kinds[OP_KIND_COUNT], *streams[ST_COUNT];
	hid_t t, kind_t, stream_t, label_t;

	for (int i = 0; i < OP_KIND_COUNT; i++)
		kinds[i] = op_kind_name((enum op_kind)i);
	for (int i = 0; i < ST_COUNT; i++)
		streams[i] = stream_name((enum stream_id)i);
	kind_t = h5file_enum_type(s, kinds, OP_KIND_COUNT);
	stream_t = h5file_enum_type(s, streams, ST_COUNT);
	label_t = H5Tcopy(H5T_C_S1);
	t = H5Tcreate(H5T_COMPOUND, sizeof(struct op_row));
	if (s->failed || h5file_check(s, label_t, "H5Tcopy") < 0 || h5file_check(s, t, "H5Tcreate") < 0)
		goto out;
	if (h5file_check(s, H5Tset_size(label_t, LABEL_BYTES), "H5Tset_size(label)") < 0 ||
	    h5file_check(s, H5Tset_strpad(label_t, H5T_STR_NULLTERM), "H5Tset_strpad(label)") < 0)
		goto out;
#define FIELD(name, type) \
	h5file_check(s, H5Tinsert(t, #name, HOFFSET(struct op_row, name), type), "H5Tinsert(" #name ")")
	FIELD(op, H5T_NATIVE_UINT32);
	FIELD(kind, kind_t);
	FIELD(stream, stream_t);
	FIELD(unit, H5T_NATIVE_INT32);
	FIELD(seg, H5T_NATIVE_INT32);
	FIELD(micro, H5T_NATIVE_INT32);
	FIELD(label, label_t);
	FIELD(start_ns, H5T_NATIVE_UINT64);
	FIELD(end_ns, H5T_NATIVE_UINT64);
	FIELD(bytes, H5T_NATIVE_UINT64);
	FIELD(flops, H5T_NATIVE_UINT64);
#undef FIELD
out:
	if (kind_t >= 0)
		H5Tclose(kind_t);
	if (stream_t >= 0)
		H5Tclose(stream_t);
	if (label_t >= 0)
		H5Tclose(label_t);
	if (s->failed && t >= 0) {
		H5Tclose(t);
		t = -1;
	}
	return t;
}

/* The memory row compound: struct mem_sample as it is, or -1. Caller closes. */
static hid_t mem_row_type(struct h5file_session *s)
{
	hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct mem_sample));

	if (h5file_check(s, t, "H5Tcreate") < 0)
		return -1;
	h5file_check(s, H5Tinsert(t, "t_ns", HOFFSET(struct mem_sample, t_ns), H5T_NATIVE_UINT64),
		  "H5Tinsert(t_ns)");
	for (int c = 0; c < MEM_CAT_COUNT && !s->failed; c++)
		h5file_check(s, H5Tinsert(t, mem_cat_name((enum mem_cat)c),
				       HOFFSET(struct mem_sample, alloc) + (size_t)c * sizeof(uint64_t),
				       H5T_NATIVE_UINT64), "H5Tinsert(memory category)");
	if (!s->failed)
		h5file_check(s, H5Tinsert(t, "reserved", HOFFSET(struct mem_sample, reserved),
				       H5T_NATIVE_UINT64), "H5Tinsert(reserved)");
	if (s->failed) {
		H5Tclose(t);
		return -1;
	}
	return t;
}

/* A compound of n fields of native types (name, offset, type), or -1. Caller closes. */
struct field {
	const char *name;
	size_t off;
	hid_t type;
};

static hid_t compound_type(struct h5file_session *s, size_t size, const struct field *f, int n)
{
	hid_t t = H5Tcreate(H5T_COMPOUND, size);

	if (h5file_check(s, t, "H5Tcreate") < 0)
		return -1;
	for (int i = 0; i < n; i++)
		h5file_check(s, H5Tinsert(t, f[i].name, f[i].off, f[i].type), "H5Tinsert");
	if (s->failed) {
		H5Tclose(t);
		return -1;
	}
	return t;
}

/* A PyTorch run's alloc_trace rows: action, stream (uint8), bytes, addr (uint64) as core/alloc.h has them. */
static hid_t alloc_event_type(struct h5file_session *s)
{
	const struct field f[] = {
		{ "action", HOFFSET(struct alloc_event, action), H5T_NATIVE_UINT8 },
		{ "stream", HOFFSET(struct alloc_event, stream), H5T_NATIVE_UINT8 },
		{ "bytes", HOFFSET(struct alloc_event, bytes), H5T_NATIVE_UINT64 },
		{ "addr", HOFFSET(struct alloc_event, addr), H5T_NATIVE_UINT64 },
	};

	return compound_type(s, sizeof(struct alloc_event), f, 4);
}

/* A PyTorch run's memory_by_step rows: allocated_bytes, reserved_bytes (uint64). */
static hid_t mem_after_type(struct h5file_session *s)
{
	const struct field f[] = {
		{ "allocated_bytes", HOFFSET(struct mem_after, alloc), H5T_NATIVE_UINT64 },
		{ "reserved_bytes", HOFFSET(struct mem_after, reserved), H5T_NATIVE_UINT64 },
	};

	return compound_type(s, sizeof(struct mem_after), f, 2);
}

/* The kernels row compound (a PyTorch run's, written by fsdp_bench.py), or -1. Caller closes. */
static hid_t kernel_row_type(struct h5file_session *s)
{
	hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct run_kernel)), str = H5Tcopy(H5T_C_S1);

	if (h5file_check(s, t, "H5Tcreate") < 0 || h5file_check(s, str, "H5Tcopy") < 0 ||
	    h5file_check(s, H5Tset_size(str, sizeof(((struct run_kernel *)0)->name)), "H5Tset_size") < 0) {
		if (t >= 0)
			H5Tclose(t);
		if (str >= 0)
			H5Tclose(str);
		return -1;
	}
	h5file_check(s, H5Tinsert(t, "name", HOFFSET(struct run_kernel, name), str), "H5Tinsert(name)");
	h5file_check(s, H5Tinsert(t, "calls", HOFFSET(struct run_kernel, calls), H5T_NATIVE_INT32), "H5Tinsert(calls)");
	h5file_check(s, H5Tinsert(t, "device_us", HOFFSET(struct run_kernel, device_us), H5T_NATIVE_DOUBLE),
		     "H5Tinsert(device_us)");
	H5Tclose(str);
	if (s->failed) {
		H5Tclose(t);
		return -1;
	}
	return t;
}

static void write_ops(struct h5file_session *s, hid_t run, const struct run_result *r)
{
	const struct schedule *sc = r->sched;
	struct op_row *rows;
	hid_t t;

	if (s->failed)
		return;
	rows = xcalloc(sc->nops ? (size_t)sc->nops : 1, sizeof *rows);
	for (int i = 0; i < sc->nops; i++) {
		const struct op *o = &sc->ops[i];
		struct op_row *w = &rows[i];
		w->op = (uint32_t)i;
		w->kind = o->kind;
		w->stream = o->stream;
		w->unit = o->unit;
		w->seg = o->seg;
		w->micro = o->micro;
		op_label(sc, i, w->label, LABEL_BYTES);
		w->start_ns = r->ops[i].start_ns;
		w->end_ns = r->ops[i].end_ns;
		w->bytes = o->bytes;
		w->flops = o->flops;
	}
	t = op_row_type(s);
	if (t >= 0) {
		h5file_dataset(s, run, "ops", t, (size_t)sc->nops, rows);
		H5Tclose(t);
	}
	free(rows);
}

/* One row of the ops_by_rank dataset. */
struct rank_row {
	int32_t rank;
	uint32_t op;
	uint64_t start_ns;
	uint64_t end_ns;
};

/* The ops_by_rank row compound, or -1. Caller closes. */
static hid_t rank_row_type(struct h5file_session *s)
{
	const struct field f[] = {
		{ "rank", HOFFSET(struct rank_row, rank), H5T_NATIVE_INT32 },
		{ "op", HOFFSET(struct rank_row, op), H5T_NATIVE_UINT32 },
		{ "start_ns", HOFFSET(struct rank_row, start_ns), H5T_NATIVE_UINT64 },
		{ "end_ns", HOFFSET(struct rank_row, end_ns), H5T_NATIVE_UINT64 },
	};

	return compound_type(s, sizeof(struct rank_row), f, 4);
}

/* Every rank's timings of the recorded step: where ranks drift apart, and which one a collective waited for. */
static void write_ops_by_rank(struct h5file_session *s, hid_t run, const struct run_result *r)
{
	size_t nops = (size_t)r->sched->nops, n = (size_t)r->nranks * nops;
	struct rank_row *rows;
	hid_t t;

	if (s->failed || !r->ops_by_rank || r->nranks < 1)
		return;
	rows = xcalloc(n + 1, sizeof(*rows));
	for (size_t i = 0; i < n; i++)
		rows[i] = (struct rank_row){ (int32_t)(i / nops), (uint32_t)(i % nops), r->ops_by_rank[i].start_ns,
					     r->ops_by_rank[i].end_ns };
	t = rank_row_type(s);
	if (t >= 0) {
		h5file_dataset(s, run, "ops_by_rank", t, n, rows);
		H5Tclose(t);
	}
	free(rows);
}

static void write_memory(struct h5file_session *s, hid_t run, const struct run_result *r)
{
	hid_t t;

	if (s->failed)
		return;
	t = mem_row_type(s);
	if (t >= 0) {
		h5file_dataset(s, run, "memory", t, r->nmem > 0 ? (size_t)r->nmem : 0, r->mem);
		H5Tclose(t);
	}
}

static void write_summary(struct h5file_session *s, hid_t run, const struct summary *m)
{
	const char *cats[MEM_CAT_COUNT], *crit[RESULTS_CRIT_MAX];
	int ncrit = m->ncrit < 0 ? 0 : m->ncrit > RESULTS_CRIT_MAX ? RESULTS_CRIT_MAX : m->ncrit;
	hid_t g;

	if (s->failed)
		return;
	g = H5Gcreate2(run, "summary", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	if (h5file_check(s, g, "H5Gcreate2(summary)") < 0)
		return;
	for (int c = 0; c < MEM_CAT_COUNT; c++)
		cats[c] = mem_cat_name((enum mem_cat)c);
	for (int i = 0; i < ncrit; i++)
		crit[i] = m->crit_name[i];
	h5file_attr_f64(s, g, "step_time_s", m->step_time_s);
	h5file_attr_f64(s, g, "step_time_p10_s", m->steps > 1 ? m->step_time_p10_s : m->step_time_s);
	h5file_attr_f64(s, g, "step_time_p90_s", m->steps > 1 ? m->step_time_p90_s : m->step_time_s);
	h5file_attr_i32(s, g, "steps", m->steps > 0 ? m->steps : 1);
	h5file_attr_f64(s, g, "tokens_per_s_per_gpu", m->tokens_per_s_per_gpu);
	h5file_attr_f64(s, g, "mfu", m->mfu);
	h5file_attr_f64(s, g, "compute_s", m->compute_s);
	h5file_attr_f64(s, g, "exposed_comm_s", m->exposed_comm_s);
	h5file_attr_u64(s, g, "comm_bytes_per_gpu", m->comm_bytes_per_gpu);
	h5file_attr_u64(s, g, "peak_alloc_bytes", m->peak_alloc_bytes);
	h5file_attr_u64(s, g, "peak_reserved_bytes", m->peak_reserved_bytes);
	h5file_attr_write(s, g, "peak_by_cat_bytes", H5T_STD_U64LE, H5T_NATIVE_UINT64, MEM_CAT_COUNT,
		   m->peak_by_cat);
	h5file_attr_strs(s, g, "categories", MEM_CAT_COUNT, cats);
	h5file_attr_u64(s, g, "gpu_bytes", m->gpu_bytes);
	h5file_attr_i32(s, g, "fits", m->fits);
	h5file_attr_i32(s, g, "alloc_retries", m->alloc_retries);
	h5file_attr_i32(s, g, "alloc_ooms", m->alloc_ooms);
	h5file_attr_i32(s, g, "alloc_retries_step", m->alloc_retries_step);
	h5file_attr_i32(s, g, "ncrit", ncrit);
	h5file_attr_strs(s, g, "crit_names", ncrit, crit);
	h5file_attr_write(s, g, "crit_s", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, ncrit, m->crit_s);
	H5Gclose(g);
}

/* A results file holds /runs, /sweeps (the tables of ./sim --sweep, core/sweep_table.h), or nothing yet. */
static const char *const results_groups[] = { "runs", "sweeps", NULL };
#define NOT_RESULTS "is an HDF5 file without /runs or /sweeps, not a results file"

/* Write run r as the next group of /runs in file. 0 or -1 (reported). */
static int write_run(struct h5file_session *s, hid_t file, void *ctx)
{
	return results_write_run(s, file, ctx, NULL);
}

int results_write_run(struct h5file_session *s, int64_t file, const struct run_result *r, char name_out[16])
{
	char name[16], created[32], host[256] = "";
	time_t now = time(NULL);
	struct tm tm;
	hid_t run;

	if (h5file_check_ours(s, file, results_groups, NOT_RESULTS) < 0)
		return -1;
	run = h5file_next_group(s, file, "runs", name);
	if (run < 0)
		return -1;
	if (name_out)
		memcpy(name_out, name, 16);
	gmtime_r(&now, &tm);
	strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
	gethostname(host, sizeof host - 1);
	h5file_attr_str(s, run, "source", r->source ? r->source : "");
	h5file_attr_str(s, run, "created", created);
	h5file_attr_i32(s, run, "schema_version", SCHEMA_VERSION);
	h5file_attr_str(s, run, "hostname", host);
	if (r->hardware)
		h5file_attr_str(s, run, "hardware", r->hardware);
	if (r->compares)
		h5file_attr_str(s, run, "compares", r->compares);
	if (r->exp) {
		struct config_ctx c = { s, run };
		h5file_attr_str(s, run, "experiment", r->exp->path);
		config_each(r->exp, config_attr, &c);
	}
	write_ops(s, run, r);
	write_ops_by_rank(s, run, r);
	write_memory(s, run, r);
	write_summary(s, run, &r->sum);
	H5Gclose(run);
	return s->failed ? -1 : 0;
}

int results_append(const char *path, const struct run_result *r)
{
	return h5file_append("results", path, write_run, (void *)r);
}

struct many {
	const char *path;
	const struct run_result *runs;
	int n, seen;
	results_there_fn there;
	void *ctx;
	int written;
};

static int write_runs(struct h5file_session *s, hid_t file, void *ctx)
{
	struct many *m = ctx;
	struct run_read *now = NULL;
	int nnow = 0, rc = 0;

	/* under the lock: another writer appended since the caller read the file, and may have added these */
	if (m->there && results_count(m->path) != m->seen && results_read(m->path, &now, &nnow) != 0)
		return -1;
	m->written = 0;
	for (int i = 0; i < m->n && !rc; i++) {
		if (now && m->there(m->ctx, &m->runs[i], now, nnow))
			continue;
		rc = write_run(s, file, (void *)&m->runs[i]);
		m->written += !rc;
	}
	if (now)
		results_read_free(now, nnow);
	return rc;
}

int results_append_runs(const char *path, const struct run_result *runs, int n, int seen, results_there_fn there,
			void *ctx, int *written)
{
	struct many m = { path, runs, n, seen, there, ctx, 0 };
	int rc = h5file_append("results", path, write_runs, &m);

	if (written)
		*written = rc == 0 ? m.written : 0;
	return rc;
}

const char *results_refusal(const char *path)
{
	return h5file_refusal("results", path, results_groups, NOT_RESULTS);
}

const char *results_unreadable(const char *path)
{
	static char why[96]; /* the reason returned, until the next call */
	struct h5file_session s;
	struct stat st;
	htri_t is_hdf5;

	if (stat(path, &st) != 0)
		return strerror(errno);
	if (!S_ISREG(st.st_mode)) { /* H5Fis_hdf5 would block on a FIFO, fail oddly on a directory */
		snprintf(why, sizeof why, "is %s, not a results file (data/README.md)", text_file_kind(st.st_mode));
		return why;
	}
	h5file_begin(&s, "results", path); /* quiet */
	is_hdf5 = H5Fis_hdf5(path);
	H5Eclear2(H5E_DEFAULT);
	h5file_end(&s);
	return is_hdf5 > 0 ? NULL : "is not an HDF5 results file (data/README.md)";
}

int results_count(const char *path)
{
	struct h5file_session s;
	H5G_info_t info;
	htri_t have_runs;
	hid_t file, runs;
	int n = -1;

	h5file_begin(&s, "results", path);
	if (access(path, R_OK) < 0) {
		text_line(stderr, "results: %s: %s", path, strerror(errno));
		goto out;
	}
	file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (h5file_check(&s, file, "H5Fopen") < 0)
		goto out;
	have_runs = H5Lexists(file, "runs", H5P_DEFAULT);
	if (h5file_check(&s, have_runs, "H5Lexists(/runs)") < 0)
		goto out_file;
	if (!have_runs) {
		n = 0;
		goto out_file;
	}
	runs = H5Gopen2(file, "runs", H5P_DEFAULT);
	if (h5file_check(&s, runs, "H5Gopen2(/runs)") == 0) {
		if (h5file_check(&s, H5Gget_info(runs, &info), "H5Gget_info(/runs)") == 0)
			n = (int)info.nlinks;
		H5Gclose(runs);
	}
out_file:
	H5Fclose(file);
out:
	h5file_end(&s);
	return n;
}

/* ---- reading back ------------------------------------------------------------- */

struct rebuild {
	struct experiment *e;
	struct fabric_record *fabric;
	FILE *err;
	int failed;
	const char *path; /* the file's, for messages */
};

/* A configuration attribute ("section.key", a string) back into the experiment through the parser. */
static herr_t config_attr_read(hid_t loc, const char *name, const H5A_info_t *info, void *ctx)
{
	struct rebuild *rb = ctx;
	struct h5file_session s;
	char value[CONFIG_PATH_MAX + 8], assignment[CONFIG_PATH_MAX + 160];

	(void)info;
	if (rb->failed)
		return 0;
	if (!config_is_section_key(name)) {
		/* what gpu_run was on (gpu/run/runinfo.h): only the fabric matters to a prediction */
		if (strcmp(name, "fabric") && strncmp(name, "fabric.", 7))
			return 0;
	}
	h5file_begin(&s, "results", rb->path);
	if (h5file_read_str(&s, loc, name, value, sizeof value) != 0) {
		/* a key the prediction would go without */
		fprintf(rb->err, "attribute %s is not one string\n", name);
		rb->failed = 1;
	} else if (!config_is_section_key(name)) {
		fabric_record_attr(rb->fabric, name, value);
	} else {
		snprintf(assignment, sizeof assignment, "%s=%s", name, value);
		if (config_set(rb->e, assignment, "the run's attributes") != 0)
			rb->failed = 1;
	}
	h5file_end(&s);
	return 0;
}

/*
 * The summary's attribute reserved_by_pool, "STREAM/POOL=BYTES" words
 * separated by spaces (STREAM a schedule stream's name or another, POOL
 * large or small), into r->sum; a word of another shape is the run's error.
 */
static void read_reserved_by_pool(struct h5file_session *s, hid_t run, struct run_read *r)
{
	struct summary *m = &r->sum;
	char text[2048], *save = NULL;
	hid_t g;
	int got;

	m->has_reserved_by_pool = 0;
	memset(m->reserved_by_pool, 0, sizeof(m->reserved_by_pool));
	m->reserved_other = 0;
	g = H5Gopen2(run, "summary", H5P_DEFAULT);
	if (h5file_check(s, g, "H5Gopen2(summary)") < 0)
		return;
	got = h5file_has_attr(g, "reserved_by_pool") && h5file_read_str(s, g, "reserved_by_pool", text, sizeof text) == 0;
	H5Gclose(g);
	if (!got)
		return;
	for (char *w = strtok_r(text, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
		char *slash = strchr(w, '/'), *eq = slash ? strchr(slash, '=') : NULL, *end = NULL;
		unsigned long long bytes;
		int st = -1, large;
		if (!eq) {
			snprintf(r->error, sizeof r->error, "summary reserved_by_pool: '%.64s' is not STREAM/POOL=BYTES", w);
			return;
		}
		*slash = *eq = '\0';
		large = !strcmp(slash + 1, "large");
		errno = 0;
		bytes = strtoull(eq + 1, &end, 10);
		if ((!large && strcmp(slash + 1, "small")) || errno || end == eq + 1 || *end || eq[1] == '-') {
			snprintf(r->error, sizeof r->error,
				 "summary reserved_by_pool: '%.32s/%.32s=%.32s' (allowed: STREAM/large or STREAM/small "
				 "= a number of bytes)", w, slash + 1, eq + 1);
			return;
		}
		for (int t = 0; t < ST_COUNT; t++)
			if (!strcmp(w, stream_name((enum stream_id)t)))
				st = t;
		if (st < 0)
			m->reserved_other += bytes;
		else
			m->reserved_by_pool[2 * st + large] += bytes;
	}
	m->has_reserved_by_pool = 1;
}

static void read_summary(struct h5file_session *s, hid_t run, struct summary *m)
{
	hid_t g = H5Gopen2(run, "summary", H5P_DEFAULT);
	int32_t i;

	if (h5file_check(s, g, "H5Gopen2(summary)") < 0)
		return;
	h5file_read_f64(s, g, "step_time_s", &m->step_time_s);
	m->step_time_p10_s = m->step_time_p90_s = m->step_time_s;
	m->steps = 1;
	if (h5file_has_attr(g, "steps")) {
		h5file_read_f64(s, g, "step_time_p10_s", &m->step_time_p10_s);
		h5file_read_f64(s, g, "step_time_p90_s", &m->step_time_p90_s);
		h5file_read_i32(s, g, "steps", &i);
		m->steps = i;
	}
	h5file_read_f64(s, g, "tokens_per_s_per_gpu", &m->tokens_per_s_per_gpu);
	/* what a PyTorch run (experiments/pytorch/fsdp_bench.py) does not measure is absent: 0 */
	if (h5file_has_attr(g, "mfu"))
		h5file_read_f64(s, g, "mfu", &m->mfu);
	if (h5file_has_attr(g, "compute_s"))
		h5file_read_f64(s, g, "compute_s", &m->compute_s);
	if (h5file_has_attr(g, "exposed_comm_s"))
		h5file_read_f64(s, g, "exposed_comm_s", &m->exposed_comm_s);
	if (h5file_has_attr(g, "comm_bytes_per_gpu"))
		h5file_read_u64(s, g, "comm_bytes_per_gpu", &m->comm_bytes_per_gpu);
	h5file_read_u64(s, g, "peak_alloc_bytes", &m->peak_alloc_bytes);
	h5file_read_u64(s, g, "peak_reserved_bytes", &m->peak_reserved_bytes);
	h5file_read_u64(s, g, "gpu_bytes", &m->gpu_bytes);
	m->outside_bytes = 0;
	if (h5file_has_attr(g, "outside_bytes"))
		h5file_read_u64(s, g, "outside_bytes", &m->outside_bytes);
	h5file_read_i32(s, g, "fits", &i);
	m->fits = i;
	m->profile_span_s = m->profile_busy_s = 0;
	if (h5file_has_attr(g, "profile_span_s") && h5file_has_attr(g, "profile_busy_s")) {
		h5file_read_f64(s, g, "profile_span_s", &m->profile_span_s);
		h5file_read_f64(s, g, "profile_busy_s", &m->profile_busy_s);
	}
	m->alloc_retries = m->alloc_ooms = m->alloc_retries_step = 0; /* files written before the allocator had a capacity */
	m->has_alloc_retries = h5file_has_attr(g, "alloc_retries");
	if (m->has_alloc_retries) {
		h5file_read_i32(s, g, "alloc_retries", &m->alloc_retries);
		h5file_read_i32(s, g, "alloc_ooms", &m->alloc_ooms);
		h5file_read_i32(s, g, "alloc_retries_step", &m->alloc_retries_step);
	}
	H5Gclose(g);
}

/*
 * What a comparison reads of a measured run's summary besides its step:
 * at least one step measured, its 10th and 90th percentiles in order
 * around nothing negative, compute and exposed communication finite and
 * not negative. Else the run's error names the attribute and what is allowed.
 */
static void check_measured_summary(struct run_read *r)
{
	const struct summary *m = &r->sum;
	static const char *const what[] = { "step_time_p10_s", "step_time_p90_s", "compute_s", "exposed_comm_s",
					    "tokens_per_s_per_gpu" };
	const double v[] = { m->step_time_p10_s, m->step_time_p90_s, m->compute_s, m->exposed_comm_s,
			     m->tokens_per_s_per_gpu };

	if (m->steps < 1) {
		snprintf(r->error, sizeof r->error, "summary steps = %d (allowed: 1 or more measured steps)", m->steps);
		return;
	}
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
		if (!(isfinite(v[i]) && v[i] >= 0)) {
			snprintf(r->error, sizeof r->error, "summary %s = %g (allowed: a finite number, 0 or more)", what[i],
				 v[i]);
			return;
		}
	if (m->step_time_p10_s > m->step_time_p90_s)
		snprintf(r->error, sizeof r->error,
			 "summary step_time_p10_s = %g above step_time_p90_s = %g (allowed: p10 <= p90)",
			 m->step_time_p10_s, m->step_time_p90_s);
}

/*
 * A run's op times (all 0 where it timed none): each op ends after it
 * starts, and the step's ops lie within 100 times its measured step of
 * the first one's start. Else the run's error says which op is off.
 */
static void check_op_times(struct run_read *r)
{
	uint64_t first = UINT64_MAX;

	for (int i = 0; i < r->nops; i++) {
		if (r->ops[i].end_ns < r->ops[i].start_ns) {
			snprintf(r->error, sizeof r->error, "op %d of its ops table ends (%llu ns) before it starts (%llu ns)",
				 i, (unsigned long long)r->ops[i].end_ns, (unsigned long long)r->ops[i].start_ns);
			return;
		}
		if (r->ops[i].end_ns > 0 && r->ops[i].start_ns < first)
			first = r->ops[i].start_ns;
	}
	for (int i = 0; i < r->nops && first != UINT64_MAX; i++)
		if (r->ops[i].end_ns > 0 && (double)(r->ops[i].end_ns - first) * 1e-9 > 100 * r->sum.step_time_s) {
			snprintf(r->error, sizeof r->error, "op %d of its ops table ends %.3g s after the first op starts, over "
				 "100 times the measured step (%.3g s)", i, (double)(r->ops[i].end_ns - first) * 1e-9,
				 r->sum.step_time_s);
			return;
		}
}

static void read_run(struct h5file_session *s, hid_t runs, const char *name, struct run_read *r)
{
	hid_t run = H5Gopen2(runs, name, H5P_DEFAULT), t;
	struct rebuild rb = { &r->exp, &r->fabric, NULL, 0, s->path };
	FILE *saved = config_errfile;
	char *msg = NULL;
	size_t msglen = 0, n;
	struct op_row *rows;
	int32_t version;

	memset(r, 0, sizeof(*r));
	fabric_record_init(&r->fabric);
	snprintf(r->name, sizeof r->name, "%s", name);
	if (h5file_check(s, run, name) < 0) {
		snprintf(r->error, sizeof r->error, "cannot open /runs/%s", name);
		return;
	}
	if (!h5file_has_attr(run, "source")) { /* not written by gpu_run, ./sim or experiments/pytorch */
		snprintf(r->error, sizeof r->error,
			 "no 'source' attribute: not a run of this project's results schema (data/README.md)");
		H5Gclose(run);
		return;
	}
	if (h5file_read_str(s, run, "source", r->source, sizeof r->source) != 0) {
		snprintf(r->error, sizeof r->error, "its source attribute cannot be read (said above)");
		H5Gclose(run);
		return;
	}
	if (name_index(results_sources, r->source) < 0) { /* a writer this build does not know: the file is refused */
		const char *close = name_closest(results_sources, r->source);
		char list[64];
		snprintf(r->error, sizeof r->error, "source = '%s' (allowed: %s%s%s%s)", r->source,
			 names_joined(results_sources, list, sizeof list), close ? "; did you mean '" : "",
			 close ? close : "", close ? "'?" : "");
		r->foreign = 1;
		H5Gclose(run);
		return;
	}
	if (!h5file_has_attr(run, "schema_version")) {
		snprintf(r->error, sizeof r->error,
			 "no 'schema_version' attribute: not a run of this project's results schema (data/README.md)");
		H5Gclose(run);
		return;
	}
	if (h5file_read_i32(s, run, "schema_version", &version) != 0) {
		snprintf(r->error, sizeof r->error, "its schema_version attribute cannot be read (said above)");
		H5Gclose(run);
		return;
	}
	if (version != SCHEMA_VERSION) { /* a newer schema may mean anything by what it holds: the file is refused */
		snprintf(r->error, sizeof r->error, "schema_version = %d (allowed: %d%s)", (int)version, SCHEMA_VERSION,
			 version > SCHEMA_VERSION ? "; a newer version of the testbed wrote it: compare it with that one"
						  : "");
		r->foreign = 1;
		H5Gclose(run);
		return;
	}
	{ /* the optional string attributes a run may carry ("" where it has none) */
		const struct {
			const char *name;
			char *buf;
			size_t len;
		} opt[] = {
			{ "hardware", r->hardware, sizeof r->hardware },
			{ "compares", r->compares, sizeof r->compares },
			{ "collectives_check", r->collectives_check, sizeof r->collectives_check },
			{ "build", r->build, sizeof r->build },
			{ "created", r->created, sizeof r->created },
			{ "binary", r->binary, sizeof r->binary },
			{ "kernels.attention_used", r->attention_used, sizeof r->attention_used },
		};
		for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++)
			if (h5file_has_attr(run, opt[i].name))
				h5file_read_str(s, run, opt[i].name, opt[i].buf, opt[i].len);
	}
	if (r->build[0] && strcmp(r->build, "device") && strcmp(r->build, "meta") && !r->error[0])
		snprintf(r->error, sizeof r->error, "attribute build = '%.32s' (allowed: device, meta)", r->build);

	/* the configuration, through the parser; its messages become the run's error */
	rb.err = open_memstream(&msg, &msglen);
	config_errfile = rb.err;
	config_init(&r->exp);
	H5Aiterate2(run, H5_INDEX_NAME, H5_ITER_INC, NULL, config_attr_read, &rb);
	if (!rb.failed && config_resolve(&r->exp) != 0)
		rb.failed = 1;
	config_errfile = saved;
	fclose(rb.err);
	if (rb.failed)
		snprintf(r->error, sizeof r->error, "its configuration does not resolve: %.*s",
			 (int)strcspn(msg ? msg : "", "\n"), msg ? msg : "");
	free(msg);

	t = op_row_type(s);
	rows = t >= 0 && H5Lexists(run, "ops", H5P_DEFAULT) > 0 ? h5file_read_dataset(s, run, "ops", t, &n) : NULL;
	if (t >= 0)
		H5Tclose(t);
	if (rows) {
		r->nops = (int)n;
		r->ops = xcalloc(n + 1, sizeof(*r->ops));
		r->kinds = xcalloc(n + 1, 1);
		r->streams = xcalloc(n + 1, 1);
		for (size_t i = 0; i < n; i++) {
			r->ops[i] = (struct op_timing){ rows[i].start_ns, rows[i].end_ns };
			r->kinds[i] = rows[i].kind;
			r->streams[i] = rows[i].stream;
		}
		free(rows);
	} else if (!r->error[0] && strcmp(r->source, "sim")) {
		snprintf(r->error, sizeof r->error, "no ops table (/runs/%s/ops)%s", name,
			 strcmp(r->source, "pytorch") ? ""
						      : ": give it its schedule's ops first, "
							"experiments/pytorch/attach_schedule.py FILE");
	}
	if (r->nops && H5Lexists(run, "ops_by_rank", H5P_DEFAULT) > 0) {
		struct rank_row *br;
		t = rank_row_type(s);
		br = t >= 0 ? h5file_read_dataset(s, run, "ops_by_rank", t, &n) : NULL;
		if (t >= 0)
			H5Tclose(t);
		if (br && n % (size_t)r->nops == 0) {
			r->nranks = (int)(n / (size_t)r->nops);
			r->by_rank = xcalloc(n + 1, sizeof(*r->by_rank));
			for (size_t i = 0; i < n; i++)
				if (br[i].rank >= 0 && br[i].rank < r->nranks && br[i].op < (uint32_t)r->nops)
					r->by_rank[(size_t)br[i].rank * (size_t)r->nops + br[i].op] =
						(struct op_timing){ br[i].start_ns, br[i].end_ns };
		}
		free(br);
	}
	if (H5Lexists(run, "memory", H5P_DEFAULT) > 0 && (t = mem_row_type(s)) >= 0) { /* a PyTorch run has none */
		r->mem = h5file_read_dataset(s, run, "memory", t, &n);
		r->nmem = (int)n;
		H5Tclose(t);
	}
	if (H5Lexists(run, "kernels", H5P_DEFAULT) > 0 && (t = kernel_row_type(s)) >= 0) {
		r->kernels = h5file_read_dataset(s, run, "kernels", t, &n);
		r->nkernels = r->kernels ? (int)n : 0;
		H5Tclose(t);
	}
	if (H5Lexists(run, "alloc_trace", H5P_DEFAULT) > 0 && (t = alloc_event_type(s)) >= 0) {
		r->alloc_trace = h5file_read_dataset(s, run, "alloc_trace", t, &n);
		r->nalloc_trace = r->alloc_trace ? (int)n : 0;
		H5Tclose(t);
	}
	if (H5Lexists(run, "memory_by_step", H5P_DEFAULT) > 0 && (t = mem_after_type(s)) >= 0) {
		r->by_step = h5file_read_dataset(s, run, "memory_by_step", t, &n);
		r->nby_step = r->by_step ? (int)n : 0;
		H5Tclose(t);
		for (int i = 0; i < r->nby_step && !r->error[0]; i++)
			if (r->by_step[i].reserved < r->by_step[i].alloc)
				snprintf(r->error, sizeof r->error,
					 "memory_by_step row %d: reserved_bytes %llu below allocated_bytes %llu (a caching "
					 "allocator holds at least what it gave out)", i, (unsigned long long)r->by_step[i].reserved,
					 (unsigned long long)r->by_step[i].alloc);
	}
	if (H5Lexists(run, "summary", H5P_DEFAULT) > 0)
		read_summary(s, run, &r->sum);
	else if (!r->error[0])
		snprintf(r->error, sizeof r->error, "no summary group (/runs/%s/summary): the run did not finish", name);
	if (!r->error[0] && !s->failed && H5Lexists(run, "summary", H5P_DEFAULT) > 0)
		read_reserved_by_pool(s, run, r);
	if (!r->error[0] && s->failed)
		snprintf(r->error, sizeof r->error, "part of it cannot be read (said above)");
	if (!r->error[0] && strcmp(r->source, "sim") && !(isfinite(r->sum.step_time_s) && r->sum.step_time_s > 0))
		snprintf(r->error, sizeof r->error, "its measured step time (summary step_time_s = %g) is not a time",
			 r->sum.step_time_s);
	if (!r->error[0] && strcmp(r->source, "sim"))
		check_measured_summary(r);
	if (!r->error[0] && (!(r->sum.profile_busy_s >= 0) || !(r->sum.profile_span_s >= r->sum.profile_busy_s)))
		snprintf(r->error, sizeof r->error,
			 "summary profile_busy_s = %g and profile_span_s = %g (allowed: 0 <= busy <= span seconds)",
			 r->sum.profile_busy_s, r->sum.profile_span_s);
	if (!r->error[0])
		check_op_times(r);
	H5Gclose(run);
}

static herr_t name_fn(hid_t g, const char *name, const H5L_info_t *info, void *ctx)
{
	char (**names)[16] = ctx;
	size_t n = 0;

	(void)g;
	(void)info;
	if (strlen(name) != 6)
		return 0;
	while ((*names)[n][0])
		n++;
	*names = xrealloc(*names, sizeof(**names) * (n + 2));
	snprintf((*names)[n], 16, "%s", name);
	(*names)[n + 1][0] = '\0';
	return 0;
}

int results_read(const char *path, struct run_read **runs, int *n)
{
	struct h5file_session s;
	char (*names)[16] = xcalloc(1, sizeof(*names));
	const char *why;
	hid_t file, rg;
	int count = 0, rc = -1;

	*runs = NULL;
	*n = 0;
	if ((why = results_unreadable(path))) {
		text_line(stderr, "results: %s: %s", path, why);
		free(names);
		return -1;
	}
	h5file_begin(&s, "results", path);
	file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (h5file_check(&s, file, "H5Fopen") < 0)
		goto out;
	if (h5file_holds(file, results_groups) == 0) {
		text_line(stderr, "%s: %s: " NOT_RESULTS "", s.who, path);
		H5Fclose(file);
		goto out;
	}
	if (H5Lexists(file, "runs", H5P_DEFAULT) == 0) { /* sweeps only (core/sweep_table.h): no run */
		*runs = xcalloc(1, sizeof(**runs));
		rc = 0;
		H5Fclose(file);
		goto out;
	}
	rg = H5Gopen2(file, "runs", H5P_DEFAULT);
	if (h5file_check(&s, rg, "H5Gopen2(/runs)") == 0) {
		H5Literate(rg, H5_INDEX_NAME, H5_ITER_INC, NULL, name_fn, &names);
		while (names[count][0])
			count++;
		*runs = xcalloc((size_t)count + 1, sizeof(**runs));
		for (int i = 0; i < count; i++) {
			s.failed = 0; /* a run that cannot be read does not stop the others */
			read_run(&s, rg, names[i], &(*runs)[i]);
		}
		*n = count;
		rc = 0;
		for (int i = 0; i < count; i++)
			if ((*runs)[i].foreign) { /* a run of another schema: the whole file, said run by run */
				text_line(stderr, "%s: %s: run %s: %s", s.who, path, (*runs)[i].name, (*runs)[i].error);
				rc = -1;
			}
		if (rc) {
			results_read_free(*runs, count);
			*runs = NULL;
			*n = 0;
		}
		H5Gclose(rg);
	}
	H5Fclose(file);
out:
	h5file_end(&s);
	free(names);
	return rc;
}

void results_read_free(struct run_read *runs, int n)
{
	for (int i = 0; runs && i < n; i++) {
		config_release(&runs[i].exp);
		free(runs[i].ops);
		free(runs[i].kinds);
		free(runs[i].streams);
		free(runs[i].by_rank);
		free(runs[i].mem);
		free(runs[i].kernels);
		free(runs[i].alloc_trace);
		free(runs[i].by_step);
	}
	free(runs);
}
