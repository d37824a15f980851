/*
 * host_adamw.c - the host optimizer's AdamW step over threads (see
 * host_adamw.h).
 *
 * The tensors' elements are numbered one after the other; thread i of T
 * takes elements [i * total / T, (i + 1) * total / T) and, inside each
 * tensor it overlaps, scales the gradient and steps those elements: with
 * ref_adamw itself where everything is fp32, else element by element
 * through fp32 with the same arithmetic. The threads are made for the
 * call and joined before it returns (parts.h; a step has one host
 * optimizer call per unit or one in all; a thread costs some tens of
 * microseconds).
 */
#include "host_adamw.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "parts.h"

#if defined(__x86_64__) || defined(__i386__)
#include <pmmintrin.h>
#endif

static float bf2f(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* bf16 bits of a finite f, rounded to nearest even */
static uint16_t f2bf(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return (uint16_t)((u + 0x7fffu + (u >> 16 & 1)) >> 16);
}

static float get(const void *p, size_t i, enum elem e)
{
	return e == ELEM_BF16 ? bf2f(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static void set(void *p, size_t i, enum elem e, float v)
{
	if (e == ELEM_BF16)
		((uint16_t *)p)[i] = f2bf(v);
	else
		((float *)p)[i] = v;
}

/* Elements [lo, hi) of tensor t. */
static void step_range(const struct optim_tensor *t, size_t lo, size_t hi, const struct ref_adamw_hparams *hp,
		       int step, float scale)
{
	float c1 = 1.0f - powf(hp->beta1, (float)step), c2 = 1.0f - powf(hp->beta2, (float)step);

	if (t->p_elem == ELEM_FP32 && t->g_elem == ELEM_FP32 && t->state_elem == ELEM_FP32) {
		float *p = t->p, *g = t->g, *m = t->m, *v = t->v;
		for (size_t j = lo; j < hi; j++)
			g[j] *= scale;
		ref_adamw(p + lo, g + lo, m + lo, v + lo, hi - lo, hp, step);
		return;
	}
	for (size_t j = lo; j < hi; j++) {
		float g = get(t->g, j, t->g_elem) * scale, p = get(t->p, j, t->p_elem);
		float m = get(t->m, j, t->state_elem), v = get(t->v, j, t->state_elem);
		m = hp->beta1 * m + (1.0f - hp->beta1) * g;
		v = hp->beta2 * v + (1.0f - hp->beta2) * g * g;
		p -= hp->lr * ((m / c1) / (sqrtf(v / c2) + hp->eps) + hp->weight_decay * p);
		set(t->p, j, t->p_elem, p);
		set(t->m, j, t->state_elem, m);
		set(t->v, j, t->state_elem, v);
	}
}

struct part {
	const struct optim_tensor *t;
	int count;
	const struct ref_adamw_hparams *hp;
	int step;
	float scale;
	size_t lo, hi;     /* of the elements numbered across the tensors */
	unsigned mxcsr;    /* the caller's floating-point mode (x86) */
};

static void *run_part(void *arg)
{
	const struct part *w = arg;
	size_t base = 0;

#if defined(__x86_64__) || defined(__i386__)
	_mm_setcsr(w->mxcsr);
#endif
	for (int i = 0; i < w->count && base < w->hi; i++) {
		size_t n = w->t[i].n, lo = w->lo > base ? w->lo - base : 0, hi = w->hi - base < n ? w->hi - base : n;
		if (lo < hi)
			step_range(&w->t[i], lo, hi, w->hp, w->step, w->scale);
		base += n;
	}
	return NULL;
}

void host_adamw(const struct optim_tensor *t, int count, const struct ref_adamw_hparams *hp, int step, float scale,
		int threads)
{
	struct part w[PARTS_MAX];
	size_t total = 0;

	assert(threads >= 1);
	for (int i = 0; i < count; i++)
		total += t[i].n;
	threads = parts_count(threads, total, 1);
	for (int i = 0; i < threads; i++) {
		w[i] = (struct part){ t, count, hp, step, scale, total * (size_t)i / (size_t)threads,
				      total * (size_t)(i + 1) / (size_t)threads, 0 };
#if defined(__x86_64__) || defined(__i386__)
		w[i].mxcsr = _mm_getcsr();
#endif
	}
	parts_run(run_part, w, sizeof(*w), threads);
}
