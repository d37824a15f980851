/*
 * test_cuda_kernel.c - every kernel of core/model.c's lists has a launch
 * plan in the CUDA model (gpu/cuda/kernel_plan.c), so that a GPU
 * calibration (gpu_run --calibrate --device cuda) never meets a kernel it
 * cannot time.
 *
 * For every catalog model, segment, phase, checkpointing and loss mode:
 * a plan exists; a GEMM's plan has the kernel's shape, leading dimensions
 * no smaller than its operands' rows and operand sizes that hold them; the
 * loss's launches are the chunk's rows under the chunked loss and all N
 * rows under the full one; only the residual adds have no launch of their
 * own. Unknown names are refused with a message.
 */
#include <stdio.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "cuda/cuda_kernel.h"
#include "model.h"

static void check_gemm(const struct kernel *k, const struct cuda_kernel_plan *p)
{
	uint64_t arows = (uint64_t)(p->ta ? p->K : p->M), brows = (uint64_t)(p->tb ? p->N : p->K);

	CU_ASSERT(p->M == k->m && p->N == k->n && p->K == k->k);
	CU_ASSERT(p->lda >= (p->ta ? p->M : p->K) && p->ldb >= (p->tb ? p->K : p->N) && p->ldd >= p->N);
	CU_ASSERT(p->noperands == 3 + p->residual);
	CU_ASSERT(p->bytes[0] >= 2 * arows * (uint64_t)p->lda);
	CU_ASSERT(p->bytes[1] >= 2 * brows * (uint64_t)p->ldb);
	CU_ASSERT(p->bytes[2] >= (uint64_t)p->M * (uint64_t)p->ldd * (p->d_fp32 ? 4 : 2));
	/* the call sites' forms */
	if (strstr(k->name, "_wgrad"))
		CU_ASSERT(p->ta && !p->tb && p->d_grad && !p->residual);
	if (strstr(k->name, "_dgrad"))
		CU_ASSERT(!p->ta && !p->tb && !p->d_grad && !p->d_fp32);
	if (!strcmp(k->name, "wo") || !strcmp(k->name, "down"))
		CU_ASSERT(p->residual && !p->ta && p->tb);
	if (!strcmp(k->name, "output") || !strcmp(k->name, "output_recompute"))
		CU_ASSERT(p->d_fp32 && p->ldd == p->N);
	if (!strcmp(k->name, "output_dgrad"))
		CU_ASSERT(p->lda == 2 * (int64_t)p->K); /* the bf16 gradient in place over fp32 logits */
	if (!strcmp(k->name, "output_wgrad"))
		CU_ASSERT(p->lda == 2 * (int64_t)p->M);
}

static void check_lists(const struct model_shape *m, int batch)
{
	struct kernel ks[MODEL_MAX_KERNELS];
	char err[256];
	int n_planned = 0;

	for (int sk = 0; sk < SEG_KIND_COUNT; sk++)
		for (int ph = 0; ph < PH_COUNT; ph++)
			for (int ac = 0; ac < AC_COUNT; ac++)
				for (int loss = 0; loss < LOSS_COUNT; loss++) {
					int nk = model_segment_kernels(m, batch, sk, ph, ac, loss, 2, ks, MODEL_MAX_KERNELS);
					for (int i = 0; i < nk; i++)
						for (int gb = 0; gb < 2; gb++) {
							struct cuda_kernel_plan p;
							int rc = cuda_kernel_plan(&ks[i], m, batch, gb, &p, err, sizeof err);
							CU_ASSERT_EQUAL(rc, 0);
							if (rc) {
								fprintf(stderr, "%s: %s\n", m->name, err);
								continue;
							}
							n_planned++;
							CU_ASSERT(p.grad_bf16 == gb);
							CU_ASSERT((p.form == CUDA_KF_FUSED) == !strncmp(ks[i].name, "residual", 8));
							CU_ASSERT(p.form == CUDA_KF_FUSED || p.noperands > 0);
							CU_ASSERT(cuda_kernel_bytes(&p) % 256 == 0);
							for (int j = 0; j < p.noperands; j++)
								CU_ASSERT(p.bytes[j] > 0 && cuda_kernel_offset(&p, j) % 256 == 0);
							if (ks[i].kind == K_GEMM) {
								CU_ASSERT_EQUAL(p.form, CUDA_KF_GEMM);
								check_gemm(&ks[i], &p);
							}
							if (p.form == CUDA_KF_LOSS || p.form == CUDA_KF_LOSS_BWD) {
								int want = loss == LOSS_CHUNKED ? model_loss_chunk_rows(m, batch)
												: (int)((int64_t)batch * m->seq);
								CU_ASSERT_EQUAL(p.chunk, want);
								CU_ASSERT(p.ids);
							}
						}
				}
	CU_ASSERT(n_planned > 0);
}

static void test_every_kernel_has_a_plan(void)
{
	const char *const *names = model_names();

	for (int i = 0; names[i]; i++) {
		struct model_shape m;
		CU_ASSERT_FATAL(model_lookup(names[i], &m) == 0);
		check_lists(&m, 1);
		check_lists(&m, 2);
	}
}

static void test_grid_and_unknown(void)
{
	struct model_shape m;
	struct cuda_kernel_plan p;
	struct kernel g = { .name = "gemm", .kind = K_GEMM, .m = 1025, .n = 3072, .k = 4096 };
	struct kernel bad = { .name = "conv2d", .kind = K_ELEMENTWISE, .bytes = 64 };
	char err[256] = "";

	CU_ASSERT_FATAL(model_lookup("llama3-8b", &m) == 0);
	CU_ASSERT_EQUAL(cuda_kernel_plan(&g, &m, 1, 0, &p, err, sizeof err), 0);
	CU_ASSERT(p.form == CUDA_KF_GEMM && p.tb && !p.ta && !p.d_fp32 && !p.residual && p.M == 1025);
	CU_ASSERT_EQUAL(cuda_kernel_plan(&bad, &m, 1, 0, &p, err, sizeof err), -1);
	CU_ASSERT(strstr(err, "conv2d") != NULL);
}

void suite_cuda_kernel(void)
{
	CU_pSuite s = CU_add_suite("cuda_kernel", NULL, NULL);

	CU_add_test(s, "every kernel of every list has a CUDA launch plan", test_every_kernel_has_a_plan);
	CU_add_test(s, "the GEMM grid's shapes; unknown kernels refused", test_grid_and_unknown);
}
