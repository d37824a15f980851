/*
 * results.c - append one run to an HDF5 results file (schema: data/README.md).
 *
 * The file is never written in place. results_append() holds an exclusive
 * flock on the file's directory, copies the file (if any) to
 * `path.tmp.<pid>` beside it, adds the new group /runs/NNNNNN to the copy,
 * closes and fsyncs it and renames it over the original. A failure at any
 * point removes the copy and leaves the original as it was; two writers
 * appending to the same file take turns and both runs land. Appending costs
 * a copy of the file, which is fine for files of a few hundred runs.
 *
 * HDF5's automatic error printing is switched off while we work; a failed
 * call is reported once, as one line naming the file, the call and the
 * library's own messages (outermost and innermost of its error stack).
 */
#include "results.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#define SCHEMA_VERSION 1
#define LABEL_BYTES 64     /* fixed string size of the ops.label field, NUL included */
#define CHUNK_ROWS 4096    /* rows per chunk of the ops and memory datasets */
#define RUN_INDEX_MAX 999999

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

/*
 * The state of one HDF5 session. Errors are sticky, as with ferror(): the
 * first failed call is reported and sets `failed`; the attribute helpers
 * do nothing once it is set, so a run of them is checked once at its end.
 */
struct h5s {
	const char *path;  /* the file named in messages (the user's, not the tmp) */
	int failed;
	H5E_auto2_t saved_func;
	void *saved_data;
};

struct err_walk {
	char outer[160];
	char inner[160];
};

static herr_t err_walk_fn(unsigned n, const H5E_error2_t *e, void *ctx)
{
	struct err_walk *w = ctx;
	const char *desc = e->desc && e->desc[0] ? e->desc : e->func_name;

	if (n == 0)
		snprintf(w->outer, sizeof w->outer, "%s", desc ? desc : "");
	snprintf(w->inner, sizeof w->inner, "%s", desc ? desc : "");
	return 0;
}

static void h5s_begin(struct h5s *s, const char *path)
{
	s->path = path;
	s->failed = 0;
	H5Eget_auto2(H5E_DEFAULT, &s->saved_func, &s->saved_data);
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static void h5s_end(struct h5s *s)
{
	H5Eset_auto2(H5E_DEFAULT, s->saved_func, s->saved_data);
}

/*
 * Check the return of an HDF5 call (hid_t, herr_t or htri_t: negative is a
 * failure). On the first failure print `path: call failed: messages`.
 * Returns 0 when rv is good, -1 otherwise.
 */
static int h5s_check(struct h5s *s, int64_t rv, const char *call)
{
	struct err_walk w = { "", "" };

	if (rv >= 0)
		return 0;
	if (!s->failed) {
		H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, err_walk_fn, &w);
		if (w.outer[0] && strcmp(w.outer, w.inner) != 0)
			fprintf(stderr, "results: %s: %s failed: %s (%s)\n", s->path, call, w.outer, w.inner);
		else if (w.outer[0])
			fprintf(stderr, "results: %s: %s failed: %s\n", s->path, call, w.outer);
		else
			fprintf(stderr, "results: %s: %s failed\n", s->path, call);
	}
	H5Eclear2(H5E_DEFAULT);
	s->failed = 1;
	return -1;
}

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
static void attr_write(struct h5s *s, hid_t loc, const char *name, hid_t file_type,
		       hid_t mem_type, int n, const void *data)
{
	hsize_t dim = n < 0 ? 1 : (hsize_t)n;
	hid_t space, attr;

	if (s->failed)
		return;
	space = n < 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &dim, NULL);
	if (h5s_check(s, space, "H5Screate") < 0)
		return;
	attr = H5Acreate2(loc, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT);
	if (h5s_check(s, attr, name) == 0) {
		h5s_check(s, H5Awrite(attr, mem_type, data), name);
		H5Aclose(attr);
	}
	H5Sclose(space);
}

static void attr_str(struct h5s *s, hid_t loc, const char *name, const char *value)
{
	hid_t t;

	if (s->failed)
		return;
	t = vlen_str_type();
	if (h5s_check(s, t, "H5Tcopy(string)") < 0)
		return;
	attr_write(s, loc, name, t, t, -1, &value);
	H5Tclose(t);
}

static void attr_strs(struct h5s *s, hid_t loc, const char *name, int n, const char *const *values)
{
	hid_t t;

	if (s->failed)
		return;
	t = vlen_str_type();
	if (h5s_check(s, t, "H5Tcopy(string)") < 0)
		return;
	attr_write(s, loc, name, t, t, n, values);
	H5Tclose(t);
}

