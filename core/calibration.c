/*
 * calibration.c - calibration files and the prices they give (see
 * calibration.h).
 *
 * Interpolation is GSL's (gsl_interp, Steffen's monotone method) over
 * log(size) against log(time), so a curve that is flat for latency-bound
 * sizes and linear for bandwidth-bound ones stays so between the measured
 * points. Beyond the largest point a price grows linearly with the size,
 * at the rate of the largest point; below the smallest it stays at the
 * smallest point's time (latency).
 */
#include "calibration.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gsl/gsl_interp.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <hdf5.h>

#include "h5file.h"
#include "xalloc.h"

/* ---- file ---------------------------------------------------------------- */

static hid_t kernel_type(void)
{
	hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct cal_kernel)), s = H5Tcopy(H5T_C_S1);

	H5Tset_size(s, CAL_NAME_MAX);
	H5Tinsert(t, "name", HOFFSET(struct cal_kernel, name), s);
	H5Tinsert(t, "kind", HOFFSET(struct cal_kernel, kind), H5T_NATIVE_UINT8);
	H5Tinsert(t, "m", HOFFSET(struct cal_kernel, m), H5T_NATIVE_INT64);
	H5Tinsert(t, "n", HOFFSET(struct cal_kernel, n), H5T_NATIVE_INT64);
	H5Tinsert(t, "k", HOFFSET(struct cal_kernel, k), H5T_NATIVE_INT64);
	H5Tinsert(t, "flops", HOFFSET(struct cal_kernel, flops), H5T_NATIVE_UINT64);
	H5Tinsert(t, "bytes", HOFFSET(struct cal_kernel, bytes), H5T_NATIVE_UINT64);
	H5Tinsert(t, "ns", HOFFSET(struct cal_kernel, ns), H5T_NATIVE_DOUBLE);
	H5Tinsert(t, "ns_comm", HOFFSET(struct cal_kernel, ns_comm), H5T_NATIVE_DOUBLE);
	H5Tclose(s);
	return t;
}

static hid_t coll_type(void)
{
	hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct cal_coll));

	H5Tinsert(t, "kind", HOFFSET(struct cal_coll, kind), H5T_NATIVE_UINT8);
	H5Tinsert(t, "ranks", HOFFSET(struct cal_coll, ranks), H5T_NATIVE_INT32);
	H5Tinsert(t, "bytes", HOFFSET(struct cal_coll, bytes), H5T_NATIVE_UINT64);
	H5Tinsert(t, "ns", HOFFSET(struct cal_coll, ns), H5T_NATIVE_DOUBLE);
	H5Tinsert(t, "ns_busy", HOFFSET(struct cal_coll, ns_busy), H5T_NATIVE_DOUBLE);
	return t;
}

static hid_t pass_type(void)
{
	hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct cal_pass));

	H5Tinsert(t, "bytes", HOFFSET(struct cal_pass, bytes), H5T_NATIVE_UINT64);
	H5Tinsert(t, "ns", HOFFSET(struct cal_pass, ns), H5T_NATIVE_DOUBLE);
	return t;
}

static hid_t copy_type(void)
{
	hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct cal_copy));

	H5Tinsert(t, "kind", HOFFSET(struct cal_copy, kind), H5T_NATIVE_UINT8);
	H5Tinsert(t, "bytes", HOFFSET(struct cal_copy, bytes), H5T_NATIVE_UINT64);
	H5Tinsert(t, "ns", HOFFSET(struct cal_copy, ns), H5T_NATIVE_DOUBLE);
	return t;
}

/* A calibration file holds /calibration, or nothing yet. */
static const char *const calibration_groups[] = { "calibration", NULL };
#define NOT_CALIBRATION "is an HDF5 file without /calibration, not a calibration file"

