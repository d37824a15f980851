/*
 * test_layout.c - the activation stores and the flat model layout agree
 * across their three readers: core/model.c's byte counts (what the
 * simulator prices), the fp32 reference (gpu/ref, 4-byte elements) and
 * the CUDA model's host-side layout (gpu/cuda/layout.c, bf16), for every
 * catalog model, checkpointing mode, loss mode and a few batch sizes.
 *
 * The expected placement of every field is written out here again, from
 * what the block and head code read in backward (gpu/ref/ref.h), so that a
 * wrong table in core/model.c fails even though all three readers follow
 * it: sizes are recomputed from the shapes and compared exactly,
 * 256-byte padding included.
 */
#include <stdint.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "cuda/cuda_layout.h"
#include "model.h"
#include "ref.h"

static const int batches[] = { 1, 2, 3 };
enum { NBATCH = sizeof(batches) / sizeof(batches[0]) };

/* Far apart fake device addresses: layouts are arithmetic, nothing is dereferenced. */
#define SAVED_BASE ((uintptr_t)1 << 40)
#define TRANSIENT_BASE ((uintptr_t)1 << 42)
#define PARAMS_BASE ((uintptr_t)1 << 44)
#define GRADS_BASE ((uintptr_t)1 << 45)

/* Every catalog model, then a shape whose fields are not 256-byte multiples. */
static int shapes(struct model_shape *out, int max)
{
	static const struct model_shape odd = {
		.name = "odd", .layers = 2, .hidden = 16, .ffn = 24, .heads = 4, .kv_heads = 2,
		.vocab = 11, .seq = 5, .rope_theta = 500000.0,
	};
	const char *const *names = model_names();
	int n = 0;

	for (; names[n]; n++) {
		CU_ASSERT_FATAL(n < max - 1);
		CU_ASSERT_FATAL(model_lookup(names[n], &out[n]) == 0);
	}
	CU_ASSERT(n >= 5); /* tiny, llama3-8b, -70b, -405b, llama2-7b */
	out[n++] = odd;
	return n;
}

static uint64_t align(uint64_t bytes)
{
	return (bytes + 255) / 256 * 256;
}

/* ---- the expected tables ------------------------------------------------- */

struct expect {
	const char *name;
	uint64_t elems;
	int fp32;        /* else the activation dtype */
	int saved[AC_COUNT]; /* by ac_mode for a block, loss_mode for the head */
};

/* What a block's backward reads and where each mode keeps it (ref.h). */
static void block_expect(struct expect e[BF_COUNT], const struct model_shape *m, int B)
{
	uint64_t N = (uint64_t)B * m->seq, D = m->hidden, F = m->ffn, Q = model_head_dim(m);
	uint64_t qkv = (uint64_t)(m->heads + 2 * m->kv_heads) * Q, hq = (uint64_t)m->heads * Q;
	/*                           AC_NONE full selective */
	e[0] = (struct expect){ "x", N * D, 0, { 1, 1, 1 } };
	e[1] = (struct expect){ "xn1", N * D, 0, { 1, 0, 0 } };
	e[2] = (struct expect){ "rstd1", N, 1, { 1, 0, 0 } };
	e[3] = (struct expect){ "qkv", N * qkv, 0, { 1, 0, 1 } };
	e[4] = (struct expect){ "att", N * hq, 0, { 1, 0, 1 } };
	e[5] = (struct expect){ "lse", (uint64_t)B * m->heads * m->seq, 1, { 1, 0, 1 } };
	e[6] = (struct expect){ "x1", N * D, 0, { 1, 0, 1 } };
	e[7] = (struct expect){ "xn2", N * D, 0, { 1, 0, 0 } };
	e[8] = (struct expect){ "rstd2", N, 1, { 1, 0, 0 } };
	e[9] = (struct expect){ "gateup", N * 2 * F, 0, { 1, 0, 1 } };
	e[10] = (struct expect){ "h", N * F, 0, { 1, 0, 0 } };
}

