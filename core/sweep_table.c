/*
 * sweep_table.c - a sweep's rows in a results file (see sweep_table.h).
 *
 * A row is stored packed, its columns derived from the sweep: the
 * candidate index; each axis (a number, a boolean, a name of the axis's
 * own list as an HDF5 enum, or a policy value as a short string, the
 * resolved one); the policy fields the walk varies or the global batch
 * derives; then the figures. The memory layout is the file layout.
 */
#include "sweep_table.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "config.h"
#include "h5file.h"
#include "xalloc.h"

#define SCHEMA_VERSION 1
#define NAME_BYTES 24       /* a policy value ("partial:40", "all-but-last"), NUL included */
#define CHUNK_ROWS 4096

/* The figures of a row, by column name. */
enum figure { F_STEP, F_TOKENS, F_MFU, F_COMPUTE, F_EXPOSED, F_COMM, F_ALLOC, F_RESERVED, F_BUDGET, F_FITS, F_COUNT };
static const struct { const char *name; char type; } figures[F_COUNT] = {
	{ "step_time_s", 'r' }, { "tokens_per_s_per_gpu", 'r' }, { "mfu", 'r' }, { "compute_s", 'r' },
	{ "exposed_comm_s", 'r' }, { "comm_bytes_per_gpu", 'u' }, { "peak_alloc_bytes", 'u' },
	{ "peak_reserved_bytes", 'u' }, { "budget_bytes", 'u' }, { "fits", 'b' },
};

static size_t type_size(char type)
{
	switch (type) {
	case 'b': return 1;
	case 'e': return 2;
	case 's': return NAME_BYTES;
	default: return 8;
	}
}

static void add_col(struct sweep_table *t, const char *name, int axis, int field, int figure, char type)
{
	struct sweep_column *c = &t->cols[t->ncols++];

	snprintf(c->name, sizeof c->name, "%s", name);
	c->axis = axis;
	c->field = field;
	c->figure = figure;
	c->type = type;
	c->offset = t->row_bytes;
	c->size = type_size(type);
	t->row_bytes += c->size;
}

/* The column type of policy field f. */
static char field_type(enum policy_field f)
{
	switch (f) {
	case PF_SHARD_GROUP:
	case PF_MICROBATCHES:
	case PF_PREFETCH:
		return 'i';
	case PF_OPTIM_IN_BACKWARD:
	case PF_FLAT_PARAMS:
	case PF_CONCAT_LAST_ONLY:
	case PF_EXPANDABLE_SEGMENTS:
		return 'b';
	default:
		return 's';
	}
}

static int has_axis(const struct sweep *sw, const char *section, const char *name)
{
	for (int i = 0; i < sw->naxes; i++)
		if (!strcmp(sw->axes[i].section, section) && !strcmp(sw->axes[i].name, name))
			return 1;
	return 0;
}

void sweep_table_init(struct sweep_table *t, const struct sweep *sw, const char *path)
{
	static const enum policy_field walked[] = { PF_SHARDING, PF_SHARD_GROUP, PF_ACCUM, PF_WRAP, PF_RESHARD,
						    PF_OPTIM, PF_OPTIM_IN_BACKWARD, PF_AC, PF_OFFLOAD };
	char name[64];

	memset(t, 0, sizeof(*t));
	t->sw = sw;
	snprintf(t->path, sizeof t->path, "%s", path);
	add_col(t, "index", -1, -1, -1, 'u');
	for (int i = 0; i < sw->naxes; i++) {
		const struct sweep_axis *a = &sw->axes[i];
		char type = a->type;
		snprintf(name, sizeof name, "%s.%s", a->section, a->name);
		if (type == 'n')
			type = a->policy ? 's' : 'e';
		add_col(t, name, i, a->policy ? name_index(policy_field_names, a->name) : -1, -1, type);
	}
	if (sw->walk)
		for (size_t k = 0; k < sizeof walked / sizeof walked[0]; k++) {
			snprintf(name, sizeof name, "policy.%s", policy_field_names[walked[k]]);
			add_col(t, name, -1, walked[k], -1, field_type(walked[k]));
		}
	if (sw->global_batch && !sw->microbatches_axis)
		add_col(t, "policy.microbatches", -1, PF_MICROBATCHES, -1, 'i');
	if (!sw->walk && has_axis(sw, "policy", "sharding") && !has_axis(sw, "policy", "shard_group"))
		add_col(t, "policy.shard_group", -1, PF_SHARD_GROUP, -1, 'i');
	for (int f = 0; f < F_COUNT; f++)
		add_col(t, figures[f].name, -1, -1, f, figures[f].type);
}

