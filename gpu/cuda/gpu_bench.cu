/*
 * gpu_bench.cu - forward + backward of a stack of transformer blocks on
 * one GPU (default: Llama 3 8B blocks, T = 8192, B = 1, no recomputation):
 * the time of every kernel (CUDA events, mean over the repeats), the block
 * fwd+bwd time and the MFU against the GPU's dense bf16 peak. Appends one
 * group per run to an HDF5 file (never truncates it).
 *
 *   gpu_bench [--model NAME] [--seq T] [--batch B] [--blocks L] [--ac none|full|selective]
 *             [--warmup W] [--repeats R] [--peak-tflops P] [--out FILE]
 *             [--attention mma|cudnn] [--cudnn-gqa kv|repeat] [--cudnn-mask int32|float]
 *             [--gemm-autotune]
 *
 * HDF5 layout, one group per run, /bench/NNNNNN (six digits, the next index;
 * written to a copy renamed over the file, so earlier runs are never touched):
 *   attributes  gpu, driver, cuda_driver, cuda_runtime, cublas (strings),
 *               date (UTC, ISO 8601), model, ac (strings), seq, batch,
 *               blocks, warmup, repeats (int), block_fwd_ms, block_bwd_ms,
 *               block_ms, model_tflop_per_block, causal_tflop_per_block,
 *               peak_tflops, mfu, mfu_causal (double), mfu_counts,
 *               peak_source, attention (what ran: mma or cudnn),
 *               attention_gqa_backward (cuDNN's backward under GQA: "the
 *               graph of KV heads" or "the repeated copy", cuda_model.h;
 *               "" when it did not run), attention_mask_index (the index
 *               type of cuDNN's causal mask in the plans that ran: "int32",
 *               "float", "int32 and float"; "" when cuDNN did not run),
 *               gemm_algorithms (strings)
 *   dataset kernels  compound {name char[24], phase char[8] ("fwd", "rec"
 *               for recompute in backward, "bwd"),
 *               ms double (per block, mean over repeats), calls int (per
 *               block), tflops double (achieved, 0 when not counted)}
 * Two FLOP counts, neither counting recomputation:
 *   conventional (model_tflop_per_block, and `mfu`): 6 params + 12 H Q T per
 *     token and block, attention counted as if every query saw every key
 *     (non-causal), as core/model.c's model_mfu_flops_per_token and ./sim's
 *     MFU count it and as MFU figures are usually published;
 *   causal (causal_tflop_per_block, `mfu_causal`): the same with attention
 *     over the T (T + 1) / 2 query-key pairs causal masking leaves, i.e.
 *     6 params + 6 H Q (T + 1) per token: the work a causal kernel does.
 * The per-kernel TFLOP/s column uses core/model.c's kernel list, whose
 * attention entries are causal too (forward 2 T^2 Q per head, backward 2.5 x).
 */
#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "cuda_model.h"
extern "C" {
#include "hw.h" /* a C header */
}
#include "h5file.h" /* C, with its own extern "C" */

#define MAX_KERNELS 64

struct options {
	const char *model;
	int seq, batch, blocks, warmup, repeats;
	enum ac_mode ac;
	double peak_tflops; /* 0: from the device name */
	const char *out;
	int cudnn;          /* --attention cudnn */
	int autotune;       /* --gemm-autotune */
	int gqa_repeat;     /* --cudnn-gqa repeat */
	int mask_float;     /* --cudnn-mask float */
};

struct kstat {
	char name[24];
	char phase[8];
	double ms;  /* summed over repeats and blocks */
	int calls;  /* summed likewise */
	double flops_per_call;
};