static int write_session(struct h5file_session *s, hid_t file, void *ctx)
{
	const struct calibration *c = ctx;
	char name[16], date[32];
	time_t now = time(NULL);
	struct tm tm;
	int ours = h5file_holds(file, calibration_groups);
	hid_t g, kt, ct, pt, yt;

	if (h5file_check(s, ours, "H5Lexists(/calibration)") < 0)
		return -1;
	if (!ours) {
		fprintf(stderr, "%s: %s: " NOT_CALIBRATION "; not touching it\n", s->who, s->path);
		return -1;
	}
	g = h5file_next_group(s, file, "calibration", name);
	if (g < 0)
		return -1;
	gmtime_r(&now, &tm);
	strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
	h5file_attr_str(s, g, "hardware", c->hardware);
	h5file_attr_str(s, g, "backend", c->backend);
	h5file_attr_str(s, g, "date", c->date[0] ? c->date : date);
	h5file_attr_str(s, g, "versions", c->versions);
	h5file_attr_str(s, g, "fabric", c->fabric[0] ? c->fabric : "real");
	if (c->series[0])
		h5file_attr_str(s, g, "series", c->series);
	h5file_attr_i32(s, g, "ranks", c->ranks);
	h5file_attr_f64(s, g, "dispatch_ns", c->dispatch_ns);
	h5file_attr_f64(s, g, "wake_ns", c->wake_ns);
	h5file_attr_f64(s, g, "issue_ns", c->issue_ns);
	h5file_attr_f64(s, g, "adamw_ns_per_elem", c->adamw_ns_per_elem);
	h5file_attr_f64(s, g, "host_adamw_ns_per_elem", c->host_adamw_ns_per_elem);
	if (c->launch_queue >= 0)
		h5file_attr_i32(s, g, "launch_queue", c->launch_queue);
	kt = kernel_type();
	ct = coll_type();
	pt = pass_type();
	h5file_dataset(s, g, "kernels", kt, (size_t)c->nkernels, c->kernels);
	h5file_dataset(s, g, "gemm", kt, (size_t)c->ngemm, c->gemm);
	h5file_dataset(s, g, "passes", pt, (size_t)c->npasses, c->passes);
	h5file_dataset(s, g, "collectives", ct, (size_t)c->ncolls, c->colls);
	yt = copy_type();
	h5file_dataset(s, g, "copies", yt, (size_t)c->ncopies, c->copies);
	H5Tclose(kt);
	H5Tclose(ct);
	H5Tclose(pt);
	H5Tclose(yt);
	H5Gclose(g);
	return s->failed ? -1 : 0;
}

int calibration_write(const char *path, const struct calibration *c)
{
	return h5file_append("calibration", path, write_session, (void *)c);
}

const char *calibration_refusal(const char *path)
{
	return h5file_refusal("calibration", path, calibration_groups, NOT_CALIBRATION);
}

/* The sessions measured with the ranks asked for, newest first. */
struct pick {
	int ranks;
	char (*names)[16];
	char (*fabric)[CAL_TEXT_MAX]; /* each one's */
	char (*series)[CAL_NAME_MAX]; /* each one's, "" for none */
	int n;
	struct h5file_session *s;
};

/* The fabric session g was measured on: "real" when it does not say (files from before it was recorded). */
static void session_fabric(struct h5file_session *s, hid_t g, char *buf, size_t len)
{
	snprintf(buf, len, "real");
	if (h5file_has_attr(g, "fabric"))
		h5file_read_str(s, g, "fabric", buf, len);
}

/* Keep the sessions on the newest one's fabric. */
static void pick_same_fabric(struct pick *p)
{
	int m = 0;

	for (int i = 0; i < p->n; i++)
		if (!strcmp(p->fabric[i], p->fabric[0])) {
			memmove(p->names[m], p->names[i], sizeof(p->names[0]));
			memmove(p->fabric[m], p->fabric[i], sizeof(p->fabric[0]));
			memmove(p->series[m], p->series[i], sizeof(p->series[0]));
			m++;
		}
	p->n = m;
}