/* ---- rows ------------------------------------------------------------------------- */

static void put_text(const struct sweep_column *c, const char *text, unsigned char *p)
{
	switch (c->type) {
	case 'i': {
		int64_t v = strtoll(text, NULL, 10);
		memcpy(p, &v, 8);
		break;
	}
	case 'u': {
		uint64_t v = strtoull(text, NULL, 10);
		memcpy(p, &v, 8);
		break;
	}
	case 'r': {
		double v = strtod(text, NULL);
		memcpy(p, &v, 8);
		break;
	}
	case 'b':
		*p = !strcmp(text, "true");
		break;
	case 's':
		memset(p, 0, NAME_BYTES);
		snprintf((char *)p, NAME_BYTES, "%s", text);
		break;
	}
}

static void put_figure(const struct sweep_figures *f, int which, unsigned char *p)
{
	double d = 0;
	uint64_t u = 0;

	switch (which) {
	case F_STEP: d = f->step_time_s; break;
	case F_TOKENS: d = f->tokens_per_s_per_gpu; break;
	case F_MFU: d = f->mfu; break;
	case F_COMPUTE: d = f->compute_s; break;
	case F_EXPOSED: d = f->exposed_comm_s; break;
	case F_COMM: u = f->comm_bytes_per_gpu; break;
	case F_ALLOC: u = f->peak_alloc_bytes; break;
	case F_RESERVED: u = f->peak_reserved_bytes; break;
	case F_BUDGET: u = f->budget_bytes; break;
	case F_FITS: *p = f->fits; return;
	}
	if (figures[which].type == 'r')
		memcpy(p, &d, 8);
	else
		memcpy(p, &u, 8);
}

/* Row r as stored, into p (row_bytes). */
static void pack_row(const struct sweep_table *t, const struct sweep_row *r, unsigned char *p)
{
	struct policy pol;
	char text[64];

	sweep_policy_unpack(&r->policy, &pol);
	memset(p, 0, t->row_bytes);
	for (int i = 0; i < t->ncols; i++) {
		const struct sweep_column *c = &t->cols[i];
		unsigned char *at = p + c->offset;
		if (c->figure >= 0) {
			put_figure(&r->fig, c->figure, at);
		} else if (c->field >= 0) {
			put_text(c, policy_field_str(&pol, (enum policy_field)c->field, text, sizeof text), at);
		} else if (c->axis >= 0) {
			if (c->type == 'e') {
				uint16_t v = r->value[c->axis];
				memcpy(at, &v, 2);
			} else {
				put_text(c, t->sw->axes[c->axis].values[r->value[c->axis]], at);
			}
		} else {
			memcpy(at, &r->index, 8);
		}
	}
}

/* The row's compound type (memory = file: packed, native little-endian); -1 after reporting. */
static hid_t row_type(struct h5file_session *s, const struct sweep_table *t)
{
	hid_t type = H5Tcreate(H5T_COMPOUND, t->row_bytes);

	if (h5file_check(s, type, "H5Tcreate(row)") < 0)
		return -1;
	for (int i = 0; i < t->ncols && !s->failed; i++) {
		const struct sweep_column *c = &t->cols[i];
		hid_t ft = -1;
		int own = 0;
		switch (c->type) {
		case 'i': ft = H5T_NATIVE_INT64; break;
		case 'u': ft = H5T_NATIVE_UINT64; break;
		case 'r': ft = H5T_NATIVE_DOUBLE; break;
		case 'b': ft = H5T_NATIVE_UINT8; break;
		case 's':
			ft = H5Tcopy(H5T_C_S1);
			own = 1;
			if (h5file_check(s, ft, "H5Tcopy") == 0)
				h5file_check(s, H5Tset_size(ft, NAME_BYTES), "H5Tset_size");
			break;
		case 'e': {
			const struct sweep_axis *a = &t->sw->axes[c->axis];
			ft = H5Tenum_create(H5T_NATIVE_UINT16);
			own = 1;
			if (h5file_check(s, ft, "H5Tenum_create") == 0)
				for (int v = 0; v < a->nvalues; v++) {
					uint16_t x = (uint16_t)v;
					if (h5file_check(s, H5Tenum_insert(ft, a->values[v], &x), "H5Tenum_insert") < 0)
						break;
				}
			break;
		}
		}
		if (!s->failed)
			h5file_check(s, H5Tinsert(type, c->name, c->offset, ft), c->name);
		if (own && ft >= 0)
			H5Tclose(ft);
	}
	if (s->failed) {
		H5Tclose(type);
		return -1;
	}
	return type;
}