/* ---- arguments ------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f, "usage: gpu_bench [--model NAME] [--seq T] [--batch B] [--blocks L]\n"
		   "                 [--ac none|full|selective] [--warmup W] [--repeats R]\n"
		   "                 [--peak-tflops P] [--out FILE] [--attention mma|cudnn]\n"
		   "                 [--cudnn-gqa kv|repeat] [--cudnn-mask int32|float] [--gemm-autotune]\n");
}

static int parse_int(const char *flag, const char *v, int lo)
{
	char *end;
	long x = strtol(v, &end, 10);
	if (*v == '\0' || *end != '\0' || x < lo || x > 1 << 30) {
		fprintf(stderr, "gpu_bench: %s wants an integer >= %d, not '%s'\n", flag, lo, v);
		exit(2);
	}
	return (int)x;
}

static struct options parse(int argc, char **argv)
{
	struct options o = { "llama3-8b", 0, 1, 4, 3, 10, AC_NONE, 0.0, "data/gpu_bench.h5", 0, 0, 0, 0 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		}
		if (!strcmp(a, "--gemm-autotune")) {
			o.autotune = 1;
			continue;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "gpu_bench: %s: unknown flag or missing value\n", a);
			usage(stderr);
			exit(2);
		}
		const char *v = argv[++i];
		if (!strcmp(a, "--model"))
			o.model = v;
		else if (!strcmp(a, "--seq"))
			o.seq = parse_int(a, v, 1);
		else if (!strcmp(a, "--batch"))
			o.batch = parse_int(a, v, 1);
		else if (!strcmp(a, "--blocks"))
			o.blocks = parse_int(a, v, 1);
		else if (!strcmp(a, "--warmup"))
			o.warmup = parse_int(a, v, 0);
		else if (!strcmp(a, "--repeats"))
			o.repeats = parse_int(a, v, 1);
		else if (!strcmp(a, "--out"))
			o.out = v;
		else if (!strcmp(a, "--attention")) {
			if (strcmp(v, "mma") && strcmp(v, "cudnn")) {
				fprintf(stderr, "gpu_bench: --attention is mma or cudnn, not '%s'\n", v);
				exit(2);
			}
			o.cudnn = !strcmp(v, "cudnn");
		} else if (!strcmp(a, "--cudnn-gqa")) {
			if (strcmp(v, "kv") && strcmp(v, "repeat")) {
				fprintf(stderr, "gpu_bench: --cudnn-gqa is kv or repeat, not '%s'\n", v);
				exit(2);
			}
			o.gqa_repeat = !strcmp(v, "repeat");
		} else if (!strcmp(a, "--cudnn-mask")) {
			if (strcmp(v, "int32") && strcmp(v, "float")) {
				fprintf(stderr, "gpu_bench: --cudnn-mask is int32 or float, not '%s'\n", v);
				exit(2);
			}
			o.mask_float = !strcmp(v, "float");
		}
		else if (!strcmp(a, "--peak-tflops")) {
			char *end;
			o.peak_tflops = strtod(v, &end);
			if (*end != '\0' || o.peak_tflops <= 0.0) {
				fprintf(stderr, "gpu_bench: --peak-tflops wants a positive number, not '%s'\n", v);
				exit(2);
			}
		} else if (!strcmp(a, "--ac")) {
			if (!strcmp(v, "none"))
				o.ac = AC_NONE;
			else if (!strcmp(v, "full"))
				o.ac = AC_FULL;
			else if (!strcmp(v, "selective"))
				o.ac = AC_SELECTIVE;
			else {
				fprintf(stderr, "gpu_bench: --ac is none, full or selective, not '%s'\n", v);
				exit(2);
			}
		} else {
			fprintf(stderr, "gpu_bench: unknown flag '%s'\n", a);
			usage(stderr);
			exit(2);
		}
	}
	return o;
}

/* ---- device facts ----------------------------------------------------------------- */

/*
 * Dense bf16 peak of the device, 10^12 FLOP/s, and where the figure comes
 * from (*entry): the catalog entry (core/catalog.ini) the device name maps
 * to, or, for parts the catalog does not hold, the datasheet figure below;
 * 0 when unknown. Names are matched most specific first: "H100 NVL" and
 * "H100 PCIe" before "H100". Datasheet figures (nvidia.com, "BF16 Tensor
 * Core" with sparsity, halved for dense): H100 NVL 1,671 -> 835; H100 PCIe
 * 1,513 -> 756; H200 NVL 1,671 -> 835.
 */