/* The backward's activation gradients, all scratch. */
static void grads_expect(struct expect e[GF_COUNT], const struct model_shape *m, int B)
{
	uint64_t N = (uint64_t)B * m->seq, Q = model_head_dim(m);
	e[0] = (struct expect){ "dxn", N * m->hidden, 0, { 0 } };
	e[1] = (struct expect){ "dh", N * m->ffn, 0, { 0 } };
	e[2] = (struct expect){ "dgateup", N * 2 * m->ffn, 0, { 0 } };
	e[3] = (struct expect){ "datt", N * m->heads * Q, 0, { 0 } };
	e[4] = (struct expect){ "dqkv", N * (m->heads + 2 * m->kv_heads) * Q, 0, { 0 } };
}

/* The head: fp32 logits kept whole (LOSS_FULL) or one chunk of scratch. */
static void head_expect(struct expect e[HF_COUNT], const struct model_shape *m, int B,
			enum loss_mode loss, int chunk)
{
	uint64_t N = (uint64_t)B * m->seq, D = m->hidden;
	uint64_t rows = loss == LOSS_FULL ? N : (uint64_t)chunk;
	/*                          LOSS_FULL chunked */
	e[0] = (struct expect){ "x", N * D, 0, { 1, 1 } };
	e[1] = (struct expect){ "xn", N * D, 0, { 1, 1 } };
	e[2] = (struct expect){ "rstd", N, 1, { 1, 1 } };
	e[3] = (struct expect){ "lse", N, 1, { 1, 1 } };
	e[4] = (struct expect){ "logits", rows * m->vocab, 1, { 1, 0 } };
}

/* Bytes of the saved (saved = 1) or transient region the expectation gives. */
static uint64_t expect_bytes(const struct expect *e, int n, int mode, int saved, int act_bytes)
{
	uint64_t b = 0;
	for (int i = 0; i < n; i++)
		if (e[i].saved[mode] == saved)
			b += align(e[i].elems * (e[i].fp32 ? 4 : act_bytes));
	return b;
}

/* The layout is the expectation: names, sizes, types and regions, field by field. */
static void check_fields(const struct store_layout *l, const struct expect *e, int n, int mode,
			 int act_bytes)
{
	CU_ASSERT_EQUAL_FATAL(l->nfields, n);
	for (int i = 0; i < n; i++) {
		const struct store_field *f = &l->f[i];
		CU_ASSERT_STRING_EQUAL(f->name, e[i].name);
		CU_ASSERT_EQUAL(f->elems, e[i].elems);
		CU_ASSERT_EQUAL(f->elem_bytes, e[i].fp32 ? 4 : act_bytes);
		CU_ASSERT_EQUAL(f->region, e[i].saved[mode] ? FIELD_SAVED : FIELD_TRANSIENT);
	}
	CU_ASSERT_EQUAL(l->saved_bytes, expect_bytes(e, n, mode, 1, act_bytes));
	CU_ASSERT_EQUAL(l->transient_bytes, expect_bytes(e, n, mode, 0, act_bytes));
}

/*
 * Inside each region: fields in table order, at multiples of 256 bytes,
 * each ending before the next begins, the region's size the last end
 * rounded up to 256.
 */
static void check_no_overlap(const struct store_layout *l)
{
	for (int r = FIELD_SAVED; r <= FIELD_TRANSIENT; r++) {
		uint64_t end = 0;
		for (int i = 0; i < l->nfields; i++) {
			const struct store_field *f = &l->f[i];
			if ((int)f->region != r)
				continue;
			CU_ASSERT_EQUAL(f->offset % MODEL_FIELD_ALIGN, 0);
			CU_ASSERT(f->offset >= end);
			CU_ASSERT(f->offset < end + MODEL_FIELD_ALIGN); /* no hole beyond the padding */
			end = f->offset + f->elems * (uint64_t)f->elem_bytes;
		}
		CU_ASSERT_EQUAL(r == FIELD_SAVED ? l->saved_bytes : l->transient_bytes, align(end));
	}
}

/* ---- tests ----------------------------------------------------------------- */

