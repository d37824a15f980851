/*
 * ref_adamw.c - the AdamW step of the fp32 reference (decoupled weight
 * decay, bias correction; PyTorch's torch.optim.AdamW). The CUDA launch
 * forms (multi-tensor, fused, per-parameter) are all checked against it.
 */
#include <assert.h>
#include <math.h>

#include "ref.h"

void ref_adamw(float *p, const float *g, float *m, float *v, size_t n,
	       const struct ref_adamw_hparams *hp, int t)
{
	assert(t >= 1);
	float c1 = 1.0f - powf(hp->beta1, (float)t);
	float c2 = 1.0f - powf(hp->beta2, (float)t);
	for (size_t i = 0; i < n; i++) {
		m[i] = hp->beta1 * m[i] + (1.0f - hp->beta1) * g[i];
		v[i] = hp->beta2 * v[i] + (1.0f - hp->beta2) * g[i] * g[i];
		float mhat = m[i] / c1;
		float vhat = v[i] / c2;
		p[i] -= hp->lr * (mhat / (sqrtf(vhat) + hp->eps) + hp->weight_decay * p[i]);
	}
}

void ref_adamw_multi(const struct ref_adamw_tensor *ts, int count,
		     const struct ref_adamw_hparams *hp, int t)
{
	for (int i = 0; i < count; i++)
		ref_adamw(ts[i].p, ts[i].g, ts[i].m, ts[i].v, ts[i].n, hp, t);
}