static herr_t pick_fn(hid_t g, const char *name, const H5L_info_t *info, void *ctx)
{
	struct pick *p = ctx;
	hid_t sess;
	int32_t ranks = 0;

	(void)info;
	if (strlen(name) != 6)
		return 0;
	sess = H5Gopen2(g, name, H5P_DEFAULT);
	if (sess < 0)
		return 0;
	if (h5file_read_i32(p->s, sess, "ranks", &ranks) == 0 && (p->ranks == 0 || ranks == p->ranks)) {
		/* names come in increasing order: each new one goes first */
		p->names = xrealloc(p->names, sizeof(*p->names) * (size_t)(p->n + 1));
		p->fabric = xrealloc(p->fabric, sizeof(*p->fabric) * (size_t)(p->n + 1));
		p->series = xrealloc(p->series, sizeof(*p->series) * (size_t)(p->n + 1));
		memmove(p->names + 1, p->names, sizeof(*p->names) * (size_t)p->n);
		memmove(p->fabric + 1, p->fabric, sizeof(*p->fabric) * (size_t)p->n);
		memmove(p->series + 1, p->series, sizeof(*p->series) * (size_t)p->n);
		snprintf(p->names[0], 16, "%s", name);
		session_fabric(p->s, sess, p->fabric[0], sizeof(p->fabric[0]));
		p->series[0][0] = '\0';
		if (h5file_has_attr(sess, "series"))
			h5file_read_str(p->s, sess, "series", p->series[0], sizeof(p->series[0]));
		p->n++;
	}
	H5Gclose(sess);
	return 0;
}

static int same_kernel(const struct cal_kernel *a, const struct cal_kernel *b)
{
	return !strcmp(a->name, b->name) && a->kind == b->kind && a->m == b->m && a->n == b->n && a->k == b->k &&
	       a->flops == b->flops && a->bytes == b->bytes;
}

static int same_pass(const struct cal_pass *a, const struct cal_pass *b)
{
	return a->bytes == b->bytes;
}

static int same_coll(const struct cal_coll *a, const struct cal_coll *b)
{
	return a->kind == b->kind && a->ranks == b->ranks && a->bytes == b->bytes;
}

static int same_copy(const struct cal_copy *a, const struct cal_copy *b)
{
	return a->kind == b->kind && a->bytes == b->bytes;
}

/* The median of v[0..n), which it sorts (GSL). */
static double median_of(double *v, int n)
{
	gsl_sort(v, 1, (size_t)n);
	return gsl_stats_median_from_sorted_data(v, 1, (size_t)n);
}

/* The median of the double at byte offset `off` of each of the n measurements of a point. */
static double field_median(const void *const *of, int n, size_t off)
{
	double *a = xmalloc(sizeof(double) * (size_t)n), m;

	for (int i = 0; i < n; i++)
		memcpy(&a[i], (const char *)of[i] + off, sizeof(double));
	m = median_of(a, n);
	free(a);
	return m;
}

/* A point's value fields set to their medians over its n measurements. */
static void kernel_median(void *into, const void *const *of, int n)
{
	((struct cal_kernel *)into)->ns = field_median(of, n, offsetof(struct cal_kernel, ns));
	((struct cal_kernel *)into)->ns_comm = field_median(of, n, offsetof(struct cal_kernel, ns_comm));
}

static void pass_median(void *into, const void *const *of, int n)
{
	((struct cal_pass *)into)->ns = field_median(of, n, offsetof(struct cal_pass, ns));
}

static void copy_median(void *into, const void *const *of, int n)
{
	((struct cal_copy *)into)->ns = field_median(of, n, offsetof(struct cal_copy, ns));
}

static void coll_median(void *into, const void *const *of, int n)
{
	((struct cal_coll *)into)->ns = field_median(of, n, offsetof(struct cal_coll, ns));
	((struct cal_coll *)into)->ns_busy = field_median(of, n, offsetof(struct cal_coll, ns_busy));
}