/* The table itself, for both element sizes, against the expectation. */
static void test_tables(void)
{
	struct model_shape ms[16];
	int n = shapes(ms, 16);

	for (int k = 0; k < n; k++)
		for (int b = 0; b < NBATCH; b++)
			for (int a = 2; a <= 4; a += 2) {
				const struct model_shape *m = &ms[k];
				int B = batches[b], chunk = model_loss_chunk_rows(m, B);
				struct expect e[MODEL_STORE_FIELDS_MAX];
				struct store_layout l;

				block_expect(e, m, B);
				for (int ac = 0; ac < AC_COUNT; ac++) {
					model_block_store_layout(&l, m, B, ac, a);
					check_fields(&l, e, BF_COUNT, ac, a);
					check_no_overlap(&l);
				}
				grads_expect(e, m, B);
				model_block_grads_layout(&l, m, B, a);
				check_fields(&l, e, GF_COUNT, 0, a);
				check_no_overlap(&l);
				CU_ASSERT_EQUAL(l.saved_bytes, 0);
				for (int loss = 0; loss < LOSS_COUNT; loss++) {
					head_expect(e, m, B, loss, chunk);
					model_head_store_layout(&l, m, B, loss, chunk, a);
					check_fields(&l, e, HF_COUNT, loss, a);
					check_no_overlap(&l);
				}
			}
}

/* What the simulator prices: the regions, phase by phase. */
static void test_segment_bytes(void)
{
	struct model_shape ms[16];
	int n = shapes(ms, 16);

	for (int k = 0; k < n; k++)
		for (int b = 0; b < NBATCH; b++)
			for (int a = 2; a <= 4; a += 2)
				for (int ac = 0; ac < AC_COUNT; ac++)
					for (int loss = 0; loss < LOSS_COUNT; loss++) {
		const struct model_shape *m = &ms[k];
		int B = batches[b];
		struct expect e[MODEL_STORE_FIELDS_MAX];
		uint64_t saved, trans;

		block_expect(e, m, B);
		saved = expect_bytes(e, BF_COUNT, ac, 1, a);
		trans = expect_bytes(e, BF_COUNT, ac, 0, a);
		CU_ASSERT_EQUAL(model_segment_saved_bytes(m, B, SEG_BLOCK, ac, loss, a), saved);
		CU_ASSERT_EQUAL(model_segment_transient_bytes(m, B, SEG_BLOCK, PH_FWD, ac, loss, a),
				ac == AC_NONE ? 0 : trans);
		CU_ASSERT_EQUAL(model_segment_transient_bytes(m, B, SEG_BLOCK, PH_RECOMPUTE, ac, loss, a),
				trans);
		grads_expect(e, m, B);
		CU_ASSERT_EQUAL(model_segment_transient_bytes(m, B, SEG_BLOCK, PH_BWD, ac, loss, a),
				expect_bytes(e, GF_COUNT, 0, 0, a));

		head_expect(e, m, B, loss, model_loss_chunk_rows(m, B));
		trans = expect_bytes(e, HF_COUNT, loss, 0, a);
		CU_ASSERT_EQUAL(model_segment_saved_bytes(m, B, SEG_HEAD, ac, loss, a),
				expect_bytes(e, HF_COUNT, loss, 1, a));
		CU_ASSERT_EQUAL(model_segment_transient_bytes(m, B, SEG_HEAD, PH_FWD, ac, loss, a), trans);
		CU_ASSERT_EQUAL(model_segment_transient_bytes(m, B, SEG_HEAD, PH_BWD, ac, loss, a), trans);
		CU_ASSERT_EQUAL(model_segment_transient_bytes(m, B, SEG_HEAD, PH_RECOMPUTE, ac, loss, a), 0);
		CU_ASSERT_EQUAL(trans == 0, loss == LOSS_FULL);
	}
}

