/*
 * policy.c - policy names, defaults, the byte sizes a policy implies, and
 * the rules that define the policies.
 *
 * The name tables are indexed by their enum and end with NULL; the
 * experiment files, the command line, the results files and the plots all
 * spell a policy with these strings. Two values carry a number: partial:K
 * (accum) and every:K (wrap); the tables hold their bare names ("partial",
 * "every") and policy_parse_accum()/policy_parse_wrap() read the K.
 *
 * The rules are here once, as data-in, data-out functions: what a policy
 * resolves to (policy_resolve), which policies are invalid (policy_check)
 * and which are the same step under another name (same_step_as_another).
 * config_resolve() and the policy walk of `./sim --policy all` both call
 * them; neither re-codes a rule. Nothing here prints or knows a file.
 */
#include "policy.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "xalloc.h"

const char *const sharding_names[] = { "ddp", "fsdp", "zero2", "hsdp", NULL };
const char *const accum_names[] = { "sync-each", "no-sync", "defer-replica", "partial", NULL };
const char *const wrap_names[] = { "block", "block+io", "whole", "every", NULL };
const char *const reshard_names[] = { "yes", "no", "all-but-last", NULL };
const char *const optim_names[] = { "foreach", "fused", "per-param", NULL };
const char *const precision_names[] = { "mixed", "pure-bf16", "fp32", NULL };
const char *const dtype_names[] = { "fp32", "bf16", NULL };
const char *const ac_names[] = { "none", "full", "selective", "per-op", "per-layer", NULL };
const char *const loss_names[] = { "full", "chunked", NULL };
const char *const offload_names[] = { "none", "optim", "params", NULL };
const char *const runtime_names[] = { "testbed", "pytorch", "pytorch-compile", NULL };
const char *const compile_names[] = { "model+loss", "model", NULL };
const char *const sdpa_names[] = { "runtime", "flash", "cudnn", NULL };

/* Every table has one name per enum value: checked once, at compile time. */
#define TABLE_LEN(t) (sizeof(t) / sizeof((t)[0]) - 1)
_Static_assert(TABLE_LEN(sharding_names) == SHARD_COUNT, "sharding_names");
_Static_assert(TABLE_LEN(accum_names) == ACC_COUNT, "accum_names");
_Static_assert(TABLE_LEN(wrap_names) == WRAP_COUNT, "wrap_names");
_Static_assert(TABLE_LEN(reshard_names) == RESHARD_COUNT, "reshard_names");
_Static_assert(TABLE_LEN(optim_names) == OPT_COUNT, "optim_names");
_Static_assert(TABLE_LEN(precision_names) == PREC_COUNT, "precision_names");
_Static_assert(TABLE_LEN(dtype_names) == DT_COUNT, "dtype_names");
_Static_assert(TABLE_LEN(ac_names) == AC_MODES, "ac_names");
_Static_assert(TABLE_LEN(loss_names) == LOSS_COUNT, "loss_names");
_Static_assert(TABLE_LEN(offload_names) == OFF_COUNT, "offload_names");
_Static_assert(TABLE_LEN(runtime_names) == RT_COUNT, "runtime_names");
_Static_assert(TABLE_LEN(compile_names) == COMPILE_COUNT, "compile_names");
_Static_assert(TABLE_LEN(sdpa_names) == SDPA_COUNT, "sdpa_names");

int name_index(const char *const *names, const char *name)
{
	for (int i = 0; names[i]; i++)
		if (strcmp(names[i], name) == 0)
			return i;
	return -1;
}

/*
 * Edit distance counting a swap of two neighbours as one edit (optimal
 * string alignment: "fdsp" is one edit from "fsdp", two from "ddp"),
 * ignoring case ("FSDP" suggests "fsdp"). Names are short: three rows of
 * at most a few dozen entries.
 */
