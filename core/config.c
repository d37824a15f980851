/*
 * config.c - experiment files, command-line overrides and their resolution.
 *
 * Every setting is a key of one table (keys[] below): section, name, flag,
 * type, place in struct experiment, allowed range or names. The INI
 * reader, --set, the per-key flags, config_each() and config_write_ini()
 * all walk that one table, so a key cannot be readable in one place and
 * missing in another. The [cluster] keys that override a GPU spec come
 * from hw_gpu_fields (core/catalog.c), the table the catalog is read with.
 *
 * Each key records where its value came from (struct origin): a file and
 * line, a flag, the default, the catalog, or a derivation in
 * config_resolve(). "Explicit" means a file or a flag: explicit values
 * win over catalog ones, and error messages name every key involved in a
 * rule with the place it was set.
 *
 * Values are parsed into a temporary and stored only when valid, so a bad
 * value leaves the previous one; errors are counted, never fatal, so one
 * pass reports all of them. Messages go to config_errfile (stderr when
 * NULL); the functions return -1 after any, and the caller exits 2.
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

FILE *config_errfile;

#define KEYS_MAX 64
#define FLAG_MAX 40
#define WHERE_MAX (CONFIG_PATH_MAX + 80)
#define MSG_MAX 1024
#define CUSTOM "custom"
#define CUSTOM_SEQ 2048 /* model.seq of a custom model that does not set it */

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

enum key_type {
	KT_INT,    /* int in [min, max] */
	KT_ULONG,  /* unsigned long */
	KT_DOUBLE, /* finite double in [min, max] */
	KT_BOOL,   /* int 0/1 from true|false|yes|no|1|0 */
	KT_ENUM,   /* an enum, one of names[] */
	KT_ACCUM,  /* policy.accum and policy.partial_k */
	KT_WRAP,   /* policy.wrap and policy.wrap_k */
	KT_MODEL,  /* experiment.model_name: a catalog model or "custom" */
	KT_GPU,    /* experiment.gpu_name: a catalog GPU or "custom" */
	KT_CHOICE, /* a string buffer holding one of names[] */
	KT_TEXT,   /* a string buffer, any text */
};

struct key {
	const char *section;
	const char *name;
	enum key_type type;
	size_t offset;           /* in struct experiment */
	size_t size;             /* KT_CHOICE, KT_TEXT: buffer size */
	double min, max;         /* KT_INT, KT_DOUBLE */
	const char *const *names;/* KT_ENUM, KT_CHOICE */
	const char *what;        /* KT_ENUM, KT_CHOICE: "sharding policy" */
	const char *flag;        /* "--layers"; filled from the name when NULL */
	const char *alias;       /* a second flag, or NULL */
};

static const char *const sections[] = { "model", "cluster", "policy", "run", NULL };
static const char *const backend_names[] = { "cpu", "cuda", NULL };
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
	{ "cluster", "gpu", KT_GPU, OFF(gpu_name), HW_NAME_MAX, 0, 0, NULL, "catalog GPU", "--gpu",
	  NULL },
	INT("cluster", "nodes", cluster.nodes, 1, 65536),
	INT("cluster", "gpus_per_node", cluster.gpus_per_node, 1, 64),
};

static const struct key keys_tail[] = {
	DBL("cluster", "inter_gbps", cluster.inter_gbps, 0.001, 1e5),
	{ "policy", "sharding", KT_ENUM, OFF(policy.sharding), 0, 0, 0, sharding_names,
	  "sharding policy", "--sharding", "--policy" },
	INT("policy", "shard_group", policy.shard_group, 0, 1 << 20),
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
	ENUM("ac", policy.ac, ac_names, "activation checkpointing mode"),
	ENUM("loss", policy.loss, loss_names, "loss mode"),
	ENUM("offload", policy.offload, offload_names, "offload mode"),
	INT("policy", "prefetch", policy.prefetch, 0, 8),
	BOOL("flat_params", policy.flat_params),
	BOOL("concat_last_only", policy.concat_last_only),
	ENUM("runtime", policy.runtime, runtime_names, "runtime"),
	INT("run", "batch", run.batch, 1, 65536),
	INT("run", "steps", run.steps, 1, 1000000),
	INT("run", "warmup", run.warmup, 0, 1000000),
	{ "run", "seed", KT_ULONG, OFF(run.seed), 0, 0, 0, NULL, NULL, NULL, NULL },
	{ "run", "backend", KT_CHOICE, OFF(run.backend), sizeof(((struct run_settings *)0)->backend),
	  0, 0, backend_names, "backend", NULL, NULL },
	{ "run", "out", KT_TEXT, OFF(run.out), CONFIG_PATH_MAX, 0, 0, NULL, NULL, NULL, NULL },
	DBL("run", "lr", run.lr, 0, 10),
	DBL("run", "weight_decay", run.weight_decay, 0, 10),
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
}

static int key_find(const char *section, const char *name)
{
	keys_init();
	for (int i = 0; i < nkeys; i++)
		if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].name, name) == 0)
			return i;
	return -1;
}

/* A key the code names: it exists, or the table is broken. */
static int key_id(const char *section, const char *name)
{
	int k = key_find(section, name);
	assert(k >= 0);
	return k;
}

/* The key a flag ("--layers", no value) sets, or -1. */
static int key_of_flag(const char *flag)
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