/* One table of every session picked, newest first. */
struct tables {
	void **rows;
	size_t *n;
	size_t size;                                  /* of a row */
	int (*same)(const void *, const void *);      /* the same point */
	void (*median)(void *, const void *const *, int);
};

/*
 * The table of the calibration: each point as its newest session measured
 * it, or, when that session belongs to a series (repeats of one
 * calibration in separate processes), as the median of the series'
 * measurements of it. Older sessions fill in the points newer ones lack.
 */
static void *merge_tables(const struct tables *t, const struct pick *p, int *nout)
{
	char *out = NULL;
	const void **of = xmalloc(sizeof(void *) * (size_t)p->n);
	int n = 0;

	for (int i = 0; i < p->n; i++)
		for (size_t e = 0; e < t->n[i]; e++) {
			const char *x = (const char *)t->rows[i] + e * t->size;
			int have = 0, m = 0;
			for (int j = 0; j < n && !have; j++)
				have = t->same(out + (size_t)j * t->size, x);
			if (have)
				continue;
			out = xrealloc(out, t->size * (size_t)(n + 1));
			memcpy(out + (size_t)n * t->size, x, t->size);
			for (int j = i; j < p->n && p->series[i][0]; j++) {
				if (strcmp(p->series[j], p->series[i]))
					continue;
				for (size_t f = 0; f < t->n[j]; f++) {
					const char *y = (const char *)t->rows[j] + f * t->size;
					if (t->same(y, x)) {
						of[m++] = y;
						break;
					}
				}
			}
			if (m > 1)
				t->median(out + (size_t)n * t->size, of, m);
			n++;
		}
	free(of);
	*nout = n;
	return out;
}

static int same_kernel_v(const void *a, const void *b) { return same_kernel(a, b); }
static int same_pass_v(const void *a, const void *b) { return same_pass(a, b); }
static int same_coll_v(const void *a, const void *b) { return same_coll(a, b); }
static int same_copy_v(const void *a, const void *b) { return same_copy(a, b); }

#define NTABLES 5
#define OPTIONAL_TABLE 4 /* copies: sessions from before they were measured have none */

/* The tables of the sessions picked, merged into c (merge_tables). */
static void read_tables(struct h5file_session *s, hid_t cal, const struct pick *p, struct calibration *c, hid_t kt,
			hid_t ct, hid_t pt, hid_t yt)
{
	struct tables t[NTABLES] = {
		{ NULL, NULL, sizeof(struct cal_kernel), same_kernel_v, kernel_median },
		{ NULL, NULL, sizeof(struct cal_kernel), same_kernel_v, kernel_median },
		{ NULL, NULL, sizeof(struct cal_pass), same_pass_v, pass_median },
		{ NULL, NULL, sizeof(struct cal_coll), same_coll_v, coll_median },
		{ NULL, NULL, sizeof(struct cal_copy), same_copy_v, copy_median },
	};
	static const char *const names[NTABLES] = { "kernels", "gemm", "passes", "collectives", "copies" };
	hid_t types[NTABLES] = { kt, kt, pt, ct, yt };

	for (int k = 0; k < NTABLES; k++) {
		t[k].rows = xcalloc((size_t)p->n, sizeof(void *));
		t[k].n = xcalloc((size_t)p->n, sizeof(size_t));
	}
	for (int i = 0; i < p->n && !s->failed; i++) {
		hid_t g = H5Gopen2(cal, p->names[i], H5P_DEFAULT);
		if (h5file_check(s, g, p->names[i]) < 0)
			break;
		for (int k = 0; k < NTABLES; k++)
			if (k != OPTIONAL_TABLE || H5Lexists(g, names[k], H5P_DEFAULT) > 0)
				t[k].rows[i] = h5file_read_dataset(s, g, names[k], types[k], &t[k].n[i]);
		H5Gclose(g);
	}
	if (!s->failed) {
		c->kernels = merge_tables(&t[0], p, &c->nkernels);
		c->gemm = merge_tables(&t[1], p, &c->ngemm);
		c->passes = merge_tables(&t[2], p, &c->npasses);
		c->colls = merge_tables(&t[3], p, &c->ncolls);
		c->copies = merge_tables(&t[4], p, &c->ncopies);
	}
	for (int k = 0; k < NTABLES; k++) {
		for (int i = 0; i < p->n; i++)
			free(t[k].rows[i]);
		free(t[k].rows);
		free(t[k].n);
	}
}