/* The reference at 4 bytes and the CUDA model at 2 use exactly what is priced. */
static void test_runtime_sizes(void)
{
	struct model_shape ms[16];
	int n = shapes(ms, 16);

	for (int k = 0; k < n; k++)
		for (int b = 0; b < NBATCH; b++)
			for (int ac = 0; ac < AC_COUNT; ac++)
				for (int loss = 0; loss < LOSS_COUNT; loss++) {
		const struct model_shape *m = &ms[k];
		int B = batches[b], chunk = model_loss_chunk_rows(m, B);
		uint64_t f = sizeof(float);

		CU_ASSERT_EQUAL(f * ref_block_saved_floats(m, B, ac),
				model_segment_saved_bytes(m, B, SEG_BLOCK, ac, loss, 4));
		CU_ASSERT_EQUAL(f * ref_block_transient_floats(m, B, ac),
				model_segment_transient_bytes(m, B, SEG_BLOCK, PH_RECOMPUTE, ac, loss, 4));
		CU_ASSERT_EQUAL(ac == AC_NONE ? 0 : f * ref_block_transient_floats(m, B, ac),
				model_segment_transient_bytes(m, B, SEG_BLOCK, PH_FWD, ac, loss, 4));
		CU_ASSERT_EQUAL(f * ref_block_scratch_floats(m, B),
				model_segment_transient_bytes(m, B, SEG_BLOCK, PH_BWD, ac, loss, 4));
		CU_ASSERT_EQUAL(f * ref_head_saved_floats(m, B, loss),
				model_segment_saved_bytes(m, B, SEG_HEAD, ac, loss, 4));
		CU_ASSERT_EQUAL(f * ref_head_transient_floats(m, B, loss, chunk),
				model_segment_transient_bytes(m, B, SEG_HEAD, PH_FWD, ac, loss, 4));
		CU_ASSERT_EQUAL(ref_head_store_floats(m, B, loss, chunk),
				ref_head_saved_floats(m, B, loss) + ref_head_transient_floats(m, B, loss, chunk));

		CU_ASSERT_EQUAL(cuda_block_saved_bytes(m, B, ac),
				model_segment_saved_bytes(m, B, SEG_BLOCK, ac, loss, 2));
		CU_ASSERT_EQUAL(cuda_block_transient_bytes(m, B, ac),
				model_segment_transient_bytes(m, B, SEG_BLOCK, PH_RECOMPUTE, ac, loss, 2));
		CU_ASSERT_EQUAL(cuda_block_scratch_bytes(m, B),
				model_segment_transient_bytes(m, B, SEG_BLOCK, PH_BWD, ac, loss, 2));
		CU_ASSERT_EQUAL(cuda_head_saved_bytes(m, B, loss),
				model_segment_saved_bytes(m, B, SEG_HEAD, ac, loss, 2));
		CU_ASSERT_EQUAL(cuda_head_transient_bytes(m, B, loss, chunk),
				model_segment_transient_bytes(m, B, SEG_HEAD, PH_FWD, ac, loss, 2));
		CU_ASSERT_EQUAL(cuda_head_store_bytes(m, B, loss, chunk),
				cuda_head_saved_bytes(m, B, loss) + cuda_head_transient_bytes(m, B, loss, chunk));
	}
}

/* Where a pointer lies: base + the field's byte offset in the region the expectation says. */
static void check_at(const void *p, const struct store_field *f, int saved, int elem_bytes)
{
	uintptr_t base = saved ? SAVED_BASE : TRANSIENT_BASE;
	CU_ASSERT_EQUAL((uintptr_t)p, base + f->offset);
	CU_ASSERT_EQUAL(f->elem_bytes, elem_bytes);
}

