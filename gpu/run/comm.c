/*
 * comm.c - communicators for the schedule's groups and streams, the MPI
 * collectives of the CPU backend, the emulated fabric, the NCCL
 * communicators of the CUDA build, and the MPI check (see comm.h).
 */
#include "comm.h"

#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xalloc.h"

#ifdef GPU_RUN_CUDA
#include <nccl.h>
#include <pthread.h>

#include "check.h"
#endif

#define COMM_POLL_NS 20000 /* between tests of a pending collective: 20 us */

void comm_check(int rc, const char *call, const char *file, int line)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	if (rc == MPI_SUCCESS)
		return;
	if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
		snprintf(msg, sizeof(msg), "error %d", rc);
	fprintf(stderr, "gpu_run: %s failed at %s:%d: %s\n", call, file, line, msg);
	fflush(stderr);
	MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Which (group, stream) pairs the schedule's collectives use: the same table on every rank. */
static void used_pairs(const struct schedule *s, int used[GRP_COUNT][ST_COUNT])
{
	memset(used, 0, sizeof(int) * GRP_COUNT * ST_COUNT);
	for (int i = 0; i < s->nops; i++)
		if (op_is_collective(s->ops[i].kind))
			used[s->ops[i].group][s->ops[i].stream] = 1;
}

void comm_node(int *rank, int *size)
{
	MPI_Comm node;

	mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
	mpi_check(MPI_Comm_rank(node, rank));
	mpi_check(MPI_Comm_size(node, size));
	mpi_check(MPI_Comm_free(&node));
}

void comm_init(struct comm *c, const struct schedule *s)
{
	int used[GRP_COUNT][ST_COUNT];

	memset(c, 0, sizeof(*c));
	mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
	mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &c->world));
	assert(c->world == s->world && s->world % s->shard_n == 0);
	/* failures inside collectives come back as return codes, for mpi_check */
	mpi_check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
	c->shard_rank = c->rank % s->shard_n;
	{
		int lrank;
		comm_node(&lrank, &c->local_ranks);
	}
	c->group[GRP_NONE] = MPI_COMM_NULL;
	mpi_check(MPI_Comm_split(MPI_COMM_WORLD, c->rank / s->shard_n, c->rank, &c->group[GRP_SHARD]));
	mpi_check(MPI_Comm_split(MPI_COMM_WORLD, c->shard_rank, c->rank, &c->group[GRP_REPLICA]));
	mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &c->group[GRP_WORLD]));
	/* every rank builds the same schedule, so every rank dups the same pairs in the same order */
	used_pairs(s, used);
	for (int g = 0; g < GRP_COUNT; g++)
		for (int st = 0; st < ST_COUNT; st++) {
			struct comm_handle *h = &c->handle[g][st];
			h->comm = MPI_COMM_NULL;
			if (!used[g][st])
				continue;
			h->used = 1;
			mpi_check(MPI_Comm_dup(c->group[g], &h->comm));
			mpi_check(MPI_Comm_size(h->comm, &h->size));
			mpi_check(MPI_Comm_rank(h->comm, &h->rank));
		}
}

void comm_release(struct comm *c)
{
	for (int g = 0; g < GRP_COUNT; g++) {
		for (int st = 0; st < ST_COUNT; st++)
			if (c->handle[g][st].comm != MPI_COMM_NULL)
				mpi_check(MPI_Comm_free(&c->handle[g][st].comm));
		if (c->group[g] != MPI_COMM_NULL)
			mpi_check(MPI_Comm_free(&c->group[g]));
	}
}

struct comm_handle *comm_handle_of(struct comm *c, int group, int stream)
{
	struct comm_handle *h;

	assert(group > GRP_NONE && group < GRP_COUNT && stream >= 0 && stream < ST_COUNT);
	h = &c->handle[group][stream];
	assert(h->used && "a collective on a stream comm_init did not see");
	return h;
}

