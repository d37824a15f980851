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
	h5file_attr_i32(s, g, "ncrit", ncrit);
	h5file_attr_strs(s, g, "crit_names", ncrit, crit);
	h5file_attr_write(s, g, "crit_s", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, ncrit, m->crit_s);
	H5Gclose(g);
}

/* Write run r as the next group of /runs in file. 0 or -1 (reported). */
static int write_run(struct h5file_session *s, hid_t file, void *ctx)
{
	const struct run_result *r = ctx;
	char name[16], created[32], host[256] = "";
	time_t now = time(NULL);
	struct tm tm;
	hid_t run = h5file_next_group(s, file, "runs", name);

	if (run < 0)
		return -1;
	gmtime_r(&now, &tm);
	strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
	gethostname(host, sizeof host - 1);
	h5file_attr_str(s, run, "source", r->source ? r->source : "");
	h5file_attr_str(s, run, "created", created);
	h5file_attr_i32(s, run, "schema_version", SCHEMA_VERSION);
	h5file_attr_str(s, run, "hostname", host);
	if (r->exp) {
		struct config_ctx c = { s, run };
		h5file_attr_str(s, run, "experiment", r->exp->path);
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