static int edit_distance(const char *a, const char *b)
{
	int la = (int)strlen(a), lb = (int)strlen(b);
	int *rows = xmalloc(3 * (size_t)(lb + 1) * sizeof *rows);
	int *pprev = rows, *prev = rows + lb + 1, *cur = rows + 2 * (lb + 1);
	for (int j = 0; j <= lb; j++)
		prev[j] = j;
	for (int i = 1; i <= la; i++) {
		int ai = tolower((unsigned char)a[i - 1]);
		cur[0] = i;
		for (int j = 1; j <= lb; j++) {
			int bj = tolower((unsigned char)b[j - 1]);
			int best = prev[j - 1] + (ai != bj);
			if (prev[j] + 1 < best)
				best = prev[j] + 1;
			if (cur[j - 1] + 1 < best)
				best = cur[j - 1] + 1;
			if (i > 1 && j > 1 && ai == tolower((unsigned char)b[j - 2]) &&
			    tolower((unsigned char)a[i - 2]) == bj && pprev[j - 2] + 1 < best)
				best = pprev[j - 2] + 1;
			cur[j] = best;
		}
		int *t = pprev;
		pprev = prev;
		prev = cur;
		cur = t;
	}
	int d = prev[lb];
	free(rows);
	return d;
}

/*
 * A prefix wins ("h100" means "h100-sxm", not "h200" one edit away);
 * otherwise the least edit distance, first in table order among equals;
 * NULL when even that is further than max(2, len/2) edits: a suggestion
 * that far off would be noise.
 */
const char *name_closest(const char *const *names, const char *name)
{
	int len = (int)strlen(name), limit = len / 2 > 2 ? len / 2 : 2;
	const char *best = NULL;
	int best_d = limit + 1;

	if (len >= 2)
		for (int i = 0; names[i]; i++)
			if (strncasecmp(names[i], name, (size_t)len) == 0)
				return names[i];
	for (int i = 0; names[i]; i++) {
		int d = edit_distance(names[i], name);
		if (d < best_d) {
			best_d = d;
			best = names[i];
		}
	}
	return best;
}

const char *names_joined(const char *const *names, char *buf, int len)
{
	int used = 0;

	assert(len > 0);
	buf[0] = '\0';
	for (int i = 0; names[i] && used < len; i++) {
		int n = snprintf(buf + used, (size_t)(len - used), "%s%s", i ? "|" : "", names[i]);
		if (n < 0)
			break;
		used += n;
	}
	return buf;
}

void policy_default(struct policy *p)
{
	memset(p, 0, sizeof *p);
	p->sharding = SHARD_FSDP;
	p->shard_group = 0;
	p->accum = ACC_SYNC_EACH;
	p->partial_k = 0;
	p->microbatches = 1;
	p->accum_dtype = DT_FP32;
	p->wrap = WRAP_BLOCK;
	p->wrap_k = 0;
	p->reshard = RESHARD_YES;
	p->optim = OPT_FOREACH;
	p->optim_in_backward = 0;
	p->precision = PREC_MIXED;
	p->reduce_dtype = DT_FP32;
	p->ac = AC_NONE;
	p->ac_k = 0;
	p->loss = LOSS_FULL;
	p->offload = OFF_NONE;
	p->prefetch = 1;
	p->flat_params = 0;
	p->concat_last_only = 0;
	p->runtime = RT_TESTBED;
	p->expandable_segments = 0;
	p->compile = COMPILE_MODEL_LOSS;
	p->sdpa = SDPA_RUNTIME;
	p->hold_logits = 0;
}

int dtype_bytes(enum dtype d)
{
	assert(d >= 0 && d < DT_COUNT);
	return d == DT_FP32 ? 4 : 2;
}

/*
 * Per element:        full param  master  both moments
 *   mixed               bf16 2    fp32 4    fp32 8
 *   pure-bf16           bf16 2    bf16 2    bf16 4
 *   fp32                fp32 4    fp32 4    fp32 8
 */
int precision_param_bytes(enum precision p)
{
	static const int b[PREC_COUNT] = { 2, 2, 4 };
	assert(p >= 0 && p < PREC_COUNT);
	return b[p];
}

int precision_master_bytes(enum precision p)
{
	static const int b[PREC_COUNT] = { 4, 2, 4 };
	assert(p >= 0 && p < PREC_COUNT);
	return b[p];
}

int precision_optstate_bytes(enum precision p)
{
	static const int b[PREC_COUNT] = { 8, 4, 8 };
	assert(p >= 0 && p < PREC_COUNT);
	return b[p];
}

int policy_grad_bytes(const struct policy *p)
{
	return dtype_bytes(p->reduce_dtype);
}

int policy_accum_bytes(const struct policy *p)
{
	return dtype_bytes(p->accum_dtype);
}

/* "name" or "name:K" for the one entry of a table that takes a K. */
static const char *with_k(const char *name, int takes_k, int k, char *buf, int len)
{
	if (takes_k)
		snprintf(buf, (size_t)len, "%s:%d", name, k);
	else
		snprintf(buf, (size_t)len, "%s", name);
	return buf;
}