/* The reference's and the CUDA model's store structs point where the table says. */
static void test_store_pointers(void)
{
	struct model_shape ms[16];
	int n = shapes(ms, 16);
	float *fs = (float *)SAVED_BASE, *ft = (float *)TRANSIENT_BASE;
	void *vs = (void *)SAVED_BASE, *vt = (void *)TRANSIENT_BASE;

	for (int k = 0; k < n; k++)
		for (int b = 0; b < NBATCH; b++) {
			const struct model_shape *m = &ms[k];
			int B = batches[b], chunk = model_loss_chunk_rows(m, B);
			struct expect e[MODEL_STORE_FIELDS_MAX];
			struct store_layout l4, l2;

			block_expect(e, m, B);
			for (int ac = 0; ac < AC_COUNT; ac++) {
				struct ref_block_store rs;
				struct cuda_block_store cs;
				model_block_store_layout(&l4, m, B, ac, 4);
				model_block_store_layout(&l2, m, B, ac, 2);
				ref_block_store_init(&rs, fs, ft, m, B, ac);
				cuda_block_store_init(&cs, vs, vt, m, B, ac);
				const void *r[BF_COUNT] = { rs.x, rs.xn1, rs.rstd1, rs.qkv, rs.att, rs.lse,
							    rs.x1, rs.xn2, rs.rstd2, rs.gateup, rs.h };
				const void *c[BF_COUNT] = { cs.x, cs.xn1, cs.rstd1, cs.qkv, cs.att, cs.lse,
							    cs.x1, cs.xn2, cs.rstd2, cs.gateup, cs.h };
				for (int f = 0; f < BF_COUNT; f++) {
					check_at(r[f], &l4.f[f], e[f].saved[ac], 4);
					check_at(c[f], &l2.f[f], e[f].saved[ac], e[f].fp32 ? 4 : 2);
				}
				CU_ASSERT_EQUAL(rs.mode, ac);
				CU_ASSERT_EQUAL(cs.mode, ac);
			}

			struct cuda_block_grads g;
			model_block_grads_layout(&l2, m, B, 2);
			cuda_block_grads_init(&g, vt, m, B);
			const void *gp[GF_COUNT] = { g.dxn, g.dh, g.dgu, g.datt, g.dqkv };
			for (int f = 0; f < GF_COUNT; f++)
				check_at(gp[f], &l2.f[f], 0, 2);

			for (int loss = 0; loss < LOSS_COUNT; loss++) {
				struct ref_head_store rh, rh1;
				struct cuda_head_store ch, ch1;
				head_expect(e, m, B, loss, chunk);
				model_head_store_layout(&l4, m, B, loss, chunk, 4);
				model_head_store_layout(&l2, m, B, loss, chunk, 2);
				ref_head_store_init_split(&rh, fs, loss == LOSS_FULL ? NULL : ft, m, B, loss,
							  chunk);
				cuda_head_store_init_split(&ch, vs, loss == LOSS_FULL ? NULL : vt, m, B, loss,
							   chunk);
				const void *r[HF_COUNT] = { rh.x, rh.xn, rh.rstd, rh.lse, rh.logits };
				const void *c[HF_COUNT] = { ch.x, ch.xn, ch.rstd, ch.lse, ch.logits };
				for (int f = 0; f < HF_COUNT; f++) {
					check_at(r[f], &l4.f[f], e[f].saved[loss], 4);
					check_at(c[f], &l2.f[f], e[f].saved[loss], e[f].fp32 ? 4 : 2);
				}
				CU_ASSERT_EQUAL(rh.chunk, loss == LOSS_FULL ? B * m->seq : chunk);
				CU_ASSERT_EQUAL(ch.chunk, rh.chunk);
				/* in one buffer the chunk follows the saved fields */
				ref_head_store_init(&rh1, fs, m, B, loss, chunk);
				cuda_head_store_init(&ch1, vs, m, B, loss, chunk);
				CU_ASSERT_EQUAL((uintptr_t)rh1.logits,
						SAVED_BASE + (loss == LOSS_FULL ? l4.f[HF_LOGITS].offset
										: l4.saved_bytes));
				CU_ASSERT_EQUAL((uintptr_t)ch1.logits,
						SAVED_BASE + (loss == LOSS_FULL ? l2.f[HF_LOGITS].offset
										: l2.saved_bytes));
				CU_ASSERT_PTR_EQUAL(rh1.lse, rh.lse);
				CU_ASSERT_PTR_EQUAL(ch1.lse, ch.lse);
			}
		}
}

