/*
 * config_keys.c - the key table: every setting of an experiment, its
 * section, flag, type, place in struct experiment and allowed values;
 * values parsed from text and written back as text; the defaults; the
 * resolved configuration as INI text (config_write_ini, config_each).
 *
 * The table is assembled once, lazily: the keys before the GPU spec
 * overrides, the [cluster] keys of hw_gpu_fields (core/catalog.c, the
 * table the catalog is read with), then the rest. A key's number is its
 * place in the table. See config_internal.h for the invariants the module
 * keeps.
 */
#include "config_internal.h"

#include <assert.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "text.h"
#include "xalloc.h"

/* Enums are stored and read through int: the same size, checked here. */
#define INT_SIZED(t) _Static_assert(sizeof(t) == sizeof(int), #t " is stored as an int")
INT_SIZED(enum sharding);
INT_SIZED(enum accum);
INT_SIZED(enum wrap);
INT_SIZED(enum reshard);
INT_SIZED(enum optim);
INT_SIZED(enum precision);
INT_SIZED(enum dtype);
INT_SIZED(enum ac_mode);
INT_SIZED(enum loss_mode);
INT_SIZED(enum offload);
INT_SIZED(enum runtime);

const char *const config_sections[] = { "model", "cluster", "policy", "run", NULL };
static const char *const device_names[] = { "cpu", "cuda", NULL };

int config_is_section_key(const char *name)
{
	for (int i = 0; config_sections[i]; i++) {
		size_t n = strlen(config_sections[i]);
		if (!strncmp(name, config_sections[i], n) && name[n] == '.')
			return 1;
	}
	return 0;
}
static const char *const bool_words[] = { "true", "false", "yes", "no", "1", "0", NULL };

#define OFF(m) offsetof(struct experiment, m)
#define INT(s, n, m, lo, hi) { s, n, KT_INT, OFF(m), 0, lo, hi, NULL, NULL, NULL, NULL }
#define DBL(s, n, m, lo, hi) { s, n, KT_DOUBLE, OFF(m), 0, lo, hi, NULL, NULL, NULL, NULL }
#define ENUM(n, m, tbl, w) { "policy", n, KT_ENUM, OFF(m), 0, 0, 0, tbl, w, NULL, NULL }
#define BOOL(n, m) { "policy", n, KT_BOOL, OFF(m), 0, 0, 1, NULL, NULL, NULL, NULL }

/* The keys before the GPU spec overrides, and after them. */
static const struct key keys_head[] = {
	{ "model", "name", KT_MODEL, OFF(model_name), MODEL_NAME_MAX, 0, 0, NULL, "catalog model",
	  "--model", NULL },
	INT("model", "layers", model.layers, 1, 1000),
	INT("model", "hidden", model.hidden, 1, 1 << 20),
	INT("model", "ffn", model.ffn, 1, 1 << 22),
	INT("model", "heads", model.heads, 1, 4096),
	INT("model", "kv_heads", model.kv_heads, 1, 4096),
	INT("model", "vocab", model.vocab, 1, 1 << 24),
	INT("model", "seq", model.seq, 1, 1 << 22),
	DBL("model", "rope_theta", model.rope_theta, MODEL_ROPE_THETA_MIN, MODEL_ROPE_THETA_MAX),
	{ "cluster", "gpu", KT_GPU, OFF(gpu_name), HW_NAME_MAX, 0, 0, NULL, "catalog GPU", "--gpu",
	  NULL },
	INT("cluster", "nodes", cluster.nodes, 1, 65536),
	INT("cluster", "gpus_per_node", cluster.gpus_per_node, 1, 64),
};