const char *policy_accum_str(const struct policy *p, char *buf, int len)
{
	assert(p->accum >= 0 && p->accum < ACC_COUNT);
	return with_k(accum_names[p->accum], p->accum == ACC_PARTIAL, p->partial_k, buf, len);
}

const char *policy_wrap_str(const struct policy *p, char *buf, int len)
{
	assert(p->wrap >= 0 && p->wrap < WRAP_COUNT);
	return with_k(wrap_names[p->wrap], p->wrap == WRAP_EVERY, p->wrap_k, buf, len);
}

const char *policy_ac_str(const struct policy *p, char *buf, int len)
{
	assert(p->ac >= 0 && p->ac < AC_MODES);
	return with_k(ac_names[p->ac], p->ac == AC_PER_LAYER, p->ac_k, buf, len);
}

/*
 * Parse "name" or "name:K" against a table whose entry k_index (alone)
 * takes a K >= 1. *index and *k are written only on success.
 */
static int parse_with_k(const char *const *names, int k_index, const char *s, int *index, int *k)
{
	const char *colon = strchr(s, ':');
	size_t n = colon ? (size_t)(colon - s) : strlen(s);
	int i;

	for (i = 0; names[i]; i++)
		if (strlen(names[i]) == n && strncmp(names[i], s, n) == 0)
			break;
	if (!names[i])
		return -1;
	if (i != k_index) {
		if (colon)
			return -1;
		*index = i;
		return 0;
	}
	if (!colon || !colon[1] || !isdigit((unsigned char)colon[1]))
		return -2;
	char *end;
	errno = 0;
	long v = strtol(colon + 1, &end, 10);
	if (*end || errno || v < 1 || v > 1000000)
		return -2;
	*index = i;
	*k = (int)v;
	return 0;
}

int policy_parse_accum(struct policy *p, const char *s)
{
	int i, k = p->partial_k;
	int rc = parse_with_k(accum_names, ACC_PARTIAL, s, &i, &k);

	if (rc == 0) {
		p->accum = (enum accum)i;
		p->partial_k = i == ACC_PARTIAL ? k : 0;
	}
	return rc;
}

int policy_parse_ac(struct policy *p, const char *s)
{
	int i, k = p->ac_k;
	int rc = parse_with_k(ac_names, AC_PER_LAYER, s, &i, &k);

	if (rc == 0) {
		p->ac = (enum ac_mode)i;
		p->ac_k = i == AC_PER_LAYER ? k : 0;
	}
	return rc;
}

int policy_parse_wrap(struct policy *p, const char *s)
{
	int i, k = p->wrap_k;
	int rc = parse_with_k(wrap_names, WRAP_EVERY, s, &i, &k);

	if (rc == 0) {
		p->wrap = (enum wrap)i;
		p->wrap_k = i == WRAP_EVERY ? k : 0;
	}
	return rc;
}

/* ---- resolution ------------------------------------------------------------ */

const char *const policy_field_names[] = {
	"sharding", "shard_group", "accum", "microbatches", "accum_dtype", "wrap", "reshard",
	"optim", "optim_in_backward", "precision", "reduce_dtype", "ac", "loss", "offload",
	"prefetch", "flat_params", "concat_last_only", "runtime", "expandable_segments", "compile", "sdpa",
	"hold_logits", NULL
};
_Static_assert(TABLE_LEN(policy_field_names) == PF_COUNT, "policy_field_names");
_Static_assert(PF_COUNT <= 32, "a policy field mask is an unsigned");

#define IS_SET(set, f) (((set) & POLICY_BIT(f)) != 0)