/* A shape whose fields are not 256-byte multiples: padding counted, exact bytes. */
static void test_padding(void)
{
	static const struct model_shape m = {
		.name = "odd", .layers = 2, .hidden = 16, .ffn = 24, .heads = 4, .kv_heads = 2,
		.vocab = 11, .seq = 5, .rope_theta = 500000.0,
	};
	/* B = 2, N = 10: x is 640 fp32 bytes, 768 with padding; rstd 40 bytes, 256 */
	CU_ASSERT_EQUAL(model_segment_saved_bytes(&m, 2, SEG_BLOCK, AC_FULL, LOSS_FULL, 4), 768);
	CU_ASSERT_EQUAL(ref_block_saved_floats(&m, 2, AC_FULL), 192);
	/* head, chunked: x, xn (320 bf16 bytes: 512 each), rstd, lse (256 each) */
	CU_ASSERT_EQUAL(cuda_head_saved_bytes(&m, 2, LOSS_CHUNKED), 2 * 512 + 2 * 256);
	/* the chunk is every row (10 < 1024): 10 x 11 fp32 = 440 bytes, 512 */
	CU_ASSERT_EQUAL(model_loss_chunk_rows(&m, 2), 10);
	CU_ASSERT_EQUAL(cuda_head_transient_bytes(&m, 2, LOSS_CHUNKED, 10), 512);
}

static void test_chunk_rows(void)
{
	struct model_shape m;
	CU_ASSERT_FATAL(model_lookup("tiny", &m) == 0);
	CU_ASSERT_EQUAL(model_loss_chunk_rows(&m, 1), 32);
	CU_ASSERT_EQUAL(model_loss_chunk_rows(&m, 2), 64);
	CU_ASSERT_EQUAL(model_loss_chunk_rows(&m, 100), 1024);
	CU_ASSERT_FATAL(model_lookup("llama3-8b", &m) == 0);
	CU_ASSERT_EQUAL(model_loss_chunk_rows(&m, 1), 1024);
}

/* embed | blocks | final norm | output, in the reference and the CUDA model. */
static void test_module_offsets(void)
{
	struct model_shape ms[16];
	int n = shapes(ms, 16);

	for (int k = 0; k < n; k++) {
		const struct model_shape *m = &ms[k];
		int64_t vd = (int64_t)m->vocab * m->hidden, bp = model_block_params(m);
		int64_t L = m->layers;
		struct ref_model rm;
		struct cuda_model cm;

		CU_ASSERT_EQUAL(model_module_offset(m, MOD_EMBED, 0), 0);
		for (int l = 0; l < m->layers; l++)
			CU_ASSERT_EQUAL(model_module_offset(m, MOD_BLOCK, l), vd + l * bp);
		CU_ASSERT_EQUAL(model_module_offset(m, MOD_FINAL_NORM, 0), vd + L * bp);
		CU_ASSERT_EQUAL(model_module_offset(m, MOD_OUTPUT, 0), vd + L * bp + m->hidden);
		CU_ASSERT_EQUAL(model_module_offset(m, MOD_OUTPUT, 0) + model_output_params(m),
				model_total_params(m));

		CU_ASSERT_FATAL(ref_model_init(&rm, m, (float *)PARAMS_BASE, (float *)GRADS_BASE) == 0);
		CU_ASSERT_FATAL(cuda_model_init(&cm, m, (bf16 *)PARAMS_BASE, (float *)GRADS_BASE) == 0);
#define AT(base, p, k_, l_, size) \
	CU_ASSERT_EQUAL((uintptr_t)(p), (base) + (size) * (uintptr_t)model_module_offset(m, (k_), (l_)))
		AT(PARAMS_BASE, rm.embed, MOD_EMBED, 0, 4);
		AT(GRADS_BASE, rm.d_embed, MOD_EMBED, 0, 4);
		AT(PARAMS_BASE, cm.embed, MOD_EMBED, 0, 2);
		AT(GRADS_BASE, cm.d_embed, MOD_EMBED, 0, 4);
		for (int l = 0; l < m->layers; l++) {
			AT(PARAMS_BASE, rm.blocks[l], MOD_BLOCK, l, 4);
			AT(GRADS_BASE, rm.d_blocks[l], MOD_BLOCK, l, 4);
			AT(PARAMS_BASE, cm.blocks[l], MOD_BLOCK, l, 2);
			AT(GRADS_BASE, cm.d_blocks[l], MOD_BLOCK, l, 4);
		}
		AT(PARAMS_BASE, rm.final_norm, MOD_FINAL_NORM, 0, 4);
		AT(GRADS_BASE, rm.d_final_norm, MOD_FINAL_NORM, 0, 4);
		AT(PARAMS_BASE, cm.final_norm, MOD_FINAL_NORM, 0, 2);
		AT(GRADS_BASE, cm.d_final_norm, MOD_FINAL_NORM, 0, 4);
		AT(PARAMS_BASE, rm.w_out, MOD_OUTPUT, 0, 4);
		AT(GRADS_BASE, rm.d_w_out, MOD_OUTPUT, 0, 4);
		AT(PARAMS_BASE, cm.w_out, MOD_OUTPUT, 0, 2);
		AT(GRADS_BASE, cm.d_w_out, MOD_OUTPUT, 0, 4);
#undef AT
		CU_ASSERT_EQUAL(ref_model_floats(m), (size_t)model_total_params(m));
		CU_ASSERT_EQUAL(cuda_model_elems(m), (size_t)model_total_params(m));
		ref_model_release(&rm);
		cuda_model_release(&cm);
	}
}