/* ---- origins ------------------------------------------------------------ */

enum origin_kind { OR_DEFAULT, OR_FILE, OR_FLAG, OR_CATALOG, OR_DERIVED };

struct origin {
	enum origin_kind kind;
	int line;              /* OR_FILE */
	int load;              /* OR_FILE: which config_load() call */
	char where[WHERE_MAX]; /* OR_FILE: path; OR_FLAG: "--layers"; OR_CATALOG: "model llama3-8b" */
};

struct origins {
	struct origin o[KEYS_MAX];
	int loads;             /* config_load() calls so far */
};

static struct origin *origin_of(const struct experiment *e, int k)
{
	struct origins *o = e->origins;
	assert(o && "config_init() first");
	return &o->o[k];
}

static int is_explicit(const struct experiment *e, int k)
{
	enum origin_kind kind = origin_of(e, k)->kind;
	return kind == OR_FILE || kind == OR_FLAG;
}

static void origin_set(struct experiment *e, int k, enum origin_kind kind, const char *where)
{
	struct origin *o = origin_of(e, k);
	o->kind = kind;
	o->line = 0;
	o->load = 0;
	snprintf(o->where, sizeof o->where, "%s", where ? where : "");
}

/* "at x.ini:4", "from --nodes", "by default", "from model llama3-8b", "derived" */
static void origin_text(const struct origin *o, char *buf, size_t n)
{
	switch (o->kind) {
	case OR_FILE:
		snprintf(buf, n, "at %s:%d", o->where, o->line);
		break;
	case OR_FLAG:
		snprintf(buf, n, "from %s", o->where);
		break;
	case OR_DEFAULT:
		snprintf(buf, n, "by default");
		break;
	case OR_CATALOG:
		snprintf(buf, n, "from %s", o->where);
		break;
	case OR_DERIVED:
		snprintf(buf, n, "derived%s%s", *o->where ? " from " : "", o->where);
		break;
	}
}

/* The place a message about an explicit key starts with: "x.ini:4" or "--nodes". */
static void origin_prefix(const struct origin *o, char *buf, size_t n)
{
	assert(o->kind == OR_FILE || o->kind == OR_FLAG);
	if (o->kind == OR_FILE)
		snprintf(buf, n, "%s:%d", o->where, o->line);
	else
		snprintf(buf, n, "%s", o->where);
}

/* ---- messages ------------------------------------------------------------ */

static FILE *errf(void)
{
	return config_errfile ? config_errfile : stderr;
}

