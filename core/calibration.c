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
 *
 * Reading checks every session of the file whole, attributes and tables,
 * and stops at the first value that is no measurement (data/README.md
 * lists what is allowed); merging sorts the rows of the sessions merged,
 * so a file of millions of rows reads in about a second.
 */
#include "calibration.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <gsl/gsl_interp.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <hdf5.h>

#include "h5file.h"
#include "text.h"
#include "xalloc.h"

/* ---- file ---------------------------------------------------------------- */

const char *const calibration_backends[] = { "cpu", "cuda", "pytorch", NULL };


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
	H5Tinsert(t, "ns_comm2", HOFFSET(struct cal_kernel, ns_comm2), H5T_NATIVE_DOUBLE);
	H5Tinsert(t, "ns_ar", HOFFSET(struct cal_kernel, ns_ar), H5T_NATIVE_DOUBLE);
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
	hid_t g, kt, ct, pt, yt;

	if (h5file_check_ours(s, file, calibration_groups, NOT_CALIBRATION) < 0)
		return -1;
	g = h5file_next_group(s, file, "calibration", name);
	if (g < 0)
		return -1;
	gmtime_r(&now, &tm);
	strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
	h5file_attr_str(s, g, "hardware", c->hardware);
	h5file_attr_str(s, g, "backend", c->backend);
	h5file_attr_str(s, g, "date", c->date[0] ? c->date : date);
	h5file_attr_str(s, g, "versions", c->versions);
	if (c->binary[0])
		h5file_attr_str(s, g, "binary", c->binary);
	h5file_attr_str(s, g, "fabric", c->fabric[0] ? c->fabric : "real");
	if (c->series[0])
		h5file_attr_str(s, g, "series", c->series);
	h5file_attr_i32(s, g, "ranks", c->ranks);
	h5file_attr_f64(s, g, "dispatch_ns", c->dispatch_ns);
	h5file_attr_f64(s, g, "wake_ns", c->wake_ns);
	h5file_attr_f64(s, g, "issue_ns", c->issue_ns);
	h5file_attr_f64(s, g, "adamw_ns_per_elem", c->adamw_ns_per_elem);
	h5file_attr_f64(s, g, "host_adamw_ns_per_elem", c->host_adamw_ns_per_elem);
	if (c->adamw_call_ns > 0)
		h5file_attr_f64(s, g, "adamw_call_ns", c->adamw_call_ns);
	if (c->host_adamw_call_ns > 0)
		h5file_attr_f64(s, g, "host_adamw_call_ns", c->host_adamw_call_ns);
	if (c->adamw_fused_ns_per_elem > 0)
		h5file_attr_f64(s, g, "adamw_fused_ns_per_elem", c->adamw_fused_ns_per_elem);
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

/* ---- reading ------------------------------------------------------------- */

/*
 * What a session may hold (data/README.md). A time is a measurement of
 * one op, or of the runtime's cost per op: finite, positive and at most an
 * hour, as no op of a step takes longer. The overheads (dispatch_ns,
 * issue_ns, wake_ns) may be 0, too small to see; a time measured beside
 * another op (ns_comm, ns_comm2, ns_ar, ns_busy) is 0 when it was not
 * measured, and the time alone (or beside one collective) prices it then.
 * Sizes are positive and at most a pebibyte.
 */
#define CAL_NS_MAX 3.6e12          /* an hour */
#define CAL_NS_PER_ELEM_MAX 1e6    /* a millisecond per parameter element */
#define CAL_BYTES_MAX (1ull << 50) /* a pebibyte */
#define CAL_RANKS_MAX (1 << 24)

enum { S_DISPATCH, S_ISSUE, S_WAKE, S_ADAMW, S_HOST_ADAMW, S_ADAMW_FUSED, S_ADAMW_CALL, S_HOST_ADAMW_CALL, NSCALARS };

/*
 * The float64 attributes of a session: whether 0 is allowed (an overhead
 * too small to see), the most allowed, and whether a session may leave it
 * out (then NAN: not measured).
 */
static const struct {
	const char *name;
	int zero_ok;
	double max;
	int optional;
} scalars[NSCALARS] = {
	{ "dispatch_ns", 1, CAL_NS_MAX, 0 },
	{ "issue_ns", 1, CAL_NS_MAX, 0 },
	{ "wake_ns", 1, CAL_NS_MAX, 0 },
	{ "adamw_ns_per_elem", 0, CAL_NS_PER_ELEM_MAX, 0 },
	{ "host_adamw_ns_per_elem", 0, CAL_NS_PER_ELEM_MAX, 0 },
	{ "adamw_fused_ns_per_elem", 0, CAL_NS_PER_ELEM_MAX, 1 }, /* microbench.py: torch.optim.AdamW(fused=True) */
	{ "adamw_call_ns", 0, CAL_NS_MAX, 1 },      /* gpu_run, since it times the optimizer at two sizes */
	{ "host_adamw_call_ns", 0, CAL_NS_MAX, 1 }, /* the same, the host optimizer */
};

/* A session's pass_traffic: what a pass's label may count as traffic, per byte */
#define PASS_TRAFFIC_MAX 8.0

enum { T_KERNELS, T_GEMM, T_PASSES, T_COLLS, T_COPIES, NTABLES };

/* A session of the file: what decides whether it merges, its scalars and its tables' rows. */
struct session {
	char name[16];
	int32_t ranks;
	char fabric[CAL_TEXT_MAX];  /* "real" when it does not say (files from before it was recorded) */
	char series[CAL_NAME_MAX];  /* "" for none */
	char hardware[64];
	char backend[16];
	double scalar[NSCALARS];
	void *rows[NTABLES];
	size_t nrows[NTABLES];
};

/*
 * A file being read: every session checked, those measured with the
 * ranks asked for kept (newest first), and the first reason to refuse
 * the file, which ends the reading.
 */
struct reader {
	const char *path;
	int ranks;                 /* asked for; 0: any; < 0: none (only check) */
	const char *fabric;        /* the fabric asked for ("real", "emulated"); NULL: the newest session's */
	int other_fabric;          /* sessions of those ranks left out for their fabric */
	char *err;
	int errlen;
	int failed;
	struct h5file_session s;
	hid_t types[NTABLES];      /* of a row of each table in memory */
	struct session *sess;      /* picked, newest first */
	int n;
	int32_t seen[32];          /* the world sizes of the file's sessions */
	int nseen;
	char upto[CAL_SESSION_LEN]; /* FILE@NNNNNN: the sessions after it are left out; "" none */
	char last[16];             /* the file's newest session, "" while none is seen */
	int upto_seen;
};