static const struct key keys_tail[] = {
	/* the range holds every derived nics_per_node * nic_gbps / gpus_per_node */
	DBL("cluster", "inter_gbps", cluster.inter_gbps, 1e-6, 1e7),
	DBL("cluster", "node_inter_gbps", cluster.node_inter_gbps, 0.001, 1e7),
	{ "cluster", "calibration", KT_TEXT, OFF(calibration), CONFIG_PATH_MAX, 0, 0, NULL, NULL, NULL, NULL },
	{ "policy", "sharding", KT_ENUM, OFF(policy.sharding), 0, 0, 0, sharding_names,
	  "sharding policy", "--sharding", "--policy" },
	/* up to the largest world, 65536 nodes x 64 GPUs: what fsdp derives */
	INT("policy", "shard_group", policy.shard_group, 0, 1 << 22),
	{ "policy", "accum", KT_ACCUM, OFF(policy.accum), 0, 0, 0, accum_names,
	  "gradient accumulation policy", NULL, NULL },
	INT("policy", "microbatches", policy.microbatches, 1, 4096),
	ENUM("accum_dtype", policy.accum_dtype, dtype_names, "dtype"),
	{ "policy", "wrap", KT_WRAP, OFF(policy.wrap), 0, 0, 0, wrap_names, "wrapping policy",
	  NULL, NULL },
	ENUM("reshard", policy.reshard, reshard_names, "reshard setting"),
	ENUM("optim", policy.optim, optim_names, "optimizer step"),
	BOOL("optim_in_backward", policy.optim_in_backward),
	ENUM("precision", policy.precision, precision_names, "precision"),
	ENUM("reduce_dtype", policy.reduce_dtype, dtype_names, "dtype"),
	{ "policy", "ac", KT_AC, OFF(policy.ac), 0, 0, 0, ac_names, "activation checkpointing mode", NULL,
	  NULL },
	ENUM("loss", policy.loss, loss_names, "loss mode"),
	ENUM("offload", policy.offload, offload_names, "offload mode"),
	INT("policy", "prefetch", policy.prefetch, 0, 8),
	BOOL("flat_params", policy.flat_params),
	BOOL("concat_last_only", policy.concat_last_only),
	ENUM("runtime", policy.runtime, runtime_names, "runtime"),
	BOOL("expandable_segments", policy.expandable_segments),
	ENUM("compile", policy.compile, compile_names, "torch.compile scope"),
	ENUM("sdpa", policy.sdpa, sdpa_names, "backend of scaled_dot_product_attention"),
	BOOL("hold_logits", policy.hold_logits),
	INT("run", "batch", run.batch, 1, 65536),
	INT("run", "steps", run.steps, 1, 1000000),
	INT("run", "warmup", run.warmup, 0, 1000000),
	{ "run", "seed", KT_ULONG, OFF(run.seed), 0, 0, 0, NULL, NULL, NULL, NULL },
	{ "run", "device", KT_CHOICE, OFF(run.device), sizeof(((struct run_settings *)0)->device),
	  0, 0, device_names, "device", NULL, NULL },
	{ "run", "out", KT_TEXT, OFF(run.out), CONFIG_PATH_MAX, 0, 0, NULL, NULL, NULL, NULL },
	DBL("run", "lr", run.lr, 0, 10),
	DBL("run", "weight_decay", run.weight_decay, 0, 10),
	DBL("run", "eps", run.eps, 1e-30, 10), /* 0: a parameter never given a gradient (shard padding) steps by 0 / 0 */
	DBL("run", "timeout_s", run.timeout_s, 0, 1e6),
};

/* The table, assembled once: keys_head, the GPU spec keys, keys_tail. */
static struct key keys[KEYS_MAX];
static int nkeys;
static char flag_text[KEYS_MAX][FLAG_MAX];
static const char *flag_list[2 * KEYS_MAX + 2]; /* "--flag" strings, NULL-terminated */
static const char *flag_bare[2 * KEYS_MAX + 2]; /* the same without "--" */

static void keys_add(const struct key *k)
{
	assert(nkeys < KEYS_MAX);
	keys[nkeys] = *k;
	if (!k->flag) {
		char *f = flag_text[nkeys];
		int n = snprintf(f, FLAG_MAX, "--%s", k->name);
		assert(n < FLAG_MAX);
		for (char *c = f; *c; c++)
			if (*c == '_')
				*c = '-';
		keys[nkeys].flag = f;
	}
	nkeys++;
}