static double peak_of(const struct cudaDeviceProp *prop, const char **entry)
{
	static const struct { const char *match, *catalog, *sheet; double tflops; } map[] = {
		{ "H100 NVL", NULL, "H100 NVL datasheet (835 dense bf16)", 835.0 },
		{ "H100 PCIe", NULL, "H100 PCIe datasheet (756 dense bf16)", 756.0 },
		{ "H200 NVL", NULL, "H200 NVL datasheet (835 dense bf16)", 835.0 },
		{ "H200", "h200", NULL, 0.0 },
		{ "H100", "h100-sxm", NULL, 0.0 }, /* "H100 80GB HBM3": the SXM part */
		{ "A100", "a100-80g", NULL, 0.0 },
	};
	const char *cat = NULL;
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
		if (!strstr(prop->name, map[i].match))
			continue;
		if (map[i].sheet) {
			*entry = map[i].sheet;
			return map[i].tflops;
		}
		cat = map[i].catalog;
		break;
	}
	/* an unfamiliar name: the SXM parts' SM counts (H100 PCIe has 114, A100 40/80 GB 108) */
	if (!cat && prop->major == 9 && prop->multiProcessorCount == 132)
		cat = "h100-sxm";
	if (!cat && prop->major == 8 && prop->minor == 0 && prop->multiProcessorCount == 108)
		cat = "a100-80g";
	struct gpu_spec g;
	if (cat && hw_gpu_lookup(cat, &g) == 0) {
		*entry = cat;
		return g.bf16_tflops;
	}
	*entry = NULL;
	return 0.0;
}

/* ---- initial values ------------------------------------------------------------------ */

/* x[i] = offset + scale * U(-1, 1) from a hash of (seed, i): no host transfer for gigabytes. */
static __global__ void fill_uniform_kernel(bf16 *x, size_t n, float offset, float scale,
					   uint32_t seed)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint32_t h = (uint32_t)i * 2654435761u ^ seed;
		h ^= h >> 16;
		h *= 0x7feb352du;
		h ^= h >> 15;
		h *= 0x846ca68bu;
		h ^= h >> 16;
		x[i] = __float2bfloat16(offset + scale * ((float)h * (2.0f / 4294967296.0f) - 1.0f));
	}
}

static void fill_uniform(bf16 *x, size_t n, float offset, float scale, uint32_t seed,
			 cudaStream_t st)
{
	fill_uniform_kernel<<<1024, 256, 0, st>>>(x, n, offset, scale, seed);
	cudaCheck(cudaGetLastError());
}

/* ---- statistics --------------------------------------------------------------------- */

static struct kstat *stat_of(struct kstat *ks, int *n, const char *name, const char *phase)
{
	for (int i = 0; i < *n; i++)
		if (!strcmp(ks[i].name, name) && !strcmp(ks[i].phase, phase))
			return &ks[i];
	cuda_assert(*n < MAX_KERNELS);
	struct kstat *k = &ks[(*n)++];
	memset(k, 0, sizeof(*k));
	snprintf(k->name, sizeof(k->name), "%.23s", name);
	snprintf(k->phase, sizeof(k->phase), "%.7s", phase);
	return k;
}

/*
 * Add the timed kernels since the last read to the statistics. Forward
 * kernels are "fwd"; in backward, each block's kernels before its
 * down_dgrad are its recompute ("rec"), the rest "bwd".
 */
static void record_profile(struct cuda_ctx *ctx, struct kstat *ks, int *nks, int backward)
{
	int pending = cuda_ctx_profile_count(ctx);
	struct cuda_kernel_time *kt =
		(struct cuda_kernel_time *)malloc(sizeof(*kt) * (size_t)(pending > 0 ? pending : 1));
	cuda_assert(kt != NULL);
	int n = cuda_ctx_profile_read(ctx, kt, pending);
	const char *phase = backward ? "rec" : "fwd";
	for (int i = 0; i < n; i++) {
		if (backward && !strcmp(kt[i].name, "down_dgrad"))
			phase = "bwd";
		struct kstat *k = stat_of(ks, nks, kt[i].name, phase);
		k->ms += kt[i].ms;
		k->calls++;
		if (backward && !strcmp(kt[i].name, "attn_norm_bwd"))
			phase = "rec"; /* the next block's backward begins */
	}
	free(kt);
}