static int mpi_count(size_t count)
{
	if (count > INT_MAX) {
		fprintf(stderr, "gpu_run: a collective of %zu elements is more than MPI's int count\n", count);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	return (int)count;
}

static void scale(float *p, size_t n, float f)
{
	for (size_t i = 0; i < n; i++)
		p[i] *= f;
}

/*
 * Wait for a non-blocking collective without holding a core: test it, and
 * sleep a little between tests. MPI progresses the collective inside
 * MPI_Test; a blocking collective would spin at full speed and take the
 * core from the compute stream's thread, which is not what a GPU's
 * communication kernels do to its compute.
 */
static void wait_for(MPI_Request *req)
{
	const struct timespec nap = { 0, COMM_POLL_NS };
	int done = 0;

	for (;;) {
		mpi_check(MPI_Test(req, &done, MPI_STATUS_IGNORE));
		if (done)
			return;
		nanosleep(&nap, NULL);
	}
}

void comm_all_gather(struct comm_handle *h, float *out, const float *in, size_t count)
{
	MPI_Request req;
	int n = mpi_count(count);

	mpi_check(MPI_Iallgather(in, n, MPI_FLOAT, out, n, MPI_FLOAT, h->comm, &req));
	wait_for(&req);
}

void comm_all_gather_bytes(struct comm_handle *h, void *out, const void *in, size_t bytes)
{
	MPI_Request req;
	int n = mpi_count(bytes);

	mpi_check(MPI_Iallgather(in, n, MPI_BYTE, out, n, MPI_BYTE, h->comm, &req));
	wait_for(&req);
}

void comm_reduce_scatter_mean(struct comm_handle *h, float *out, const float *in, size_t count)
{
	MPI_Request req;

	mpi_check(MPI_Ireduce_scatter_block(in, out, mpi_count(count), MPI_FLOAT, MPI_SUM, h->comm, &req));
	wait_for(&req);
	scale(out, count, 1.0f / (float)h->size);
}

void comm_all_reduce_mean(struct comm_handle *h, float *buf, size_t count)
{
	MPI_Request req;

	mpi_check(MPI_Iallreduce(MPI_IN_PLACE, buf, mpi_count(count), MPI_FLOAT, MPI_SUM, h->comm, &req));
	wait_for(&req);
	scale(buf, count, 1.0f / (float)h->size);
}

/* ---- the emulated fabric -------------------------------------------------------- */

void comm_init_emulated(struct comm *c, const struct schedule *s, const struct comm_emu_opts *o)
{
	int used[GRP_COUNT][ST_COUNT];

	assert(o->world == s->world && s->world % s->shard_n == 0);
	memset(c, 0, sizeof(*c));
	c->rank = 0;
	c->world = o->world;
	c->local_ranks = 1;
	c->shard_rank = 0;
	c->emulated = 1;
	c->emu = *o;
	c->group[GRP_NONE] = MPI_COMM_NULL;
	for (int g = GRP_SHARD; g < GRP_COUNT; g++)
		mpi_check(MPI_Comm_dup(MPI_COMM_SELF, &c->group[g]));
	used_pairs(s, used);
	for (int g = 0; g < GRP_COUNT; g++)
		for (int st = 0; st < ST_COUNT; st++) {
			struct comm_handle *h = &c->handle[g][st];
			h->comm = MPI_COMM_NULL;
			if (!used[g][st])
				continue;
			h->used = 1;
			h->emulated = 1;
			h->size = schedule_group_size(s, g);
			h->rank = 0;
			fabric_link_of(s, g, &h->link); /* the link ./sim prices (core/fabric.h) */
			if (o->gbps > 0)
				h->link.gbps = o->gbps;
			if (o->lat_us >= 0)
				h->link.step_lat_ns = 1e3 * o->lat_us;
		}
}

void comm_emu_plan(const struct comm_handle *h, enum op_kind k, uint64_t S, struct comm_emu_plan *p)
{
	int n = h->size;

	memset(p, 0, sizeof(*p));
	p->bytes_per_ns = h->link.gbps;
	if (n <= 1)
		return;
	p->wire_bytes = collective_wire_bytes(k, S, n);
	switch (k) {
	case OP_ALLGATHER:
		p->steps = n - 1;
		break;
	case OP_REDUCE_SCATTER:
		p->steps = p->reduce_steps = n - 1;
		break;
	case OP_ALLREDUCE:
		p->steps = 2 * (n - 1);
		p->reduce_steps = n - 1;
		break;
	default:
		assert(!"not a collective");
	}
	/*
	 * the collective's latency as ./sim prices it (a tree's for a cross-node
	 * all-reduce), spread over the ring's steps; and the tree's bytes, when
	 * the rule takes a tree
	 */
	{
		struct fabric_coll fc;
		fabric_collective(&h->link, k, n, S, &fc);
		p->step_lat_ns = fc.latency_ns / p->steps;
		p->wire_bytes = fc.wire;
	}
}

uint64_t comm_emu_step_bytes(const struct comm_emu_plan *p, int step)
{
	uint64_t q = p->wire_bytes / (uint64_t)p->steps, r = p->wire_bytes % (uint64_t)p->steps;

	assert(step >= 0 && step < p->steps);
	return q + ((uint64_t)step < r);
}

double comm_emu_deadline_ns(const struct comm_emu_plan *p, int step)
{
	double t = 0;

	for (int i = 0; i <= step; i++)
		t += (double)comm_emu_step_bytes(p, i) / p->bytes_per_ns + p->step_lat_ns;
	return t;
}

static double mono_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Sleep until the monotonic clock reads t_ns. */
static void sleep_until(double t_ns)
{
	for (;;) {
		double left = t_ns - mono_ns();
		struct timespec nap;
		if (left <= 0)
			return;
		nap.tv_sec = (time_t)(left / 1e9);
		nap.tv_nsec = (long)(left - (double)nap.tv_sec * 1e9);
		nanosleep(&nap, NULL);
	}
}

/* A byte copy of n bytes, then the step's deadline. */
static void emu_step_copy(const struct comm_emu_plan *p, int step, double t0, void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
	sleep_until(t0 + comm_emu_deadline_ns(p, step));
}

void comm_emu_all_gather(struct comm_handle *h, void *out, const void *in, size_t count, int elem_bytes)
{
	struct comm_emu_plan p;
	size_t slot = count * (size_t)elem_bytes;
	double t0 = mono_ns();

	assert(h->emulated);
	comm_emu_plan(h, OP_ALLGATHER, (uint64_t)slot * (uint64_t)h->size, &p);
	if ((char *)out + (size_t)h->rank * slot != (const char *)in)
		memcpy((char *)out + (size_t)h->rank * slot, in, slot);
	/* step i brings the shard of rank i + 1 (here: a copy of this rank's) */
	for (int i = 0; i < p.steps; i++) {
		size_t n = comm_emu_step_bytes(&p, i);
		emu_step_copy(&p, i, t0, (char *)out + (size_t)(i + 1) * slot, in, n < slot ? n : slot);
	}
	h->wire_bytes += p.wire_bytes;
}

/* Step i of a reduction: acc += what arrives (here: contribution src), n bytes of fp32. */
static void emu_step_add(const struct comm_emu_plan *p, int step, double t0, float *acc, const float *src, size_t n)
{
	for (size_t j = 0; j < n / sizeof(float); j++)
		acc[j] += src[j];
	sleep_until(t0 + comm_emu_deadline_ns(p, step));
}

void comm_emu_reduce_scatter(struct comm_handle *h, float *out, const float *in, size_t count)
{
	struct comm_emu_plan p;
	double t0 = mono_ns();

	assert(h->emulated);
	comm_emu_plan(h, OP_REDUCE_SCATTER, (uint64_t)count * sizeof(float) * (uint64_t)h->size, &p);
	memcpy(out, in + (size_t)h->rank * count, count * sizeof(float));
	/* step i adds another chunk of this rank's input, as the ring adds another rank's */
	for (int i = 0; i < p.steps; i++) {
		size_t n = comm_emu_step_bytes(&p, i);
		const float *chunk = in + (size_t)((h->rank + i + 1) % h->size) * count;
		emu_step_add(&p, i, t0, out, chunk, n < count * sizeof(float) ? n : count * sizeof(float));
	}
	scale(out, count, 1.0f / (float)h->size);
	h->wire_bytes += p.wire_bytes;
}

void comm_emu_all_reduce(struct comm_handle *h, float *buf, size_t count)
{
	struct comm_emu_plan p;
	size_t chunk = (count + (size_t)h->size - 1) / (size_t)h->size;
	float *tmp = xcalloc(chunk + 1, sizeof(float));
	double t0 = mono_ns();

	assert(h->emulated);
	comm_emu_plan(h, OP_ALLREDUCE, (uint64_t)count * sizeof(float), &p);
	/* the mean of identical contributions is buf itself: the ring's work goes to a scratch chunk */
	for (int i = 0; i < p.steps; i++) {
		size_t n = comm_emu_step_bytes(&p, i), cap = (chunk < count ? chunk : count) * sizeof(float);
		if (n > cap)
			n = cap;
		if (i < p.reduce_steps)
			emu_step_add(&p, i, t0, tmp, buf, n);
		else
			emu_step_copy(&p, i, t0, tmp, buf, n);
	}
	free(tmp);
	h->wire_bytes += p.wire_bytes;
}

void comm_describe(const struct comm *c, void (*put)(void *ctx, const char *key, const char *value), void *ctx)
{
	static const char *const gname[GRP_COUNT] = { "none", "shard", "replica", "world" };
	char v[64], k[64];
	uint64_t wire = 0;

	if (c->staged) {
		put(ctx, "fabric", "staged");
		put(ctx, "fabric.path", "host memory and MPI (gpu_run --staged-collectives): numbers checked, times not "
					"a GPU job's");
		return;
	}
	if (!c->emulated) {
		put(ctx, "fabric", "real");
		return;
	}
	put(ctx, "fabric", "emulated");
	snprintf(v, sizeof(v), "%d", c->emu.world);
	put(ctx, "fabric.world", v);
	put(ctx, "fabric.rank", "0");
	put(ctx, "fabric.algorithm", "ring");
	for (int g = GRP_SHARD; g < GRP_COUNT; g++) {
		const struct comm_handle *h = NULL;
		for (int st = 0; st < ST_COUNT && !h; st++)
			if (c->handle[g][st].used)
				h = &c->handle[g][st];
		for (int st = 0; st < ST_COUNT; st++)
			wire += c->handle[g][st].wire_bytes;
		if (!h)
			continue;
		snprintf(k, sizeof(k), "fabric.%s.ranks", gname[g]);
		snprintf(v, sizeof(v), "%d", h->size);
		put(ctx, k, v);
		snprintf(k, sizeof(k), "fabric.%s.link_gbps", gname[g]);
		snprintf(v, sizeof(v), "%.6g", h->link.gbps);
		put(ctx, k, v);
		snprintf(k, sizeof(k), "fabric.%s.step_latency_us", gname[g]);
		snprintf(v, sizeof(v), "%.6g", h->link.step_lat_ns / 1e3);
		put(ctx, k, v);
		if (h->size > 1) {
			/* a small all-reduce's latency: the tree's across nodes, where the rule takes it */
			struct fabric_coll fc;
			fabric_collective(&h->link, OP_ALLREDUCE, h->size, 1, &fc);
			snprintf(k, sizeof(k), "fabric.%s.allreduce_latency_us", gname[g]);
			snprintf(v, sizeof(v), "%.6g (%s)", fc.latency_ns / 1e3,
				 fc.tree ? "a double binary tree's" : "the ring's");
			put(ctx, k, v);
		}
	}
	snprintf(v, sizeof(v), "%llu", (unsigned long long)wire);
	put(ctx, "fabric.wire_bytes_total", v);
}

/* ---- NCCL (CUDA build) ------------------------------------------------------------ */

#ifdef GPU_RUN_CUDA

static const char *const group_names[GRP_COUNT] = { "none", "shard", "replica", "world" };

static void nccl_config(ncclConfig_t *cfg, const struct comm_nccl_opts *o)
{
	ncclConfig_t init = NCCL_CONFIG_INITIALIZER;

	*cfg = init;
	cfg->blocking = 1;
	if (o->min_ctas > 0)
		cfg->minCTAs = o->min_ctas;
	if (o->max_ctas > 0)
		cfg->maxCTAs = o->max_ctas;
	if (o->cga_cluster >= 0)
		cfg->cgaClusterSize = o->cga_cluster;
#ifdef NCCL_CTA_POLICY_DEFAULT
	if (o->cta_policy >= 0)
		cfg->CTAPolicy = o->cta_policy;
#else
	if (o->cta_policy >= 0)
		fprintf(stderr, "gpu_run: this NCCL's header has no CTA policy: --nccl-cta-policy ignored\n");
#endif
}

void comm_nccl_init(struct comm *c, const struct schedule *s, const struct comm_nccl_opts *o)
{
	ncclUniqueId id;
	ncclConfig_t cfg;
	ncclComm_t world;

	(void)s;
	c->nccl_opts = *o;
	ncclCheck(ncclGetVersion(&c->nccl_version));
	if (c->emulated || c->staged)
		return;
	memset(&id, 0, sizeof(id));
	if (c->rank == 0)
		ncclCheck(ncclGetUniqueId(&id));
	mpi_check(MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
	nccl_config(&cfg, o);
	ncclCheck(ncclCommInitRankConfig(&world, c->world, id, c->rank, &cfg));
	c->nccl_world = world;
	/* the same splits in the same order on every rank: each is collective over the world */
	for (int g = 0; g < GRP_COUNT; g++)
		for (int st = 0; st < ST_COUNT; st++) {
			struct comm_handle *h = &c->handle[g][st];
			ncclComm_t sub;
			ncclConfig_t scfg;
			int color = 0; /* the world: one color */
			if (!h->used)
				continue;
			if (g == GRP_SHARD)
				color = c->rank / s->shard_n;
			else if (g == GRP_REPLICA)
				color = c->shard_rank;
			nccl_config(&scfg, o);
			ncclCheck(ncclCommSplit(world, color, c->rank, &sub, &scfg));
			h->nccl = sub;
		}
}

/* Each NCCL communicator of c, the world's last; fn(comm, group, stream), group -1 for the world. */
static void each_nccl(struct comm *c, void (*fn)(ncclComm_t comm, int g, int st, struct comm *c))
{
	for (int g = 0; g < GRP_COUNT; g++)
		for (int st = 0; st < ST_COUNT; st++)
			if (c->handle[g][st].nccl)
				fn(c->handle[g][st].nccl, g, st, c);
	if (c->nccl_world)
		fn(c->nccl_world, -1, -1, c);
}

/*
 * The communicators are checked by the thread that issues the step and
 * aborted by the watchdog's: the lock keeps an abort from freeing one
 * under a check, and a check after the abort finds none. Recursive: a
 * failing check's own abort (check.h's failure path) takes it again.
 */
static pthread_mutex_t nccl_mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static int nccl_failed; /* under nccl_mu: a check found an asynchronous error */

static void check_one(ncclComm_t comm, int g, int st, struct comm *c)
{
	ncclResult_t r = ncclSuccess;

	ncclCheck(ncclCommGetAsyncError(comm, &r));
	if (r == ncclSuccess || r == ncclInProgress)
		return;
	fprintf(stderr, "gpu_run: rank %d: NCCL asynchronous error on the %s communicator of stream %s: %s (%s)\n",
		c->rank, g < 0 ? "world" : group_names[g], st < 0 ? "-" : stream_name(st), ncclGetErrorString(r),
		ncclGetLastError(comm));
	fflush(stderr);
	nccl_failed = 1;
}

void comm_nccl_check_async(struct comm *c)
{
	int failed;

	pthread_mutex_lock(&nccl_mu);
	each_nccl(c, check_one);
	failed = nccl_failed;
	pthread_mutex_unlock(&nccl_mu);
	if (failed) {
		comm_nccl_abort(c);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
}

static void abort_one(ncclComm_t comm, int g, int st, struct comm *c)
{
	(void)g;
	(void)st;
	(void)c;
	(void)ncclCommAbort(comm); /* on the way out: its own failure changes nothing */
}

/* Any thread, on the way out; a check that holds the lock longer than 2 s is not waited for. */
void comm_nccl_abort(struct comm *c)
{
	struct timespec until;
	int locked;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	locked = pthread_mutex_timedlock(&nccl_mu, &until) == 0;
	each_nccl(c, abort_one);
	for (int g = 0; g < GRP_COUNT; g++)
		for (int st = 0; st < ST_COUNT; st++)
			c->handle[g][st].nccl = NULL;
	c->nccl_world = NULL;
	if (locked)
		pthread_mutex_unlock(&nccl_mu);
}

static void release_one(ncclComm_t comm, int g, int st, struct comm *c)
{
	(void)g;
	(void)st;
	(void)c;
	ncclCheck(ncclCommFinalize(comm));
	ncclCheck(ncclCommDestroy(comm));
}

void comm_nccl_release(struct comm *c)
{
	each_nccl(c, release_one);
	for (int g = 0; g < GRP_COUNT; g++)
		for (int st = 0; st < ST_COUNT; st++)
			c->handle[g][st].nccl = NULL;
	c->nccl_world = NULL;
}

#endif