static void keys_init(void)
{
	if (nkeys)
		return;
	for (size_t i = 0; i < sizeof keys_head / sizeof keys_head[0]; i++)
		keys_add(&keys_head[i]);
	for (const struct hw_field *f = hw_gpu_fields; f->name; f++) {
		struct key k = { "cluster", f->name, f->type == HW_FIELD_INT ? KT_INT : KT_DOUBLE,
				 OFF(cluster.gpu) + f->offset, 0, f->min, f->max, NULL, NULL, NULL, NULL };
		keys_add(&k);
	}
	for (size_t i = 0; i < sizeof keys_tail / sizeof keys_tail[0]; i++)
		keys_add(&keys_tail[i]);

	int n = 0;
	flag_list[n++] = "--set";
	for (int i = 0; i < nkeys; i++) {
		flag_list[n++] = keys[i].flag;
		if (keys[i].alias)
			flag_list[n++] = keys[i].alias;
	}
	flag_list[n] = NULL;
	for (int i = 0; i < n; i++)
		flag_bare[i] = flag_list[i] + 2;
	flag_bare[n] = NULL;

	/* the [policy] keys are the policy's fields, in the order of policy_field_names */
	int f = 0;
	for (int i = 0; i < nkeys; i++)
		if (strcmp(keys[i].section, "policy") == 0) {
			assert(f < PF_COUNT && strcmp(keys[i].name, policy_field_names[f]) == 0);
			f++;
		}
	assert(f == PF_COUNT);
}

int config_key_find(const char *section, const char *name)
{
	keys_init();
	for (int i = 0; i < nkeys; i++)
		if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].name, name) == 0)
			return i;
	return -1;
}

int config_key_id(const char *section, const char *name)
{
	int k = config_key_find(section, name);
	assert(k >= 0);
	return k;
}

int config_key_of_flag(const char *flag)
{
	keys_init();
	for (int i = 0; i < nkeys; i++)
		if (strcmp(keys[i].flag, flag) == 0 || (keys[i].alias && strcmp(keys[i].alias, flag) == 0))
			return i;
	return -1;
}

/* NULL-terminated names of the keys of one section, into out. */
static void section_keys(const char *section, const char **out)
{
	int n = 0;
	for (int i = 0; i < nkeys; i++)
		if (strcmp(keys[i].section, section) == 0)
			out[n++] = keys[i].name;
	out[n] = NULL;
}

static void *field(struct experiment *e, const struct key *k)
{
	return (char *)e + k->offset;
}

static const void *cfield(const struct experiment *e, const struct key *k)
{
	return (const char *)e + k->offset;
}

int config_key_count(void)
{
	keys_init();
	return nkeys;
}

const struct key *config_key(int k)
{
	keys_init();
	assert(k >= 0 && k < nkeys);
	return &keys[k];
}

const char *const *config_flags_bare(void)
{
	keys_init();
	return flag_bare;
}

void *config_key_field(struct experiment *e, int k)
{
	return field(e, config_key(k));
}

int config_is_bool_word(const char *s)
{
	for (int i = 0; bool_words[i]; i++)
		if (strcasecmp(bool_words[i], s) == 0)
			return 1;
	return 0;
}

/* ---- texts ------------------------------------------------------------ */

char *config_head_of(const char *s, const char *stop, char *buf, size_t n)
{
	size_t len = strcspn(s, stop);
	if (len >= n)
		len = n - 1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return buf;
}

void config_allowed_text(const char *const *names, const char *k_form, const char *value,
			 char *buf, size_t n)
{
	char list[512], sugg[160] = "", name[64];

	config_head_of(value, ":", name, sizeof name);
	const char *close = name_closest(names, k_form ? name : value);

	names_joined(names, list, sizeof list);
	if (k_form) { /* the entry that takes a K prints as name:K */
		size_t l = strlen(list), kl = strlen(k_form);
		if (l > kl && strcmp(list + l - kl, k_form) == 0)
			snprintf(list + l, sizeof list - l, ":K");
	}
	if (close) {
		const char *colon = strchr(value, ':');
		if (k_form && strcmp(close, k_form) == 0)
			snprintf(sugg, sizeof sugg, "; did you mean '%s%s'?", close, colon ? colon : ":K");
		else
			snprintf(sugg, sizeof sugg, "; did you mean '%s'?", close);
	}
	snprintf(buf, n, " (allowed: %s%s)", list, sugg);
}

/* ---- numbers ------------------------------------------------------------ */

/*
 * Where the decimal number at s ends: an optional '-', digits (with a
 * '.' and more digits when real), and when real an exponent; s itself
 * when none starts there.
 */