/* A scalar of the newest session, or the median over its series. */
static double series_scalar(struct h5file_session *s, hid_t cal, const struct pick *p, const char *name)
{
	double *v = xmalloc(sizeof(double) * (size_t)p->n), x;
	int m = 0;

	for (int i = 0; i < p->n && !s->failed; i++) {
		hid_t g;
		if (i > 0 && (!p->series[0][0] || strcmp(p->series[i], p->series[0])))
			continue;
		g = H5Gopen2(cal, p->names[i], H5P_DEFAULT);
		if (h5file_check(s, g, p->names[i]) < 0)
			break;
		if (h5file_read_f64(s, g, name, &v[m]) == 0)
			m++;
		H5Gclose(g);
	}
	x = m ? median_of(v, m) : 0;
	free(v);
	return x;
}

int calibration_read(const char *path, int ranks, struct calibration *c, char *err, int errlen)
{
	struct h5file_session s;
	struct pick p = { ranks, NULL, NULL, NULL, 0, &s };
	hid_t file, cal = -1, g = -1, kt = -1, ct = -1, pt = -1, yt = -1;
	int rc = -1;

	memset(c, 0, sizeof(*c));
	h5file_begin(&s, "calibration", path);
	file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (file < 0) {
		snprintf(err, errlen, "%s: cannot open as an HDF5 file", path);
		goto out;
	}
	if (H5Lexists(file, "calibration", H5P_DEFAULT) <= 0 ||
	    (cal = H5Gopen2(file, "calibration", H5P_DEFAULT)) < 0) {
		snprintf(err, errlen, "%s: no /calibration group: not a calibration file", path);
		goto out_file;
	}
	H5Literate(cal, H5_INDEX_NAME, H5_ITER_INC, NULL, pick_fn, &p);
	if (!p.n) {
		snprintf(err, errlen, "%s: no calibration measured with %d ranks", path, ranks);
		goto out_file;
	}
	pick_same_fabric(&p);
	/* the newest session's scalars (its series' medians); the tables of all (merge_tables) */
	g = H5Gopen2(cal, p.names[0], H5P_DEFAULT);
	snprintf(c->path, sizeof c->path, "%s", path);
	snprintf(c->session, sizeof c->session, "%s", p.names[0]);
	c->sessions = p.n;
	h5file_read_str(&s, g, "hardware", c->hardware, sizeof c->hardware);
	h5file_read_str(&s, g, "backend", c->backend, sizeof c->backend);
	h5file_read_str(&s, g, "date", c->date, sizeof c->date);
	h5file_read_str(&s, g, "versions", c->versions, sizeof c->versions);
	snprintf(c->fabric, sizeof c->fabric, "%s", p.fabric[0]);
	snprintf(c->series, sizeof c->series, "%s", p.series[0]);
	h5file_read_i32(&s, g, "ranks", &c->ranks);
	c->dispatch_ns = series_scalar(&s, cal, &p, "dispatch_ns");
	c->wake_ns = series_scalar(&s, cal, &p, "wake_ns");
	c->issue_ns = series_scalar(&s, cal, &p, "issue_ns");
	c->adamw_ns_per_elem = series_scalar(&s, cal, &p, "adamw_ns_per_elem");
	c->host_adamw_ns_per_elem = series_scalar(&s, cal, &p, "host_adamw_ns_per_elem");
	/* sessions written before it was measured: gpu_run's CPU backend never bounds its queues */
	c->launch_queue = !strcmp(c->backend, "cpu") ? 0 : -1;
	if (h5file_has_attr(g, "launch_queue"))
		h5file_read_i32(&s, g, "launch_queue", &c->launch_queue);
	kt = kernel_type();
	ct = coll_type();
	pt = pass_type();
	yt = copy_type();
	H5Gclose(g);
	read_tables(&s, cal, &p, c, kt, ct, pt, yt);
	if (s.failed) {
		snprintf(err, errlen, "%s: /calibration cannot be read (see above)", path);
		calibration_release(c);
	} else {
		rc = 0;
	}
	H5Tclose(kt);
	H5Tclose(ct);
	H5Tclose(pt);
	H5Tclose(yt);
out_file:
	if (cal >= 0)
		H5Gclose(cal);
	H5Fclose(file);
out:
	free(p.names);
	free(p.fabric);
	free(p.series);
	h5file_end(&s);
	return rc;
}