static void attr_i32(struct h5s *s, hid_t loc, const char *name, int32_t v)
{
	attr_write(s, loc, name, H5T_STD_I32LE, H5T_NATIVE_INT32, -1, &v);
}

static void attr_u64(struct h5s *s, hid_t loc, const char *name, uint64_t v)
{
	attr_write(s, loc, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, -1, &v);
}

static void attr_f64(struct h5s *s, hid_t loc, const char *name, double v)
{
	attr_write(s, loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, -1, &v);
}

struct config_ctx {
	struct h5s *s;
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
static hid_t enum_type(struct h5s *s, const char *const *names, int n)
{
	hid_t t = H5Tenum_create(H5T_NATIVE_UINT8);

	if (h5s_check(s, t, "H5Tenum_create") < 0)
		return -1;
	for (int i = 0; i < n; i++) {
		uint8_t v = (uint8_t)i;
		if (h5s_check(s, H5Tenum_insert(t, names[i], &v), "H5Tenum_insert") < 0) {
			H5Tclose(t);
			return -1;
		}
	}
	return t;
}

/* The ops row compound in memory layout, or -1. Caller closes. */
static hid_t op_row_type(struct h5s *s)
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
	if (s->failed || h5s_check(s, label_t, "H5Tcopy") < 0 || h5s_check(s, t, "H5Tcreate") < 0)
		goto out;
	if (h5s_check(s, H5Tset_size(label_t, LABEL_BYTES), "H5Tset_size(label)") < 0 ||
	    h5s_check(s, H5Tset_strpad(label_t, H5T_STR_NULLTERM), "H5Tset_strpad(label)") < 0)
		goto out;
#define FIELD(name, type) \
	h5s_check(s, H5Tinsert(t, #name, HOFFSET(struct op_row, name), type), "H5Tinsert(" #name ")")
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
static hid_t mem_row_type(struct h5s *s)
{
	hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct mem_sample));

	if (h5s_check(s, t, "H5Tcreate") < 0)
		return -1;
	h5s_check(s, H5Tinsert(t, "t_ns", HOFFSET(struct mem_sample, t_ns), H5T_NATIVE_UINT64),
		  "H5Tinsert(t_ns)");
	for (int c = 0; c < MEM_CAT_COUNT && !s->failed; c++)
		h5s_check(s, H5Tinsert(t, mem_cat_name((enum mem_cat)c),
				       HOFFSET(struct mem_sample, alloc) + (size_t)c * sizeof(uint64_t),
				       H5T_NATIVE_UINT64), "H5Tinsert(memory category)");
	if (!s->failed)
		h5s_check(s, H5Tinsert(t, "reserved", HOFFSET(struct mem_sample, reserved),
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
static void dataset_write(struct h5s *s, hid_t loc, const char *name, hid_t mem_type,
			  size_t n, const void *rows)
{
	hsize_t dim = n, chunk = n < CHUNK_ROWS ? n : CHUNK_ROWS;
	hid_t file_type = -1, space = -1, dcpl = -1, dset = -1;

	if (s->failed)
		return;
	file_type = H5Tcopy(mem_type);
	if (h5s_check(s, file_type, "H5Tcopy") < 0 || h5s_check(s, H5Tpack(file_type), "H5Tpack") < 0)
		goto out;
	space = H5Screate_simple(1, &dim, NULL);
	dcpl = H5Pcreate(H5P_DATASET_CREATE);
	if (h5s_check(s, space, "H5Screate_simple") < 0 || h5s_check(s, dcpl, "H5Pcreate") < 0)
		goto out;
	if (n > 0) {
		if (h5s_check(s, H5Pset_chunk(dcpl, 1, &chunk), "H5Pset_chunk") < 0)
			goto out;
		if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0 &&
		    (h5s_check(s, H5Pset_shuffle(dcpl), "H5Pset_shuffle") < 0 ||
		     h5s_check(s, H5Pset_deflate(dcpl, 4), "H5Pset_deflate") < 0))
			goto out;
	}
	dset = H5Dcreate2(loc, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
	if (h5s_check(s, dset, name) < 0)
		goto out;
	if (n > 0)
		h5s_check(s, H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows), name);
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

static void write_ops(struct h5s *s, hid_t run, const struct run_result *r)
{
	const struct schedule *sc = r->sched;
	struct op_row *rows;
	hid_t t;

	if (s->failed)
		return;
	rows = calloc(sc->nops ? (size_t)sc->nops : 1, sizeof *rows);
	if (!rows) {
		fprintf(stderr, "results: %s: out of memory for %d ops\n", s->path, sc->nops);
		s->failed = 1;
		return;
	}
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

static void write_memory(struct h5s *s, hid_t run, const struct run_result *r)
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

static void write_summary(struct h5s *s, hid_t run, const struct summary *m)
{
	const char *cats[MEM_CAT_COUNT], *crit[RESULTS_CRIT_MAX];
	int ncrit = m->ncrit < 0 ? 0 : m->ncrit > RESULTS_CRIT_MAX ? RESULTS_CRIT_MAX : m->ncrit;
	hid_t g;

	if (s->failed)
		return;
	g = H5Gcreate2(run, "summary", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	if (h5s_check(s, g, "H5Gcreate2(summary)") < 0)
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

static herr_t max_index_fn(hid_t g, const char *name, const H5L_info_t *info, void *ctx)
{
	int *max = ctx;
	char *end;
	long v;

	(void)g;
	(void)info;
	if (strlen(name) != 6)
		return 0;
	v = strtol(name, &end, 10);
	if (*end == '\0' && v > *max)
		*max = (int)v;
	return 0;
}

/* Write run r as the next group of /runs in file. 0 or -1 (reported). */
static int write_run(struct h5s *s, hid_t file, const struct run_result *r)
{
	char name[16], created[32], host[256] = "";
	time_t now = time(NULL);
	struct tm tm;
	htri_t have_runs;
	hid_t runs, run;
	int max = -1;

	have_runs = H5Lexists(file, "runs", H5P_DEFAULT);
	if (h5s_check(s, have_runs, "H5Lexists(/runs)") < 0)
		return -1;
	if (have_runs)
		runs = H5Gopen2(file, "runs", H5P_DEFAULT);
	else
		runs = H5Gcreate2(file, "runs", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	if (h5s_check(s, runs, have_runs ? "H5Gopen2(/runs)" : "H5Gcreate2(/runs)") < 0)
		return -1;
	if (h5s_check(s, H5Literate(runs, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, max_index_fn, &max),
		      "H5Literate(/runs)") < 0)
		goto out_runs;
	if (max >= RUN_INDEX_MAX) {
		fprintf(stderr, "results: %s: /runs is full (%d runs)\n", s->path, RUN_INDEX_MAX + 1);
		s->failed = 1;
		goto out_runs;
	}
	snprintf(name, sizeof name, "%06d", max + 1);
	run = H5Gcreate2(runs, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	if (h5s_check(s, run, "H5Gcreate2(/runs/NNNNNN)") < 0)
		goto out_runs;

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
out_runs:
	H5Gclose(runs);
	return s->failed ? -1 : 0;
}

/* ---- files ----------------------------------------------------------- */

/* Copy src to the new file dst (created, same mode). 0 or -1 after a message. */
static int copy_file(const char *src, const char *dst)
{
	enum { BUF_BYTES = 1 << 20 };
	char *buf;
	struct stat st;
	int in, out, rc = -1;

	buf = malloc(BUF_BYTES);
	if (!buf) {
		fprintf(stderr, "results: %s: out of memory\n", src);
		return -1;
	}
	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0 || fstat(in, &st) < 0) {
		fprintf(stderr, "results: %s: cannot read: %s\n", src, strerror(errno));
		if (in >= 0)
			close(in);
		free(buf);
		return -1;
	}
	out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st.st_mode & 07777);
	if (out < 0) {
		fprintf(stderr, "results: %s: cannot create: %s\n", dst, strerror(errno));
		goto out_src;
	}
	for (;;) {
		ssize_t n = read(in, buf, BUF_BYTES), done = 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "results: %s: read failed: %s\n", src, strerror(errno));
			goto out_dst;
		}
		if (n == 0)
			break;
		while (done < n) {
			ssize_t w = write(out, buf + done, (size_t)(n - done));
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0) {
				fprintf(stderr, "results: %s: write failed: %s\n", dst, strerror(errno));
				goto out_dst;
			}
			done += w;
		}
	}
	rc = 0;
out_dst:
	close(out);
out_src:
	close(in);
	free(buf);
	return rc;
}

static int fsync_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;

	if (fd < 0)
		return -1;
	rc = fsync(fd);
	close(fd);
	return rc;
}

/* Open the directory holding path with an exclusive flock on it; fd or -1. */
static int lock_dir(const char *path)
{
	char *copy = strdup(path);
	const char *dir;
	int fd;

	if (!copy) {
		fprintf(stderr, "results: %s: out of memory\n", path);
		return -1;
	}
	dir = dirname(copy);
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		fprintf(stderr, "results: %s: cannot open directory %s: %s\n", path, dir, strerror(errno));
	else if (flock(fd, LOCK_EX) < 0) {
		fprintf(stderr, "results: %s: cannot lock directory %s: %s\n", path, dir, strerror(errno));
		close(fd);
		fd = -1;
	}
	free(copy);
	return fd;
}

int results_append(const char *path, const struct run_result *r)
{
	char tmp[4096];
	struct stat st;
	struct h5s s;
	hid_t fapl = -1, file = -1;
	int dirfd, exists, rc = -1;

	if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp) {
		fprintf(stderr, "results: %s: path too long\n", path);
		return -1;
	}
	dirfd = lock_dir(path);
	if (dirfd < 0)
		return -1;
	h5s_begin(&s, path);
	exists = stat(path, &st) == 0;
	if (!exists && errno != ENOENT) {
		fprintf(stderr, "results: %s: %s\n", path, strerror(errno));
		goto out_unlock;
	}
	if (exists) {
		htri_t is_hdf5 = H5Fis_hdf5(path);
		if (h5s_check(&s, is_hdf5, "H5Fis_hdf5") < 0)
			goto out_unlock;
		if (!is_hdf5) {
			fprintf(stderr, "results: %s: exists and is not an HDF5 file; not touching it\n", path);
			goto out_unlock;
		}
	}
	/* We hold the directory lock, so a tmp with our pid is a dead writer's. */
	unlink(tmp);
	if (exists && copy_file(path, tmp) < 0)
		goto out_tmp;

	/* STRONG: close whatever is still open on the file when it closes. */
	fapl = H5Pcreate(H5P_FILE_ACCESS);
	if (h5s_check(&s, fapl, "H5Pcreate") < 0 ||
	    h5s_check(&s, H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG), "H5Pset_fclose_degree") < 0)
		goto out_tmp;
	if (exists)
		file = H5Fopen(tmp, H5F_ACC_RDWR, fapl);
	else
		file = H5Fcreate(tmp, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
	if (h5s_check(&s, file, exists ? "H5Fopen(copy)" : "H5Fcreate") < 0)
		goto out_tmp;
	write_run(&s, file, r);
	if (h5s_check(&s, H5Fclose(file), "H5Fclose") < 0 || s.failed)
		goto out_tmp;
	if (fsync_path(tmp) < 0) {
		fprintf(stderr, "results: %s: fsync of %s failed: %s\n", path, tmp, strerror(errno));
		goto out_tmp;
	}
	if (rename(tmp, path) < 0) {
		fprintf(stderr, "results: %s: rename from %s failed: %s\n", path, tmp, strerror(errno));
		goto out_tmp;
	}
	fsync(dirfd);
	rc = 0;
	goto out_unlock;
out_tmp:
	unlink(tmp);
out_unlock:
	if (fapl >= 0)
		H5Pclose(fapl);
	h5s_end(&s);
	close(dirfd);   /* releases the flock */
	return rc;
}

int results_count(const char *path)
{
	struct h5s s;
	H5G_info_t info;
	htri_t have_runs;
	hid_t file, runs;
	int n = -1;

	h5s_begin(&s, path);
	if (access(path, R_OK) < 0) {
		fprintf(stderr, "results: %s: %s\n", path, strerror(errno));
		goto out;
	}
	file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (h5s_check(&s, file, "H5Fopen") < 0)
		goto out;
	have_runs = H5Lexists(file, "runs", H5P_DEFAULT);
	if (h5s_check(&s, have_runs, "H5Lexists(/runs)") < 0)
		goto out_file;
	if (!have_runs) {
		n = 0;
		goto out_file;
	}
	runs = H5Gopen2(file, "runs", H5P_DEFAULT);
	if (h5s_check(&s, runs, "H5Gopen2(/runs)") == 0) {
		if (h5s_check(&s, H5Gget_info(runs, &info), "H5Gget_info(/runs)") == 0)
			n = (int)info.nlinks;
		H5Gclose(runs);
	}
out_file:
	H5Fclose(file);
out:
	h5s_end(&s);
	return n;
}
