/*
 * h5file.c - appends that never lose a file's contents, and HDF5 errors
 * reported once (see h5file.h).
 */
#include "h5file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "outfile.h"
#include "text.h"
#include "xalloc.h"

#define INDEX_MAX 999999
#define CHUNK_ROWS 4096    /* rows per chunk of a dataset */

/* ---- errors ----------------------------------------------------------- */

struct err_walk {
	char outer[160];
	char inner[160];
};

/* s into buf with line breaks as spaces: a failed call is reported as one line. */
static void one_line(char *buf, size_t n, const char *s)
{
	snprintf(buf, n, "%s", s ? s : "");
	for (char *c = buf; *c; c++)
		if (*c == '\n' || *c == '\r')
			*c = ' ';
}

static herr_t err_walk_fn(unsigned n, const H5E_error2_t *e, void *ctx)
{
	struct err_walk *w = ctx;
	const char *desc = e->desc && e->desc[0] ? e->desc : e->func_name;

	if (n == 0)
		one_line(w->outer, sizeof w->outer, desc);
	one_line(w->inner, sizeof w->inner, desc);
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
			text_line(stderr, "%s: %s: %s failed: %s (%s)", s->who, s->path, call, w.outer, w.inner);
		else if (w.outer[0])
			text_line(stderr, "%s: %s: %s failed: %s", s->who, s->path, call, w.outer);
		else
			text_line(stderr, "%s: %s: %s failed", s->who, s->path, call);
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
	h5file_attr_strs(s, loc, name, -1, &value);
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

/* Read a scalar attribute (one value) as mem_type; 0, or -1 after reporting. */
static int attr_read(struct h5file_session *s, hid_t loc, const char *name, hid_t mem_type, void *out)
{
	hid_t a = H5Aopen(loc, name, H5P_DEFAULT), space;
	hssize_t n;
	int rc;

	if (h5file_check(s, a, name) < 0)
		return -1;
	space = H5Aget_space(a);
	n = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
	if (space >= 0)
		H5Sclose(space);
	if (h5file_check(s, n, name) < 0) {
		H5Aclose(a);
		return -1;
	}
	if (n != 1) { /* read whole, it would overrun out */
		text_line(stderr, "%s: %s: attribute %s holds %lld values where one is expected", s->who, s->path, name,
			(long long)n);
		s->failed = 1;
		H5Aclose(a);
		return -1;
	}
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

int h5file_holds(hid_t file, const char *const *groups)
{
	H5G_info_t info;

	for (int i = 0; groups[i]; i++) {
		htri_t have = H5Lexists(file, groups[i], H5P_DEFAULT);
		if (have != 0)
			return have > 0 ? 1 : -1;
	}
	if (H5Gget_info(file, &info) < 0)
		return -1;
	return info.nlinks == 0;
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

/* The highest six-digit index among g's links into *max (-1: none), which h5file_next_group() goes on from. */
static herr_t max_index(hid_t g, int *max)
{
	*max = -1;
	return H5Literate(g, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, max_index_fn, max);
}

/*
 * What keeps the writer from adding /group/NNNNNN to one of the groups the
 * open file holds, into why[n] ("" when nothing does): one that is no
 * group (a dataset, a dangling link: opening it would fail only after the
 * run) or one whose last index is taken. 0, or -1 on a failed call
 * (nothing reported).
 */
static int groups_trouble(hid_t file, const char *const *groups, char *why, size_t n)
{
	why[0] = '\0';
	for (int i = 0; groups[i]; i++) {
		htri_t have = H5Lexists(file, groups[i], H5P_DEFAULT);
		H5I_type_t kind;
		hid_t o;
		int max;

		if (have < 0)
			return -1;
		if (!have)
			continue;
		o = H5Oopen(file, groups[i], H5P_DEFAULT);
		kind = o >= 0 ? H5Iget_type(o) : H5I_BADID;
		if (kind != H5I_GROUP) {
			snprintf(why, n, "is an HDF5 file whose /%s is %s, not a group", groups[i],
				 kind == H5I_DATASET ? "a dataset" : kind == H5I_DATATYPE ? "a named datatype" :
				 "a link that cannot be followed");
			if (o >= 0)
				H5Oclose(o);
			return 0;
		}
		if (max_index(o, &max) < 0) {
			H5Oclose(o);
			return -1;
		}
		H5Oclose(o);
		if (max >= INDEX_MAX) {
			snprintf(why, n, "is an HDF5 file whose /%s is full (it holds /%s/%06d, the last index)", groups[i],
				 groups[i], INDEX_MAX);
			return 0;
		}
	}
	return 0;
}

int h5file_check_ours(struct h5file_session *s, hid_t file, const char *const *groups, const char *not_ours)
{
	int ours = h5file_holds(file, groups);
	char why[160];

	if (h5file_check(s, ours, "H5Lexists") < 0)
		return -1;
	if (!ours) {
		text_line(stderr, "%s: %s: %s; not touching it", s->who, s->path, not_ours);
		s->failed = 1;
		return -1;
	}
	if (h5file_check(s, groups_trouble(file, groups, why, sizeof why), "H5Oopen") < 0)
		return -1;
	if (why[0]) {
		text_line(stderr, "%s: %s: %s; not touching it", s->who, s->path, why);
		s->failed = 1;
		return -1;
	}
	return 0;
}

const char *h5file_refusal(const char *who, const char *path, const char *const *groups, const char *not_ours)
{
	static char trouble[160]; /* the reason returned, until the next call */
	struct h5file_session s;
	const char *why = NULL;
	hid_t file;
	int ours;

	h5file_begin(&s, who, path); /* quiet: HDF5 prints nothing here */
	if (H5Fis_hdf5(path) <= 0) {
		why = "exists and is not an HDF5 file";
		goto out;
	}
	file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (file < 0) {
		why = "is an HDF5 file that cannot be opened";
		goto out;
	}
	ours = h5file_holds(file, groups);
	if (ours < 0)
		why = "is an HDF5 file that cannot be read";
	else if (!ours)
		why = not_ours;
	else if (groups_trouble(file, groups, trouble, sizeof trouble) < 0)
		why = "is an HDF5 file that cannot be read";
	else if (trouble[0])
		why = trouble;
	H5Fclose(file);
out:
	H5Eclear2(H5E_DEFAULT);
	h5file_end(&s);
	return why;
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
	if (h5file_check(s, max_index(p, &max), "H5Literate") < 0)
		goto out;
	if (max >= INDEX_MAX) {
		text_line(stderr, "%s: %s: /%s is full (it holds /%s/%06d, the last index)", s->who, s->path, parent,
			parent, INDEX_MAX);
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

#define CORE_INCREMENT (1 << 20) /* growth step of the in-memory file */

/* The whole file at fd into a new buffer (xmalloc), its size in *n. 0, or -1 with errno. */
static int read_all(int fd, void **buf, size_t *n)
{
	struct stat st;
	size_t done = 0;
	char *b;

	if (fstat(fd, &st) < 0)
		return -1;
	b = xmalloc(st.st_size > 0 ? (size_t)st.st_size : 1);
	while (done < (size_t)st.st_size) {
		ssize_t r = read(fd, b + done, (size_t)st.st_size - done);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = EIO; /* the file shrank under the lock: not ours to guess */
			free(b);
			return -1;
		}
		done += (size_t)r;
	}
	*buf = b;
	*n = done;
	return 0;
}

/* Write n bytes to the new file path (mode), fsync and close it. 0, or -1 after a message. */
static int write_new(const char *who, const char *user_path, const char *path, const void *buf, size_t n,
		     mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	size_t done = 0;

	if (fd < 0) {
		text_line(stderr, "%s: %s: cannot create %s: %s", who, user_path, path, strerror(errno));
		return -1;
	}
	if (mode != (mode_t)-1 && fchmod(fd, mode) < 0)
		goto fail;
	while (done < n) {
		ssize_t w = write(fd, (const char *)buf + done, n - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			goto fail;
		done += (size_t)w;
	}
	if (fsync(fd) < 0)
		goto fail;
	if (close(fd) < 0) {
		fd = -1;
		goto fail;
	}
	return 0;
fail:
	text_line(stderr, "%s: %s: cannot write %s: %s", who, user_path, path, strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

/* Open the directory holding path with an exclusive flock on it; fd or -1. */
static int lock_dir(const char *who, const char *user_path, const char *path)
{
	char *copy = xstrdup(path);
	const char *dir = dirname(copy);
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		text_line(stderr, "%s: %s: cannot open directory %s: %s", who, user_path, dir, strerror(errno));
	else if (flock(fd, LOCK_EX) < 0) {
		text_line(stderr, "%s: %s: cannot lock directory %s: %s", who, user_path, dir, strerror(errno));
		close(fd);
		fd = -1;
	}
	free(copy);
	return fd;
}

/*
 * The file's current contents, under the directory lock: NULL image when
 * it does not exist. 0, or -1 after a message (not a regular file, not
 * HDF5, unreadable).
 */
static int load_original(struct h5file_session *s, const char *target, void **image, size_t *n, mode_t *mode)
{
	struct stat st;
	htri_t is_hdf5;
	int fd;

	*image = NULL;
	*n = 0;
	*mode = (mode_t)-1;
	if (stat(target, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		text_line(stderr, "%s: %s: %s", s->who, s->path, strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		text_line(stderr, "%s: %s: exists and is not a regular file; not touching it", s->who, s->path);
		return -1;
	}
	is_hdf5 = H5Fis_hdf5(target);
	if (h5file_check(s, is_hdf5, "H5Fis_hdf5") < 0)
		return -1;
	if (!is_hdf5) {
		text_line(stderr, "%s: %s: exists and is not an HDF5 file; not touching it", s->who, s->path);
		return -1;
	}
	fd = open(target, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read_all(fd, image, n) < 0) {
		text_line(stderr, "%s: %s: cannot read: %s", s->who, s->path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	*mode = st.st_mode & 07777;
	return 0;
}

/*
 * The append happens in memory: HDF5's core driver without a backing
 * store opens the original's image, the writer adds to it, and its final
 * image is written to the temporary with plain write() calls. HDF5 never
 * writes a file itself, so a full disk is a failed write() reported as one
 * line, never a failed H5Fclose, whose half-closed file crashes HDF5's
 * library shutdown at exit (HDF5 1.10).
 */
int h5file_append(const char *who, const char *path, h5file_writer fn, void *ctx)
{
	char target[PATH_MAX], tmp[PATH_MAX + 32];
	struct h5file_session s;
	hid_t fapl = -1, file = -1;
	void *image = NULL;
	size_t size = 0;
	ssize_t got;
	mode_t mode;
	int dirfd, rc = -1;

	/* a symbolic link is followed: its target is replaced, the link stays (outfile.h) */
	if (outfile_resolve(path, target, sizeof target) < 0) {
		text_line(stderr, "%s: %s: cannot follow the link: %s", who, path, strerror(errno));
		return -1;
	}
	if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", target, (long)getpid()) >= sizeof tmp) {
		text_line(stderr, "%s: %s: path too long", who, path);
		return -1;
	}
	dirfd = lock_dir(who, path, target);
	if (dirfd < 0)
		return -1;
	h5file_begin(&s, who, path);
	/* under the lock no other writer is mid-append: temporaries of dead writers go */
	outfile_remove_stale(who, target);
	unlink(tmp);
	if (load_original(&s, target, &image, &size, &mode) < 0)
		goto out_unlock;

	/* STRONG: close whatever is still open on the file when it closes. */
	fapl = H5Pcreate(H5P_FILE_ACCESS);
	if (h5file_check(&s, fapl, "H5Pcreate") < 0 ||
	    h5file_check(&s, H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG), "H5Pset_fclose_degree") < 0 ||
	    h5file_check(&s, H5Pset_fapl_core(fapl, CORE_INCREMENT, 0), "H5Pset_fapl_core") < 0)
		goto out_unlock;
	if (image && h5file_check(&s, H5Pset_file_image(fapl, image, size), "H5Pset_file_image") < 0)
		goto out_unlock;
	free(image);
	image = NULL;
	if (mode != (mode_t)-1)
		file = H5Fopen(tmp, H5F_ACC_RDWR, fapl);
	else
		file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
	if (h5file_check(&s, file, mode != (mode_t)-1 ? "H5Fopen(image)" : "H5Fcreate") < 0)
		goto out_unlock;
	if (fn(&s, file, ctx) != 0)
		s.failed = 1;
	if (!s.failed && h5file_check(&s, H5Fflush(file, H5F_SCOPE_GLOBAL), "H5Fflush") == 0) {
		got = H5Fget_file_image(file, NULL, 0);
		if (h5file_check(&s, got, "H5Fget_file_image") == 0) {
			size = (size_t)got;
			image = xmalloc(size ? size : 1);
			if (h5file_check(&s, H5Fget_file_image(file, image, size), "H5Fget_file_image") < 0)
				size = 0;
		}
	}
	if (h5file_check(&s, H5Fclose(file), "H5Fclose") < 0 || s.failed)
		goto out_unlock;
	if (write_new(who, path, tmp, image, size, mode) < 0)
		goto out_tmp;
	if (rename(tmp, target) < 0) {
		text_line(stderr, "%s: %s: rename from %s failed: %s", who, path, tmp, strerror(errno));
		goto out_tmp;
	}
	fsync(dirfd);
	rc = 0;
	goto out_unlock;
out_tmp:
	unlink(tmp);
out_unlock:
	free(image);
	if (fapl >= 0)
		H5Pclose(fapl);
	h5file_end(&s);
	close(dirfd);   /* releases the flock */
	return rc;
}
