/*
 * ref_layers.c - the layers of the fp32 reference, one forward and one
 * backward each: embedding, RMSNorm, linear, rotary embedding, causal GQA
 * attention, SwiGLU, cross-entropy and the output projection with its loss.
 *
 * Plain loops in the order the math reads; sums run in float in a fixed
 * order, so results are bit-for-bit reproducible. Contracts are in ref.h.
 */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "ref.h"

/* ---- embedding ----------------------------------------------------------- */

void ref_embedding_forward(float *out, const int *tokens, const float *wte, int N, int D)
{
	for (int n = 0; n < N; n++)
		memcpy(out + (size_t)n * D, wte + (size_t)tokens[n] * D, (size_t)D * sizeof(float));
}

void ref_embedding_backward(float *dwte, const float *dout, const int *tokens, int N, int D)
{
	for (int n = 0; n < N; n++) {
		float *row = dwte + (size_t)tokens[n] * D;
		const float *d = dout + (size_t)n * D;
		for (int i = 0; i < D; i++)
			row[i] += d[i];
	}
}

/* ---- RMSNorm ------------------------------------------------------------- */

void ref_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C)
{
	for (int n = 0; n < N; n++) {
		const float *xr = x + (size_t)n * C;
		float *o = out + (size_t)n * C;
		float ss = 0.0f;
		for (int i = 0; i < C; i++)
			ss += xr[i] * xr[i];
		float r = 1.0f / sqrtf(ss / C + REF_RMS_EPS);
		for (int i = 0; i < C; i++)
			o[i] = xr[i] * r * w[i];
		rstd[n] = r;
	}
}

/*
 * With xhat = x r and r = (mean(x^2) + eps)^(-1/2):
 *   dx_i = r (g_i w_i - xhat_i * mean_j(g_j w_j xhat_j)),  dw_i += g_i xhat_i.
 * The row's dot product is taken before dx is written, so dx may alias dout.
 */
void ref_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x,
			  const float *w, const float *rstd, int N, int C)
{
	for (int n = 0; n < N; n++) {
		const float *xr = x + (size_t)n * C;
		const float *g = dout + (size_t)n * C;
		float *d = dx + (size_t)n * C;
		float r = rstd[n];
		float dot = 0.0f;
		for (int i = 0; i < C; i++) {
			float xhat = xr[i] * r;
			dot += g[i] * w[i] * xhat;
			dw[i] += g[i] * xhat;
		}
		float mean = dot / C;
		for (int i = 0; i < C; i++)
			d[i] = r * (g[i] * w[i] - xr[i] * r * mean);
	}
}

/* ---- linear -------------------------------------------------------------- */

void ref_linear_forward(float *out, const float *x, const float *w, int N, int C, int OC)
{
	for (int n = 0; n < N; n++) {
		const float *xr = x + (size_t)n * C;
		for (int o = 0; o < OC; o++) {
			const float *wr = w + (size_t)o * C;
			float s = 0.0f;
			for (int i = 0; i < C; i++)
				s += xr[i] * wr[i];
			out[(size_t)n * OC + o] = s;
		}
	}
}

void ref_linear_backward_dx(float *dx, const float *dout, const float *w, int N, int C, int OC)
{
	for (int n = 0; n < N; n++) {
		float *d = dx + (size_t)n * C;
		const float *g = dout + (size_t)n * OC;
		for (int i = 0; i < C; i++)
			d[i] = 0.0f;
		for (int o = 0; o < OC; o++) {
			const float *wr = w + (size_t)o * C;
			for (int i = 0; i < C; i++)
				d[i] += g[o] * wr[i];
		}
	}
}

void ref_linear_backward_dw(float *dw, const float *dout, const float *x, int N, int C, int OC)
{
	for (int n = 0; n < N; n++) {
		const float *xr = x + (size_t)n * C;
		const float *g = dout + (size_t)n * OC;
		for (int o = 0; o < OC; o++) {
			float *dwr = dw + (size_t)o * C;
			for (int i = 0; i < C; i++)
				dwr[i] += g[o] * xr[i];
		}
	}
}

void ref_linear_backward(float *dx, float *dw, const float *dout, const float *x,
			 const float *w, int N, int C, int OC)
{
	if (dx)
		ref_linear_backward_dx(dx, dout, w, N, C, OC);
	ref_linear_backward_dw(dw, dout, x, N, C, OC);
}

/* ---- rotary embedding ---------------------------------------------------- */

/*
 * Rotate the first H + KV heads of every qkv row by angle * sign:
 * (a, b) -> (a cos - b sin, a sin + b cos) on pairs (i, i + Q/2).
 * sign = -1 applies the transpose, which is backward.
 */