const char *policy_field_str(const struct policy *p, enum policy_field f, char *buf, int len)
{
	switch (f) {
	case PF_SHARDING: snprintf(buf, len, "%s", sharding_names[p->sharding]); break;
	case PF_SHARD_GROUP: snprintf(buf, len, "%d", p->shard_group); break;
	case PF_ACCUM: policy_accum_str(p, buf, len); break;
	case PF_MICROBATCHES: snprintf(buf, len, "%d", p->microbatches); break;
	case PF_ACCUM_DTYPE: snprintf(buf, len, "%s", dtype_names[p->accum_dtype]); break;
	case PF_WRAP: policy_wrap_str(p, buf, len); break;
	case PF_RESHARD: snprintf(buf, len, "%s", reshard_names[p->reshard]); break;
	case PF_OPTIM: snprintf(buf, len, "%s", optim_names[p->optim]); break;
	case PF_OPTIM_IN_BACKWARD: snprintf(buf, len, "%s", p->optim_in_backward ? "true" : "false"); break;
	case PF_PRECISION: snprintf(buf, len, "%s", precision_names[p->precision]); break;
	case PF_REDUCE_DTYPE: snprintf(buf, len, "%s", dtype_names[p->reduce_dtype]); break;
	case PF_AC: snprintf(buf, len, "%s", ac_names[p->ac]); break;
	case PF_LOSS: snprintf(buf, len, "%s", loss_names[p->loss]); break;
	case PF_OFFLOAD: snprintf(buf, len, "%s", offload_names[p->offload]); break;
	case PF_PREFETCH: snprintf(buf, len, "%d", p->prefetch); break;
	case PF_FLAT_PARAMS: snprintf(buf, len, "%s", p->flat_params ? "true" : "false"); break;
	case PF_CONCAT_LAST_ONLY: snprintf(buf, len, "%s", p->concat_last_only ? "true" : "false"); break;
	case PF_RUNTIME: snprintf(buf, len, "%s", runtime_names[p->runtime]); break;
	case PF_EXPANDABLE_SEGMENTS: snprintf(buf, len, "%s", p->expandable_segments ? "true" : "false"); break;
	case PF_COMPILE: snprintf(buf, len, "%s", compile_names[p->compile]); break;
	case PF_SDPA: snprintf(buf, len, "%s", sdpa_names[p->sdpa]); break;
	case PF_HOLD_LOGITS: snprintf(buf, len, "%s", p->hold_logits ? "true" : "false"); break;
	default: assert(!"bad policy field");
	}
	return buf;
}

/*
 * The shard group of a sharding, unless hsdp's is set: every rank shards
 * for fsdp and zero2, one node's GPUs for hsdp, nothing for ddp.
 */
static int default_shard_group(enum sharding s, const struct cluster *c)
{
	switch (s) {
	case SHARD_HSDP:
		return c->gpus_per_node;
	case SHARD_DDP:
		return 1;
	default:
		return cluster_world(c);
	}
}

/* zero2 and ddp keep full parameters from forward to backward: nothing to reshard. */
static int keeps_full_params(enum sharding s)
{
	return s == SHARD_ZERO2 || s == SHARD_DDP;
}

unsigned policy_resolve(struct policy *p, unsigned set, const struct cluster *c,
			const struct model_shape *m)
{
	enum dtype grad_dt = p->precision == PREC_PURE_BF16 ? DT_BF16 : DT_FP32;
	unsigned wrote = 0;

	(void)m;
	/* gradient dtypes follow the precision unless set */
	if (!IS_SET(set, PF_REDUCE_DTYPE)) {
		p->reduce_dtype = grad_dt;
		wrote |= POLICY_BIT(PF_REDUCE_DTYPE);
	}
	if (!IS_SET(set, PF_ACCUM_DTYPE)) {
		p->accum_dtype = grad_dt;
		wrote |= POLICY_BIT(PF_ACCUM_DTYPE);
	}

	/* the shard group; an explicit 0 means the default, as if not set */
	if (!IS_SET(set, PF_SHARD_GROUP) || p->shard_group == 0) {
		p->shard_group = default_shard_group(p->sharding, c);
		wrote |= POLICY_BIT(PF_SHARD_GROUP);
	}

	/*
	 * zero2 and ddp: reshard resolves to no; "yes", the default's spelling,
	 * is taken as the default; an explicit "all-but-last" asks for what they
	 * cannot do and stays for policy_check to name.
	 */
	if (keeps_full_params(p->sharding)) {
		int asks_all_but_last = IS_SET(set, PF_RESHARD) && p->reshard == RESHARD_ALL_BUT_LAST;
		if (!asks_all_but_last && (p->reshard != RESHARD_NO || !IS_SET(set, PF_RESHARD))) {
			p->reshard = RESHARD_NO;
			wrote |= POLICY_BIT(PF_RESHARD);
		}
	} else if (!IS_SET(set, PF_RESHARD)) {
		p->reshard = RESHARD_YES;
		wrote |= POLICY_BIT(PF_RESHARD);
	}
	return wrote;
}

