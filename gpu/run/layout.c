/*
 * layout.c - full and sharded layouts of the units (see layout.h).
 *
 * A unit's modules are its segments' modules in forward order, the order
 * core/schedule.c adds them for every wrapping policy; the counts are
 * checked against the schedule's, so a disagreement is caught at start.
 */
#include "layout.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parts.h"
#include "xalloc.h"


/* The modules a segment owns, in order. */
static int seg_modules(enum segment_kind k, enum module_kind out[2])
{
	switch (k) {
	case SEG_EMBED: out[0] = MOD_EMBED; return 1;
	case SEG_BLOCK: out[0] = MOD_BLOCK; return 1;
	case SEG_HEAD: out[0] = MOD_FINAL_NORM; out[1] = MOD_OUTPUT; return 2;
	default: assert(!"bad segment kind"); return 0;
	}
}

/* Initial values of a tensor (ref_init_params's rule, gain 1): norms 1, the embedding N(0, 1), weights N(0, 1/fan_in). */
static void init_rule(struct layout_tensor *t, enum module_kind k, const struct tensor_desc *td)
{
	t->init_mean = 0.0f;
	if (td->rows == 1) {
		t->init_mean = 1.0f; /* a norm weight */
		t->init_std = 0.0f;
	} else if (k == MOD_EMBED) {
		t->init_std = 1.0f;
	} else {
		t->init_std = 1.0f / sqrtf((float)td->cols);
	}
}

/* Append module k of segment g to unit layout u. */
static void add_module(struct layout *l, struct unit_layout *u, const struct model_shape *m,
		       enum module_kind k, int block, int g)
{
	struct tensor_desc td[BT_COUNT];
	int n = model_module_tensor_list(m, k, td, BT_COUNT);
	size_t moff = (size_t)model_module_offset(m, k, block);

	if (k == MOD_OUTPUT)
		l->segs[g].out_off = u->full_floats;
	else
		l->segs[g].off = u->full_floats;
	u->t = xrealloc(u->t, sizeof(*u->t) * (size_t)(u->ntensors + n));
	for (int i = 0; i < n; i++) {
		struct layout_tensor *t = &u->t[u->ntensors++];
		t->rows = td[i].rows == 1 ? td[i].cols : td[i].rows;
		t->cols = td[i].rows == 1 ? 1 : td[i].cols;
		t->rows_per_rank = (t->rows + l->shard_n - 1) / l->shard_n;
		t->flat_off = u->full_floats;
		t->shard_off = u->shard_floats;
		t->model_off = moff;
		init_rule(t, k, &td[i]);
		u->full_floats += (size_t)(t->rows * t->cols);
		u->shard_floats += (size_t)(t->rows_per_rank * t->cols);
		moff += (size_t)(t->rows * t->cols);
	}
}

struct layout *layout_new(const struct schedule *s)
{
	const struct model_shape *m = &s->exp->model;
	struct layout *l = xcalloc(1, sizeof(*l));

	l->nunits = s->nunits;
	l->nsegs = s->nsegs;
	l->shard_n = s->shard_n;
	l->units = xcalloc((size_t)s->nunits, sizeof(*l->units));
	l->segs = xcalloc((size_t)s->nsegs, sizeof(*l->segs));
	for (int u = 0; u < s->nunits; u++) {
		struct unit_layout *ul = &l->units[u];
		ul->per_tensor = s->per_tensor_shards;
		for (int g = 0; g < s->nsegs; g++) {
			enum module_kind mods[2];
			int nm;
			if (s->segs[g].unit != u)
				continue;
			nm = seg_modules(s->segs[g].kind, mods);
			for (int i = 0; i < nm; i++)
				add_module(l, ul, m, mods[i], s->segs[g].block, g);
		}
		if (!ul->per_tensor)
			ul->shard_floats = (ul->full_floats + (size_t)l->shard_n - 1) / (size_t)l->shard_n;
		assert(ul->full_floats == (size_t)s->units[u].params);
		assert(ul->shard_floats == s->units[u].shard_elems);
		assert(ul->ntensors == s->units[u].ntensors);
	}
	return l;
}

void layout_free(struct layout *l)
{
	if (!l)
		return;
	for (int u = 0; u < l->nunits; u++)
		free(l->units[u].t);
	free(l->units);
	free(l->segs);
	free(l);
}

/* Per tensor: rows of tensor t that rank r holds (0 for a rank past the end), and the first one. */
static int64_t rank_rows(const struct layout_tensor *t, int r, int64_t *first)
{
	int64_t lo = (int64_t)r * t->rows_per_rank, hi = lo + t->rows_per_rank;

	if (hi > t->rows)
		hi = t->rows;
	*first = lo;
	return hi > lo ? hi - lo : 0;
}

