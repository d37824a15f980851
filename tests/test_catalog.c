/*
 * test_catalog.c - the built-in catalog (core/catalog.ini via
 * core/catalog.c): every entry present with the published numbers, the
 * field table it is read with, and the shapes giving the published
 * parameter counts.
 */
#include <math.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "hw.h"
#include "model.h"

static void test_gpu_names(void)
{
	const char *const *n = hw_gpu_names();

	CU_ASSERT_STRING_EQUAL(n[0], "a100-80g");
	CU_ASSERT_STRING_EQUAL(n[1], "h100-sxm");
	CU_ASSERT_STRING_EQUAL(n[2], "h200");
	CU_ASSERT_STRING_EQUAL(n[3], "h100-96g");
	CU_ASSERT_STRING_EQUAL(n[4], "h100-nvl");
	CU_ASSERT_STRING_EQUAL(n[5], "h100-pcie");
	CU_ASSERT_STRING_EQUAL(n[6], "a100-40g");
	CU_ASSERT_STRING_EQUAL(n[7], "cpu");
	CU_ASSERT_PTR_NULL(n[8]);
}

static void test_gpu_values(void)
{
	struct gpu_spec g;

	CU_ASSERT_FATAL(hw_gpu_lookup("h100-sxm", &g) == 0);
	CU_ASSERT_STRING_EQUAL(g.name, "h100-sxm");
	CU_ASSERT_EQUAL(g.sms, 132);
	CU_ASSERT_DOUBLE_EQUAL(g.bf16_tflops, 989, 1e-9);
	CU_ASSERT_DOUBLE_EQUAL(g.fp32_tflops, 67, 1e-9);
	CU_ASSERT_DOUBLE_EQUAL(g.hbm_gbps, 3350, 1e-9);
	CU_ASSERT_DOUBLE_EQUAL(g.hbm_gib, 79.6, 1e-9); /* 81559 MiB */
	CU_ASSERT_DOUBLE_EQUAL(g.intra_gbps, 360, 1e-9);
	CU_ASSERT_EQUAL(g.nics_per_node, 8);
	CU_ASSERT_DOUBLE_EQUAL(g.nic_gbps, 48, 1e-9);
	CU_ASSERT_DOUBLE_EQUAL(g.pcie_gbps, 50, 1e-9);
	CU_ASSERT_EQUAL(g.gemm_tile_m, 128);
	CU_ASSERT_EQUAL(g.gemm_tile_n, 256);
	CU_ASSERT_EQUAL(g.tiles_per_sm, 1);
	CU_ASSERT_DOUBLE_EQUAL(g.gemm_eff, 0.75, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(g.attn_eff, 0.216, 1e-12); /* gpu_bench's forward on an H100 */
	CU_ASSERT_DOUBLE_EQUAL(g.attn_bwd_eff, 0.193, 1e-12); /* and backward */
	CU_ASSERT_EQUAL(g.nccl_sms, 24);
	CU_ASSERT_DOUBLE_EQUAL(g.nccl_hbm_factor, 2.5, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(g.elementwise_sms_frac, 0.25, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(g.cpu_adam_gparams, 1.5, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(g.net_latency_us, 6, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(g.nvlink_latency_us, 1.9, 1e-12);
	CU_ASSERT(strstr(g.source, "H100 datasheet") != NULL);

	CU_ASSERT_FATAL(hw_gpu_lookup("a100-80g", &g) == 0);
	CU_ASSERT_EQUAL(g.sms, 108);
	CU_ASSERT_DOUBLE_EQUAL(g.bf16_tflops, 312, 1e-9);
	CU_ASSERT_DOUBLE_EQUAL(g.fp32_tflops, 19.5, 1e-9);
	CU_ASSERT_DOUBLE_EQUAL(g.hbm_gbps, 2039, 1e-9);
	CU_ASSERT_DOUBLE_EQUAL(g.hbm_gib, 80, 1e-9);
	CU_ASSERT_DOUBLE_EQUAL(g.intra_gbps, 230, 1e-9);
	CU_ASSERT_EQUAL(g.nics_per_node, 8);
	CU_ASSERT_DOUBLE_EQUAL(g.nic_gbps, 25, 1e-9); /* 200 Gb/s */
	CU_ASSERT_EQUAL(g.gemm_tile_m, 128);
	CU_ASSERT_EQUAL(g.gemm_tile_n, 128);
	CU_ASSERT_EQUAL(g.tiles_per_sm, 2);

	/* the H100's GH100 with HBM3e: 141 GB is 143771 MiB in nvidia-smi */
	CU_ASSERT_FATAL(hw_gpu_lookup("h200", &g) == 0);
	CU_ASSERT_EQUAL(g.sms, 132);
	CU_ASSERT_DOUBLE_EQUAL(g.bf16_tflops, 989, 1e-9);
	CU_ASSERT_DOUBLE_EQUAL(g.hbm_gbps, 4800, 1e-9);
	CU_ASSERT_DOUBLE_EQUAL(g.hbm_gib, 143771.0 / 1024, 0.05);

	CU_ASSERT_FATAL(hw_gpu_lookup("cpu", &g) == 0);
	CU_ASSERT_EQUAL(g.sms, 2);
	CU_ASSERT(g.nccl_sms < g.sms);

	CU_ASSERT_EQUAL(hw_gpu_lookup("h100", &g), -1);
	CU_ASSERT_EQUAL(hw_gpu_lookup("", &g), -1);
}

/* Every catalog GPU lies inside the ranges experiments are checked against. */
static void test_gpu_fields_table(void)
{
	const char *const *names = hw_gpu_names();
	int n = 0;

	for (const struct hw_field *f = hw_gpu_fields; f->name; f++, n++) {
		CU_ASSERT(f->min <= f->max);
		CU_ASSERT(f->doc && *f->doc);
		for (const struct hw_field *g = f + 1; g->name; g++)
			CU_ASSERT(strcmp(f->name, g->name) != 0);
		if (f > hw_gpu_fields)
			CU_ASSERT(f->offset > f[-1].offset);
		for (int i = 0; names[i]; i++) {
			struct gpu_spec s;
			CU_ASSERT_FATAL(hw_gpu_lookup(names[i], &s) == 0);
			double v = f->type == HW_FIELD_INT ? *(const int *)((const char *)&s + f->offset) :
							     *(const double *)((const char *)&s + f->offset);
			CU_ASSERT(v >= f->min && v <= f->max);
		}
	}
	/* every numeric field of struct gpu_spec: sms ... power_cap_w */
	CU_ASSERT_EQUAL(n, 30);
	CU_ASSERT_STRING_EQUAL(hw_gpu_fields[0].name, "sms");
	CU_ASSERT_STRING_EQUAL(hw_gpu_fields[n - 1].name, "power_cap_w");
	CU_ASSERT_EQUAL(hw_gpu_fields[n - 1].offset, offsetof(struct gpu_spec, power_cap_w));
}

/* The deployed variants: datasheet numbers, and the clock a power cap leaves. */
static void test_gpu_variants(void)
{
	struct gpu_spec g;

	CU_ASSERT_FATAL(hw_gpu_lookup("h100-96g", &g) == 0);
	CU_ASSERT_EQUAL(g.hbm_gbps, 2400);
	CU_ASSERT_EQUAL(g.power_cap_w, 500);
	CU_ASSERT_DOUBLE_EQUAL(hw_clock_factor(&g), cbrt(500.0 / 700.0), 1e-12);
	CU_ASSERT_FATAL(hw_gpu_lookup("h100-sxm", &g) == 0);
	CU_ASSERT_EQUAL(hw_clock_factor(&g), 1.0);
	CU_ASSERT(g.kernel_min_us > 0); /* read from the catalog: the floors act */
	CU_ASSERT_FATAL(hw_gpu_lookup("h100-pcie", &g) == 0);
	CU_ASSERT_EQUAL(g.sms, 114);
	CU_ASSERT_FATAL(hw_gpu_lookup("a100-40g", &g) == 0);
	CU_ASSERT_EQUAL(g.hbm_gbps, 1555);
	CU_ASSERT_DOUBLE_EQUAL(g.hbm_gib, 40.0, 1e-12);
	CU_ASSERT_FATAL(hw_gpu_lookup("h100-nvl", &g) == 0);
	CU_ASSERT_EQUAL(g.hbm_gbps, 3900);
}

static void test_models(void)
{
	const char *const *n = model_names();
	struct model_shape m;
	char err[128];

	CU_ASSERT_STRING_EQUAL(n[0], "llama3-8b");
	CU_ASSERT_STRING_EQUAL(n[1], "llama3-70b");
	CU_ASSERT_STRING_EQUAL(n[2], "llama3-405b");
	CU_ASSERT_STRING_EQUAL(n[3], "llama2-7b");
	CU_ASSERT_STRING_EQUAL(n[4], "tiny");
	CU_ASSERT_STRING_EQUAL(n[5], "small");
	CU_ASSERT_PTR_NULL(n[6]);
	for (int i = 0; n[i]; i++) {
		CU_ASSERT_FATAL(model_lookup(n[i], &m) == 0);
		CU_ASSERT_STRING_EQUAL(m.name, n[i]);
		CU_ASSERT_EQUAL(model_check(&m, err, sizeof err), 0);
	}

	CU_ASSERT_FATAL(model_lookup("llama3-8b", &m) == 0);
	CU_ASSERT_EQUAL(m.layers, 32);
	CU_ASSERT_EQUAL(m.hidden, 4096);
	CU_ASSERT_EQUAL(m.ffn, 14336);
	CU_ASSERT_EQUAL(m.heads, 32);
	CU_ASSERT_EQUAL(m.kv_heads, 8);
	CU_ASSERT_EQUAL(m.vocab, 128256);
	CU_ASSERT_EQUAL(m.seq, 8192);
	CU_ASSERT_EQUAL(model_total_params(&m), 8030261248LL);

	CU_ASSERT_FATAL(model_lookup("llama3-70b", &m) == 0);
	CU_ASSERT_EQUAL(model_total_params(&m), 70553706496LL);

	CU_ASSERT_FATAL(model_lookup("llama3-405b", &m) == 0);
	CU_ASSERT_EQUAL(m.layers, 126);
	CU_ASSERT_EQUAL(m.ffn, 53248);
	CU_ASSERT(fabs(model_total_params(&m) / 1e9 - 405.9) < 0.1);

	CU_ASSERT_FATAL(model_lookup("llama2-7b", &m) == 0);
	CU_ASSERT_EQUAL(m.kv_heads, 32);
	CU_ASSERT_EQUAL(m.vocab, 32000);
	CU_ASSERT_EQUAL(m.seq, 4096);
	CU_ASSERT(fabs(model_total_params(&m) / 1e9 - 6.74) < 0.01);

	CU_ASSERT_FATAL(model_lookup("tiny", &m) == 0);
	CU_ASSERT_EQUAL(m.layers, 2);
	CU_ASSERT_EQUAL(m.hidden, 64);
	CU_ASSERT_EQUAL(m.ffn, 192);
	CU_ASSERT_EQUAL(m.heads, 4);
	CU_ASSERT_EQUAL(m.kv_heads, 2);
	CU_ASSERT_EQUAL(m.vocab, 256);
	CU_ASSERT_EQUAL(m.seq, 32);
	CU_ASSERT_EQUAL(model_head_dim(&m), 16);

	/* per block: q 128x128, k and v 128x64 (4 kv heads of 16), o 128x128,
	   three 128x384 MLP weights, two norms; embedding and output 512x128; final norm */
	CU_ASSERT_FATAL(model_lookup("small", &m) == 0);
	CU_ASSERT_EQUAL(model_head_dim(&m), 16);
	CU_ASSERT_EQUAL(model_total_params(&m),
			4 * (2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 384 + 2 * 128) + 2 * 512 * 128 + 128);

	CU_ASSERT_EQUAL(model_lookup("llama3", &m), -1);
}

static void test_runtimes(void)
{
	struct runtime_spec r;

	CU_ASSERT_FATAL(hw_runtime_lookup("testbed", &r) == 0);
	CU_ASSERT_STRING_EQUAL(r.name, "testbed");
	CU_ASSERT_DOUBLE_EQUAL(r.launch_us, 4, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(r.op_overhead_us, 2, 1e-12);
	CU_ASSERT_EQUAL(r.caching_allocator, 0);
	CU_ASSERT_EQUAL(r.copy_in_out, 0);
	CU_ASSERT_EQUAL(r.per_param_kernels, 1);
	CU_ASSERT_EQUAL(r.foreach_kernels, 1);
	CU_ASSERT_EQUAL(r.fused_kernels, 1);
	CU_ASSERT_EQUAL(r.foreach_chunk, 64);
	CU_ASSERT_DOUBLE_EQUAL(r.unfused_traffic, 1.0, 1e-12);
	CU_ASSERT_EQUAL(r.alloc_round_bytes, 512);
	CU_ASSERT_EQUAL(r.segment_bytes, 2 << 20);

	CU_ASSERT_FATAL(hw_runtime_lookup("pytorch", &r) == 0);
	CU_ASSERT_EQUAL(r.caching_allocator, 1);
	CU_ASSERT_EQUAL(r.copy_in_out, 1);
	CU_ASSERT_EQUAL(r.per_param_kernels, 8);
	CU_ASSERT_EQUAL(r.foreach_kernels, 8);
	CU_ASSERT_EQUAL(r.fused_kernels, 1);
	CU_ASSERT_EQUAL(r.foreach_chunk, 48);
	CU_ASSERT(r.op_overhead_us > r.launch_us);
	/* 21 fp32 reads and writes per parameter for the eight foreach ops, 7 for the fused kernel */
	CU_ASSERT_DOUBLE_EQUAL(r.unfused_traffic, 21.0 / 7.0, 1e-12);
	CU_ASSERT_STRING_EQUAL(r.kernels, "eager");
	CU_ASSERT_STRING_EQUAL(r.attention, "flash");
	CU_ASSERT_EQUAL(r.optim_temp_bytes, 4);
	CU_ASSERT_EQUAL(r.alloc_round_bytes, 512);
	CU_ASSERT_EQUAL(r.segment_bytes, 2097152);
	CU_ASSERT(strstr(r.source, "CUDACachingAllocator") != NULL);

	CU_ASSERT_EQUAL(hw_runtime_lookup("jax", &r), -1);
}

void suite_catalog(void)
{
	CU_pSuite s = CU_add_suite("catalog", NULL, NULL);
	CU_add_test(s, "GPU names in file order", test_gpu_names);
	CU_add_test(s, "GPU values", test_gpu_values);
	CU_add_test(s, "GPU field table and ranges", test_gpu_fields_table);
	CU_add_test(s, "deployed GPU variants and power caps", test_gpu_variants);
	CU_add_test(s, "models and their parameter counts", test_models);
	CU_add_test(s, "runtimes", test_runtimes);
}