void calibration_release(struct calibration *c)
{
	free(c->kernels);
	free(c->gemm);
	free(c->passes);
	free(c->colls);
	free(c->copies);
	memset(c, 0, sizeof(*c));
}

/* ---- prices -------------------------------------------------------------- */

/*
 * y at x from the points (xs, ys), n of them, sorted by x with equal x's
 * averaged: log-log Steffen interpolation inside, the smallest point's y
 * below, linear in x beyond (the largest point's y per x).
 */
static double interp(double *xs, double *ys, size_t n, double x)
{
	size_t m = 0;
	double y;

	gsl_sort2(xs, 1, ys, 1, n);
	for (size_t i = 0; i < n; i++) { /* average equal x's, in place */
		if (m && xs[m - 1] == xs[i]) {
			ys[m - 1] = 0.5 * (ys[m - 1] + ys[i]);
			continue;
		}
		xs[m] = xs[i];
		ys[m++] = ys[i];
	}
	if (m == 0)
		return 0;
	if (x <= xs[0] || m == 1)
		return x <= xs[0] ? ys[0] : ys[0] * x / xs[0];
	if (x >= xs[m - 1])
		return ys[m - 1] * x / xs[m - 1];
	for (size_t i = 0; i < m; i++) {
		xs[i] = log(xs[i]);
		ys[i] = log(ys[i] > 0 ? ys[i] : 1e-3);
	}
	{
		const gsl_interp_type *type = m >= 3 ? gsl_interp_steffen : gsl_interp_linear;
		gsl_interp *it = gsl_interp_alloc(type, m);
		gsl_interp_init(it, xs, ys, m);
		y = exp(gsl_interp_eval(it, xs, ys, log(x), NULL));
		gsl_interp_free(it);
	}
	return y;
}

/* The median of ns_comm / ns over the kernels measured: how much a running collective slows a kernel. */
static double compute_slowdown(const struct calibration *c)
{
	double *r = xmalloc(sizeof(double) * (size_t)(c->nkernels + 1)), med = 1.0;
	size_t n = 0;

	for (int i = 0; i < c->nkernels; i++)
		if (c->kernels[i].ns > 0 && c->kernels[i].ns_comm > 0)
			r[n++] = c->kernels[i].ns_comm / c->kernels[i].ns;
	if (n) {
		gsl_sort(r, 1, n);
		med = gsl_stats_median_from_sorted_data(r, 1, n);
	}
	free(r);
	return med;
}

double calibration_pass_ns(const struct calibration *c, uint64_t bytes)
{
	double *xs = xmalloc(sizeof(double) * (size_t)(c->npasses + 1));
	double *ys = xmalloc(sizeof(double) * (size_t)(c->npasses + 1)), ns;

	for (int i = 0; i < c->npasses; i++) {
		xs[i] = PASS_TRAFFIC * (double)c->passes[i].bytes;
		ys[i] = c->passes[i].ns;
	}
	ns = interp(xs, ys, (size_t)c->npasses, (double)(bytes ? bytes : 1));
	free(xs);
	free(ys);
	return ns;
}

