/*
 * catalog.c - the named GPUs, models and runtimes of core/catalog.ini.
 *
 * The catalog is data compiled into the binary (catalog_ini[], generated
 * by the Makefile). It is parsed once, on the first look-up, with inih.
 * Invariants after that parse: every entry has every field, each within
 * its range (the ranges of hw_gpu_fields for GPUs), names are unique and
 * the tables keep the file's order. Anything else is a bug in the
 * catalog, reported with the section and key, then abort(): there is no
 * recovering from a wrong built-in table.
 *
 * Not thread-safe on the first call; both binaries look the catalog up
 * from their main thread before starting any other.
 */
#include "hw.h"
#include "model.h"
#include "policy.h"
#include "recipe.h"

#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const char catalog_ini[];

#define CATALOG_MAX 16  /* entries per kind; the catalog holds a handful */
#define FIELDS_MAX 64   /* fields per kind, one bit each in a set mask */

#define GPU_FIELD(n, t, lo, hi, d) { #n, t, offsetof(struct gpu_spec, n), lo, hi, d, 0 }
#define GPU_MODEL_FIELD(n, t, lo, hi, d) { #n, t, offsetof(struct gpu_spec, n), lo, hi, d, 1 }

const struct hw_field hw_gpu_fields[] = {
	GPU_FIELD(sms, HW_FIELD_INT, 1, 1024, "streaming multiprocessors"),
	GPU_FIELD(bf16_tflops, HW_FIELD_DOUBLE, 0.001, 100000, "peak dense bf16, 10^12 FLOP/s"),
	GPU_FIELD(fp32_tflops, HW_FIELD_DOUBLE, 0.001, 100000, "peak dense fp32, 10^12 FLOP/s"),
	GPU_FIELD(hbm_gbps, HW_FIELD_DOUBLE, 0.001, 1e6, "memory bandwidth, GB/s"),
	GPU_FIELD(hbm_gib, HW_FIELD_DOUBLE, 0.001, 1e6, "memory capacity, GiB"),
	GPU_FIELD(intra_gbps, HW_FIELD_DOUBLE, 0.001, 1e6,
		  "intra-node all-gather/reduce-scatter bus bandwidth per GPU, GB/s"),
	GPU_FIELD(nics_per_node, HW_FIELD_INT, 1, 64, "network cards per node"),
	GPU_FIELD(nic_gbps, HW_FIELD_DOUBLE, 0.001, 1e5, "bandwidth of one network card, GB/s"),
	GPU_FIELD(pcie_gbps, HW_FIELD_DOUBLE, 0.001, 1e5, "host-device copy bandwidth, GB/s"),
	GPU_MODEL_FIELD(gemm_tile_m, HW_FIELD_INT, 1, 4096, "GEMM output tile rows"),
	GPU_MODEL_FIELD(gemm_tile_n, HW_FIELD_INT, 1, 4096, "GEMM output tile columns"),
	GPU_MODEL_FIELD(tiles_per_sm, HW_FIELD_INT, 1, 64, "GEMM tiles resident per SM"),
	GPU_MODEL_FIELD(gemm_eff, HW_FIELD_DOUBLE, 0.01, 1, "fraction of peak a full GEMM wave reaches"),
	GPU_MODEL_FIELD(attn_eff, HW_FIELD_DOUBLE, 0.01, 1, "fraction of peak this project's fused attention reaches, forward"),
	GPU_MODEL_FIELD(attn_bwd_eff, HW_FIELD_DOUBLE, 0.01, 1,
		  "the same, backward (attn_eff when only that is set)"),
	GPU_MODEL_FIELD(fa2_fwd_eff, HW_FIELD_DOUBLE, 0.01, 1, "fraction of peak FlashAttention-2 forward reaches"),
	GPU_MODEL_FIELD(fa2_bwd_eff, HW_FIELD_DOUBLE, 0.01, 1, "fraction of peak FlashAttention-2 backward reaches"),
	GPU_MODEL_FIELD(cudnn_fwd_eff, HW_FIELD_DOUBLE, 0.01, 1, "fraction of peak cuDNN attention forward reaches"),
	GPU_MODEL_FIELD(cudnn_bwd_eff, HW_FIELD_DOUBLE, 0.01, 1, "fraction of peak cuDNN attention backward reaches"),
	GPU_MODEL_FIELD(attn_half_seq, HW_FIELD_DOUBLE, 0, 1e7, "sequence length at which attention reaches half its fraction"),
	GPU_MODEL_FIELD(hbm_eff, HW_FIELD_DOUBLE, 0.01, 1, "fraction of hbm_gbps a streaming kernel achieves"),
	GPU_MODEL_FIELD(nccl_sms, HW_FIELD_INT, 1, 1024, "SMs one collective holds"),
	GPU_MODEL_FIELD(nccl_hbm_factor, HW_FIELD_DOUBLE, 0, 16, "HBM bytes a collective moves per wire byte"),
	GPU_MODEL_FIELD(elementwise_sms_frac, HW_FIELD_DOUBLE, 0.01, 1,
		  "fraction of SMs a memory-bound kernel needs for full bandwidth"),
	GPU_FIELD(cpu_adam_gparams, HW_FIELD_DOUBLE, 0.001, 1000,
		  "host optimizer rate per GPU, 10^9 parameters/s"),
	GPU_FIELD(net_latency_us, HW_FIELD_DOUBLE, 0, 1e6, "ring step latency across nodes, us"),
	GPU_FIELD(nvlink_latency_us, HW_FIELD_DOUBLE, 0, 1e6, "ring step latency inside a node, us"),
	GPU_MODEL_FIELD(kernel_min_us, HW_FIELD_DOUBLE, 0, 1e6, "shortest time any kernel takes, us"),
	GPU_FIELD(tdp_w, HW_FIELD_DOUBLE, 1, 1e5, "board power at which the datasheet's peaks hold, W"),
	GPU_FIELD(power_cap_w, HW_FIELD_DOUBLE, 1, 1e5, "board power as deployed, W"),
	{ NULL, 0, 0, 0, 0, NULL, 0 },
};