static int refuse(struct reader *r, const char *group, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Refuse the file: "path: /calibration/NNNNNN: what" in r->err (the first reason only). -1. */
static int refuse(struct reader *r, const char *group, const char *fmt, ...)
{
	va_list ap;
	int used;

	if (r->failed)
		return -1;
	r->failed = 1;
	used = group ? snprintf(r->err, (size_t)r->errlen, "%s: /calibration/%s: ", r->path, group)
		     : snprintf(r->err, (size_t)r->errlen, "%s: ", r->path);
	if (used >= 0 && used < r->errlen) {
		va_start(ap, fmt);
		vsnprintf(r->err + used, (size_t)(r->errlen - used), fmt, ap);
		va_end(ap);
	}
	return -1;
}

/*
 * Attribute `name` of session group g: there, one value, a number ('i':
 * an integer; 'f': an integer or a float) or a string ('s'). 0, or -1
 * refused.
 */
static int attr_check(struct reader *r, const char *group, hid_t g, const char *name, int want)
{
	const char *wanted = want == 's' ? "a string" : want == 'i' ? "an integer" : "a number";
	hid_t a, space, type;
	hssize_t n;
	H5T_class_t cls;
	int ok;

	if (!h5file_has_attr(g, name))
		return refuse(r, group, "no attribute %s (%s; data/README.md)", name, wanted);
	a = H5Aopen(g, name, H5P_DEFAULT);
	if (h5file_check(&r->s, a, name) < 0)
		return refuse(r, group, "attribute %s cannot be read (see above)", name);
	space = H5Aget_space(a);
	n = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
	type = H5Aget_type(a);
	cls = type >= 0 ? H5Tget_class(type) : H5T_NO_CLASS;
	if (space >= 0)
		H5Sclose(space);
	if (type >= 0)
		H5Tclose(type);
	H5Aclose(a);
	if (n != 1)
		return refuse(r, group, "attribute %s holds %lld values where one is expected (%s)", name, (long long)n,
			      wanted);
	if (want == 's')
		ok = cls == H5T_STRING;
	else
		ok = cls == H5T_INTEGER || (want == 'f' && cls == H5T_FLOAT);
	if (!ok)
		return refuse(r, group, "attribute %s is not %s", name, wanted);
	return 0;
}

static int read_i32(struct reader *r, const char *group, hid_t g, const char *name, int32_t *v)
{
	if (attr_check(r, group, g, name, 'i') < 0)
		return -1;
	if (h5file_read_i32(&r->s, g, name, v) < 0)
		return refuse(r, group, "attribute %s cannot be read (see above)", name);
	return 0;
}

static int read_f64(struct reader *r, const char *group, hid_t g, const char *name, double *v)
{
	if (attr_check(r, group, g, name, 'f') < 0)
		return -1;
	if (h5file_read_f64(&r->s, g, name, v) < 0)
		return refuse(r, group, "attribute %s cannot be read (see above)", name);
	return 0;
}

/* A string attribute; an optional one missing leaves buf as it is. */
static int read_str(struct reader *r, const char *group, hid_t g, const char *name, char *buf, size_t len,
		    int optional)
{
	if (optional && !h5file_has_attr(g, name))
		return 0;
	if (attr_check(r, group, g, name, 's') < 0)
		return -1;
	if (h5file_read_str(&r->s, g, name, buf, len) < 0)
		return refuse(r, group, "attribute %s cannot be read (see above)", name);
	return 0;
}

/* Whether v is an allowed time: finite, > 0 (>= 0 with zero_ok), at most max. */
static int time_ok(double v, int zero_ok, double max)
{
	return isfinite(v) && (v > 0 || (zero_ok && v == 0)) && v <= max;
}

static int refuse_time(struct reader *r, const char *group, const char *where, const char *field, double v,
		       int zero_ok, double max)
{
	return refuse(r, group, "%s%s = %g (allowed: finite, %s 0 and at most %g ns%s)", where, field, v,
		      zero_ok ? ">=" : ">", max, max == CAL_NS_MAX ? ", an hour" : " per element");
}

static int refuse_bytes(struct reader *r, const char *group, const char *where, uint64_t v)
{
	return refuse(r, group, "%sbytes = %llu (allowed: 1 to 2^50, a pebibyte)", where, (unsigned long long)v);
}

/* A row's bytes and times (at most CAL_NS_MAX): 0, or -1 refused. */
static int row_bytes(struct reader *r, const struct session *x, const char *where, uint64_t v)
{
	return v >= 1 && v <= CAL_BYTES_MAX ? 0 : refuse_bytes(r, x->name, where, v);
}

static int row_ns(struct reader *r, const struct session *x, const char *where, const char *field, double v,
		  int zero_ok)
{
	return time_ok(v, zero_ok, CAL_NS_MAX) ? 0 : refuse_time(r, x->name, where, field, v, zero_ok, CAL_NS_MAX);
}

/*
 * Each row checked: the values it may hold (CAL_NS_MAX). where is "table
 * row N: ". 0, or -1 refused.
 */
static int check_kernel(struct reader *r, const struct session *x, const char *where, void *row)
{
	struct cal_kernel *k = row;

	k->name[CAL_NAME_MAX - 1] = '\0';
	if (k->kind >= K_KIND_COUNT)
		return refuse(r, x->name, "%skind = %u (allowed: 0 %s, 1 %s, 2 %s)", where, k->kind,
			      kernel_kind_name(K_GEMM), kernel_kind_name(K_ATTN), kernel_kind_name(K_ELEMENTWISE));
	if (k->m < 0 || k->n < 0 || k->k < 0)
		return refuse(r, x->name, "%sm, n, k = %lld, %lld, %lld (allowed: >= 0)", where, (long long)k->m,
			      (long long)k->n, (long long)k->k);
	if (row_bytes(r, x, where, k->bytes) || row_ns(r, x, where, "ns", k->ns, 0) ||
	    row_ns(r, x, where, "ns_comm", k->ns_comm, 1) || row_ns(r, x, where, "ns_comm2", k->ns_comm2, 1))
		return -1;
	return row_ns(r, x, where, "ns_ar", k->ns_ar, 1);
}

static int check_pass(struct reader *r, const struct session *x, const char *where, void *row)
{
	const struct cal_pass *p = row;

	return row_bytes(r, x, where, p->bytes) || row_ns(r, x, where, "ns", p->ns, 0) ? -1 : 0;
}

static int check_coll(struct reader *r, const struct session *x, const char *where, void *row)
{
	const struct cal_coll *c = row;

	if (!op_is_collective((enum op_kind)c->kind))
		return refuse(r, x->name, "%skind = %u (allowed: %d %s, %d %s, %d %s)", where, c->kind, OP_ALLGATHER,
			      op_kind_name(OP_ALLGATHER), OP_REDUCE_SCATTER, op_kind_name(OP_REDUCE_SCATTER),
			      OP_ALLREDUCE, op_kind_name(OP_ALLREDUCE));
	if (c->ranks < 2 || c->ranks > x->ranks)
		return refuse(r, x->name, "%sranks = %d (allowed: 2 to the session's %d)", where, (int)c->ranks,
			      (int)x->ranks);
	if (row_bytes(r, x, where, c->bytes) || row_ns(r, x, where, "ns", c->ns, 0))
		return -1;
	return row_ns(r, x, where, "ns_busy", c->ns_busy, 1);
}

static int check_copy(struct reader *r, const struct session *x, const char *where, void *row)
{
	const struct cal_copy *y = row;

	if (y->kind != OP_H2D && y->kind != OP_D2H)
		return refuse(r, x->name, "%skind = %u (allowed: %d %s, %d %s)", where, y->kind, OP_D2H,
			      op_kind_name(OP_D2H), OP_H2D, op_kind_name(OP_H2D));
	return row_bytes(r, x, where, y->bytes) || row_ns(r, x, where, "ns", y->ns, 0) ? -1 : 0;
}

static int cmp_u64(uint64_t a, uint64_t b)
{
	return (a > b) - (a < b);
}

static int cmp_i64(int64_t a, int64_t b)
{
	return (a > b) - (a < b);
}

/* Orders of the points of each table: 0 for the same point (the same kernel and shape, pass size, ...). */
static int cmp_kernel(const void *pa, const void *pb)
{
	const struct cal_kernel *a = pa, *b = pb;
	int c = strncmp(a->name, b->name, CAL_NAME_MAX);

	if (c)
		return c;
	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	if ((c = cmp_i64(a->m, b->m)) || (c = cmp_i64(a->n, b->n)) || (c = cmp_i64(a->k, b->k)) ||
	    (c = cmp_u64(a->flops, b->flops)))
		return c;
	return cmp_u64(a->bytes, b->bytes);
}

static int cmp_pass(const void *pa, const void *pb)
{
	return cmp_u64(((const struct cal_pass *)pa)->bytes, ((const struct cal_pass *)pb)->bytes);
}

static int cmp_coll(const void *pa, const void *pb)
{
	const struct cal_coll *a = pa, *b = pb;

	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	if (a->ranks != b->ranks)
		return a->ranks < b->ranks ? -1 : 1;
	return cmp_u64(a->bytes, b->bytes);
}

static int cmp_copy(const void *pa, const void *pb)
{
	const struct cal_copy *a = pa, *b = pb;

	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	return cmp_u64(a->bytes, b->bytes);
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

/* The median of the measured (non-zero) doubles at byte offset `off` of the n measurements; 0: none measured. */
static double measured_median(const void *const *of, int n, size_t off)
{
	double *a = xmalloc(sizeof(double) * (size_t)(n + 1)), m = 0;
	int k = 0;

	for (int i = 0; i < n; i++) {
		memcpy(&a[k], (const char *)of[i] + off, sizeof(double));
		k += a[k] > 0;
	}
	if (k)
		m = median_of(a, k);
	free(a);
	return m;
}

/*
 * A point's value fields set to their medians over its n measurements
 * (beside two collectives and beside an all-reduce: over the sessions
 * that measured them).
 */
static void kernel_median(void *into, const void *const *of, int n)
{
	((struct cal_kernel *)into)->ns = field_median(of, n, offsetof(struct cal_kernel, ns));
	((struct cal_kernel *)into)->ns_comm = field_median(of, n, offsetof(struct cal_kernel, ns_comm));
	((struct cal_kernel *)into)->ns_comm2 = measured_median(of, n, offsetof(struct cal_kernel, ns_comm2));
	((struct cal_kernel *)into)->ns_ar = measured_median(of, n, offsetof(struct cal_kernel, ns_ar));
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

/* The tables of a session: how each is read, checked and merged. */
static const struct table {
	const char *name;
	int optional;                                 /* copies: sessions from before them have none */
	size_t size;                                  /* of a row */
	int (*cmp)(const void *, const void *);       /* 0: the same point */
	void (*median)(void *, const void *const *, int);
	int (*check)(struct reader *, const struct session *, const char *, void *);
} tables[NTABLES] = {
	[T_KERNELS] = { "kernels", 0, sizeof(struct cal_kernel), cmp_kernel, kernel_median, check_kernel },
	[T_GEMM] = { "gemm", 0, sizeof(struct cal_kernel), cmp_kernel, kernel_median, check_kernel },
	[T_PASSES] = { "passes", 0, sizeof(struct cal_pass), cmp_pass, pass_median, check_pass },
	[T_COLLS] = { "collectives", 0, sizeof(struct cal_coll), cmp_coll, coll_median, check_coll },
	[T_COPIES] = { "copies", 1, sizeof(struct cal_copy), cmp_copy, copy_median, check_copy },
};

/* Fields a table's rows may lack: measured since files were first written (then 0: not measured). */
static int optional_field(const char *name)
{
	return !strcmp(name, "ns_comm2") || !strcmp(name, "ns_ar");
}

/* Row type t without the members whose bit is set in `missing`, at the same offsets. */
static hid_t type_without(hid_t t, uint64_t missing)
{
	hid_t sub = H5Tcreate(H5T_COMPOUND, H5Tget_size(t));

	for (int f = 0; f < H5Tget_nmembers(t); f++) {
		char *name;
		hid_t mt;
		if (missing >> f & 1)
			continue;
		name = H5Tget_member_name(t, (unsigned)f);
		mt = H5Tget_member_type(t, (unsigned)f);
		H5Tinsert(sub, name, H5Tget_member_offset(t, (unsigned)f), mt);
		H5Tclose(mt);
		H5free_memory(name);
	}
	return sub;
}

/*
 * Dataset k of session group g: a table of compound rows with every field
 * of its row type (those of optional_field() may be missing), numbers
 * where numbers go; its rows read and checked into x. 0, or -1 refused.
 */
static int read_table(struct reader *r, hid_t g, struct session *x, int k)
{
	const struct table *t = &tables[k];
	hid_t mt = r->types[k], d, ft;
	char fields[128] = "", where[64];
	int nf = H5Tget_nmembers(mt), rc = 0;
	uint64_t missing = 0;

	for (int f = 0; f < nf; f++) {
		char *name = H5Tget_member_name(mt, (unsigned)f);
		size_t used = strlen(fields);
		snprintf(fields + used, sizeof fields - used, "%s%s", f ? ", " : "", name);
		H5free_memory(name);
	}
	if (H5Lexists(g, t->name, H5P_DEFAULT) <= 0) {
		if (t->optional)
			return 0;
		return refuse(r, x->name, "no dataset %s (every session has kernels, gemm, passes and collectives; "
					  "data/README.md)", t->name);
	}
	d = H5Dopen2(g, t->name, H5P_DEFAULT);
	if (h5file_check(&r->s, d, t->name) < 0)
		return refuse(r, x->name, "dataset %s cannot be opened (see above)", t->name);
	ft = H5Dget_type(d);
	if (ft < 0 || H5Tget_class(ft) != H5T_COMPOUND)
		rc = refuse(r, x->name, "dataset %s is no table of compound rows (fields %s)", t->name, fields);
	for (int f = 0; f < nf && rc == 0; f++) {
		char *name = H5Tget_member_name(mt, (unsigned)f);
		int at = H5Tget_member_index(ft, name);
		H5T_class_t want = H5Tget_member_class(mt, (unsigned)f), have = H5T_NO_CLASS;
		if (at >= 0)
			have = H5Tget_member_class(ft, (unsigned)at);
		if (at < 0 && optional_field(name))
			missing |= 1ull << f;
		else if (at < 0)
			rc = refuse(r, x->name, "%s has no field %s (its fields: %s)", t->name, name, fields);
		else if (want == H5T_STRING ? have != H5T_STRING : have != H5T_INTEGER && have != H5T_FLOAT)
			rc = refuse(r, x->name, "%s field %s is not %s", t->name, name,
				    want == H5T_STRING ? "a string" : "a number");
		H5free_memory(name);
	}
	if (ft >= 0)
		H5Tclose(ft);
	H5Dclose(d);
	if (rc)
		return rc;
	if (missing) { /* those fields stay 0 */
		hid_t sub = type_without(mt, missing);
		x->rows[k] = h5file_read_dataset(&r->s, g, t->name, sub, &x->nrows[k]);
		H5Tclose(sub);
	} else {
		x->rows[k] = h5file_read_dataset(&r->s, g, t->name, mt, &x->nrows[k]);
	}
	if (!x->rows[k])
		return refuse(r, x->name, "dataset %s cannot be read (see above)", t->name);
	for (size_t e = 0; e < x->nrows[k] && rc == 0; e++) {
		snprintf(where, sizeof where, "%s row %zu: ", t->name, e);
		rc = t->check(r, x, where, (char *)x->rows[k] + e * t->size);
	}
	return rc;
}

static void session_release(struct session *x)
{
	for (int k = 0; k < NTABLES; k++) {
		free(x->rows[k]);
		x->rows[k] = NULL;
	}
}

/*
 * The session group `name`, checked whole: its attributes and tables.
 * Kept (newest first) when it was measured with the ranks asked for.
 * 0, or -1 refused.
 */
static int read_session(struct reader *r, hid_t g, const char *name)
{
	struct session x;
	int32_t queue;
	int known = 0, rc = 0;
	double traffic = PASS_TRAFFIC;

	memset(&x, 0, sizeof x);
	snprintf(x.name, sizeof x.name, "%s", name);
	if (read_i32(r, name, g, "ranks", &x.ranks) < 0)
		return -1;
	if (x.ranks < 1 || x.ranks > CAL_RANKS_MAX)
		return refuse(r, name, "attribute ranks = %d (allowed: 1 to %d, the processes measured at once)",
			      (int)x.ranks, CAL_RANKS_MAX);
	for (int i = 0; i < r->nseen && !known; i++)
		known = r->seen[i] == x.ranks;
	if (!known && r->nseen < (int)(sizeof r->seen / sizeof r->seen[0]))
		r->seen[r->nseen++] = x.ranks;
	snprintf(x.fabric, sizeof x.fabric, "real");
	if (read_str(r, name, g, "fabric", x.fabric, sizeof x.fabric, 1) < 0 ||
	    read_str(r, name, g, "series", x.series, sizeof x.series, 1) < 0 ||
	    read_str(r, name, g, "hardware", x.hardware, sizeof x.hardware, 0) < 0 ||
	    read_str(r, name, g, "backend", x.backend, sizeof x.backend, 0) < 0)
		return -1;
	if (name_index(calibration_backends, x.backend) < 0) { /* what prices it (launch_queue's default) reads it */
		const char *close = name_closest(calibration_backends, x.backend);
		char list[64];
		return refuse(r, name, "attribute backend = '%s' (allowed: %s%s%s%s)", x.backend,
			      names_joined(calibration_backends, list, sizeof list), close ? "; did you mean '" : "",
			      close ? close : "", close ? "'?" : "");
	}
	for (int k = 0; k < NSCALARS; k++) {
		if (scalars[k].optional && !h5file_has_attr(g, scalars[k].name)) {
			x.scalar[k] = NAN;
			continue;
		}
		if (read_f64(r, name, g, scalars[k].name, &x.scalar[k]) < 0)
			return -1;
		if (!time_ok(x.scalar[k], scalars[k].zero_ok, scalars[k].max))
			return refuse_time(r, name, "attribute ", scalars[k].name, x.scalar[k], scalars[k].zero_ok,
					   scalars[k].max);
	}
	if (h5file_has_attr(g, "launch_queue")) {
		if (read_i32(r, name, g, "launch_queue", &queue) < 0)
			return -1;
		if (queue < 0)
			return refuse(r, name, "attribute launch_queue = %d (allowed: >= 0 kernels, 0 for no bound)",
				      (int)queue);
	}
	if (h5file_has_attr(g, "pass_traffic")) {
		if (read_f64(r, name, g, "pass_traffic", &traffic) < 0)
			return -1;
		if (!(isfinite(traffic) && traffic > 0 && traffic <= PASS_TRAFFIC_MAX))
			return refuse(r, name, "attribute pass_traffic = %g (allowed: above 0 and at most %g, the bytes "
					       "of traffic per byte of a pass's label; without it %g, data/README.md)",
				      traffic, PASS_TRAFFIC_MAX, PASS_TRAFFIC);
	}
	for (int k = 0; k < NTABLES && rc == 0; k++)
		rc = read_table(r, g, &x, k);
	/* a session whose passes count their traffic otherwise: their labels as the schema's */
	for (size_t i = 0; rc == 0 && traffic != PASS_TRAFFIC && i < x.nrows[T_PASSES]; i++) {
		struct cal_pass *p = &((struct cal_pass *)x.rows[T_PASSES])[i];
		p->bytes = (uint64_t)llround((double)p->bytes * traffic / PASS_TRAFFIC);
		if (!p->bytes)
			p->bytes = 1;
	}
	if (!rc && r->ranks >= 0 && (r->ranks == 0 || x.ranks == r->ranks) && r->fabric &&
	    strcmp(x.fabric, r->fabric) != 0) {
		r->other_fabric++;
		rc = 1; /* not kept */
	}
	if (rc || r->ranks < 0 || (r->ranks != 0 && x.ranks != r->ranks)) {
		session_release(&x);
		return rc < 0 ? rc : 0;
	}
	/* names come in increasing order: each new one goes first */
	r->sess = xrealloc(r->sess, sizeof(*r->sess) * (size_t)(r->n + 1));
	memmove(r->sess + 1, r->sess, sizeof(*r->sess) * (size_t)r->n);
	r->sess[0] = x;
	r->n++;
	return 0;
}

static herr_t session_fn(hid_t cal, const char *name, const H5L_info_t *info, void *ctx)
{
	struct reader *r = ctx;
	hid_t g;
	int rc;

	(void)info;
	if (strlen(name) != 6)
		return 0;
	if (strcmp(name, r->last) > 0) /* the names of one length sort as their numbers */
		snprintf(r->last, sizeof r->last, "%s", name);
	if (r->upto[0] && strcmp(name, r->upto) > 0)
		return 0; /* appended after the session the calibration's name selects */
	r->upto_seen |= r->upto[0] && !strcmp(name, r->upto);
	g = H5Gopen2(cal, name, H5P_DEFAULT);
	if (h5file_check(&r->s, g, name) < 0) {
		refuse(r, name, "cannot be opened as a group (see above)");
		return 1;
	}
	rc = read_session(r, g, name);
	H5Gclose(g);
	return rc < 0 ? 1 : 0; /* the first bad session ends the walk */
}

/* Keep the sessions on the newest one's fabric. */
static void pick_same_fabric(struct reader *r)
{
	int m = 0;

	for (int i = 0; i < r->n; i++) {
		if (!strcmp(r->sess[i].fabric, r->sess[0].fabric))
			r->sess[m++] = r->sess[i];
		else
			session_release(&r->sess[i]);
	}
	r->n = m;
}

/* The sessions that merge were measured on one machine: one hardware, one backend. 0, or -1 refused. */
static int check_same_machine(struct reader *r)
{
	const struct session *a = &r->sess[0];

	for (int i = 1; i < r->n; i++) {
		const struct session *b = &r->sess[i];
		if (strcmp(a->hardware, b->hardware) || strcmp(a->backend, b->backend))
			return refuse(r, NULL, "sessions /calibration/%s (%s, %s) and /calibration/%s (%s, %s) of %d "
					       "ranks would merge, but are different machines (a file holds one "
					       "hardware and backend)",
				      a->name, a->hardware, a->backend, b->name, b->hardware, b->backend,
				      (int)a->ranks);
	}
	return 0;
}

/* A row of a session: rows sort by point, then session (newest first), then place in its table. */
struct ref {
	const char *row;
	int sess;
	size_t idx;
};

/* A point: refs[first..end), refs[first] the newest session's first row of it. */
struct point {
	size_t first, end;
};

static int ref_cmp(const void *pa, const void *pb, void *ctx)
{
	const struct table *t = ctx;
	const struct ref *a = pa, *b = pb;
	int c = t->cmp(a->row, b->row);

	if (c)
		return c;
	if (a->sess != b->sess)
		return a->sess < b->sess ? -1 : 1;
	return cmp_u64(a->idx, b->idx);
}

/* Points in the order of their first rows (by session, then place). */
static int point_cmp(const void *pa, const void *pb, void *ctx)
{
	const struct ref *refs = ctx, *a = &refs[((const struct point *)pa)->first];
	const struct ref *b = &refs[((const struct point *)pb)->first];

	if (a->sess != b->sess)
		return a->sess < b->sess ? -1 : 1;
	return cmp_u64(a->idx, b->idx);
}

/*
 * Table k of the calibration: each point as its newest session measured
 * it, or, when that session belongs to a series (repeats of one
 * calibration in separate processes), as the median of the series'
 * measurements of it (each session's first row of the point). Older
 * sessions fill in the points newer ones lack. Points come in the order
 * of their first rows, newest session first. The rows of all sessions
 * are sorted by point: O(n log n) for n rows.
 */
static void *merge_table(const struct reader *r, int k, int *nout)
{
	const struct table *t = &tables[k];
	size_t total = 0, n = 0, np = 0;
	struct ref *refs;
	struct point *pts;
	const void **of = xmalloc(sizeof(void *) * (size_t)(r->n + 1));
	char *out;

	for (int i = 0; i < r->n; i++)
		total += r->sess[i].nrows[k];
	refs = xmalloc(sizeof(*refs) * (total + 1));
	for (int i = 0; i < r->n; i++)
		for (size_t e = 0; e < r->sess[i].nrows[k]; e++)
			refs[n++] = (struct ref){ (const char *)r->sess[i].rows[k] + e * t->size, i, e };
	qsort_r(refs, total, sizeof(*refs), ref_cmp, (void *)t);
	pts = xmalloc(sizeof(*pts) * (total + 1));
	for (size_t a = 0, b; a < total; a = b) {
		for (b = a + 1; b < total && t->cmp(refs[a].row, refs[b].row) == 0; b++)
			;
		pts[np++] = (struct point){ a, b };
	}
	qsort_r(pts, np, sizeof(*pts), point_cmp, refs);
	out = xmalloc(t->size * (np + 1));
	for (size_t p = 0; p < np; p++) {
		const struct ref *x = &refs[pts[p].first];
		const char *series = r->sess[x->sess].series;
		char *into = out + p * t->size;
		int m = 0;
		memcpy(into, x->row, t->size);
		for (size_t j = pts[p].first; j < pts[p].end && series[0]; j++)
			if ((j == pts[p].first || refs[j].sess != refs[j - 1].sess) &&
			    !strcmp(r->sess[refs[j].sess].series, series))
				of[m++] = refs[j].row;
		if (m > 1)
			t->median(into, of, m);
	}
	free(pts);
	free(refs);
	free(of);
	*nout = (int)np;
	return out;
}

/* A scalar of the newest session, or the median over its series (an optional one: of those that have it; NAN, none). */
static double series_scalar(const struct reader *r, int k)
{
	double *v = xmalloc(sizeof(double) * (size_t)r->n), x;
	int m = 0;

	for (int i = 0; i < r->n; i++)
		if ((i == 0 || (r->sess[0].series[0] && !strcmp(r->sess[i].series, r->sess[0].series))) &&
		    !isnan(r->sess[i].scalar[k]))
			v[m++] = r->sess[i].scalar[k];
	x = m ? median_of(v, m) : NAN;
	free(v);
	return x;
}

/* "2, 4 and 8": the world sizes the file's sessions hold. */
static void seen_text(const struct reader *r, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int i = 0; i < r->nseen && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%d",
					 i == 0 ? "" : i + 1 == r->nseen ? " and " : ", ", (int)r->seen[i]);
}

/* The sessions picked, merged into c: the newest one's scalars (its series' medians), the tables of all. */
static int merge(struct reader *r, hid_t cal, struct calibration *c)
{
	hid_t g;

	snprintf(c->path, sizeof c->path, "%s", r->path);
	snprintf(c->session, sizeof c->session, "%s", r->sess[0].name);
	c->sessions = r->n;
	snprintf(c->hardware, sizeof c->hardware, "%s", r->sess[0].hardware);
	snprintf(c->backend, sizeof c->backend, "%s", r->sess[0].backend);
	snprintf(c->fabric, sizeof c->fabric, "%s", r->sess[0].fabric);
	snprintf(c->series, sizeof c->series, "%s", r->sess[0].series);
	c->ranks = r->sess[0].ranks;
	c->dispatch_ns = series_scalar(r, S_DISPATCH);
	c->wake_ns = series_scalar(r, S_WAKE);
	c->issue_ns = series_scalar(r, S_ISSUE);
	c->adamw_ns_per_elem = series_scalar(r, S_ADAMW);
	c->host_adamw_ns_per_elem = series_scalar(r, S_HOST_ADAMW);
	c->adamw_fused_ns_per_elem = series_scalar(r, S_ADAMW_FUSED);
	if (isnan(c->adamw_fused_ns_per_elem))
		c->adamw_fused_ns_per_elem = 0;
	c->adamw_call_ns = series_scalar(r, S_ADAMW_CALL);
	c->host_adamw_call_ns = series_scalar(r, S_HOST_ADAMW_CALL);
	if (isnan(c->adamw_call_ns)) /* sessions from before: one size, no cost per call */
		c->adamw_call_ns = 0;
	if (isnan(c->host_adamw_call_ns))
		c->host_adamw_call_ns = 0;
	/* sessions written before it was measured: gpu_run's CPU backend never bounds its queues */
	c->launch_queue = !strcmp(c->backend, "cpu") ? 0 : -1;
	g = H5Gopen2(cal, r->sess[0].name, H5P_DEFAULT);
	if (h5file_check(&r->s, g, r->sess[0].name) < 0)
		return refuse(r, r->sess[0].name, "cannot be opened as a group (see above)");
	if (read_str(r, c->session, g, "date", c->date, sizeof c->date, 0) < 0 ||
	    read_str(r, c->session, g, "versions", c->versions, sizeof c->versions, 0) < 0 ||
	    read_str(r, c->session, g, "binary", c->binary, sizeof c->binary, 1) < 0 ||
	    (h5file_has_attr(g, "launch_queue") && read_i32(r, c->session, g, "launch_queue", &c->launch_queue) < 0)) {
		H5Gclose(g);
		return -1;
	}
	H5Gclose(g);
	c->kernels = merge_table(r, T_KERNELS, &c->nkernels);
	c->gemm = merge_table(r, T_GEMM, &c->ngemm);
	c->passes = merge_table(r, T_PASSES, &c->npasses);
	c->colls = merge_table(r, T_COLLS, &c->ncolls);
	c->copies = merge_table(r, T_COPIES, &c->ncopies);
	/* an op of no measured kernel, and every memory-bound one, is priced from the passes */
	if (c->npasses == 0)
		return refuse(r, NULL, "the sessions of %d ranks hold no passes: memory-bound ops could not be "
				       "priced (data/README.md)", c->ranks);
	return 0;
}

/*
 * Read the file r names, every session checked: those of r->ranks world
 * size merged into c (none with r->ranks < 0: only the check, and the
 * world sizes in r->seen). 0, or -1 refused (the reason in r->err).
 */
static int read_file(struct reader *r, struct calibration *c)
{
	hid_t file, cal = -1;
	char seen[128], how[64];
	struct stat st;

	memset(c, 0, sizeof(*c));
	h5file_begin(&r->s, "calibration", r->path);
	r->types[T_KERNELS] = kernel_type();
	r->types[T_GEMM] = kernel_type();
	r->types[T_PASSES] = pass_type();
	r->types[T_COLLS] = coll_type();
	r->types[T_COPIES] = copy_type();
	if (stat(r->path, &st) != 0) {
		refuse(r, NULL, "%s", strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) { /* HDF5 would wait forever on a FIFO's writer */
		refuse(r, NULL, "is %s, not a calibration file (data/README.md)", text_file_kind(st.st_mode));
		goto out;
	}
	file = H5Fopen(r->path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (file < 0) {
		refuse(r, NULL, "cannot open as an HDF5 file");
		goto out;
	}
	if (H5Lexists(file, "calibration", H5P_DEFAULT) <= 0 ||
	    (cal = H5Gopen2(file, "calibration", H5P_DEFAULT)) < 0) {
		refuse(r, NULL, "no /calibration group: not a calibration file");
		goto out_file;
	}
	H5Literate(cal, H5_INDEX_NAME, H5_ITER_INC, NULL, session_fn, r);
	if (r->failed)
		goto out_file;
	if (r->upto[0] && !r->upto_seen) {
		refuse(r, NULL, "no session /calibration/%s (its sessions end at /calibration/%s; FILE@NNNNNN is "
				"the file as it stood when session NNNNNN was appended)",
		       r->upto, r->last[0] ? r->last : "none");
		goto out_file;
	}
	if (!r->nseen) {
		refuse(r, NULL, "no calibration session in /calibration");
		goto out_file;
	}
	if (r->ranks < 0)
		goto out_file;
	if (!r->n && r->other_fabric) {
		if (!strcmp(r->fabric, "real"))
			snprintf(how, sizeof how, "mpirun -np %d gpu_run --calibrate", r->ranks);
		else
			snprintf(how, sizeof how, "gpu_run --calibrate --emulate-world %d", r->ranks);
		refuse(r, NULL, "no calibration measured with %d ranks on %s fabric (%d session%s of %d ranks on "
				"%s one, another machine; calibrate with %s)",
		       r->ranks, !strcmp(r->fabric, "real") ? "a real" : "an emulated", r->other_fabric,
		       r->other_fabric == 1 ? "" : "s", r->ranks, !strcmp(r->fabric, "real") ? "an emulated" : "a real",
		       how);
		goto out_file;
	}
	if (!r->n) {
		seen_text(r, seen, sizeof seen);
		refuse(r, NULL, "no calibration measured with %d ranks (its sessions have %s)", r->ranks, seen);
		goto out_file;
	}
	pick_same_fabric(r);
	if (check_same_machine(r) == 0)
		merge(r, cal, c);
out_file:
	if (cal >= 0)
		H5Gclose(cal);
	H5Fclose(file);
out:
	for (int i = 0; i < r->n; i++)
		session_release(&r->sess[i]);
	free(r->sess);
	r->sess = NULL;
	r->n = 0;
	for (int k = 0; k < NTABLES; k++)
		H5Tclose(r->types[k]);
	h5file_end(&r->s);
	if (r->failed)
		calibration_release(c);
	return r->failed ? -1 : 0;
}

int calibration_file(const char *spec, char *file, size_t n, char *upto)
{
	size_t len = strlen(spec), at = len;

	upto[0] = '\0';
	if (len > 7 && spec[len - 7] == '@' && strspn(spec + len - 6, "0123456789") == 6) {
		at = len - 7;
		memcpy(upto, spec + at + 1, 7);
	}
	if (at >= n)
		return -1;
	memcpy(file, spec, at);
	file[at] = '\0';
	return upto[0] != '\0';
}

int calibration_named(const char *spec)
{
	return spec && spec[0] && strcmp(spec, "none") != 0;
}

int calibration_access(const char *spec)
{
	char file[sizeof((struct calibration *)0)->path], upto[CAL_SESSION_LEN];

	if (calibration_file(spec, file, sizeof file, upto) < 0) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return access(file, R_OK);
}

/* A reader of the calibration named spec, its file's name in file (-1 with the message in err: too long). */
static int reader_of(struct reader *r, const char *spec, char *file, size_t n, int ranks, char *err, int errlen)
{
	memset(r, 0, sizeof *r);
	r->path = file;
	r->ranks = ranks;
	r->fabric = NULL;
	r->err = err;
	r->errlen = errlen;
	if (calibration_file(spec, file, n, r->upto) < 0) {
		snprintf(err, (size_t)errlen, "%.64s...: a calibration file's name of at most %zu bytes", spec, n - 1);
		return -1;
	}
	return 0;
}

int calibration_read_on(const char *path, int ranks, const char *fabric, struct calibration *c, char *err,
			int errlen)
{
	struct reader r;
	char file[sizeof c->path];

	memset(c, 0, sizeof(*c));
	if (reader_of(&r, path, file, sizeof file, ranks, err, errlen) != 0)
		return -1;
	r.fabric = fabric && fabric[0] ? fabric : NULL;
	return read_file(&r, c);
}

int calibration_read(const char *path, int ranks, struct calibration *c, char *err, int errlen)
{
	return calibration_read_on(path, ranks, NULL, c, err, errlen);
}

int calibration_pin(const char *spec, char *out, size_t n, char *err, int errlen)
{
	struct reader r;
	struct calibration c;
	char file[sizeof c.path];

	/* the check's walk: every session up to the one named, the newest of them */
	if (reader_of(&r, spec, file, sizeof file, -1, err, errlen) != 0 || read_file(&r, &c) != 0)
		return -1;
	if ((size_t)snprintf(out, n, "%s@%s", file, r.upto[0] ? r.upto : r.last) >= n) {
		snprintf(err, (size_t)errlen, "%s@%s: a calibration's name of at most %zu bytes", file,
			 r.upto[0] ? r.upto : r.last, n - 1);
		return -1;
	}
	return 0;
}

int calibration_check(const char *path, char *err, int errlen)
{
	struct reader r;
	struct calibration c;
	char file[sizeof c.path];

	if (reader_of(&r, path, file, sizeof file, -1, err, errlen) != 0 || read_file(&r, &c) != 0)
		return -1;
	/* what merging adds: one machine per world size, passes in each */
	for (int i = 0; i < r.nseen; i++) {
		if (calibration_read(path, r.seen[i], &c, err, errlen) != 0)
			return -1;
		calibration_release(&c);
	}
	return 0;
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
 * below. Beyond the largest, by bytes (per_byte: collectives, passes,
 * copies): that point's y plus its marginal cost (the slope from the
 * largest point at or below half its x) per byte past it, as such a time
 * is a fixed part (a collective's latency, a launch) and a part per byte
 * of which only the second grows (a whole model's all-gather where a
 * block's was measured); without such a point, or a slope that does not
 * rise, and by FLOPs (a GEMM past the grid, at the largest one's
 * efficiency), the largest point's y per x.
 */
static double interp(double *xs, double *ys, size_t n, double x, int per_byte)
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
	if (x >= xs[m - 1]) {
		for (size_t i = m - 1; per_byte && i-- > 0;)
			if (xs[i] <= 0.5 * xs[m - 1]) {
				double slope = (ys[m - 1] - ys[i]) / (xs[m - 1] - xs[i]);
				if (slope > 0)
					return ys[m - 1] + slope * (x - xs[m - 1]);
				break;
			}
		return ys[m - 1] * x / xs[m - 1];
	}
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

/* Kernel x's time with what `beside` (enum cal_beside) says runs beside it, as measured. */
static double beside_ns(const struct cal_kernel *x, int beside)
{
	if (beside == CAL_BESIDE_TWO && x->ns_comm2 > 0)
		return x->ns_comm2;
	if (beside == CAL_BESIDE_ALLREDUCE && x->ns_ar > 0)
		return x->ns_ar;
	return beside != CAL_ALONE && x->ns_comm > 0 ? x->ns_comm : x->ns;
}

/*
 * The median of beside_ns / ns over the kernels measured: how much what
 * `beside` says runs beside a kernel slows it.
 */
static double compute_slowdown(const struct calibration *c, int beside)
{
	double *r = xmalloc(sizeof(double) * (size_t)(c->nkernels + 1)), med = 1.0;
	size_t n = 0;

	for (int i = 0; i < c->nkernels; i++)
		if (c->kernels[i].ns > 0 && c->kernels[i].ns_comm > 0)
			r[n++] = beside_ns(&c->kernels[i], beside) / c->kernels[i].ns;
	if (n) {
		gsl_sort(r, 1, n);
		med = gsl_stats_median_from_sorted_data(r, 1, n);
	}
	free(r);
	return med;
}

double calibration_slowdown(const struct calibration *c, int beside)
{
	return beside ? compute_slowdown(c, beside) : 1.0;
}

int calibration_kernel_named(const struct calibration *c, const char *name, uint64_t *bytes, double *ns)
{
	for (int i = 0; i < c->nkernels; i++) {
		const struct cal_kernel *x = &c->kernels[i];
		if (x->kind == K_ELEMENTWISE && x->bytes > 0 && x->ns > 0 && !strcmp(x->name, name)) {
			*bytes = x->bytes;
			*ns = x->ns;
			return 0;
		}
	}
	return -1;
}

double calibration_pass_ns(const struct calibration *c, uint64_t bytes)
{
	double *xs = xmalloc(sizeof(double) * (size_t)(c->npasses + 1));
	double *ys = xmalloc(sizeof(double) * (size_t)(c->npasses + 1)), ns;

	for (int i = 0; i < c->npasses; i++) {
		xs[i] = PASS_TRAFFIC * (double)c->passes[i].bytes;
		ys[i] = c->passes[i].ns;
	}
	ns = interp(xs, ys, (size_t)c->npasses, (double)(bytes ? bytes : 1), 1);
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
	ns = m ? interp(xs, ys, m, (double)(bytes ? bytes : 1), 1) : calibration_pass_ns(c, 2 * bytes);
	free(xs);
	free(ys);
	return ns;
}

double calibration_op_ns(const struct calibration *c, const char *name, uint64_t bytes, int beside)
{
	for (int i = 0; i < c->nkernels; i++) {
		const struct cal_kernel *x = &c->kernels[i];
		if (x->kind == K_ELEMENTWISE && !x->m && !x->n && !x->k && x->bytes == bytes && !strcmp(x->name, name))
			return beside_ns(x, beside);
	}
	return calibration_pass_ns(c, bytes);
}

double calibration_adamw_ns(const struct calibration *c, enum optim o, int host, double elems)
{
	if (host)
		return c->host_adamw_call_ns + c->host_adamw_ns_per_elem * elems;
	if (o == OPT_FUSED && c->adamw_fused_ns_per_elem > 0)
		return c->adamw_fused_ns_per_elem * elems;
	return c->adamw_call_ns + c->adamw_ns_per_elem * elems;
}

void calibration_adamw_fit(double n0, double t0, double n1, double t1, double *call_ns, double *ns_per_elem)
{
	*call_ns = 0;
	*ns_per_elem = t1 / n1;
	if (t1 > t0) {
		double slope = (t1 - t0) / (n1 - n0);
		if (t0 - slope * n0 > 0) {
			*ns_per_elem = slope;
			*call_ns = t0 - slope * n0;
		}
	}
}

/*
 * Whether measured kernel x prices kernels of `kind`: a GEMM any GEMM; an
 * attention kernel those of its direction (bwd: a backward's, "attention_bwd",
 * named so by both measurers), the forward's and the backward's being
 * different kernels.
 */
static int same_class(const struct cal_kernel *x, enum kernel_kind kind, int bwd)
{
	return x->kind == kind && x->flops > 0 && (kind != K_ATTN || !strstr(x->name, "bwd") == !bwd);
}

/* A GEMM or attention kernel from the measured ones of its kind (and direction, bwd), at its FLOPs. */
static double by_flops(const struct cal_kernel *ks, int n, enum kernel_kind kind, int bwd, const struct kernel *k,
		       int beside)
{
	double *xs = xmalloc(sizeof(double) * (size_t)(n + 1)), *ys = xmalloc(sizeof(double) * (size_t)(n + 1)), ns;
	size_t m = 0;

	for (int i = 0; i < n; i++)
		if (same_class(&ks[i], kind, bwd)) {
			xs[m] = (double)ks[i].flops;
			ys[m++] = beside_ns(&ks[i], beside);
		}
	ns = m ? interp(xs, ys, m, (double)k->flops, 0) : -1;
	free(xs);
	free(ys);
	return ns;
}

/*
 * The measured kernel a GEMM or attention kernel is priced from by FLOPs
 * (the grid for a GEMM where there is one, else the kernels measured by
 * name of its kind and direction) when it is smaller than all of them:
 * there the table gives the smallest one's time (calibration_kernel_ns).
 */
static const struct cal_kernel *smallest_of(const struct cal_kernel *ks, int n, enum kernel_kind kind, int bwd)
{
	const struct cal_kernel *best = NULL;

	for (int i = 0; i < n; i++)
		if (same_class(&ks[i], kind, bwd) && (!best || ks[i].flops < best->flops))
			best = &ks[i];
	return best;
}

int calibration_kernel_anchor(const struct calibration *c, const struct kernel *k, struct kernel *anchor)
{
	const struct cal_kernel *x = NULL;

	if (k->kind == K_GEMM) {
		x = smallest_of(c->gemm, c->ngemm, K_GEMM, 0);
		if (!x)
			x = smallest_of(c->kernels, c->nkernels, K_GEMM, 0);
	} else if (k->kind == K_ATTN) {
		x = smallest_of(c->kernels, c->nkernels, K_ATTN, strstr(k->name, "bwd") != NULL);
	}
	if (!x || k->flops >= x->flops)
		return 0;
	memset(anchor, 0, sizeof(*anchor));
	snprintf(anchor->name, sizeof anchor->name, "%s", x->name);
	anchor->kind = (enum kernel_kind)x->kind;
	anchor->m = x->m;
	anchor->n = x->n;
	anchor->k = x->k;
	anchor->flops = x->flops;
	anchor->bytes = x->bytes;
	anchor->backward = k->backward;
	return 1;
}

double calibration_kernel_ns(const struct calibration *c, const struct kernel *k, int beside, int *exact)
{
	double ns = -1;

	*exact = 0;
	for (int i = 0; i < c->nkernels; i++) {
		const struct cal_kernel *x = &c->kernels[i];
		if (!strcmp(x->name, k->name) && x->m == k->m && x->n == k->n && x->k == k->k && x->bytes == k->bytes) {
			*exact = 1;
			return beside_ns(x, beside);
		}
	}
	switch (k->kind) {
	case K_GEMM:
		ns = by_flops(c->gemm, c->ngemm, K_GEMM, 0, k, 0);
		if (ns < 0)
			ns = by_flops(c->kernels, c->nkernels, K_GEMM, 0, k, 0);
		break;
	case K_ATTN:
		ns = by_flops(c->kernels, c->nkernels, K_ATTN, strstr(k->name, "bwd") != NULL, k, 0);
		break;
	default:
		break;
	}
	if (ns < 0)
		ns = calibration_pass_ns(c, k->bytes);
	return beside ? ns * compute_slowdown(c, beside) : ns;
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
		ns = interp(xs, ys, m, (double)(bytes ? bytes : 1), 1);
	free(xs);
	free(ys);
	return ns;
}

int calibration_host_dispatch(const struct calibration *c)
{
	return !strcmp(c->backend, "pytorch");
}

int calibration_has_collective(const struct calibration *c, enum op_kind k, int ranks)
{
	for (int i = 0; i < c->ncolls; i++)
		if (c->colls[i].kind == k && c->colls[i].ranks == ranks)
			return 1;
	return 0;
}