double calibration_copy_ns(const struct calibration *c, enum op_kind k, uint64_t bytes)
{
	double *xs = xmalloc(sizeof(double) * (size_t)(c->ncopies + 1));
	double *ys = xmalloc(sizeof(double) * (size_t)(c->ncopies + 1)), ns;
	size_t m = 0;

	for (int i = 0; i < c->ncopies; i++)
		if (c->copies[i].kind == k) {
			xs[m] = (double)c->copies[i].bytes;
			ys[m++] = c->copies[i].ns;
		}
	ns = m ? interp(xs, ys, m, (double)(bytes ? bytes : 1)) : calibration_pass_ns(c, 2 * bytes);
	free(xs);
	free(ys);
	return ns;
}

/* A GEMM or attention kernel from the measured ones of its kind, at its FLOPs. */
static double by_flops(const struct cal_kernel *ks, int n, enum kernel_kind kind, const char *prefix,
		       const struct kernel *k, int beside)
{
	double *xs = xmalloc(sizeof(double) * (size_t)(n + 1)), *ys = xmalloc(sizeof(double) * (size_t)(n + 1)), ns;
	size_t m = 0;

	for (int i = 0; i < n; i++)
		if (ks[i].kind == kind && ks[i].flops > 0 && (!prefix || !strncmp(ks[i].name, prefix, strlen(prefix)))) {
			xs[m] = (double)ks[i].flops;
			ys[m++] = beside && ks[i].ns_comm > 0 ? ks[i].ns_comm : ks[i].ns;
		}
	ns = m ? interp(xs, ys, m, (double)k->flops) : -1;
	free(xs);
	free(ys);
	return ns;
}

double calibration_kernel_ns(const struct calibration *c, const struct kernel *k, int beside, int *exact)
{
	double ns = -1;

	*exact = 0;
	for (int i = 0; i < c->nkernels; i++) {
		const struct cal_kernel *x = &c->kernels[i];
		if (!strcmp(x->name, k->name) && x->m == k->m && x->n == k->n && x->k == k->k && x->bytes == k->bytes) {
			*exact = 1;
			return beside && x->ns_comm > 0 ? x->ns_comm : x->ns;
		}
	}
	switch (k->kind) {
	case K_GEMM:
		ns = by_flops(c->gemm, c->ngemm, K_GEMM, NULL, k, 0);
		if (ns < 0)
			ns = by_flops(c->kernels, c->nkernels, K_GEMM, NULL, k, 0);
		break;
	case K_ATTN:
		ns = by_flops(c->kernels, c->nkernels, K_ATTN, strstr(k->name, "bwd") ? "attention_bwd" : "attention",
			      k, 0);
		break;
	default:
		break;
	}
	if (ns < 0)
		ns = calibration_pass_ns(c, k->bytes);
	return beside ? ns * compute_slowdown(c) : ns;
}

double calibration_collective_ns(const struct calibration *c, enum op_kind k, int ranks, uint64_t bytes,
				 int busy)
{
	double *xs = xmalloc(sizeof(double) * (size_t)(c->ncolls + 1));
	double *ys = xmalloc(sizeof(double) * (size_t)(c->ncolls + 1)), ns = -1;
	size_t m = 0;

	for (int i = 0; i < c->ncolls; i++)
		if (c->colls[i].kind == k && c->colls[i].ranks == ranks) {
			xs[m] = (double)c->colls[i].bytes;
			ys[m++] = busy && c->colls[i].ns_busy > 0 ? c->colls[i].ns_busy : c->colls[i].ns;
		}
	if (m)
		ns = interp(xs, ys, m, (double)(bytes ? bytes : 1));
	free(xs);
	free(ys);
	return ns;
}