/* ---- the rules ------------------------------------------------------------ */

struct checker {
	struct policy_violation *out;
	int max;
	int n; /* violations found, also those out had no room for */
};

static void violation(struct checker *ck, const char *key, const char *other0, const char *other1,
		      const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Count one broken rule; describe it when out has room. */
static void violation(struct checker *ck, const char *key, const char *other0, const char *other1,
		      const char *fmt, ...)
{
	if (ck->out && ck->n < ck->max) {
		struct policy_violation *v = &ck->out[ck->n];
		va_list ap;

		v->key = key;
		v->others[0] = other0;
		v->others[1] = other0 ? other1 : NULL;
		v->others[2] = NULL;
		va_start(ap, fmt);
		vsnprintf(v->what, sizeof v->what, fmt, ap);
		va_end(ap);
	}
	ck->n++;
}

/*
 * The rules, in the order their violations are reported. Each names the
 * key it is about first, then the keys that make it wrong.
 */
int policy_sharding_variants(const struct policy *p, const struct cluster *c, const struct model_shape *m,
			     struct policy *out)
{
	static const enum sharding others[] = { SHARD_DDP, SHARD_FSDP, SHARD_HSDP };
	int n = 0;

	for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
		struct policy *v = &out[n];
		if (others[i] == p->sharding)
			continue;
		*v = *p;
		v->sharding = others[i];
		v->shard_group = 0;
		v->accum = ACC_SYNC_EACH;
		v->reshard = RESHARD_YES;
		v->optim_in_backward = 0;
		policy_resolve(v, POLICY_ALL_FIELDS & ~(POLICY_BIT(PF_SHARD_GROUP) | POLICY_BIT(PF_RESHARD)), c, m);
		if (policy_check(v, c, m, NULL, 0) == 0)
			n++;
	}
	return n;
}

int policy_check(const struct policy *p, const struct cluster *c, const struct model_shape *m,
		 struct policy_violation *out, int max)
{
	struct checker ck = { out, max, 0 };
	const char *sname = sharding_names[p->sharding];
	int world = cluster_world(c);