static void say(const char *prefix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(const char *prefix, const char *fmt, ...)
{
	va_list ap;
	FILE *f = errf();

	fprintf(f, "%s: ", prefix);
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
}

/* The first strcspn(s, stop) characters of s into buf, cut to fit. */
static char *head_of(const char *s, const char *stop, char *buf, size_t n)
{
	size_t len = strcspn(s, stop);
	if (len >= n)
		len = n - 1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return buf;
}

/*
 * " (allowed: a|b|c; did you mean 'b'?)" for a value not in names. With
 * k_form, the entry of that name prints as "name:K", and a suggestion of
 * it keeps the value's own ":K" ("parital:4" -> "partial:4").
 */
static void allowed_text(const char *const *names, const char *k_form, const char *value,
			 char *buf, size_t n)
{
	char list[512], sugg[160] = "", name[64];

	head_of(value, ":", name, sizeof name);
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

/* ---- values ------------------------------------------------------------ */

/* A hint when a value looks like it carries a '#' comment inih keeps. */
static const char *comment_hint(const char *value)
{
	return strchr(value, '#') ? " (comments go on a line of their own, or after ' ;')" : "";
}

/* Shortest %g text that reads back as the same double. */
static void double_text(double v, char *buf, size_t n)
{
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, n, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

/* "1 to 1000" */
static const char *range_text(const struct key *k, char *buf, size_t n)
{
	char lo[40], hi[40];
	double_text(k->min, lo, sizeof lo);
	double_text(k->max, hi, sizeof hi);
	snprintf(buf, n, "%s to %s", lo, hi);
	return buf;
}

/* The value of key k as text (the form a file would give it). */
static void value_text(const struct experiment *e, int k, char *buf, size_t n)
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
		double_text(*(const double *)p, buf, n);
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
	case KT_MODEL:
	case KT_GPU:
	case KT_CHOICE:
	case KT_TEXT:
		snprintf(buf, n, "%s", (const char *)p);
		break;
	}
}

/* NULL-terminated catalog names plus "custom", in a static buffer. */
static const char *const *names_with_custom(const char *const *catalog)
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

/*
 * Parse value into key k of e. 0, or -1 with the message (without its
 * place) in err; e is unchanged then.
 */
static int value_parse(struct experiment *e, int k, const char *value, char *err, size_t errlen)
{
	const struct key *key = &keys[k];
	void *p = field(e, key);
	char allowed[768], range[96];
	char *end;

	switch (key->type) {
	case KT_INT: {
		errno = 0;
		long v = strtol(value, &end, 10);
		if (!*value || *end) {
			snprintf(err, errlen, "%s.%s = '%s' is not an integer%s", key->section, key->name,
				 value, comment_hint(value));
			return -1;
		}
		if (errno == ERANGE || v < key->min || v > key->max) {
			snprintf(err, errlen, "%s.%s = %s is out of range (%s)", key->section, key->name,
				 value, range_text(key, range, sizeof range));
			return -1;
		}
		*(int *)p = (int)v;
		return 0;
	}
	case KT_ULONG: {
		errno = 0;
		unsigned long v = strtoul(value, &end, 10);
		if (!*value || *end || value[strspn(value, " \t")] == '-') {
			snprintf(err, errlen, "%s.%s = '%s' is not a non-negative integer%s", key->section,
				 key->name, value, comment_hint(value));
			return -1;
		}
		if (errno == ERANGE) {
			snprintf(err, errlen, "%s.%s = %s is out of range (0 to %lu)", key->section,
				 key->name, value, ULONG_MAX);
			return -1;
		}
		*(unsigned long *)p = v;
		return 0;
	}
	case KT_DOUBLE: {
		errno = 0;
		double v = strtod(value, &end);
		if (!*value || *end || !isfinite(v)) {
			snprintf(err, errlen, "%s.%s = '%s' is not a number%s", key->section, key->name,
				 value, comment_hint(value));
			return -1;
		}
		if (v < key->min || v > key->max) {
			snprintf(err, errlen, "%s.%s = %s is out of range (%s)", key->section, key->name,
				 value, range_text(key, range, sizeof range));
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
			allowed_text(key->names, NULL, value, allowed, sizeof allowed);
			snprintf(err, errlen, "%s.%s = '%s' is not a %s%s", key->section, key->name, value,
				 key->what, allowed);
			return -1;
		}
		if (key->type == KT_ENUM)
			*(int *)p = i;
		else
			snprintf(p, key->size, "%s", value);
		return 0;
	}
	case KT_ACCUM:
	case KT_WRAP: {
		struct policy pol = e->policy;
		int rc = key->type == KT_ACCUM ? policy_parse_accum(&pol, value) :
						 policy_parse_wrap(&pol, value);
		const char *k_form = key->type == KT_ACCUM ? "partial" : "every";
		if (rc == -1) {
			char name[64];
			head_of(value, ":", name, sizeof name);
			if (strchr(value, ':') && name_index(key->names, name) >= 0) {
				snprintf(err, errlen, "%s.%s = '%s': only %s takes a ':K'", key->section,
					 key->name, value, k_form);
				return -1;
			}
			allowed_text(key->names, k_form, value, allowed, sizeof allowed);
			snprintf(err, errlen, "%s.%s = '%s' is not a %s%s", key->section, key->name, value,
				 key->what, allowed);
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
			allowed_text(names_with_custom(cat), NULL, value, allowed, sizeof allowed);
			snprintf(err, errlen, "%s.%s = '%s' is not a %s%s", key->section, key->name, value,
				 key->what, allowed);
			return -1;
		}
		snprintf(p, key->size, "%s", value);
		return 0;
	}
	case KT_TEXT: {
		size_t len = strlen(value);
		if (len >= 2 && value[0] == '"' && value[len - 1] == '"') {
			value++;
			len -= 2;
		}
		if (len >= key->size) {
			snprintf(err, errlen, "%s.%s is longer than %zu characters", key->section,
				 key->name, key->size - 1);
			return -1;
		}
		snprintf(p, key->size, "%.*s", (int)len, value);
		return 0;
	}
	}
	assert(0 && "key type");
	return -1;
}

/*
 * The message for a key that does not exist: unknown section, unknown key
 * with the closest one, or the section the key belongs to.
 */
static void unknown_key_text(const char *section, const char *name, char *buf, size_t n)
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

static void unknown_section_text(const char *section, char *buf, size_t n)
{
	const char *close = name_closest(sections, section);

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
	e->origins = calloc(1, sizeof(struct origins));
	assert(e->origins && "out of memory");

	snprintf(e->model_name, sizeof e->model_name, "tiny");
	snprintf(e->gpu_name, sizeof e->gpu_name, "cpu");
	e->cluster.nodes = 1;
	e->cluster.gpus_per_node = 2;
	policy_default(&e->policy);
	e->run.batch = 1;
	e->run.steps = 10;
	e->run.warmup = 2;
	e->run.seed = 1234;
	snprintf(e->run.backend, sizeof e->run.backend, "cpu");
	e->run.out[0] = '\0';
	e->run.lr = 3e-4;
	e->run.weight_decay = 0.1;

	/* the rest (model shape, GPU spec, runtime) comes from the catalog */
	int rc = config_resolve(e);
	assert(rc == 0 && "the defaults resolve");
	(void)rc;
}

void config_release(struct experiment *e)
{
	if (!e)
		return;
	free(e->origins);
	e->origins = NULL;
}

/* ---- files ------------------------------------------------------------ */

struct message {
	int line;
	int seq;
	char *text;
};

struct load {
	struct experiment *e;
	FILE *f;
	const char *path;
	int line;             /* of the line inih is handling */
	int section_line;     /* of the last [section] header */
	int reported_line;    /* the header whose unknown section was reported */
	int load_id;
	struct message *msgs;
	int nmsgs, cap;
};

static void load_error(struct load *l, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void load_error(struct load *l, int line, const char *fmt, ...)
{
	char text[MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	if (l->nmsgs == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 16;
		l->msgs = realloc(l->msgs, (size_t)l->cap * sizeof *l->msgs);
		assert(l->msgs && "out of memory");
	}
	l->msgs[l->nmsgs] = (struct message){ line, l->nmsgs, strdup(text) };
	assert(l->msgs[l->nmsgs].text && "out of memory");
	l->nmsgs++;
}

static int message_cmp(const void *a, const void *b)
{
	const struct message *x = a, *y = b;
	if (x->line != y->line)
		return x->line < y->line ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/*
 * inih's reader: fgets that counts lines (this inih calls handlers
 * without line numbers), notes section headers, and turns a line too long
 * for inih's buffer into an error instead of two half-lines.
 */
static char *load_reader(char *str, int num, void *stream)
{
	struct load *l = stream;

	if (!fgets(str, num, l->f))
		return NULL;
	l->line++;
	size_t n = strlen(str);
	if (n == (size_t)num - 1 && str[n - 1] != '\n') {
		int c, more = 0;
		while ((c = fgetc(l->f)) != EOF && c != '\n')
			more = 1;
		if (more) {
			load_error(l, l->line, "line is longer than %d characters", num - 3);
			str[0] = '\0';
			return str;
		}
	}
	const char *p = str;
	if (l->line == 1 && strncmp(p, "\xEF\xBB\xBF", 3) == 0)
		p += 3;
	p += strspn(p, " \t");
	if (*p == '[')
		l->section_line = l->line;
	return str;
}

static int load_handler(void *user, const char *section, const char *name, const char *value)
{
	struct load *l = user;
	struct experiment *e = l->e;
	char err[MSG_MAX];

	if (!*section) {
		int k = -1;
		for (int i = 0; i < nkeys && k < 0; i++)
			if (strcmp(keys[i].name, name) == 0)
				k = i;
		if (k >= 0)
			load_error(l, l->line, "key '%s' is outside any section (it belongs in [%s])", name,
				   keys[k].section);
		else
			load_error(l, l->line, "key '%s' is outside any section", name);
		return 1;
	}
	if (name_index(sections, section) < 0) {
		if (l->reported_line != l->section_line) {
			unknown_section_text(section, err, sizeof err);
			load_error(l, l->section_line, "%s", err);
			l->reported_line = l->section_line;
		}
		return 1;
	}
	int k = key_find(section, name);
	if (k < 0) {
		unknown_key_text(section, name, err, sizeof err);
		load_error(l, l->line, "%s", err);
		return 1;
	}
	struct origin *o = origin_of(e, k);
	if (o->kind == OR_FILE && o->load == l->load_id) {
		load_error(l, l->line, "%s.%s is set twice (first at line %d)", section, name, o->line);
		return 1;
	}
	if (value_parse(e, k, value, err, sizeof err) < 0) {
		load_error(l, l->line, "%s", err);
		return 1;
	}
	origin_set(e, k, OR_FILE, l->path);
	o->line = l->line;
	o->load = l->load_id;
	return 1;
}

int config_load(struct experiment *e, const char *path)
{
	struct origins *os = e->origins;
	struct load l = { .e = e, .path = path };
	int rc;

	assert(os && "config_init() first");
	keys_init();
	if (strlen(path) >= sizeof e->path) {
		say(path, "path is longer than %zu characters", sizeof e->path - 1);
		return -1;
	}
	snprintf(e->path, sizeof e->path, "%s", path);
	l.f = fopen(path, "r");
	if (!l.f) {
		say(path, "cannot open: %s", strerror(errno));
		return -1;
	}
	l.load_id = ++os->loads;
	rc = ini_parse_stream(load_reader, &l, load_handler, &l);
	if (ferror(l.f)) {
		say(path, "cannot read: %s", strerror(errno));
		rc = -1;
	} else if (rc > 0) {
		load_error(&l, rc, "syntax error: expected '[section]' or 'key = value'");
	} else if (rc < 0) {
		say(path, "cannot parse (inih error %d)", rc);
	}
	fclose(l.f);

	if (l.nmsgs)
		qsort(l.msgs, (size_t)l.nmsgs, sizeof *l.msgs, message_cmp);
	for (int i = 0; i < l.nmsgs; i++) {
		fprintf(errf(), "%s:%d: %s\n", path, l.msgs[i].line, l.msgs[i].text);
		free(l.msgs[i].text);
	}
	free(l.msgs);
	return l.nmsgs || rc != 0 ? -1 : 0;
}

/* ---- one key from the command line -------------------------------------- */

static void trim(char *s)
{
	size_t n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		s[--n] = '\0';
	size_t lead = strspn(s, " \t");
	memmove(s, s + lead, n - lead + 1);
}

int config_set(struct experiment *e, const char *assignment, const char *origin)
{
	char prefix[WHERE_MAX], lhs[256], value[CONFIG_PATH_MAX + 8], err[MSG_MAX];
	const char *eq = strchr(assignment, '=');

	assert(e->origins && "config_init() first");
	keys_init();
	if (strcmp(origin, "--set") == 0)
		snprintf(prefix, sizeof prefix, "--set %s", assignment);
	else
		snprintf(prefix, sizeof prefix, "%s", origin);

	if (!eq || (size_t)(eq - assignment) >= sizeof lhs) {
		say(prefix, "expected section.key=value");
		return -1;
	}
	snprintf(lhs, sizeof lhs, "%.*s", (int)(eq - assignment), assignment);
	if (strlen(eq + 1) >= sizeof value) {
		say(prefix, "value is longer than %zu characters", sizeof value - 1);
		return -1;
	}
	snprintf(value, sizeof value, "%s", eq + 1);
	trim(lhs);
	trim(value);
	char *dot = strchr(lhs, '.');
	if (!dot) {
		say(prefix, "expected section.key=value");
		return -1;
	}
	*dot = '\0';
	const char *section = lhs, *name = dot + 1;
	if (name_index(sections, section) < 0) {
		unknown_section_text(section, err, sizeof err);
		say(prefix, "%s", err);
		return -1;
	}
	int k = key_find(section, name);
	if (k < 0) {
		unknown_key_text(section, name, err, sizeof err);
		say(prefix, "%s", err);
		return -1;
	}
	if (value_parse(e, k, value, err, sizeof err) < 0) {
		say(prefix, "%s", err);
		return -1;
	}
	origin_set(e, k, OR_FLAG, prefix);
	return 0;
}

/* ---- resolution ------------------------------------------------------------ */

/* "section.key = value" */
static void key_text(const struct experiment *e, int k, char *buf, size_t n)
{
	char v[CONFIG_PATH_MAX + 8];
	value_text(e, k, v, sizeof v);
	snprintf(buf, n, "%s.%s = %s", keys[k].section, keys[k].name, v);
}

/*
 * A rule between keys is broken: "<place>: <primary> = <value> <what>
 * (<other> = <value> <where>, ...)". The place is the primary key's when it
 * was set in a file or a flag, else the first such other key's (the
 * primary's origin then follows its value), else the experiment file.
 * others ends with -1.
 */
static void rule_error(const struct experiment *e, int primary, const char *what, const int *others)
{
	char prefix[WHERE_MAX + 32], text[4 * MSG_MAX], kt[MSG_MAX], where[WHERE_MAX + 32];
	size_t used = 0;
	int from = -1;

	if (is_explicit(e, primary))
		from = primary;
	for (int i = 0; from < 0 && others[i] >= 0; i++)
		if (is_explicit(e, others[i]))
			from = others[i];
	if (from >= 0)
		origin_prefix(origin_of(e, from), prefix, sizeof prefix);
	else
		snprintf(prefix, sizeof prefix, "%s", *e->path ? e->path : "experiment");

	key_text(e, primary, kt, sizeof kt);
	used += (size_t)snprintf(text + used, sizeof text - used, "%s", kt);
	if (from != primary) {
		origin_text(origin_of(e, primary), where, sizeof where);
		used += (size_t)snprintf(text + used, sizeof text - used, " (%s)", where);
	}
	used += (size_t)snprintf(text + used, sizeof text - used, " %s", what);
	for (int i = 0; others[i] >= 0 && used < sizeof text; i++) {
		key_text(e, others[i], kt, sizeof kt);
		origin_text(origin_of(e, others[i]), where, sizeof where);
		used += (size_t)snprintf(text + used, sizeof text - used, "%s%s %s", i ? ", " : " (", kt,
					 where);
		if (others[i + 1] < 0 && used < sizeof text)
			used += (size_t)snprintf(text + used, sizeof text - used, ")");
	}
	say(prefix, "%s", text);
}

/* "a.b, c.d" of the keys in ks (ending with -1) that are not explicit */
static int missing_keys(const struct experiment *e, const int *ks, char *buf, size_t n)
{
	size_t used = 0;
	int count = 0;

	buf[0] = '\0';
	for (int i = 0; ks[i] >= 0 && used < n; i++)
		if (!is_explicit(e, ks[i])) {
			used += (size_t)snprintf(buf + used, n - used, "%s%s.%s", count ? ", " : "",
						 keys[ks[i]].section, keys[ks[i]].name);
			count++;
		}
	return count;
}

static int resolve_model(struct experiment *e)
{
	static const char *const dims[] = { "layers", "hidden", "ffn", "heads", "kv_heads", "vocab",
					    "seq", NULL };
	int kname = key_id("model", "name"), ks[8], explicit_ks[8], nexp = 0;
	char what[2 * MSG_MAX], list[MSG_MAX], err[256];
	struct model_shape cat;

	for (int i = 0; dims[i]; i++) {
		ks[i] = key_id("model", dims[i]);
		if (is_explicit(e, ks[i]))
			explicit_ks[nexp++] = ks[i];
	}
	ks[7] = -1;
	explicit_ks[nexp] = -1;

	if (strcmp(e->model_name, CUSTOM) == 0) {
		ks[6] = -1; /* seq has a default */
		if (missing_keys(e, ks, list, sizeof list)) {
			snprintf(what, sizeof what, "needs every dimension; not set: %s", list);
			rule_error(e, kname, what, (int[]){ -1 });
			return -1;
		}
		ks[6] = key_id("model", "seq");
		if (!is_explicit(e, ks[6])) {
			e->model.seq = CUSTOM_SEQ;
			origin_set(e, ks[6], OR_DEFAULT, NULL);
		}
	} else {
		if (model_lookup(e->model_name, &cat) < 0) {
			char allowed[768];
			allowed_text(names_with_custom(model_names()), NULL, e->model_name, allowed,
				     sizeof allowed);
			snprintf(what, sizeof what, "is not a catalog model%s", allowed);
			rule_error(e, kname, what, (int[]){ -1 });
			return -1;
		}
		char where[64];
		snprintf(where, sizeof where, "model %s", e->model_name);
		for (int i = 0; dims[i]; i++)
			if (!is_explicit(e, ks[i])) {
				*(int *)field(e, &keys[ks[i]]) = *(const int *)((const char *)&cat +
					(keys[ks[i]].offset - OFF(model)));
				origin_set(e, ks[i], OR_CATALOG, where);
			}
	}
	snprintf(e->model.name, sizeof e->model.name, "%s", e->model_name);
	if (model_check(&e->model, err, sizeof err) < 0) {
		snprintf(what, sizeof what, "has an unusable shape: %s", err);
		rule_error(e, kname, what, explicit_ks);
		return -1;
	}
	return 0;
}

static int resolve_cluster(struct experiment *e)
{
	int kgpu = key_id("cluster", "gpu"), ks[KEYS_MAX], n = 0, errors = 0;
	char what[2 * MSG_MAX], list[MSG_MAX], where[64];
	struct gpu_spec cat;

	for (const struct hw_field *f = hw_gpu_fields; f->name; f++)
		ks[n++] = key_id("cluster", f->name);
	ks[n] = -1;

	if (strcmp(e->gpu_name, CUSTOM) == 0) {
		if (missing_keys(e, ks, list, sizeof list)) {
			snprintf(what, sizeof what, "needs every GPU spec key; not set: %s", list);
			rule_error(e, kgpu, what, (int[]){ -1 });
			return -1;
		}
		snprintf(e->cluster.gpu.source, sizeof e->cluster.gpu.source,
			 "custom: the experiment's [cluster] keys");
	} else {
		if (hw_gpu_lookup(e->gpu_name, &cat) < 0) {
			char allowed[768];
			allowed_text(names_with_custom(hw_gpu_names()), NULL, e->gpu_name, allowed,
				     sizeof allowed);
			snprintf(what, sizeof what, "is not a catalog GPU%s", allowed);
			rule_error(e, kgpu, what, (int[]){ -1 });
			return -1;
		}
		snprintf(where, sizeof where, "gpu %s", e->gpu_name);
		int i = 0;
		for (const struct hw_field *f = hw_gpu_fields; f->name; f++, i++) {
			if (is_explicit(e, ks[i]))
				continue;
			memcpy((char *)&e->cluster.gpu + f->offset, (const char *)&cat + f->offset,
			       f->type == HW_FIELD_INT ? sizeof(int) : sizeof(double));
			origin_set(e, ks[i], OR_CATALOG, where);
		}
		snprintf(e->cluster.gpu.source, sizeof e->cluster.gpu.source, "%s", cat.source);
	}
	snprintf(e->cluster.gpu.name, sizeof e->cluster.gpu.name, "%s", e->gpu_name);

	e->cluster.intra_gbps = e->cluster.gpu.intra_gbps;
	int kinter = key_id("cluster", "inter_gbps");
	if (!is_explicit(e, kinter)) {
		e->cluster.inter_gbps = e->cluster.gpu.nics_per_node * e->cluster.gpu.nic_gbps /
					e->cluster.gpus_per_node;
		origin_set(e, kinter, OR_DERIVED,
			   "cluster.nics_per_node * cluster.nic_gbps / cluster.gpus_per_node");
	}

	if (e->cluster.gpu.nccl_sms > e->cluster.gpu.sms) {
		int knccl = key_id("cluster", "nccl_sms"), ksms = key_id("cluster", "sms");
		int primary = is_explicit(e, ksms) && !is_explicit(e, knccl) ? ksms : knccl;
		rule_error(e, primary, primary == knccl ? "is more SMs than the GPU has" :
							  "is fewer SMs than one collective holds",
			   (int[]){ primary == knccl ? ksms : knccl, -1 });
		errors++;
	}
	return errors ? -1 : 0;
}

static int resolve_policy(struct experiment *e, int model_ok)
{
	struct policy *p = &e->policy;
	int world = cluster_world(&e->cluster), errors = 0;
	int ksharding = key_id("policy", "sharding"), kgroup = key_id("policy", "shard_group");
	int knodes = key_id("cluster", "nodes"), kgpn = key_id("cluster", "gpus_per_node");
	int kaccum = key_id("policy", "accum"), kwrap = key_id("policy", "wrap");
	int kreshard = key_id("policy", "reshard"), klayers = key_id("model", "layers");
	int kflat = key_id("policy", "flat_params"), kconcat = key_id("policy", "concat_last_only");
	int koffload = key_id("policy", "offload");
	int kreduce = key_id("policy", "reduce_dtype"), kadt = key_id("policy", "accum_dtype");
	int kmicro = key_id("policy", "microbatches");
	const char *sname = sharding_names[p->sharding];
	char what[MSG_MAX];

	/* gradient dtypes follow the precision unless set */
	enum dtype grad_dt = p->precision == PREC_PURE_BF16 ? DT_BF16 : DT_FP32;
	if (!is_explicit(e, kreduce)) {
		p->reduce_dtype = grad_dt;
		origin_set(e, kreduce, OR_DERIVED, "policy.precision");
	}
	if (!is_explicit(e, kadt)) {
		p->accum_dtype = grad_dt;
		origin_set(e, kadt, OR_DERIVED, "policy.precision");
	}

	/* the shard group; an explicit 0 means the default, as if not set */
	if (is_explicit(e, kgroup) && p->shard_group == 0)
		origin_set(e, kgroup, OR_DEFAULT, NULL);
	int group = p->sharding == SHARD_HSDP ? e->cluster.gpus_per_node :
		    p->sharding == SHARD_DDP ? 1 : world;
	if (is_explicit(e, kgroup) && p->sharding != SHARD_HSDP && p->shard_group != group) {
		if (p->sharding == SHARD_DDP)
			snprintf(what, sizeof what, "applies to hsdp only; ddp shards nothing");
		else
			snprintf(what, sizeof what,
				 "applies to hsdp only; %s shards over all %d ranks",
				 sname, world);
		rule_error(e, kgroup, what, (int[]){ ksharding, -1 });
		errors++;
	} else if (is_explicit(e, kgroup)) {
		if (world % p->shard_group != 0) {
			snprintf(what, sizeof what, "does not divide the world size %d", world);
			rule_error(e, kgroup, what, (int[]){ knodes, kgpn, -1 });
			errors++;
		}
	} else {
		char why[64];
		p->shard_group = group;
		snprintf(why, sizeof why, "policy.sharding = %s", sname);
		origin_set(e, kgroup, OR_DERIVED, why);
	}

	/*
	 * zero2 and ddp keep full parameters from forward to backward: reshard
	 * resolves to no; "yes", the default's spelling, is taken as the default,
	 * "all-but-last" asks for what they cannot do.
	 */
	if (p->sharding == SHARD_ZERO2 || p->sharding == SHARD_DDP) {
		if (is_explicit(e, kreshard) && p->reshard == RESHARD_ALL_BUT_LAST) {
			snprintf(what, sizeof what,
				 "does not apply: %s keeps full parameters from forward to backward",
				 sname);
			rule_error(e, kreshard, what, (int[]){ ksharding, -1 });
			errors++;
		} else if (p->reshard != RESHARD_NO || !is_explicit(e, kreshard)) {
			p->reshard = RESHARD_NO;
			origin_set(e, kreshard, OR_DERIVED, "policy.sharding");
		}
	} else if (!is_explicit(e, kreshard)) {
		p->reshard = RESHARD_YES;
		origin_set(e, kreshard, OR_DEFAULT, NULL);
	}

	if (p->accum == ACC_DEFER_REPLICA && p->sharding != SHARD_HSDP) {
		rule_error(e, kaccum, "needs policy.sharding = hsdp: it defers the all-reduce across replicas",
			   (int[]){ ksharding, -1 });
		errors++;
	}
	if (model_ok && p->accum == ACC_PARTIAL && (p->partial_k < 1 || p->partial_k > e->model.layers)) {
		snprintf(what, sizeof what, "needs K from 1 to the number of layers, %d", e->model.layers);
		rule_error(e, kaccum, what, (int[]){ klayers, -1 });
		errors++;
	}
	if (model_ok && p->wrap == WRAP_EVERY && (p->wrap_k < 1 || p->wrap_k > e->model.layers)) {
		snprintf(what, sizeof what, "needs K from 1 to the number of layers, %d", e->model.layers);
		rule_error(e, kwrap, what, (int[]){ klayers, -1 });
		errors++;
	}
	if (p->microbatches < 1) {
		rule_error(e, kmicro, "must be at least 1", (int[]){ -1 });
		errors++;
	}
	if (p->concat_last_only && !p->flat_params) {
		rule_error(e, kconcat, "needs policy.flat_params = true",
			   (int[]){ kflat, -1 });
		errors++;
	}
	if (p->sharding == SHARD_DDP && p->flat_params) {
		rule_error(e, kflat, "does not apply to ddp: it has no shards to flatten",
			   (int[]){ ksharding, -1 });
		errors++;
	}
	if (p->sharding == SHARD_DDP && p->offload != OFF_NONE) {
		rule_error(e, koffload, "does not apply to ddp: it has no shards to offload",
			   (int[]){ ksharding, -1 });
		errors++;
	}
	return errors ? -1 : 0;
}

int config_resolve(struct experiment *e)
{
	int errors = 0;

	assert(e->origins && "config_init() first");
	keys_init();
	int model_ok = resolve_model(e) == 0;
	errors += !model_ok;
	errors += resolve_cluster(e) < 0;
	errors += resolve_policy(e, model_ok) < 0;

	int rc = hw_runtime_lookup(runtime_names[e->policy.runtime], &e->runtime);
	assert(rc == 0 && "every runtime name has a catalog entry");
	(void)rc;

	if (e->run.batch < 1) {
		rule_error(e, key_id("run", "batch"), "must be at least 1", (int[]){ -1 });
		errors++;
	}
	return errors ? -1 : 0;
}

/* ---- output ------------------------------------------------------------ */

void config_each(const struct experiment *e,
		 void (*fn)(void *ctx, const char *section, const char *key, const char *value),
		 void *ctx)
{
	char v[CONFIG_PATH_MAX + 8];

	keys_init();
	for (int i = 0; i < nkeys; i++) {
		value_text(e, i, v, sizeof v);
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
		value_text(e, i, v, sizeof v);
		fprintf(f, "%s =%s%s\n", keys[i].name, *v ? " " : "", v);
	}
}

/* ---- the command line ------------------------------------------------------ */

static int is_bool_word(const char *s)
{
	for (int i = 0; bool_words[i]; i++)
		if (strcasecmp(bool_words[i], s) == 0)
			return 1;
	return 0;
}

int config_is_flag(const char *arg)
{
	char name[FLAG_MAX + 8];

	keys_init();
	if (strncmp(arg, "--", 2) != 0)
		return 0;
	head_of(arg, "=", name, sizeof name);
	return strcmp(name, "--set") == 0 || key_of_flag(name) >= 0;
}

const char *config_flag_closest(const char *arg)
{
	char name[FLAG_MAX + 8];

	keys_init();
	if (arg[0] != '-')
		return NULL;
	arg += strspn(arg, "-");
	head_of(arg, "=", name, sizeof name);
	const char *close = name_closest(flag_bare, name);
	return close ? close - 2 : NULL;
}

struct pending {
	int key;             /* -1 for --set */
	const char *flag;    /* as written, without "=value" */
	const char *value;   /* NULL: missing */
};

int config_parse_args(struct experiment *e, int argc, char **argv)
{
	struct pending *todo = calloc((size_t)argc + 1, sizeof *todo);
	char flag[FLAG_MAX + 8];
	const char *file = NULL;
	int n = 0, errors = 0;

	assert(todo && "out of memory");
	keys_init();
	for (int i = 1; i < argc; i++) {
		char *a = argv[i];
		if (!a)
			continue;
		if (strncmp(a, "--", 2) != 0 || !a[2]) {
			/* after a flag of the caller's, this may be its value */
			const char *before = i > 1 ? argv[i - 1] : NULL;
			int maybe_value = before && before[0] == '-' && !strchr(before, '=');
			size_t len = strlen(a);
			int ini = len > 4 && strcmp(a + len - 4, ".ini") == 0;
			if (a[0] != '-' && !file && (ini || !maybe_value)) {
				file = a;
				argv[i] = NULL;
			}
			continue;
		}
		const char *eq = strchr(a, '=');
		size_t len = eq ? (size_t)(eq - a) : strlen(a);
		if (len >= sizeof flag)
			continue;
		snprintf(flag, sizeof flag, "%.*s", (int)len, a);
		int k = strcmp(flag, "--set") == 0 ? -1 : key_of_flag(flag);
		if (k < 0 && strcmp(flag, "--set") != 0)
			continue; /* the caller's */

		struct pending *t = &todo[n++];
		t->key = k;
		t->flag = k >= 0 ? (keys[k].alias && strcmp(keys[k].alias, flag) == 0 ? keys[k].alias :
										  keys[k].flag) : "--set";
		argv[i] = NULL;
		if (eq) {
			t->value = eq + 1;
		} else if (k >= 0 && keys[k].type == KT_BOOL) {
			t->value = "true";
			if (i + 1 < argc && argv[i + 1] && is_bool_word(argv[i + 1])) {
				t->value = argv[i + 1];
				argv[++i] = NULL;
			}
		} else if (i + 1 < argc && argv[i + 1] && strncmp(argv[i + 1], "--", 2) != 0) {
			t->value = argv[i + 1];
			argv[++i] = NULL;
		}
	}

	/* the file first, then the flags in order: the command line wins */
	if (file && config_load(e, file) < 0)
		errors++;
	for (int i = 0; i < n; i++) {
		struct pending *t = &todo[i];
		if (!t->value) {
			if (t->key < 0)
				say(t->flag, "missing value (write --set section.key=value)");
			else
				say(t->flag, "missing value");
			errors++;
			continue;
		}
		if (t->key < 0) {
			errors += config_set(e, t->value, "--set") < 0;
		} else {
			char assignment[CONFIG_PATH_MAX + 128];
			snprintf(assignment, sizeof assignment, "%s.%s=%s", keys[t->key].section,
				 keys[t->key].name, t->value);
			errors += config_set(e, assignment, t->flag) < 0;
		}
	}
	free(todo);
	return errors ? -1 : 0;
}

void config_usage(FILE *f)
{
	keys_init();
	fprintf(f, "experiment: [FILE.ini] [--set section.key=value]... and one flag per key:\n");
	for (int s = 0; sections[s]; s++) {
		int col = fprintf(f, "  [%s]", sections[s]);
		for (int i = 0; i < nkeys; i++) {
			if (strcmp(keys[i].section, sections[s]) != 0)
				continue;
			const char *arg = keys[i].type == KT_BOOL ? "" : " V";
			int w = (int)strlen(keys[i].flag) + (int)strlen(arg) + 1;
			if (col + w > 79) {
				fprintf(f, "\n%*s", 11, "");
				col = 11;
			}
			col += fprintf(f, " %s%s", keys[i].flag, arg);
			if (keys[i].alias)
				col += fprintf(f, " (or %s)", keys[i].alias);
		}
		fputc('\n', f);
	}
	fprintf(f, "  see experiments/README.md for every key, its values and default\n");
}

int config_check_leftovers(int argc, char **argv, const char *prog)
{
	for (int i = 1; i < argc; i++) {
		const char *near;
		if (!argv[i])
			continue;
		near = config_flag_closest(argv[i]);
		if (near)
			fprintf(errf(), "unknown flag '%s' (did you mean '%s'?)\n", argv[i], near);
		else
			fprintf(errf(), "unknown flag '%s' (see %s --help)\n", argv[i], prog);
		return -1;
	}
	return 0;
}