/* The CUDA model's one activation allocation: its parts in order, nothing shared but the transient area. */
static void test_cuda_acts(void)
{
	struct model_shape m;
	CU_ASSERT_FATAL(model_lookup("tiny", &m) == 0);
	for (int ac = 0; ac < AC_COUNT; ac++)
		for (int loss = 0; loss < LOSS_COUNT; loss++) {
			struct cuda_block_store stores[2];
			struct cuda_acts a = { .blocks = stores };
			int B = 1, chunk = 7;
			size_t saved = cuda_block_saved_bytes(&m, B, ac);
			size_t trans = cuda_block_transient_bytes(&m, B, ac);
			size_t head = cuda_head_store_bytes(&m, B, loss, chunk);
			size_t nd = align((uint64_t)B * m.seq * m.hidden * 2);

			CU_ASSERT_FATAL(m.layers == 2);
			cuda_acts_point(&a, (void *)SAVED_BASE, &m, B, ac, loss, chunk);
			CU_ASSERT_EQUAL(a.bytes, 2 * saved + trans + head + nd + cuda_block_scratch_bytes(&m, B));
			CU_ASSERT_EQUAL((uintptr_t)stores[0].x, SAVED_BASE);
			CU_ASSERT_EQUAL((uintptr_t)stores[1].x, SAVED_BASE + saved);
			if (ac != AC_NONE)
				CU_ASSERT_PTR_EQUAL(stores[0].h, stores[1].h);
			CU_ASSERT_EQUAL((uintptr_t)a.head.x, SAVED_BASE + 2 * saved + trans);
			CU_ASSERT_EQUAL((uintptr_t)a.dres, SAVED_BASE + 2 * saved + trans + head);
			CU_ASSERT_EQUAL((uintptr_t)a.scratch, SAVED_BASE + 2 * saved + trans + head + nd);
			CU_ASSERT_EQUAL(a.head.chunk, loss == LOSS_FULL ? B * m.seq : chunk);
		}
}

void suite_layout(void)
{
	CU_pSuite s = CU_add_suite("layout", NULL, NULL);
	CU_add_test(s, "store tables", test_tables);
	CU_add_test(s, "segment bytes", test_segment_bytes);
	CU_add_test(s, "reference and CUDA sizes", test_runtime_sizes);
	CU_add_test(s, "store pointers", test_store_pointers);
	CU_add_test(s, "padding", test_padding);
	CU_add_test(s, "loss chunk rows", test_chunk_rows);
	CU_add_test(s, "module offsets", test_module_offsets);
	CU_add_test(s, "cuda activations", test_cuda_acts);
}