/* FLOPs of the named kernel of a block from core/model.c's list (0 when absent). */
static double kernel_flops(const struct model_shape *m, int B, enum phase ph, const char *name)
{
	struct kernel ks[MODEL_MAX_KERNELS];
	int n = model_segment_kernels(m, B, SEG_BLOCK, ph, AC_NONE, LOSS_FULL, 2, ks,
				      MODEL_MAX_KERNELS);
	for (int i = 0; i < n; i++)
		if (!strcmp(ks[i].name, name))
			return (double)ks[i].flops;
	return 0.0;
}

/* ---- HDF5 ---------------------------------------------------------------------------- */

/* The open session of the append in progress: h5check records a failed call there (h5file.h). */
static struct h5file_session *h5s;

#define h5check(call) h5file_check(h5s, (int64_t)(call), #call)

static void attr_str(hid_t g, const char *name, const char *value)
{
	hid_t t = H5Tcopy(H5T_C_S1);
	h5check(t);
	h5check(H5Tset_size(t, strlen(value) + 1));
	hid_t s = H5Screate(H5S_SCALAR);
	hid_t a = H5Acreate2(g, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
	h5check(a);
	h5check(H5Awrite(a, t, value));
	H5Aclose(a);
	H5Sclose(s);
	H5Tclose(t);
}

static void attr_num(hid_t g, const char *name, hid_t type, const void *value)
{
	hid_t s = H5Screate(H5S_SCALAR);
	hid_t a = H5Acreate2(g, name, type, s, H5P_DEFAULT, H5P_DEFAULT);
	h5check(a);
	h5check(H5Awrite(a, type, value));
	H5Aclose(a);
	H5Sclose(s);
}

struct krow {
	char name[24];
	char phase[8];
	double ms;
	int calls;
	double tflops;
};

struct run_info {
	const struct options *o;
	const char *gpu, *driver, *cuda_driver, *cuda_runtime, *cublas, *date;
	const char *peak_source, *attention, *attention_gqa, *attention_mask, *gemm_algorithms;
	double fwd_ms, bwd_ms, block_ms, model_tflop, causal_tflop, peak, mfu, mfu_causal;
};

struct bench_write {
	const struct run_info *r;
	const struct krow *rows;
	int n;
	char name[16];
};

/* Add /bench/NNNNNN (the next index) to the open copy of the file (h5file_append). */
static int write_bench(struct h5file_session *session, hid_t f, void *ctx)
{
	struct bench_write *w = (struct bench_write *)ctx;
	const struct run_info *r = w->r;
	const struct krow *rows = w->rows;

	h5s = session;
	hid_t g = h5file_next_group(session, f, "bench", w->name);
	if (g < 0)
		return -1;
	attr_str(g, "gpu", r->gpu);
	attr_str(g, "driver", r->driver);
	attr_str(g, "cuda_driver", r->cuda_driver);
	attr_str(g, "cuda_runtime", r->cuda_runtime);
	attr_str(g, "cublas", r->cublas);
	attr_str(g, "date", r->date);
	attr_str(g, "model", r->o->model);
	attr_str(g, "ac", ac_name(r->o->ac));
	attr_num(g, "seq", H5T_NATIVE_INT, &r->o->seq);
	attr_num(g, "batch", H5T_NATIVE_INT, &r->o->batch);
	attr_num(g, "blocks", H5T_NATIVE_INT, &r->o->blocks);
	attr_num(g, "warmup", H5T_NATIVE_INT, &r->o->warmup);
	attr_num(g, "repeats", H5T_NATIVE_INT, &r->o->repeats);
	attr_num(g, "block_fwd_ms", H5T_NATIVE_DOUBLE, &r->fwd_ms);
	attr_num(g, "block_bwd_ms", H5T_NATIVE_DOUBLE, &r->bwd_ms);
	attr_num(g, "block_ms", H5T_NATIVE_DOUBLE, &r->block_ms);
	attr_num(g, "model_tflop_per_block", H5T_NATIVE_DOUBLE, &r->model_tflop);
	attr_num(g, "causal_tflop_per_block", H5T_NATIVE_DOUBLE, &r->causal_tflop);
	attr_num(g, "peak_tflops", H5T_NATIVE_DOUBLE, &r->peak);
	attr_num(g, "mfu", H5T_NATIVE_DOUBLE, &r->mfu);
	attr_num(g, "mfu_causal", H5T_NATIVE_DOUBLE, &r->mfu_causal);
	attr_str(g, "mfu_counts", "mfu: conventional count, 6 params + 12 H Q T per token (attention "
				  "non-causal); mfu_causal: 6 params + 6 H Q (T + 1) per token");
	attr_str(g, "peak_source", r->peak_source);
	attr_str(g, "attention", r->attention);
	attr_str(g, "attention_gqa_backward", r->attention_gqa);
	attr_str(g, "attention_mask_index", r->attention_mask);
	attr_str(g, "gemm_algorithms", r->gemm_algorithms);

	hid_t s24 = H5Tcopy(H5T_C_S1), s8 = H5Tcopy(H5T_C_S1);
	h5check(H5Tset_size(s24, sizeof(rows[0].name)));
	h5check(H5Tset_size(s8, sizeof(rows[0].phase)));
	hid_t ct = H5Tcreate(H5T_COMPOUND, sizeof(struct krow));
	h5check(H5Tinsert(ct, "name", HOFFSET(struct krow, name), s24));
	h5check(H5Tinsert(ct, "phase", HOFFSET(struct krow, phase), s8));
	h5check(H5Tinsert(ct, "ms", HOFFSET(struct krow, ms), H5T_NATIVE_DOUBLE));
	h5check(H5Tinsert(ct, "calls", HOFFSET(struct krow, calls), H5T_NATIVE_INT));
	h5check(H5Tinsert(ct, "tflops", HOFFSET(struct krow, tflops), H5T_NATIVE_DOUBLE));
	hsize_t dim = (hsize_t)w->n;
	hid_t sp = H5Screate_simple(1, &dim, NULL);
	hid_t ds = H5Dcreate2(g, "kernels", ct, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	h5check(ds);
	h5check(H5Dwrite(ds, ct, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows));
	H5Dclose(ds);
	H5Sclose(sp);
	H5Tclose(ct);
	H5Tclose(s8);
	H5Tclose(s24);
	H5Gclose(g);
	return session->failed ? -1 : 0;
}

/*
 * Add /bench/NNNNNN to the HDF5 file at path (created when missing),
 * through h5file_append: earlier runs are never touched and an interrupted
 * write leaves the file as it was.
 */
static void write_h5(const char *path, const struct run_info *r, const struct krow *rows, int n)
{
	struct bench_write w = { r, rows, n, "" };

	if (h5file_append("gpu_bench", path, write_bench, &w) != 0)
		exit(1);
	printf("appended /bench/%s to %s\n", w.name, path);
}

/* ---- the run ------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
	struct options o = parse(argc, argv);
	int ndev = 0;
	cudaError_t e = cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess || ndev == 0) {
		printf("gpu_bench: no CUDA device (%s): nothing to measure here; the CPU backend "
		       "runs without one (./gpu_run --device cpu)\n",
		       e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		return 0;
	}

	struct model_shape m;
	if (model_lookup(o.model, &m) != 0) {
		fprintf(stderr, "gpu_bench: --model '%s' is not in the catalog (core/catalog.ini)\n",
			o.model);
		return 2;
	}
	if (o.seq)
		m.seq = o.seq;
	o.seq = m.seq;
	m.layers = o.blocks;
	char err[256];
	if (cuda_shape_check(&m, err, sizeof(err)) != 0) {
		fprintf(stderr, "gpu_bench: model %s: %s\n", o.model, err);
		return 2;
	}

	struct cudaDeviceProp prop;
	cudaCheck(cudaGetDeviceProperties(&prop, 0));
	const char *entry = NULL;
	double peak = o.peak_tflops > 0.0 ? o.peak_tflops : peak_of(&prop, &entry);
	int drv = 0, rt = 0;
	cudaCheck(cudaDriverGetVersion(&drv));
	cudaCheck(cudaRuntimeGetVersion(&rt));
	size_t blas = cublasLtGetVersion();
	char driver[64], cuda_driver[32], cuda_runtime[32], cublas[32], date[32];
	cuda_driver_version(driver, sizeof(driver));
	snprintf(cuda_driver, sizeof(cuda_driver), "%d.%d", drv / 1000, drv % 1000 / 10);
	snprintf(cuda_runtime, sizeof(cuda_runtime), "%d.%d", rt / 1000, rt % 1000 / 10);
	snprintf(cublas, sizeof(cublas), "%zu.%zu.%zu", blas / 10000, blas / 100 % 100, blas % 100);
	time_t now = time(NULL);
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));

	const int B = o.batch, L = o.blocks;
	const size_t N = (size_t)B * m.seq, nd = N * m.hidden, pe = cuda_block_elems(&m);
	printf("gpu_bench: %s, driver %s, CUDA %s (runtime %s), cuBLASLt %s\n", prop.name, driver,
	       cuda_driver, cuda_runtime, cublas);
	printf("%d x %s block (D %d, F %d, H %d, KV %d), T %d, B %d, ac %s, %d warmup + %d repeats\n",
	       L, o.model, m.hidden, m.ffn, m.heads, m.kv_heads, m.seq, B, ac_name(o.ac), o.warmup,
	       o.repeats);

	cudaStream_t st;
	cudaCheck(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	struct cuda_ctx *ctx = cuda_ctx_new(cuda_scratch_bytes(&m, B));
	cuda_ctx_attention(ctx, o.cudnn ? CUDA_ATTN_CUDNN : CUDA_ATTN_MMA);
	cuda_ctx_attention_gqa_repeat(ctx, o.gqa_repeat);
	cuda_ctx_attention_mask_float(ctx, o.mask_float);
	cuda_ctx_gemm_autotune(ctx, o.autotune);

	/* parameters, gradients, activations: one block store per block */
	size_t saved = cuda_block_saved_bytes(&m, B, o.ac), trans = cuda_block_transient_bytes(&m, B, o.ac);
	bf16 *params, *dres, *dout0, *out;
	float *grads;
	void *acts, *transient = NULL, *scratch;
	cudaCheck(cudaMalloc(&params, (size_t)L * pe * sizeof(bf16)));
	cudaCheck(cudaMalloc(&grads, (size_t)L * pe * sizeof(float)));
	cudaCheck(cudaMalloc(&acts, (size_t)L * saved));
	if (trans)
		cudaCheck(cudaMalloc(&transient, trans));
	cudaCheck(cudaMalloc(&scratch, cuda_block_scratch_bytes(&m, B)));
	cudaCheck(cudaMalloc(&dres, nd * sizeof(bf16)));
	cudaCheck(cudaMalloc(&dout0, nd * sizeof(bf16)));
	cudaCheck(cudaMalloc(&out, nd * sizeof(bf16)));
	cudaCheck(cudaMemsetAsync(grads, 0, (size_t)L * pe * sizeof(float), st));
	struct cuda_block_store *stores = (struct cuda_block_store *)calloc(L, sizeof(*stores));
	cuda_assert(stores != NULL);
	for (int l = 0; l < L; l++) {
		cuda_block_store_init(&stores[l], (char *)acts + (size_t)l * saved, transient, &m, B,
				      o.ac);
		bf16 *p = params + (size_t)l * pe;
		fill_uniform(p, pe, 0.0f, 0.02f, 17u + l, st);
		/* norm weights near 1 */
		fill_uniform(p + cuda_block_offset(&m, BT_ATTN_NORM), m.hidden, 1.0f, 0.1f, 91u + l, st);
		fill_uniform(p + cuda_block_offset(&m, BT_MLP_NORM), m.hidden, 1.0f, 0.1f, 93u + l, st);
	}
	fill_uniform(stores[0].x, nd, 0.0f, 1.0f, 5u, st);
	fill_uniform(dout0, nd, 0.0f, 1e-3f, 7u, st);
	cudaCheck(cudaStreamSynchronize(st));

	cudaEvent_t e0, e1, e2;
	cudaCheck(cudaEventCreate(&e0));
	cudaCheck(cudaEventCreate(&e1));
	cudaCheck(cudaEventCreate(&e2));
	struct kstat ks[MAX_KERNELS];
	int nks = 0;
	double fwd_ms = 0.0, bwd_ms = 0.0;

	/*
	 * Warmup (GEMM plans, smem opt-in), then timed passes (no events
	 * between kernels), then profiled passes (an event pair per kernel).
	 */
	for (int pass = 0; pass < o.warmup + 2 * o.repeats; pass++) {
		int timed = pass >= o.warmup && pass < o.warmup + o.repeats;
		int profiled = pass >= o.warmup + o.repeats;
		cuda_ctx_profile(ctx, profiled);
		cudaCheck(cudaMemcpyAsync(dres, dout0, nd * sizeof(bf16), cudaMemcpyDeviceToDevice, st));
		cudaCheck(cudaEventRecord(e0, st));
		for (int l = 0; l < L; l++)
			cuda_block_forward(ctx, l + 1 < L ? stores[l + 1].x : out, &stores[l],
					   params + (size_t)l * pe, &m, B, st);
		cudaCheck(cudaEventRecord(e1, st));
		if (profiled)
			record_profile(ctx, ks, &nks, 0);
		for (int l = L - 1; l >= 0; l--)
			cuda_block_backward(ctx, dres, grads + (size_t)l * pe, dres, &stores[l],
					    params + (size_t)l * pe, scratch, &m, B, st);
		cudaCheck(cudaEventRecord(e2, st));
		cudaCheck(cudaEventSynchronize(e2));
		if (timed) {
			float a, b;
			cudaCheck(cudaEventElapsedTime(&a, e0, e1));
			cudaCheck(cudaEventElapsedTime(&b, e1, e2));
			fwd_ms += a;
			bwd_ms += b;
		}
		if (profiled)
			record_profile(ctx, ks, &nks, 1);
	}
	cuda_ctx_profile(ctx, 0);

	/* per block, mean over repeats */
	double reps = o.repeats, per = reps * L;
	fwd_ms /= per;
	bwd_ms /= per;
	double block_ms = fwd_ms + bwd_ms;
	double tokens = (double)N;
	double pblock = (double)model_block_params(&m);
	double hq = (double)m.heads * model_head_dim(&m);
	double model_flop = tokens * (6.0 * pblock + 12.0 * hq * (double)m.seq);
	double causal_flop = tokens * (6.0 * pblock + 6.0 * hq * (double)(m.seq + 1));
	double mfu = peak > 0.0 ? model_flop / (block_ms * 1e-3) / (peak * 1e12) : 0.0;
	double mfu_causal = peak > 0.0 ? causal_flop / (block_ms * 1e-3) / (peak * 1e12) : 0.0;

	struct krow rows[MAX_KERNELS];
	printf("\n%-18s %5s %6s %10s %9s   (TFLOP/s: executed FLOPs, attention causal)\n", "kernel",
	       "phase", "calls", "ms/block", "TFLOP/s");
	double sum_ms = 0.0;
	for (int i = 0; i < nks; i++) {
		struct kstat *k = &ks[i];
		enum phase ph = strcmp(k->phase, "bwd") ? PH_FWD : PH_BWD; /* rec: forward kernels */
		double f = kernel_flops(&m, B, ph, k->name);
		double ms = k->ms / per;
		double calls = k->calls / per;
		double tf = f > 0.0 ? f * calls / (ms * 1e-3) / 1e12 : 0.0;
		sum_ms += ms;
		memset(&rows[i], 0, sizeof(rows[i]));
		snprintf(rows[i].name, sizeof(rows[i].name), "%.23s", k->name);
		snprintf(rows[i].phase, sizeof(rows[i].phase), "%.7s", k->phase);
		rows[i].ms = ms;
		rows[i].calls = (int)(calls + 0.5);
		rows[i].tflops = tf;
		if (tf > 0.0)
			printf("%-18s %5s %6.0f %10.3f %9.1f\n", k->name, k->phase, calls, ms, tf);
		else
			printf("%-18s %5s %6.0f %10.3f %9s\n", k->name, k->phase, calls, ms, "-");
	}
	printf("%-18s %5s %6s %10.3f   (sum of kernels; events add a little)\n", "total", "", "",
	       sum_ms);
	printf("\nblock forward %.3f ms, backward %.3f ms, fwd+bwd %.3f ms (mean of %d x %d blocks)\n",
	       fwd_ms, bwd_ms, block_ms, o.repeats, L);
	printf("model FLOPs per block step: %.3f TFLOP conventional (6 params + 12 H Q T per token, "
	       "attention non-causal), %.3f TFLOP causal (6 params + 6 H Q (T + 1))\n",
	       model_flop / 1e12, causal_flop / 1e12);
	const char *peak_source = o.peak_tflops > 0.0 ? "--peak-tflops" : entry ? entry : "unknown";
	if (peak > 0.0)
		printf("MFU %.1f%% of %.0f TFLOP/s dense bf16 (%s), conventional count; %.1f%% counting "
		       "causal attention FLOPs\n",
		       100.0 * mfu, peak, peak_source, 100.0 * mfu_causal);
	else
		printf("MFU: unknown peak for '%s'; give --peak-tflops\n", prop.name);

	const char *why = NULL;
	const char *attention = cuda_ctx_attention_used(ctx, &why) == CUDA_ATTN_CUDNN ? "cudnn" : "mma";
	if (o.cudnn && why)
		printf("attention: cuDNN was asked for, the mma kernels ran: %s\n", why);
	const char *mask = o.cudnn ? cuda_ctx_attention_mask(ctx) : NULL;
	if (mask)
		printf("attention: cuDNN's plans, their causal mask's indices %s\n", mask);
	const char *not_kv = NULL, *gqa = o.cudnn ? cuda_ctx_attention_gqa(ctx, &not_kv) : NULL;
	if (gqa)
		printf("attention: cuDNN's backward under GQA by %s%s%s\n", gqa, not_kv ? ": " : "", not_kv ? not_kv : "");
	struct run_info ri = { &o, prop.name, driver, cuda_driver, cuda_runtime, cublas, date,
			       peak_source, attention, gqa ? gqa : "", mask ? mask : "",
			       o.autotune ? "timed (top 8 of the heuristic)" : "heuristic's first", fwd_ms, bwd_ms, block_ms, model_flop / 1e12,
			       causal_flop / 1e12, peak, mfu, mfu_causal };
	write_h5(o.out, &ri, rows, nks);

	cudaCheck(cudaEventDestroy(e2));
	cudaCheck(cudaEventDestroy(e1));
	cudaCheck(cudaEventDestroy(e0));
	free(stores);
	cudaCheck(cudaFree(out));
	cudaCheck(cudaFree(dout0));
	cudaCheck(cudaFree(dres));
	cudaCheck(cudaFree(scratch));
	cudaCheck(cudaFree(transient));
	cudaCheck(cudaFree(acts));
	cudaCheck(cudaFree(grads));
	cudaCheck(cudaFree(params));
	cuda_ctx_free(ctx);
	cudaCheck(cudaStreamDestroy(st));
	return 0;
}