	/* only hsdp chooses its shard group, and it must divide the world */
	if (p->sharding != SHARD_HSDP && p->shard_group != default_shard_group(p->sharding, c)) {
		if (p->sharding == SHARD_DDP)
			violation(&ck, "policy.shard_group", "policy.sharding", NULL,
				  "applies to hsdp only; ddp shards nothing");
		else
			violation(&ck, "policy.shard_group", "policy.sharding", NULL,
				  "applies to hsdp only; %s shards over all %d ranks", sname, world);
	} else if (p->shard_group < 1 || world % p->shard_group != 0) {
		violation(&ck, "policy.shard_group", "cluster.nodes", "cluster.gpus_per_node",
			  "does not divide the world size %d", world);
	}
	/* zero2 and ddp have nothing to reshard */
	if (keeps_full_params(p->sharding) && p->reshard != RESHARD_NO)
		violation(&ck, "policy.reshard", "policy.sharding", NULL,
			  "does not apply: %s keeps full parameters from forward to backward", sname);
	if (p->accum == ACC_DEFER_REPLICA && p->sharding != SHARD_HSDP)
		violation(&ck, "policy.accum", "policy.sharding", NULL,
			  "needs policy.sharding = hsdp: it defers the all-reduce across replicas");
	if (m && p->accum == ACC_PARTIAL && (p->partial_k < 1 || p->partial_k > m->layers))
		violation(&ck, "policy.accum", "model.layers", NULL,
			  "needs K from 1 to the number of layers, %d", m->layers);
	if (m && p->wrap == WRAP_EVERY && (p->wrap_k < 1 || p->wrap_k > m->layers))
		violation(&ck, "policy.wrap", "model.layers", NULL,
			  "needs K from 1 to the number of layers, %d", m->layers);
	if (m && p->ac == AC_PER_LAYER && (p->ac_k < 1 || p->ac_k > m->layers))
		violation(&ck, "policy.ac", "model.layers", NULL,
			  "needs K from 1 to the number of layers, %d", m->layers);
	/* PyTorch's policies name PyTorch's ops and per-block modes: the testbed's stores have neither */
	if (p->ac >= AC_COUNT && p->runtime == RT_TESTBED)
		violation(&ck, "policy.ac", "policy.runtime", NULL,
			  "is a PyTorch checkpointing policy: it needs policy.runtime = pytorch or pytorch-compile "
			  "(the testbed runtime checkpoints none, full or selective)");
	/* PyTorch's allocator setting: the testbed's arena allocator has no such mode */
	if (p->expandable_segments && p->runtime == RT_TESTBED)
		violation(&ck, "policy.expandable_segments", "policy.runtime", NULL,
			  "is a setting of PyTorch's caching allocator: it needs policy.runtime = pytorch or "
			  "pytorch-compile (the testbed runtime's arena allocator has no such mode)");
	/* what torch.compile compiles: only a compiling runtime has a choice */
	if (p->compile != COMPILE_MODEL_LOSS && p->runtime != RT_PYTORCH_COMPILE)
		violation(&ck, "policy.compile", "policy.runtime", NULL,
			  "says what torch.compile compiles: it needs policy.runtime = pytorch-compile");
	/* SDPA's backend: the testbed runs its own attention kernel */
	if (p->sdpa != SDPA_RUNTIME && p->runtime == RT_TESTBED)
		violation(&ck, "policy.sdpa", "policy.runtime", NULL,
			  "is PyTorch's attention backend: it needs policy.runtime = pytorch or pytorch-compile");
	/* a PyTorch training loop's reference to the logits: the testbed's loss keeps no logits tensor */
	if (p->hold_logits && p->runtime == RT_TESTBED)
		violation(&ck, "policy.hold_logits", "policy.runtime", NULL,
			  "is a PyTorch training loop's reference to the logits: it needs policy.runtime = pytorch "
			  "or pytorch-compile");
	else if (p->hold_logits && p->loss == LOSS_CHUNKED)
		violation(&ck, "policy.hold_logits", "policy.loss", NULL,
			  "needs policy.loss = full: the chunked loss makes no logits tensor of the whole batch");
	if (p->microbatches < 1)
		violation(&ck, "policy.microbatches", NULL, NULL, "must be at least 1");
	if (p->concat_last_only && !p->flat_params)
		violation(&ck, "policy.concat_last_only", "policy.flat_params", NULL,
			  "needs policy.flat_params = true");
	if (p->sharding == SHARD_DDP && p->flat_params)
		violation(&ck, "policy.flat_params", "policy.sharding", NULL,
			  "does not apply to ddp: it has no shards to flatten");
	if (p->sharding == SHARD_DDP && p->offload != OFF_NONE)
		violation(&ck, "policy.offload", "policy.sharding", NULL,
			  "does not apply to ddp: it has no shards to offload");
	assert(ck.n <= POLICY_VIOLATIONS_MAX);
	return ck.n;
}

/* ---- the policy space ------------------------------------------------------ */

/* The choices of the accum and wrap axes put the K forms last: */
_Static_assert(ACC_PARTIAL == ACC_COUNT - 1, "partial:K is the last accumulation choice");
_Static_assert(WRAP_EVERY == WRAP_COUNT - 1, "every:K is the last wrapping choice");

/* The fields the walk sets, one per axis. */
#define WALK_FIELDS (POLICY_BIT(PF_SHARDING) | POLICY_BIT(PF_ACCUM) | POLICY_BIT(PF_WRAP) | \
		     POLICY_BIT(PF_RESHARD) | POLICY_BIT(PF_OPTIM) | POLICY_BIT(PF_OPTIM_IN_BACKWARD) | \
		     POLICY_BIT(PF_AC) | POLICY_BIT(PF_OFFLOAD))

void policy_walk_init(struct policy_walk *w, const struct policy *base, const struct cluster *c,
		      const struct model_shape *m)
{
	assert(m && m->layers >= 1);
	memset(w, 0, sizeof *w);
	w->base = *base;
	w->cluster = c;
	w->model = m;
	w->size[PA_SHARDING] = SHARD_COUNT;
	/* sync-each, no-sync, defer-replica, then partial:K, K = 1..layers: each K defers other blocks */
	w->size[PA_ACCUM] = ACC_PARTIAL + m->layers;
	/* block, block+io, whole, then every:K, K = 2..layers: every:1 cuts the blocks as block does */
	w->size[PA_WRAP] = WRAP_EVERY + m->layers - 1;
	w->size[PA_RESHARD] = RESHARD_COUNT;
	w->size[PA_OPTIM] = OPT_COUNT;
	w->size[PA_OPTIM_IN_BACKWARD] = 2;
	/* none, full, selective, per-op; per-layer:K when the base has it, with its K */
	w->size[PA_AC] = AC_PER_LAYER + (base->ac == AC_PER_LAYER);
	w->size[PA_OFFLOAD] = OFF_COUNT;
}

