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
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "h5file.h"

#include "xalloc.h"

#define SCHEMA_VERSION 1
#define LABEL_BYTES 64     /* fixed string size of the ops.label field, NUL included */
#define CHUNK_ROWS 4096    /* rows per chunk of the ops and memory datasets */

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

/* Variable-length UTF-8 string type (h5py reads it as str). Caller closes. */
static hid_t vlen_str_type(void)
{
	hid_t t = H5Tcopy(H5T_C_S1);

	if (t >= 0 && (H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0)) {
		H5Tclose(t);
		return -1;
	}
	return t;
}

/*
 * Write attribute `name` on loc: n elements of mem_type from data, stored
 * as file_type; n < 0 makes a scalar, n >= 0 a one-dimensional array.
 */
static void attr_write(struct h5file_session *s, hid_t loc, const char *name, hid_t file_type,
		       hid_t mem_type, int n, const void *data)
{
	hsize_t dim = n < 0 ? 1 : (hsize_t)n;
	hid_t space, attr;

	if (s->failed)
		return;
	space = n < 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &dim, NULL);
	if (h5file_check(s, space, "H5Screate") < 0)
		return;
	attr = H5Acreate2(loc, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT);
	if (h5file_check(s, attr, name) == 0) {
		h5file_check(s, H5Awrite(attr, mem_type, data), name);
		H5Aclose(attr);
	}
	H5Sclose(space);
}

static void attr_str(struct h5file_session *s, hid_t loc, const char *name, const char *value)
{
	hid_t t;

	if (s->failed)
		return;
	t = vlen_str_type();
	if (h5file_check(s, t, "H5Tcopy(string)") < 0)
		return;
	attr_write(s, loc, name, t, t, -1, &value);
	H5Tclose(t);
}

static void attr_strs(struct h5file_session *s, hid_t loc, const char *name, int n, const char *const *values)
{
	hid_t t;

	if (s->failed)
		return;
	t = vlen_str_type();
	if (h5file_check(s, t, "H5Tcopy(string)") < 0)
		return;
	attr_write(s, loc, name, t, t, n, values);
	H5Tclose(t);
}

static void attr_i32(struct h5file_session *s, hid_t loc, const char *name, int32_t v)
{
	attr_write(s, loc, name, H5T_STD_I32LE, H5T_NATIVE_INT32, -1, &v);
}

static void attr_u64(struct h5file_session *s, hid_t loc, const char *name, uint64_t v)
{
	attr_write(s, loc, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, -1, &v);
}

static void attr_f64(struct h5file_session *s, hid_t loc, const char *name, double v)
{
	attr_write(s, loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, -1, &v);
}

struct config_ctx {
	struct h5file_session *s;
	hid_t loc;
};

static void config_attr(void *ctx, const char *section, const char *key, const char *value)
{
	struct config_ctx *c = ctx;
	char name[128];

	snprintf(name, sizeof name, "%s.%s", section, key);
	attr_str(c->s, c->loc, name, value);
}

/* ---- datasets -------------------------------------------------------- */

/* An HDF5 enum over uint8 with values 0..n-1 named names[i]. Caller closes. */
static hid_t enum_type(struct h5file_session *s, const char *const *names, int n)
{
	hid_t t = H5Tenum_create(H5T_NATIVE_UINT8);

	if (h5file_check(s, t, "H5Tenum_create") < 0)
		return -1;
	for (int i = 0; i < n; i++) {
		uint8_t v = (uint8_t)i;
		if (h5file_check(s, H5Tenum_insert(t, names[i], &v), "H5Tenum_insert") < 0) {
			H5Tclose(t);
			return -1;
		}
	}
	return t;
}

