/*
 * h5file.c - appends that never lose a file's contents, and HDF5 errors
 * reported once (see h5file.h).
 */
#include "h5file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xalloc.h"

#define INDEX_MAX 999999
#define CHUNK_ROWS 4096    /* rows per chunk of a dataset */

/* ---- errors ----------------------------------------------------------- */

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

void h5file_begin(struct h5file_session *s, const char *who, const char *path)
{
	s->who = who;
	s->path = path;
	s->failed = 0;
	H5Eget_auto2(H5E_DEFAULT, &s->saved_func, &s->saved_data);
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void h5file_end(struct h5file_session *s)
{
	H5Eset_auto2(H5E_DEFAULT, s->saved_func, s->saved_data);
}

int h5file_check(struct h5file_session *s, int64_t rv, const char *call)
{
	struct err_walk w = { "", "" };

	if (rv >= 0)
		return 0;
	if (!s->failed) {
		H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, err_walk_fn, &w);
		if (w.outer[0] && strcmp(w.outer, w.inner) != 0)
			fprintf(stderr, "%s: %s: %s failed: %s (%s)\n", s->who, s->path, call, w.outer, w.inner);
		else if (w.outer[0])
			fprintf(stderr, "%s: %s: %s failed: %s\n", s->who, s->path, call, w.outer);
		else
			fprintf(stderr, "%s: %s: %s failed\n", s->who, s->path, call);
	}
	H5Eclear2(H5E_DEFAULT);
	s->failed = 1;
	return -1;
}