/* ---- the group ------------------------------------------------------------------------ */

/* Attribute name = value, replacing one there. */
static void attr_replace(struct h5file_session *s, hid_t g, const char *name)
{
	if (!s->failed && H5Aexists(g, name) > 0)
		h5file_check(s, H5Adelete(g, name), name);
}

static void write_progress(struct h5file_session *s, hid_t g, uint64_t rows, const struct sweep_progress *p)
{
	static const char *const skip[SWEEP_END] = { NULL, "skipped_invalid", "skipped_duplicate", "skipped_off_batch" };

	attr_replace(s, g, "status");
	h5file_attr_str(s, g, "status", p->status);
	attr_replace(s, g, "rows");
	h5file_attr_u64(s, g, "rows", rows);
	attr_replace(s, g, "seconds");
	h5file_attr_f64(s, g, "seconds", p->seconds);
	attr_replace(s, g, "ranks");
	h5file_attr_i32(s, g, "ranks", p->ranks);
	for (int k = 1; k < SWEEP_END; k++) {
		attr_replace(s, g, skip[k]);
		h5file_attr_u64(s, g, skip[k], p->skipped[k]);
	}
}

/* The whole sweep file as text ("" when there is none), malloc'ed. */
static char *file_text(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	size_t n;

	if (!f)
		return xstrdup("");
	buf = xmalloc((1 << 20) + 1); /* a sweep file is at most 1 MiB (config_open) */
	n = fread(buf, 1, 1 << 20, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* The attributes a sweep's group gets once: what it is. */
static void write_description(struct h5file_session *s, hid_t g, const struct sweep *sw)
{
	char created[32], host[256] = "", id[96], *ini = NULL, *text;
	size_t ini_n = 0;
	time_t now = time(NULL);
	struct tm tm;
	const char *axes[SWEEP_AXES_MAX];
	char names[SWEEP_AXES_MAX][64];
	FILE *f;

	gmtime_r(&now, &tm);
	strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
	gethostname(host, sizeof host - 1);
	h5file_attr_str(s, g, "source", "sim");
	h5file_attr_i32(s, g, "schema_version", SCHEMA_VERSION);
	h5file_attr_str(s, g, "created", created);
	h5file_attr_str(s, g, "hostname", host);
	h5file_attr_str(s, g, "sweep_file", sw->from_file ? sw->path : "");
	text = sw->from_file ? file_text(sw->path) : xstrdup("");
	h5file_attr_str(s, g, "sweep_text", text);
	free(text);
	h5file_attr_str(s, g, "experiment", sw->experiment);
	f = open_memstream(&ini, &ini_n);
	config_write_ini(&sw->base, f);
	fclose(f);
	h5file_attr_str(s, g, "base_ini", ini);
	free(ini);
	h5file_attr_str(s, g, "policies", sw->walk ? "all" : "axes");
	h5file_attr_u64(s, g, "global_batch", (uint64_t)sw->global_batch);
	h5file_attr_f64(s, g, "memory_budget_gib", sw->memory_budget_gib);
	h5file_attr_i32(s, g, "must_fit", sw->must_fit);
	h5file_attr_u64(s, g, "candidates", sw->ncandidates);
	for (int i = 0; i < sw->naxes; i++) {
		snprintf(names[i], sizeof names[i], "%.15s.%.31s", sw->axes[i].section, sw->axes[i].name);
		axes[i] = names[i];
		snprintf(id, sizeof id, "values.%s", names[i]);
		h5file_attr_strs(s, g, id, sw->axes[i].nvalues, (const char *const *)sw->axes[i].values);
	}
	h5file_attr_strs(s, g, "axes", sw->naxes, axes);
	h5file_attr_str(s, g, "what_if", sw->what_if >= 0 ? names[sw->what_if] : "");
}

struct append {
	struct sweep_table *t;
	const unsigned char *rows;
	size_t n;
	const struct run_result *runs;
	const uint64_t *run_rows;
	int nruns;
	const struct sweep_progress *p;
	char group[16];
};

static int write_append(struct h5file_session *s, hid_t file, void *ctx)
{
	struct append *a = ctx;
	struct sweep_table *t = a->t;
	hid_t g = -1, type = -1, d = -1, space = -1, mspace = -1, dcpl = -1;
	hsize_t old = t->written, dim = old + a->n, count = a->n;

	if (!t->group[0]) {
		g = h5file_next_group(s, file, "sweeps", a->group);
		if (g < 0)
			return -1;
		write_description(s, g, t->sw);
	} else {
		char path[32];
		snprintf(a->group, sizeof a->group, "%s", t->group);
		snprintf(path, sizeof path, "/sweeps/%s", t->group);
		g = H5Gopen2(file, path, H5P_DEFAULT);
		if (h5file_check(s, g, path) < 0)
			return -1;
	}
	type = row_type(s, t);
	if (type < 0)
		goto out;
	if (!t->group[0]) {
		hsize_t zero = 0, unlimited = H5S_UNLIMITED, chunk = CHUNK_ROWS;
		space = H5Screate_simple(1, &zero, &unlimited);
		dcpl = H5Pcreate(H5P_DATASET_CREATE);
		if (h5file_check(s, space, "H5Screate_simple") < 0 || h5file_check(s, dcpl, "H5Pcreate") < 0 ||
		    h5file_check(s, H5Pset_chunk(dcpl, 1, &chunk), "H5Pset_chunk") < 0)
			goto out;
		if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0 &&
		    (h5file_check(s, H5Pset_shuffle(dcpl), "H5Pset_shuffle") < 0 ||
		     h5file_check(s, H5Pset_deflate(dcpl, 4), "H5Pset_deflate") < 0))
			goto out;
		d = H5Dcreate2(g, "configs", type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
		H5Sclose(space);
		space = -1;
	} else {
		d = H5Dopen2(g, "configs", H5P_DEFAULT);
	}
	if (h5file_check(s, d, "configs") < 0)
		goto out;
	if (a->n) {
		if (h5file_check(s, H5Dset_extent(d, &dim), "H5Dset_extent(configs)") < 0)
			goto out;
		space = H5Dget_space(d);
		mspace = H5Screate_simple(1, &count, NULL);
		if (h5file_check(s, space, "H5Dget_space") < 0 || h5file_check(s, mspace, "H5Screate_simple") < 0 ||
		    h5file_check(s, H5Sselect_hyperslab(space, H5S_SELECT_SET, &old, NULL, &count, NULL),
				 "H5Sselect_hyperslab") < 0)
			goto out;
		h5file_check(s, H5Dwrite(d, type, mspace, space, H5P_DEFAULT, a->rows), "H5Dwrite(configs)");
	}
	for (int i = 0; i < a->nruns && !s->failed; i++) {
		char name[16], path[40];
		hid_t run;
		if (results_write_run(s, file, &a->runs[i], name) != 0)
			break;
		snprintf(path, sizeof path, "/runs/%s", name);
		run = H5Gopen2(file, path, H5P_DEFAULT);
		if (h5file_check(s, run, path) == 0) {
			h5file_attr_str(s, run, "sweep", a->group);
			h5file_attr_u64(s, run, "sweep_index", a->run_rows[i]);
			H5Gclose(run);
		}
	}
	write_progress(s, g, old + a->n, a->p);
out:
	if (mspace >= 0)
		H5Sclose(mspace);
	if (space >= 0)
		H5Sclose(space);
	if (dcpl >= 0)
		H5Pclose(dcpl);
	if (d >= 0)
		H5Dclose(d);
	if (type >= 0)
		H5Tclose(type);
	H5Gclose(g);
	return s->failed ? -1 : 0;
}

int sweep_table_append(struct sweep_table *t, const struct sweep_row *rows, size_t n,
		       const struct run_result *runs, const uint64_t *run_rows, int nruns,
		       const struct sweep_progress *p)
{
	unsigned char *packed = xmalloc(t->row_bytes * (n ? n : 1));
	struct append a = { t, packed, n, runs, run_rows, nruns, p, "" };
	int rc;

	for (size_t i = 0; i < n; i++)
		pack_row(t, &rows[i], packed + i * t->row_bytes);
	rc = h5file_append("sweep", t->path, write_append, &a);
	free(packed);
	if (rc == 0) {
		if (!t->group[0])
			snprintf(t->group, sizeof t->group, "%s", a.group);
		t->written += n;
	}
	return rc;
}