static void rope_rotate(float *qkv, int B, int T, int H, int KV, int Q, float theta, int sign)
{
	assert(Q % 2 == 0 && theta >= 1.0f);
	int half = Q / 2;
	size_t row = (size_t)(H + 2 * KV) * Q;
	for (int b = 0; b < B; b++) {
		for (int t = 0; t < T; t++) {
			float *r = qkv + ((size_t)b * T + t) * row;
			for (int i = 0; i < half; i++) {
				double freq = pow((double)theta, -2.0 * i / Q);
				double angle = (double)t * freq;
				float c = (float)cos(angle);
				float s = (float)sin(angle) * (float)sign;
				for (int hd = 0; hd < H + KV; hd++) {
					float *v = r + (size_t)hd * Q;
					float a = v[i];
					float bb = v[i + half];
					v[i] = a * c - bb * s;
					v[i + half] = a * s + bb * c;
				}
			}
		}
	}
}

void ref_rope_forward(float *qkv, int B, int T, int H, int KV, int Q, float theta)
{
	rope_rotate(qkv, B, T, H, KV, Q, theta, 1);
}

void ref_rope_backward(float *dqkv, int B, int T, int H, int KV, int Q, float theta)
{
	rope_rotate(dqkv, B, T, H, KV, Q, theta, -1);
}

/* ---- attention ----------------------------------------------------------- */

static float dot(const float *a, const float *b, int n)
{
	float s = 0.0f;
	for (int i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

/*
 * Two passes per query row, as a flash kernel does without tiles: the first
 * finds the log-sum-exp with a running max, the second accumulates
 * exp(s - lse) v. Nothing of size T x T is stored.
 */
void ref_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int H,
			   int KV, int Q)
{
	assert(H % KV == 0);
	size_t row = (size_t)(H + 2 * KV) * Q;
	int group = H / KV;
	float scale = 1.0f / sqrtf((float)Q);
	for (int b = 0; b < B; b++) {
		const float *base = qkv + (size_t)b * T * row;
		for (int h = 0; h < H; h++) {
			int kvh = h / group;
			for (int t = 0; t < T; t++) {
				const float *q = base + t * row + (size_t)h * Q;
				float mx = -INFINITY, sum = 0.0f;
				for (int j = 0; j <= t; j++) {
					const float *k = base + j * row + (size_t)(H + kvh) * Q;
					float s = dot(q, k, Q) * scale;
					if (s > mx) {
						sum *= expf(mx - s);
						mx = s;
					}
					sum += expf(s - mx);
				}
				float l = mx + logf(sum);
				float *o = out + ((size_t)b * T + t) * H * Q + (size_t)h * Q;
				for (int i = 0; i < Q; i++)
					o[i] = 0.0f;
				for (int j = 0; j <= t; j++) {
					const float *k = base + j * row + (size_t)(H + kvh) * Q;
					const float *v = base + j * row + (size_t)(H + KV + kvh) * Q;
					float p = expf(dot(q, k, Q) * scale - l);
					for (int i = 0; i < Q; i++)
						o[i] += p * v[i];
				}
				lse[((size_t)b * H + h) * T + t] = l;
			}
		}
	}
}

/*
 * With p_tj = exp(s_tj - lse_t) and delta_t = dout_t . out_t:
 *   dv_j += p_tj dout_t;  ds_tj = p_tj (dout_t . v_j - delta_t);
 *   dq_t += scale ds_tj k_j;  dk_j += scale ds_tj q_t.
 * Key and value gradients sum over the query heads of their group.
 */
void ref_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
			    const float *lse, int B, int T, int H, int KV, int Q)
{
	assert(H % KV == 0);
	size_t row = (size_t)(H + 2 * KV) * Q;
	int group = H / KV;
	float scale = 1.0f / sqrtf((float)Q);
	memset(dqkv, 0, (size_t)B * T * row * sizeof(float));
	for (int b = 0; b < B; b++) {
		const float *base = qkv + (size_t)b * T * row;
		float *dbase = dqkv + (size_t)b * T * row;
		for (int h = 0; h < H; h++) {
			int kvh = h / group;
			for (int t = 0; t < T; t++) {
				const float *q = base + t * row + (size_t)h * Q;
				float *dq = dbase + t * row + (size_t)h * Q;
				size_t orow = ((size_t)b * T + t) * H * Q + (size_t)h * Q;
				const float *g = dout + orow;
				float delta = dot(g, out + orow, Q);
				float l = lse[((size_t)b * H + h) * T + t];
				for (int j = 0; j <= t; j++) {
					const float *k = base + j * row + (size_t)(H + kvh) * Q;
					const float *v = base + j * row + (size_t)(H + KV + kvh) * Q;
					float *dk = dbase + j * row + (size_t)(H + kvh) * Q;
					float *dv = dbase + j * row + (size_t)(H + KV + kvh) * Q;
					float p = expf(dot(q, k, Q) * scale - l);
					float ds = p * (dot(g, v, Q) - delta);
					for (int i = 0; i < Q; i++) {
						dv[i] += p * g[i];
						dq[i] += scale * ds * k[i];
						dk[i] += scale * ds * q[i];
					}
				}
			}
		}
	}
}