enum ftype { F_INT, F_INT64, F_DOUBLE, F_TEXT };

struct field {
	const char *name;
	enum ftype type;
	size_t offset;
	size_t size;       /* F_TEXT: buffer size */
	double min, max;
};

/* One kind of section: [gpu NAME], [model NAME], [runtime NAME]. */
struct kind {
	const char *word;
	struct field fields[FIELDS_MAX];
	int nfields;
	size_t entry_size;
	size_t name_offset;      /* the entry's name[] */
	char *entries;           /* CATALOG_MAX entries of entry_size bytes */
	uint64_t set[CATALOG_MAX]; /* fields given, one bit per field */
	const char *names[CATALOG_MAX + 1];
	int count;
};

/* A model entry: the shape plus its source, which model_shape lacks. */
struct model_entry {
	struct model_shape shape;
	char source[160];
};

static struct gpu_spec gpus[CATALOG_MAX];
static struct model_entry models[CATALOG_MAX];
static struct runtime_spec runtimes[CATALOG_MAX];

#define MODEL_FIELD(n, lo, hi) \
	{ #n, F_INT, offsetof(struct model_entry, shape.n), 0, lo, hi }
#define RT_FIELD(n, t, lo, hi) { #n, t, offsetof(struct runtime_spec, n), 0, lo, hi }

static struct kind kinds[] = {
	{ .word = "gpu", .entry_size = sizeof(struct gpu_spec),
	  .name_offset = offsetof(struct gpu_spec, name), .entries = (char *)gpus },
	{ .word = "model", .entry_size = sizeof(struct model_entry),
	  .name_offset = offsetof(struct model_entry, shape.name), .entries = (char *)models,
	  .fields = {
		  MODEL_FIELD(layers, 1, 1000),
		  MODEL_FIELD(hidden, 1, 1 << 20),
		  MODEL_FIELD(ffn, 1, 1 << 22),
		  MODEL_FIELD(heads, 1, 4096),
		  MODEL_FIELD(kv_heads, 1, 4096),
		  MODEL_FIELD(vocab, 1, 1 << 24),
		  MODEL_FIELD(seq, 1, 1 << 22),
		  { "rope_theta", F_DOUBLE, offsetof(struct model_entry, shape.rope_theta), 0, MODEL_ROPE_THETA_MIN,
		    MODEL_ROPE_THETA_MAX },
		  { "source", F_TEXT, offsetof(struct model_entry, source), 160, 0, 0 },
	  },
	  .nfields = 9 },
	{ .word = "runtime", .entry_size = sizeof(struct runtime_spec),
	  .name_offset = offsetof(struct runtime_spec, name), .entries = (char *)runtimes,
	  .fields = {
		  RT_FIELD(launch_us, F_DOUBLE, 0, 1e6),
		  RT_FIELD(op_overhead_us, F_DOUBLE, 0, 1e6),
		  RT_FIELD(per_param_kernels, F_INT, 1, 1000),
		  RT_FIELD(foreach_kernels, F_INT, 1, 1000),
		  RT_FIELD(fused_kernels, F_INT, 1, 1000),
		  RT_FIELD(foreach_chunk, F_INT, 1, 1 << 20),
		  RT_FIELD(unfused_traffic, F_DOUBLE, 1, 100),
		  RT_FIELD(caching_allocator, F_INT, 0, 1),
		  RT_FIELD(copy_in_out, F_INT, 0, 1),
		  RT_FIELD(alloc_round_bytes, F_INT64, 1, 1 << 30),
		  RT_FIELD(segment_bytes, F_INT64, 1, 1 << 30),
		  { "kernels", F_TEXT, offsetof(struct runtime_spec, kernels),
		    sizeof(((struct runtime_spec *)0)->kernels), 0, 0 },
		  { "attention", F_TEXT, offsetof(struct runtime_spec, attention),
		    sizeof(((struct runtime_spec *)0)->attention), 0, 0 },
		  RT_FIELD(optim_temp_bytes, F_DOUBLE, 0, 64),
		  RT_FIELD(clip_grad_norm, F_INT, 0, 1),
		  RT_FIELD(dtensor_us, F_DOUBLE, 0, 1e6),
		  RT_FIELD(launch_queue, F_INT, 0, 1 << 20),
		  RT_FIELD(lazy_optim_state, F_INT, 0, 1),
		  RT_FIELD(norm_eff, F_DOUBLE, 0, 1),
		  RT_FIELD(cast_up_sm_gbps, F_DOUBLE, 0, 1e4),
		  RT_FIELD(gather_sm_gbps, F_DOUBLE, 0, 1e4),
		  RT_FIELD(broadcast_sm_gbps, F_DOUBLE, 0, 1e4),
		  RT_FIELD(reduce_sm_gbps, F_DOUBLE, 0, 1e4),
		  RT_FIELD(multi_tensor_eff, F_DOUBLE, 0, 1),
		  { "source", F_TEXT, offsetof(struct runtime_spec, source),
		    sizeof(((struct runtime_spec *)0)->source), 0, 0 },
	  },
	  .nfields = 25 },
};

enum { KIND_GPU, KIND_MODEL, KIND_RUNTIME, KIND_COUNT };

static int loaded;

static void bad_catalog(const char *section, const char *key, const char *fmt, ...)
	__attribute__((noreturn, format(printf, 3, 4)));

static void bad_catalog(const char *section, const char *key, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "core/catalog.ini: [%s]%s%s: ", section, key ? " " : "", key ? key : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (a bug in the built-in catalog)\n");
	abort();
}

/* The gpu kind's fields: hw_gpu_fields, then source. */
static void gpu_fields_init(struct kind *k)
{
	int n = 0;

	for (const struct hw_field *f = hw_gpu_fields; f->name; f++) {
		k->fields[n++] = (struct field){ f->name, f->type == HW_FIELD_INT ? F_INT : F_DOUBLE,
						 f->offset, 0, f->min, f->max };
	}
	k->fields[n++] = (struct field){ "source", F_TEXT, offsetof(struct gpu_spec, source),
					 sizeof(((struct gpu_spec *)0)->source), 0, 0 };
	k->nfields = n;
}

static char *entry_at(struct kind *k, int i)
{
	return k->entries + (size_t)i * k->entry_size;
}

/* The entry named `name` of kind k, added when new. */
static int entry_find(struct kind *k, const char *section, const char *name)
{
	for (int i = 0; i < k->count; i++)
		if (strcmp(k->names[i], name) == 0)
			return i;
	if (k->count == CATALOG_MAX)
		bad_catalog(section, NULL, "more than %d %s entries", CATALOG_MAX, k->word);
	if (!*name || strlen(name) >= HW_NAME_MAX || strlen(name) >= MODEL_NAME_MAX || strchr(name, ' '))
		bad_catalog(section, NULL, "a name must be one word of 1 to %d characters",
			    HW_NAME_MAX - 1);
	int i = k->count++;
	char *e = entry_at(k, i);
	memset(e, 0, k->entry_size);
	strcpy(e + k->name_offset, name);
	k->names[i] = e + k->name_offset;
	k->names[k->count] = NULL;
	return i;
}

static void field_store(const char *section, const struct field *f, char *entry, const char *value)
{
	char *end;

	if (f->type == F_TEXT) {
		if (strlen(value) >= f->size)
			bad_catalog(section, f->name, "longer than %zu characters", f->size - 1);
		strcpy(entry + f->offset, value);
		return;
	}
	errno = 0;
	double v = strtod(value, &end);
	if (!*value || *end || errno || !isfinite(v))
		bad_catalog(section, f->name, "'%s' is not a number", value);
	if (v < f->min || v > f->max)
		bad_catalog(section, f->name, "%s is out of range (%g to %g)", value, f->min, f->max);
	if (f->type != F_DOUBLE && v != floor(v))
		bad_catalog(section, f->name, "'%s' is not an integer", value);
	switch (f->type) {
	case F_INT:
		*(int *)(entry + f->offset) = (int)v;
		break;
	case F_INT64:
		*(int64_t *)(entry + f->offset) = (int64_t)v;
		break;
	case F_DOUBLE:
		*(double *)(entry + f->offset) = v;
		break;
	case F_TEXT:
		break;
	}
}

static int on_key(void *user, const char *section, const char *key, const char *value)
{
	char word[16];
	const char *space = strchr(section, ' ');
	struct kind *k = NULL;

	(void)user;
	if (space && (size_t)(space - section) < sizeof word) {
		memcpy(word, section, (size_t)(space - section));
		word[space - section] = '\0';
		for (int i = 0; i < KIND_COUNT; i++)
			if (strcmp(kinds[i].word, word) == 0)
				k = &kinds[i];
	}
	if (!k)
		bad_catalog(section, NULL, "a section is [gpu NAME], [model NAME] or [runtime NAME]");

	int e = entry_find(k, section, space + 1);
	for (int i = 0; i < k->nfields; i++) {
		if (strcmp(k->fields[i].name, key) != 0)
			continue;
		if (k->set[e] & (1ull << i))
			bad_catalog(section, key, "set twice");
		k->set[e] |= 1ull << i;
		field_store(section, &k->fields[i], entry_at(k, e), value);
		return 1;
	}
	bad_catalog(section, key, "unknown key");
}

static void catalog_load(void)
{
	if (loaded)
		return;
	gpu_fields_init(&kinds[KIND_GPU]);
	for (int i = 0; i < KIND_COUNT; i++)
		if (kinds[i].nfields > FIELDS_MAX)
			bad_catalog(kinds[i].word, NULL, "more than %d fields", FIELDS_MAX);

	int rc = ini_parse_string(catalog_ini, on_key, NULL);
	if (rc != 0) {
		fprintf(stderr, "core/catalog.ini:%d: syntax error (a bug in the built-in catalog)\n", rc);
		abort();
	}

	for (int i = 0; i < KIND_COUNT; i++) {
		struct kind *k = &kinds[i];
		if (k->count == 0)
			bad_catalog(k->word, NULL, "no %s entry", k->word);
		for (int e = 0; e < k->count; e++)
			for (int f = 0; f < k->nfields; f++)
				if (!(k->set[e] & (1ull << f))) {
					char section[64];
					snprintf(section, sizeof section, "%s %s", k->word, k->names[e]);
					bad_catalog(section, k->fields[f].name, "missing");
				}
	}
	for (int e = 0; e < kinds[KIND_RUNTIME].count; e++) {
		char section[64];
		snprintf(section, sizeof section, "runtime %s", runtimes[e].name);
		if (name_index(kernel_recipe_names, runtimes[e].kernels) < 0)
			bad_catalog(section, "kernels", "'%s' is not testbed, eager or compile", runtimes[e].kernels);
		if (name_index(attention_kernel_names, runtimes[e].attention) < 0)
			bad_catalog(section, "attention", "'%s' is not testbed, flash or cudnn", runtimes[e].attention);
	}
	for (int e = 0; e < kinds[KIND_GPU].count; e++)
		if (gpus[e].nccl_sms > gpus[e].sms) {
			char section[64];
			snprintf(section, sizeof section, "gpu %s", gpus[e].name);
			bad_catalog(section, "nccl_sms", "exceeds sms");
		}
	loaded = 1;
}

static int index_of(const char *const *names, const char *name)
{
	for (int i = 0; names[i]; i++)
		if (strcmp(names[i], name) == 0)
			return i;
	return -1;
}

int hw_gpu_lookup(const char *name, struct gpu_spec *out)
{
	catalog_load();
	int i = index_of(kinds[KIND_GPU].names, name);
	if (i < 0)
		return -1;
	*out = gpus[i];
	return 0;
}

int hw_runtime_lookup(const char *name, struct runtime_spec *out)
{
	catalog_load();
	int i = index_of(kinds[KIND_RUNTIME].names, name);
	if (i < 0)
		return -1;
	*out = runtimes[i];
	return 0;
}

double hw_clock_factor(const struct gpu_spec *g)
{
	/* dynamic power goes as f V^2 and V with f: the clock a cap sustains goes as its cube root */
	return g->power_cap_w >= g->tdp_w ? 1.0 : cbrt(g->power_cap_w / g->tdp_w);
}

const char *const *hw_gpu_names(void)
{
	catalog_load();
	return kinds[KIND_GPU].names;
}

int model_lookup(const char *name, struct model_shape *m)
{
	catalog_load();
	int i = index_of(kinds[KIND_MODEL].names, name);
	if (i < 0)
		return -1;
	*m = models[i].shape;
	return 0;
}

const char *const *model_names(void)
{
	catalog_load();
	return kinds[KIND_MODEL].names;
}