/* Move to the next combination, the last axis fastest. 0 past the last one. */
static int walk_advance(struct policy_walk *w)
{
	if (w->done)
		return 0;
	if (!w->started) {
		w->started = 1;
		return 1;
	}
	for (int a = PA_COUNT - 1; a >= 0; a--) {
		if (++w->at[a] < w->size[a])
			return 1;
		w->at[a] = 0;
	}
	w->done = 1;
	return 0;
}

/* The combination the walk is at, and the fields it sets explicitly. */
static void walk_policy(const struct policy_walk *w, struct policy *p, unsigned *set)
{
	const int *at = w->at;

	*p = w->base;
	p->sharding = (enum sharding)at[PA_SHARDING];
	if (at[PA_ACCUM] < ACC_PARTIAL) {
		p->accum = (enum accum)at[PA_ACCUM];
		p->partial_k = 0;
	} else {
		p->accum = ACC_PARTIAL;
		p->partial_k = at[PA_ACCUM] - ACC_PARTIAL + 1;
	}
	if (at[PA_WRAP] < WRAP_EVERY) {
		p->wrap = (enum wrap)at[PA_WRAP];
		p->wrap_k = 0;
	} else {
		p->wrap = WRAP_EVERY;
		p->wrap_k = at[PA_WRAP] - WRAP_EVERY + 2;
	}
	p->reshard = (enum reshard)at[PA_RESHARD];
	p->optim = (enum optim)at[PA_OPTIM];
	p->optim_in_backward = at[PA_OPTIM_IN_BACKWARD];
	p->ac = (enum ac_mode)at[PA_AC];
	p->ac_k = p->ac == AC_PER_LAYER ? w->base.ac_k : 0;
	p->offload = (enum offload)at[PA_OFFLOAD];

	/* every field is as chosen, except the shard group: the sharding's, or an hsdp base's own */
	*set = POLICY_ALL_FIELDS;
	if (!(p->sharding == SHARD_HSDP && w->base.sharding == SHARD_HSDP)) {
		p->shard_group = 0;
		*set &= ~POLICY_BIT(PF_SHARD_GROUP);
	}
}

/*
 * Whether a canonical, valid p is the same training step as another policy
 * the walk emits, which stands for it. Each rule follows from what the
 * policies mean (experiments/README.md), not from how a schedule is built:
 *   - one microbatch: it is the last, where every accumulation policy
 *     reduces every gradient and nothing accumulates; sync-each stands for
 *     them all;
 *   - fsdp with reshard = no keeps full parameters from forward to
 *     backward: that is zero2, which stands for it;
 *   - hsdp whose shard group is the whole world has a single replica: it
 *     is fsdp (its defer-replica, fsdp's sync-each), which stands for it;
 *   - with offload the host takes the optimizer step: optim, the GPU
 *     kernels of the step, does not apply; foreach stands for the others.
 * Every policy that stands for another is emitted: none of these rules
 * drops it, and it is valid whenever the one it stands for is.
 * A new rule goes here, with the policy that stands for the ones it drops.
 */
static int same_step_as_another(const struct policy *p, const struct cluster *c)
{
	if (p->microbatches == 1 && p->accum != ACC_SYNC_EACH)
		return 1;
	if (p->sharding == SHARD_FSDP && p->reshard == RESHARD_NO)
		return 1;
	if (p->sharding == SHARD_HSDP && p->shard_group == cluster_world(c))
		return 1;
	if (p->offload != OFF_NONE && p->optim != OPT_FOREACH)
		return 1;
	return 0;
}

int policy_next(struct policy_walk *w, struct policy *p)
{
	while (walk_advance(w)) {
		struct policy q;
		unsigned set;

		walk_policy(w, &q, &set);
		/* a combination policy_resolve would change is another's name (zero2 with reshard yes) */
		if (policy_resolve(&q, set, w->cluster, w->model) & WALK_FIELDS)
			continue;
		if (same_step_as_another(&q, w->cluster))
			continue;
		if (policy_check(&q, w->cluster, w->model, NULL, 0) != 0)
			continue;
		*p = q;
		return 1;
	}
	return 0;
}