static const char *number_end(const char *s, int real)
{
	const char *p = s + (*s == '-'), *digits = p;

	p += strspn(p, "0123456789");
	if (real && *p == '.') {
		p++;
		p += strspn(p, "0123456789");
	}
	if (p == digits || (p == digits + 1 && *digits == '.'))
		return s;
	if (real && (*p == 'e' || *p == 'E')) {
		const char *x = p + 1 + (p[1] == '-' || p[1] == '+');
		size_t n = strspn(x, "0123456789");
		if (n)
			p = x + n;
	}
	return p;
}

/* Whether all of s is one decimal number. */
static int whole_number(const char *s, int real)
{
	const char *end = number_end(s, real);
	return end != s && *end == '\0';
}

enum config_number config_parse_real(const char *s, double *v)
{
	double x;

	if (!whole_number(s, 1))
		return CONFIG_NUMBER_BAD;
	errno = 0;
	x = strtod(s, NULL);
	if (errno == ERANGE || !isfinite(x))
		return CONFIG_NUMBER_RANGE;
	*v = x;
	return CONFIG_NUMBER_OK;
}

enum config_number config_parse_integer(const char *s, long long *v)
{
	long long x;

	if (!whole_number(s, 0))
		return CONFIG_NUMBER_BAD;
	errno = 0;
	x = strtoll(s, NULL, 10);
	if (errno == ERANGE)
		return CONFIG_NUMBER_RANGE;
	*v = x;
	return CONFIG_NUMBER_OK;
}

enum config_number config_parse_unsigned(const char *s, unsigned long long *v)
{
	unsigned long long x;

	if (*s == '-' || !whole_number(s, 0))
		return CONFIG_NUMBER_BAD;
	errno = 0;
	x = strtoull(s, NULL, 10);
	if (errno == ERANGE)
		return CONFIG_NUMBER_RANGE;
	*v = x;
	return CONFIG_NUMBER_OK;
}