/* The ops row compound in memory layout, or -1. Caller closes. */
static hid_t op_row_type(struct h5file_session *s)
{
	const char *kinds[OP_KIND_COUNT], *streams[ST_COUNT];
	hid_t t, kind_t, stream_t, label_t;

	for (int i = 0; i < OP_KIND_COUNT; i++)
		kinds[i] = op_kind_name((enum op_kind)i);
	for (int i = 0; i < ST_COUNT; i++)
		streams[i] = stream_name((enum stream_id)i);
	kind_t = enum_type(s, kinds, OP_KIND_COUNT);
	stream_t = enum_type(s, streams, ST_COUNT);
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

/*
 * Write n rows of mem_type as dataset `name` in loc. The file type is the
 * memory type packed (no padding; little-endian on our targets). Chunked
 * and deflated when there are rows and the filter is available.
 */
static void dataset_write(struct h5file_session *s, hid_t loc, const char *name, hid_t mem_type,
			  size_t n, const void *rows)
{
	hsize_t dim = n, chunk = n < CHUNK_ROWS ? n : CHUNK_ROWS;
	hid_t file_type = -1, space = -1, dcpl = -1, dset = -1;

	if (s->failed)
		return;
	file_type = H5Tcopy(mem_type);
	if (h5file_check(s, file_type, "H5Tcopy") < 0 || h5file_check(s, H5Tpack(file_type), "H5Tpack") < 0)
		goto out;
	space = H5Screate_simple(1, &dim, NULL);
	dcpl = H5Pcreate(H5P_DATASET_CREATE);
	if (h5file_check(s, space, "H5Screate_simple") < 0 || h5file_check(s, dcpl, "H5Pcreate") < 0)
		goto out;
	if (n > 0) {
		if (h5file_check(s, H5Pset_chunk(dcpl, 1, &chunk), "H5Pset_chunk") < 0)
			goto out;
		if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0 &&
		    (h5file_check(s, H5Pset_shuffle(dcpl), "H5Pset_shuffle") < 0 ||
		     h5file_check(s, H5Pset_deflate(dcpl, 4), "H5Pset_deflate") < 0))
			goto out;
	}
	dset = H5Dcreate2(loc, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
	if (h5file_check(s, dset, name) < 0)
		goto out;
	if (n > 0)
		h5file_check(s, H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows), name);
out:
	if (dset >= 0)
		H5Dclose(dset);
	if (dcpl >= 0)
		H5Pclose(dcpl);
	if (space >= 0)
		H5Sclose(space);
	if (file_type >= 0)
		H5Tclose(file_type);
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
		dataset_write(s, run, "ops", t, (size_t)sc->nops, rows);
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
		dataset_write(s, run, "memory", t, r->nmem > 0 ? (size_t)r->nmem : 0, r->mem);
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
	attr_f64(s, g, "step_time_s", m->step_time_s);
	attr_f64(s, g, "tokens_per_s_per_gpu", m->tokens_per_s_per_gpu);
	attr_f64(s, g, "mfu", m->mfu);
	attr_f64(s, g, "compute_s", m->compute_s);
	attr_f64(s, g, "exposed_comm_s", m->exposed_comm_s);
	attr_u64(s, g, "comm_bytes_per_gpu", m->comm_bytes_per_gpu);
	attr_u64(s, g, "peak_alloc_bytes", m->peak_alloc_bytes);
	attr_u64(s, g, "peak_reserved_bytes", m->peak_reserved_bytes);
	attr_write(s, g, "peak_by_cat_bytes", H5T_STD_U64LE, H5T_NATIVE_UINT64, MEM_CAT_COUNT,
		   m->peak_by_cat);
	attr_strs(s, g, "categories", MEM_CAT_COUNT, cats);
	attr_u64(s, g, "gpu_bytes", m->gpu_bytes);
	attr_i32(s, g, "fits", m->fits);
	attr_i32(s, g, "ncrit", ncrit);
	attr_strs(s, g, "crit_names", ncrit, crit);
	attr_write(s, g, "crit_s", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, ncrit, m->crit_s);
	H5Gclose(g);
}

/* Whether an open HDF5 file is a results file: /runs, or nothing at all yet. 1, 0, or -1 on a failed call. */
static int is_results(hid_t file)
{
	H5G_info_t info;
	htri_t have = H5Lexists(file, "runs", H5P_DEFAULT);

	if (have != 0)
		return have > 0 ? 1 : -1;
	if (H5Gget_info(file, &info) < 0)
		return -1;
	return info.nlinks == 0;
}

/* Write run r as the next group of /runs in file. 0 or -1 (reported). */
static int write_run(struct h5file_session *s, hid_t file, void *ctx)
{
	const struct run_result *r = ctx;
	char name[16], created[32], host[256] = "";
	time_t now = time(NULL);
	struct tm tm;
	int ours = is_results(file);
	hid_t run;

	if (h5file_check(s, ours, "H5Lexists(/runs)") < 0)
		return -1;
	if (!ours) {
		fprintf(stderr, "%s: %s: is an HDF5 file without /runs, not a results file; not touching it\n",
			s->who, s->path);
		return -1;
	}
	run = h5file_next_group(s, file, "runs", name);
	if (run < 0)
		return -1;
	gmtime_r(&now, &tm);
	strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
	gethostname(host, sizeof host - 1);
	attr_str(s, run, "source", r->source ? r->source : "");
	attr_str(s, run, "created", created);
	attr_i32(s, run, "schema_version", SCHEMA_VERSION);
	attr_str(s, run, "hostname", host);
	if (r->exp) {
		struct config_ctx c = { s, run };
		attr_str(s, run, "experiment", r->exp->path);
		config_each(r->exp, config_attr, &c);
	}
	write_ops(s, run, r);
	write_memory(s, run, r);
	write_summary(s, run, &r->sum);
	H5Gclose(run);
	return s->failed ? -1 : 0;
}

int results_append(const char *path, const struct run_result *r)
{
	return h5file_append("results", path, write_run, (void *)r);
}

const char *results_refusal(const char *path)
{
	struct h5file_session s;
	const char *why = NULL;
	htri_t is_hdf5;
	hid_t file;
	int ours;

	h5file_begin(&s, "results", path); /* quiet: HDF5 prints nothing here */
	is_hdf5 = H5Fis_hdf5(path);
	if (is_hdf5 <= 0) {
		why = "exists and is not an HDF5 file";
		goto out;
	}
	file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (file < 0) {
		why = "is an HDF5 file that cannot be opened";
		goto out;
	}
	ours = is_results(file);
	if (ours < 0)
		why = "is an HDF5 file that cannot be read";
	else if (!ours)
		why = "is an HDF5 file without /runs, not a results file";
	H5Fclose(file);
out:
	H5Eclear2(H5E_DEFAULT);
	h5file_end(&s);
	return why;
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
		fprintf(stderr, "results: %s: %s\n", path, strerror(errno));
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