/* ---- SwiGLU -------------------------------------------------------------- */

static float sigmoid(float x)
{
	return 1.0f / (1.0f + expf(-x));
}

void ref_swiglu_forward(float *h, const float *gateup, int N, int F)
{
	for (int n = 0; n < N; n++) {
		const float *gate = gateup + (size_t)n * 2 * F;
		const float *up = gate + F;
		for (int i = 0; i < F; i++)
			h[(size_t)n * F + i] = gate[i] * sigmoid(gate[i]) * up[i];
	}
}

/* silu'(a) = sig(a) (1 + a (1 - sig(a))). */
void ref_swiglu_backward(float *dgateup, const float *dh, const float *gateup, int N, int F)
{
	for (int n = 0; n < N; n++) {
		const float *gate = gateup + (size_t)n * 2 * F;
		const float *up = gate + F;
		float *dgate = dgateup + (size_t)n * 2 * F;
		float *dup = dgate + F;
		const float *g = dh + (size_t)n * F;
		for (int i = 0; i < F; i++) {
			float a = gate[i];
			float sg = sigmoid(a);
			dgate[i] = g[i] * up[i] * sg * (1.0f + a * (1.0f - sg));
			dup[i] = g[i] * a * sg;
		}
	}
}

/* ---- cross-entropy ------------------------------------------------------- */

/* Log-sum-exp of one row, max-shifted. */
static float row_lse(const float *x, int V)
{
	float mx = -INFINITY;
	for (int i = 0; i < V; i++)
		if (x[i] > mx)
			mx = x[i];
	float sum = 0.0f;
	for (int i = 0; i < V; i++)
		sum += expf(x[i] - mx);
	return mx + logf(sum);
}

/* Sum (not mean) of the rows' losses, in double so chunking cannot change it. */
static double cross_entropy_sum(float *lse, const float *logits, const int *targets, int N,
				int V)
{
	double total = 0.0;
	for (int n = 0; n < N; n++) {
		const float *x = logits + (size_t)n * V;
		assert(targets[n] >= 0 && targets[n] < V);
		lse[n] = row_lse(x, V);
		total += (double)lse[n] - (double)x[targets[n]];
	}
	return total;
}

float ref_cross_entropy_forward(float *lse, const float *logits, const int *targets, int N, int V)
{
	return (float)(cross_entropy_sum(lse, logits, targets, N, V) / N);
}

/* scale = dloss / N_total, so a chunk of rows gets the same gradient as the whole. */
static void cross_entropy_grad(float *dlogits, const float *logits, const float *lse,
			       const int *targets, int N, int V, float scale)
{
	for (int n = 0; n < N; n++) {
		const float *x = logits + (size_t)n * V;
		float *d = dlogits + (size_t)n * V;
		for (int i = 0; i < V; i++)
			d[i] = expf(x[i] - lse[n]) * scale;
		d[targets[n]] -= scale;
	}
}

void ref_cross_entropy_backward(float *dlogits, const float *logits, const float *lse,
				const int *targets, int N, int V, float dloss)
{
	cross_entropy_grad(dlogits, logits, lse, targets, N, V, dloss / N);
}

/* ---- output projection and loss ------------------------------------------ */

float ref_lm_loss_forward(float *lse, float *logits, const float *xn, const float *w_out,
			  const int *targets, int N, int D, int V, enum loss_mode mode, int chunk)
{
	if (mode == LOSS_FULL)
		chunk = N;
	assert(chunk > 0);
	double total = 0.0;
	for (int n0 = 0; n0 < N; n0 += chunk) {
		int rows = N - n0 < chunk ? N - n0 : chunk;
		ref_linear_forward(logits, xn + (size_t)n0 * D, w_out, rows, D, V);
		total += cross_entropy_sum(lse + n0, logits, targets + n0, rows, V);
	}
	return (float)(total / N);
}

void ref_lm_loss_backward(float *dxn, float *dw_out, float *logits, const float *xn,
			  const float *w_out, const float *lse, const int *targets, int N, int D,
			  int V, enum loss_mode mode, int chunk)
{
	if (mode == LOSS_FULL) {
		cross_entropy_grad(logits, logits, lse, targets, N, V, 1.0f / N);
		ref_linear_backward(dxn, dw_out, logits, xn, w_out, N, D, V);
		return;
	}
	assert(chunk > 0);
	for (int n0 = 0; n0 < N; n0 += chunk) {
		int rows = N - n0 < chunk ? N - n0 : chunk;
		const float *x = xn + (size_t)n0 * D;
		ref_linear_forward(logits, x, w_out, rows, D, V);
		cross_entropy_grad(logits, logits, lse + n0, targets + n0, rows, V, 1.0f / N);
		ref_linear_backward(dxn + (size_t)n0 * D, dw_out, logits, x, w_out, rows, D, V);
	}
}