const char *config_number_why(const char *s, enum config_number st)
{
	const char *digits = s + (*s == '-');

	if (st == CONFIG_NUMBER_RANGE) {
		/* a mantissa with a digit other than 0 that reads as less than DBL_MIN: it underflows */
		size_t mantissa = strcspn(s, "eE");
		int nonzero = strcspn(s, "123456789") < mantissa;
		double x = fabs(strtod(s, NULL));
		if (isinf(x))
			return ": a double cannot hold it (the largest is 1.8e308)";
		return nonzero && x < DBL_MIN ? ": a double cannot hold it (a nonzero number under 2.2e-308 in size "
						"reads as 0 or loses digits)" : "";
	}
	if (st != CONFIG_NUMBER_BAD)
		return "";
	if (strchr(s, '#'))
		return " (comments go on a line of their own, or after ' ;')";
	if (digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X'))
		return " (numbers are decimal: hexadecimal is not read)";
	if (*s == '+')
		return " (write it without the '+')";
	if (*s == ' ' || *s == '\t' || (*s && strchr(" \t", s[strlen(s) - 1])))
		return " (no space around a number)";
	return "";
}

/* ---- values ------------------------------------------------------------ */

void config_real_text(double v, char *buf, size_t n)
{
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, n, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

/* The longest text key's value that fits on a `name = value` line. */
static size_t text_max(const struct key *k)
{
	return LINE_MAX_CHARS - strlen(k->name) - 3;
}

/*
 * Why a text value (quotes already taken off) could not be written to an
 * experiment file or a results file and read back as itself, or NULL when
 * it can: what config_write_ini() writes must read back.
 */
static const char *text_unwritable(const char *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f)
			return "holds a control character";
	if (!text_utf8_valid(v, n))
		return "is not valid UTF-8";
	if (n && (v[0] == ' ' || v[n - 1] == ' '))
		return "starts or ends with a space";
	if (n >= 2 && v[0] == '"' && v[n - 1] == '"')
		return "is quoted twice";
	if (n && v[0] == ';')
		return "starts with ';', which starts a comment in a file";
	for (size_t i = 0; i + 1 < n; i++)
		if (v[i] == ' ' && v[i + 1] == ';')
			return "holds ' ;', which starts a comment in a file";
	return NULL;
}

/* "1 to 1000" */
static const char *range_text(const struct key *k, char *buf, size_t n)
{
	char lo[40], hi[40];
	config_real_text(k->min, lo, sizeof lo);
	config_real_text(k->max, hi, sizeof hi);
	snprintf(buf, n, "%s to %s", lo, hi);
	return buf;
}

void config_value_text(const struct experiment *e, int k, char *buf, size_t n)
{
	const struct key *key = &keys[k];
	const void *p = cfield(e, key);

	switch (key->type) {
	case KT_INT:
		snprintf(buf, n, "%d", *(const int *)p);
		break;
	case KT_ULONG:
		snprintf(buf, n, "%lu", *(const unsigned long *)p);
		break;
	case KT_DOUBLE:
		config_real_text(*(const double *)p, buf, n);
		break;
	case KT_BOOL:
		snprintf(buf, n, "%s", *(const int *)p ? "true" : "false");
		break;
	case KT_ENUM: {
		int v = *(const int *)p;
		assert(v >= 0 && key->names[v]);
		snprintf(buf, n, "%s", key->names[v]);
		break;
	}
	case KT_ACCUM:
		policy_accum_str(&e->policy, buf, (int)n);
		break;
	case KT_WRAP:
		policy_wrap_str(&e->policy, buf, (int)n);
		break;
	case KT_AC:
		policy_ac_str(&e->policy, buf, (int)n);
		break;
	case KT_MODEL:
	case KT_GPU:
	case KT_CHOICE:
	case KT_TEXT:
		snprintf(buf, n, "%s", (const char *)p);
		break;
	}
}

const char *const *config_names_with_custom(const char *const *catalog)
{
	static const char *buf[64];
	int n = 0;

	while (catalog[n] && n < 62) {
		buf[n] = catalog[n];
		n++;
	}
	buf[n++] = CUSTOM;
	buf[n] = NULL;
	return buf;
}

/* "a" or "an" before what a key's value names ("an activation checkpointing mode") */
static const char *article(const char *what)
{
	return what[0] && strchr("aeiou", what[0]) ? "an" : "a";
}

int config_value_parse(struct experiment *e, int k, const char *value, char *err, size_t errlen)
{
	const struct key *key = &keys[k];
	void *p = field(e, key);
	char allowed[768], range[96];

	switch (key->type) {
	case KT_INT: {
		long long v;
		enum config_number st = config_parse_integer(value, &v);
		if (st == CONFIG_NUMBER_BAD) {
			snprintf(err, errlen, "%s.%s = '%s' is not an integer%s", key->section, key->name,
				 value, config_number_why(value, st));
			return -1;
		}
		if (st == CONFIG_NUMBER_RANGE || v < key->min || v > key->max) {
			snprintf(err, errlen, "%s.%s = %s is out of range (%s)", key->section, key->name,
				 value, range_text(key, range, sizeof range));
			return -1;
		}
		*(int *)p = (int)v;
		return 0;
	}
	case KT_ULONG: {
		unsigned long long v;
		enum config_number st = config_parse_unsigned(value, &v);
		if (st == CONFIG_NUMBER_BAD) {
			snprintf(err, errlen, "%s.%s = '%s' is not a non-negative integer%s", key->section,
				 key->name, value, config_number_why(value, st));
			return -1;
		}
		if (st == CONFIG_NUMBER_RANGE || v > ULONG_MAX) {
			snprintf(err, errlen, "%s.%s = %s is out of range (0 to %lu)", key->section,
				 key->name, value, ULONG_MAX);
			return -1;
		}
		*(unsigned long *)p = (unsigned long)v;
		return 0;
	}
	case KT_DOUBLE: {
		double v;
		enum config_number st = config_parse_real(value, &v);
		if (st == CONFIG_NUMBER_BAD) {
			snprintf(err, errlen, "%s.%s = '%s' is not a number%s", key->section, key->name,
				 value, config_number_why(value, st));
			return -1;
		}
		if (st == CONFIG_NUMBER_RANGE || v < key->min || v > key->max) {
			snprintf(err, errlen, "%s.%s = %s is out of range (%s)%s", key->section, key->name,
				 value, range_text(key, range, sizeof range), config_number_why(value, st));
			return -1;
		}
		*(double *)p = v;
		return 0;
	}
	case KT_BOOL: {
		int i;
		for (i = 0; bool_words[i]; i++)
			if (strcasecmp(bool_words[i], value) == 0)
				break;
		if (!bool_words[i]) {
			snprintf(err, errlen, "%s.%s = '%s' is not a boolean (allowed: true|false|yes|no|1|0)",
				 key->section, key->name, value);
			return -1;
		}
		*(int *)p = i % 2 == 0;
		return 0;
	}
	case KT_ENUM:
	case KT_CHOICE: {
		int i = name_index(key->names, value);
		if (i < 0) {
			config_allowed_text(key->names, NULL, value, allowed, sizeof allowed);
			snprintf(err, errlen, "%s.%s = '%s' is not %s %s%s", key->section, key->name, value,
				 article(key->what), key->what, allowed);
			return -1;
		}
		if (key->type == KT_ENUM)
			*(int *)p = i;
		else
			snprintf(p, key->size, "%s", value);
		return 0;
	}
	case KT_ACCUM:
	case KT_WRAP:
	case KT_AC: {
		struct policy pol = e->policy;
		int rc = key->type == KT_ACCUM ? policy_parse_accum(&pol, value) :
			 key->type == KT_WRAP ? policy_parse_wrap(&pol, value) : policy_parse_ac(&pol, value);
		const char *k_form = key->type == KT_ACCUM ? "partial" : key->type == KT_WRAP ? "every" : "per-layer";
		if (rc == -1) {
			char name[64];
			config_head_of(value, ":", name, sizeof name);
			if (strchr(value, ':') && name_index(key->names, name) >= 0) {
				snprintf(err, errlen, "%s.%s = '%s': only %s takes a ':K'", key->section,
					 key->name, value, k_form);
				return -1;
			}
			config_allowed_text(key->names, k_form, value, allowed, sizeof allowed);
			snprintf(err, errlen, "%s.%s = '%s' is not %s %s%s", key->section, key->name, value,
				 article(key->what), key->what, allowed);
			return -1;
		}
		if (rc == -2) {
			snprintf(err, errlen, "%s.%s = '%s' needs a whole number K >= 1 (write %s:K)",
				 key->section, key->name, value, k_form);
			return -1;
		}
		if (key->type == KT_ACCUM) {
			e->policy.accum = pol.accum;
			e->policy.partial_k = pol.partial_k;
		} else if (key->type == KT_AC) {
			e->policy.ac = pol.ac;
			e->policy.ac_k = pol.ac_k;
		} else {
			e->policy.wrap = pol.wrap;
			e->policy.wrap_k = pol.wrap_k;
		}
		return 0;
	}
	case KT_MODEL:
	case KT_GPU: {
		int known;
		const char *const *cat;
		if (key->type == KT_MODEL) {
			struct model_shape m;
			known = model_lookup(value, &m) == 0;
			cat = model_names();
		} else {
			struct gpu_spec g;
			known = hw_gpu_lookup(value, &g) == 0;
			cat = hw_gpu_names();
		}
		if (!known && strcmp(value, CUSTOM) != 0) {
			config_allowed_text(config_names_with_custom(cat), NULL, value, allowed, sizeof allowed);
			snprintf(err, errlen, "%s.%s = '%s' is not %s %s%s", key->section, key->name, value,
				 article(key->what), key->what, allowed);
			return -1;
		}
		snprintf(p, key->size, "%s", value);
		return 0;
	}
	case KT_TEXT: {
		size_t len = strlen(value);
		const char *why;
		if (len >= 2 && value[0] == '"' && value[len - 1] == '"') {
			value++;
			len -= 2;
		}
		if (len >= key->size || len > text_max(key)) {
			snprintf(err, errlen, "%s.%s is longer than %zu characters (a `%s = ...` line of an "
				 "experiment file holds at most %d)", key->section, key->name,
				 len >= key->size ? key->size - 1 : text_max(key), key->name, LINE_MAX_CHARS);
			return -1;
		}
		why = text_unwritable(value, len);
		if (why) {
			snprintf(err, errlen, "%s.%s = '%.*s' %s", key->section, key->name, (int)len, value, why);
			return -1;
		}
		snprintf(p, key->size, "%.*s", (int)len, value);
		return 0;
	}
	}
	assert(0 && "key type");
	return -1;
}

/* An unknown key: the section it belongs to, else the closest key, else the section's keys. */
void config_unknown_key_text(const char *section, const char *name, char *buf, size_t n)
{
	const char *names[KEYS_MAX + 1];
	char list[1024];

	for (int i = 0; i < nkeys; i++)
		if (strcmp(keys[i].name, name) == 0) {
			snprintf(buf, n, "unknown key '%s' in [%s] (it belongs in [%s])", name, section,
				 keys[i].section);
			return;
		}
	section_keys(section, names);
	const char *close = name_closest(names, name);
	if (close)
		snprintf(buf, n, "unknown key '%s' in [%s] (did you mean '%s'?)", name, section, close);
	else
		snprintf(buf, n, "unknown key '%s' in [%s] (keys: %s)", name, section,
			 names_joined(names, list, sizeof list));
}

void config_unknown_section_text(const char *section, char *buf, size_t n)
{
	const char *close = name_closest(config_sections, section);

	if (close)
		snprintf(buf, n, "unknown section [%s] (did you mean [%s]?)", section, close);
	else
		snprintf(buf, n, "unknown section [%s] (sections: [model] [cluster] [policy] [run])",
			 section);
}

/* ---- init ------------------------------------------------------------ */

void config_init(struct experiment *e)
{
	keys_init();
	memset(e, 0, sizeof *e);
	e->origins = xcalloc(1, sizeof(struct origins));

	snprintf(e->model_name, sizeof e->model_name, "tiny");
	snprintf(e->gpu_name, sizeof e->gpu_name, "cpu");
	e->cluster.nodes = 1;
	e->cluster.gpus_per_node = 2;
	policy_default(&e->policy);
	e->run.batch = 1;
	e->run.steps = 10;
	e->run.warmup = 2;
	e->run.seed = 1234;
	snprintf(e->run.device, sizeof e->run.device, "cpu");
	e->run.out[0] = '\0';
	e->run.lr = 3e-4;
	e->run.weight_decay = 0.1;
	e->run.eps = 1e-8;
	e->run.timeout_s = 600;

	/* the rest (model shape, GPU spec, runtime) comes from the catalog */
	int rc = config_resolve(e);
	assert(rc == 0 && "the defaults resolve");
	(void)rc;
}

void config_init_job(struct experiment *e)
{
	config_init(e);
	snprintf(e->model_name, sizeof e->model_name, "llama3-8b");
	snprintf(e->gpu_name, sizeof e->gpu_name, "h100-sxm");
	e->cluster.nodes = 2;
	e->cluster.gpus_per_node = 8;
	/* the catalog fills in the shape and the GPU; shard group and links follow the cluster */
	int rc = config_resolve(e);
	assert(rc == 0 && "the job's defaults resolve");
	(void)rc;
}

void config_copy(struct experiment *dst, const struct experiment *src)
{
	*dst = *src;
	dst->origins = xmalloc(sizeof(struct origins));
	memcpy(dst->origins, src->origins, sizeof(struct origins));
}

int config_get(const struct experiment *e, const char *section, const char *key, char *buf, size_t n)
{
	int k = config_key_find(section, key);

	if (k < 0)
		return -1;
	config_value_text(e, k, buf, n);
	return 0;
}

int config_key_type(const char *section, const char *key)
{
	int k = config_key_find(section, key);

	if (k < 0)
		return 0;
	switch (keys[k].type) {
	case KT_INT:
	case KT_ULONG:
		return 'i';
	case KT_DOUBLE:
		return 'r';
	case KT_BOOL:
		return 'b';
	default:
		return 'n';
	}
}

void config_release(struct experiment *e)
{
	if (!e)
		return;
	free(e->origins);
	e->origins = NULL;
}

/* ---- output ------------------------------------------------------------ */

void config_each(const struct experiment *e,
		 void (*fn)(void *ctx, const char *section, const char *key, const char *value),
		 void *ctx)
{
	char v[CONFIG_PATH_MAX + 8];

	keys_init();
	for (int i = 0; i < nkeys; i++) {
		config_value_text(e, i, v, sizeof v);
		fn(ctx, keys[i].section, keys[i].name, v);
	}
}

void config_write_ini(const struct experiment *e, FILE *f)
{
	char v[CONFIG_PATH_MAX + 8];
	const char *section = "";

	keys_init();
	for (int i = 0; i < nkeys; i++) {
		if (strcmp(section, keys[i].section) != 0) {
			section = keys[i].section;
			fprintf(f, "%s[%s]\n", i ? "\n" : "", section);
		}
		config_value_text(e, i, v, sizeof v);
		fprintf(f, "%s =%s%s\n", keys[i].name, *v ? " " : "", v);
	}
}