size_t layout_rank_piece(const struct unit_layout *u, const struct layout_tensor *t, int r, size_t *dst,
			 size_t *src)
{
	if (u->per_tensor) {
		int64_t first, rows = rank_rows(t, r, &first);
		*dst = t->shard_off;
		*src = (size_t)(first * t->cols);
		return (size_t)(rows * t->cols);
	} else {
		size_t lo = (size_t)r * u->shard_floats, hi = lo + u->shard_floats;
		size_t a = t->flat_off, b = a + (size_t)(t->rows * t->cols);
		if (a < lo)
			a = lo;
		if (b > hi)
			b = hi;
		*dst = a - lo;
		*src = a - t->flat_off;
		return a < b ? b - a : 0;
	}
}

void layout_shard_from_model(const struct unit_layout *u, float *shard, const float *model, int r)
{
	memset(shard, 0, sizeof(float) * u->shard_floats);
	for (int i = 0; i < u->ntensors; i++) {
		size_t dst, src, n = layout_rank_piece(u, &u->t[i], r, &dst, &src);
		if (n)
			memcpy(shard + dst, model + u->t[i].model_off + src, sizeof(float) * n);
	}
}

/* splitmix64's finaliser: a well-mixed 64-bit value from x */
static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* sqrt(3) / 65536: the sum of four uniforms on 0..65535 has standard deviation 65536 / sqrt(3) */
#define INIT_UNIT 2.6428998e-05f

/* Approximately N(0, 1) from (key, k) alone: integers, then one rounding; the same bits everywhere. */
static float init_normal(uint64_t key, uint64_t k)
{
	uint64_t h = mix64(key ^ mix64(k));
	int32_t sum = (int32_t)(h & 0xffff) + (int32_t)(h >> 16 & 0xffff) + (int32_t)(h >> 32 & 0xffff) +
		      (int32_t)(h >> 48);
	return (float)(sum - 131070) * INIT_UNIT;
}

/* n initial values of tensor t from its model element k0 on */
static void init_values(const struct layout_tensor *t, float *out, uint64_t key, uint64_t k0, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = t->init_std == 0.0f ? t->init_mean
					     : t->init_mean + t->init_std * init_normal(key, k0 + i);
}

/* One thread's part of a shard's initial values: elements [lo, hi) of its pieces, counted in tensor order. */
struct init_part {
	const struct unit_layout *u;
	float *shard;
	int r;
	uint64_t key;
	size_t lo, hi;
};

static void *init_part_run(void *arg)
{
	const struct init_part *w = arg;
	size_t base = 0;

	for (int i = 0; i < w->u->ntensors && base < w->hi; i++) {
		size_t dst, src, n = layout_rank_piece(w->u, &w->u->t[i], w->r, &dst, &src);
		size_t lo = w->lo > base ? w->lo - base : 0, hi = w->hi - base < n ? w->hi - base : n;
		if (lo < hi)
			init_values(&w->u->t[i], w->shard + dst + lo, w->key, w->u->t[i].model_off + src + lo, hi - lo);
		base += n;
	}
	return NULL;
}

void layout_shard_init(const struct unit_layout *u, float *shard, int r, unsigned long seed, int threads)
{
	struct init_part w[PARTS_MAX];
	size_t total = 0;

	assert(threads >= 1);
	memset(shard, 0, sizeof(float) * u->shard_floats);
	for (int i = 0; i < u->ntensors; i++) {
		size_t dst, src;
		total += layout_rank_piece(u, &u->t[i], r, &dst, &src);
	}
	threads = parts_count(threads, total, 1);
	for (int i = 0; i < threads; i++)
		w[i] = (struct init_part){ u, shard, r, mix64((uint64_t)seed), total * (size_t)i / (size_t)threads,
					   total * (size_t)(i + 1) / (size_t)threads };
	parts_run(init_part_run, w, sizeof(*w), threads);
}

void layout_unpack(const struct unit_layout *u, float *flat, const float *gathered, int n)
{
	assert(u->per_tensor);
	for (int r = 0; r < n; r++) {
		const float *shard = gathered + (size_t)r * u->shard_floats;
		for (int i = 0; i < u->ntensors; i++) {
			const struct layout_tensor *t = &u->t[i];
			int64_t first, rows = rank_rows(t, r, &first);
			memcpy(flat + t->flat_off + first * t->cols, shard + t->shard_off,
			       sizeof(float) * (size_t)(rows * t->cols));
		}
	}
}

void layout_pack(const struct unit_layout *u, float *packed, const float *flat, int n)
{
	assert(u->per_tensor);
	memset(packed, 0, sizeof(float) * u->shard_floats * (size_t)n);
	for (int r = 0; r < n; r++) {
		float *shard = packed + (size_t)r * u->shard_floats;
		for (int i = 0; i < u->ntensors; i++) {
			const struct layout_tensor *t = &u->t[i];
			int64_t first, rows = rank_rows(t, r, &first);
			memcpy(shard + t->shard_off, flat + t->flat_off + first * t->cols,
			       sizeof(float) * (size_t)(rows * t->cols));
		}
	}
}