/* ---- attributes and datasets ----------------------------------------------- */

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
void h5file_attr_write(struct h5file_session *s, hid_t loc, const char *name, hid_t file_type,
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

void h5file_attr_str(struct h5file_session *s, hid_t loc, const char *name, const char *value)
{
	hid_t t;

	if (s->failed)
		return;
	t = vlen_str_type();
	if (h5file_check(s, t, "H5Tcopy(string)") < 0)
		return;
	h5file_attr_write(s, loc, name, t, t, -1, &value);
	H5Tclose(t);
}

void h5file_attr_strs(struct h5file_session *s, hid_t loc, const char *name, int n, const char *const *values)
{
	hid_t t;

	if (s->failed)
		return;
	t = vlen_str_type();
	if (h5file_check(s, t, "H5Tcopy(string)") < 0)
		return;
	h5file_attr_write(s, loc, name, t, t, n, values);
	H5Tclose(t);
}

void h5file_attr_i32(struct h5file_session *s, hid_t loc, const char *name, int32_t v)
{
	h5file_attr_write(s, loc, name, H5T_STD_I32LE, H5T_NATIVE_INT32, -1, &v);
}

void h5file_attr_u64(struct h5file_session *s, hid_t loc, const char *name, uint64_t v)
{
	h5file_attr_write(s, loc, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, -1, &v);
}

void h5file_attr_f64(struct h5file_session *s, hid_t loc, const char *name, double v)
{
	h5file_attr_write(s, loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, -1, &v);
}


/*
 * Write n rows of mem_type as dataset `name` in loc. The file type is the
 * memory type packed (no padding; little-endian on our targets). Chunked
 * and deflated when there are rows and the filter is available.
 */
void h5file_dataset(struct h5file_session *s, hid_t loc, const char *name, hid_t mem_type,
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


/* An HDF5 enum over uint8 with values 0..n-1 named names[i]. Caller closes. */
hid_t h5file_enum_type(struct h5file_session *s, const char *const *names, int n)
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

/* ---- reading ------------------------------------------------------------------ */

int h5file_has_attr(hid_t loc, const char *name)
{
	return H5Aexists(loc, name) > 0;
}

/* Read a scalar attribute as mem_type; 0, or -1 after reporting. */
static int attr_read(struct h5file_session *s, hid_t loc, const char *name, hid_t mem_type, void *out)
{
	hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
	int rc;

	if (h5file_check(s, a, name) < 0)
		return -1;
	rc = h5file_check(s, H5Aread(a, mem_type, out), name);
	H5Aclose(a);
	return rc;
}

int h5file_read_f64(struct h5file_session *s, hid_t loc, const char *name, double *v)
{
	return attr_read(s, loc, name, H5T_NATIVE_DOUBLE, v);
}

int h5file_read_i32(struct h5file_session *s, hid_t loc, const char *name, int32_t *v)
{
	return attr_read(s, loc, name, H5T_NATIVE_INT32, v);
}

int h5file_read_u64(struct h5file_session *s, hid_t loc, const char *name, uint64_t *v)
{
	return attr_read(s, loc, name, H5T_NATIVE_UINT64, v);
}

int h5file_read_str(struct h5file_session *s, hid_t loc, const char *name, char *buf, size_t len)
{
	hid_t t = vlen_str_type();
	char *v = NULL;
	int rc;

	if (h5file_check(s, t, "H5Tcopy(string)") < 0)
		return -1;
	rc = attr_read(s, loc, name, t, &v);
	if (rc == 0) {
		snprintf(buf, len, "%s", v ? v : "");
		H5free_memory(v);
	}
	H5Tclose(t);
	return rc;
}

void *h5file_read_dataset(struct h5file_session *s, hid_t loc, const char *name, hid_t mem_type, size_t *n)
{
	hid_t d = H5Dopen2(loc, name, H5P_DEFAULT), space = -1;
	hssize_t count;
	void *rows = NULL;

	*n = 0;
	if (h5file_check(s, d, name) < 0)
		return NULL;
	space = H5Dget_space(d);
	count = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
	if (h5file_check(s, space, "H5Dget_space") == 0 && h5file_check(s, count, "H5Sget_simple_extent_npoints") == 0) {
		rows = xcalloc((size_t)count + 1, H5Tget_size(mem_type));
		if (count > 0 && h5file_check(s, H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows), name) < 0) {
			free(rows);
			rows = NULL;
		} else {
			*n = (size_t)count;
		}
	}
	if (space >= 0)
		H5Sclose(space);
	H5Dclose(d);
	return rows;
}

/* ---- groups -------------------------------------------------------------- */

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

hid_t h5file_next_group(struct h5file_session *s, hid_t file, const char *parent, char name[16])
{
	htri_t have = H5Lexists(file, parent, H5P_DEFAULT);
	hid_t p, g = -1;
	int max = -1;

	if (h5file_check(s, have, "H5Lexists") < 0)
		return -1;
	p = have ? H5Gopen2(file, parent, H5P_DEFAULT) : H5Gcreate2(file, parent, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	if (h5file_check(s, p, have ? "H5Gopen2" : "H5Gcreate2") < 0)
		return -1;
	if (h5file_check(s, H5Literate(p, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, max_index_fn, &max), "H5Literate") < 0)
		goto out;
	if (max >= INDEX_MAX) {
		fprintf(stderr, "%s: %s: /%s is full (%d entries)\n", s->who, s->path, parent, INDEX_MAX + 1);
		s->failed = 1;
		goto out;
	}
	snprintf(name, 16, "%06d", max + 1);
	g = H5Gcreate2(p, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	if (h5file_check(s, g, "H5Gcreate2") < 0)
		g = -1;
out:
	H5Gclose(p);
	return g;
}

/* ---- files ----------------------------------------------------------- */

/* Copy src to the new file dst (created, same mode). 0 or -1 after a message. */
static int copy_file(const char *who, const char *src, const char *dst)
{
	enum { BUF_BYTES = 1 << 20 };
	char *buf = xmalloc(BUF_BYTES);
	struct stat st;
	int in, out, rc = -1;

	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0 || fstat(in, &st) < 0) {
		fprintf(stderr, "%s: %s: cannot read: %s\n", who, src, strerror(errno));
		if (in >= 0)
			close(in);
		free(buf);
		return -1;
	}
	out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st.st_mode & 07777);
	if (out < 0) {
		fprintf(stderr, "%s: %s: cannot create: %s\n", who, dst, strerror(errno));
		goto out_src;
	}
	for (;;) {
		ssize_t n = read(in, buf, BUF_BYTES), done = 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "%s: %s: read failed: %s\n", who, src, strerror(errno));
			goto out_dst;
		}
		if (n == 0)
			break;
		while (done < n) {
			ssize_t w = write(out, buf + done, (size_t)(n - done));
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0) {
				fprintf(stderr, "%s: %s: write failed: %s\n", who, dst, strerror(errno));
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
static int lock_dir(const char *who, const char *path)
{
	char *copy = xstrdup(path);
	const char *dir = dirname(copy);
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		fprintf(stderr, "%s: %s: cannot open directory %s: %s\n", who, path, dir, strerror(errno));
	else if (flock(fd, LOCK_EX) < 0) {
		fprintf(stderr, "%s: %s: cannot lock directory %s: %s\n", who, path, dir, strerror(errno));
		close(fd);
		fd = -1;
	}
	free(copy);
	return fd;
}

int h5file_append(const char *who, const char *path, h5file_writer fn, void *ctx)
{
	char tmp[4096];
	struct stat st;
	struct h5file_session s;
	hid_t fapl = -1, file = -1;
	int dirfd, exists, rc = -1;

	if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp) {
		fprintf(stderr, "%s: %s: path too long\n", who, path);
		return -1;
	}
	dirfd = lock_dir(who, path);
	if (dirfd < 0)
		return -1;
	h5file_begin(&s, who, path);
	exists = stat(path, &st) == 0;
	if (!exists && errno != ENOENT) {
		fprintf(stderr, "%s: %s: %s\n", who, path, strerror(errno));
		goto out_unlock;
	}
	if (exists) {
		htri_t is_hdf5 = H5Fis_hdf5(path);
		if (h5file_check(&s, is_hdf5, "H5Fis_hdf5") < 0)
			goto out_unlock;
		if (!is_hdf5) {
			fprintf(stderr, "%s: %s: exists and is not an HDF5 file; not touching it\n", who, path);
			goto out_unlock;
		}
	}
	/* We hold the directory lock, so a tmp with our pid is a dead writer's. */
	unlink(tmp);
	if (exists && copy_file(who, path, tmp) < 0)
		goto out_tmp;

	/* STRONG: close whatever is still open on the file when it closes. */
	fapl = H5Pcreate(H5P_FILE_ACCESS);
	if (h5file_check(&s, fapl, "H5Pcreate") < 0 ||
	    h5file_check(&s, H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG), "H5Pset_fclose_degree") < 0)
		goto out_tmp;
	if (exists)
		file = H5Fopen(tmp, H5F_ACC_RDWR, fapl);
	else
		file = H5Fcreate(tmp, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
	if (h5file_check(&s, file, exists ? "H5Fopen(copy)" : "H5Fcreate") < 0)
		goto out_tmp;
	if (fn(&s, file, ctx) != 0)
		s.failed = 1;
	if (h5file_check(&s, H5Fclose(file), "H5Fclose") < 0 || s.failed)
		goto out_tmp;
	if (fsync_path(tmp) < 0) {
		fprintf(stderr, "%s: %s: fsync of %s failed: %s\n", who, path, tmp, strerror(errno));
		goto out_tmp;
	}
	if (rename(tmp, path) < 0) {
		fprintf(stderr, "%s: %s: rename from %s failed: %s\n", who, path, tmp, strerror(errno));
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
	h5file_end(&s);
	close(dirfd);   /* releases the flock */
	return rc;
}
