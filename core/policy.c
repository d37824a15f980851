/*
 * policy.c - policy names, defaults and the byte sizes a policy implies.
 *
 * The name tables are indexed by their enum and end with NULL; the
 * experiment files, the command line, the results files and the plots all
 * spell a policy with these strings. Two values carry a number: partial:K
 * (accum) and every:K (wrap); the tables hold their bare names ("partial",
 * "every") and policy_parse_accum()/policy_parse_wrap() read the K.
 */
#include "policy.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *const sharding_names[] = { "ddp", "fsdp", "zero2", "hsdp", NULL };
const char *const accum_names[] = { "sync-each", "no-sync", "defer-replica", "partial", NULL };
const char *const wrap_names[] = { "block", "block+io", "whole", "every", NULL };
const char *const reshard_names[] = { "yes", "no", "all-but-last", NULL };
const char *const optim_names[] = { "foreach", "fused", "per-param", NULL };
const char *const precision_names[] = { "mixed", "pure-bf16", "fp32", NULL };
const char *const dtype_names[] = { "fp32", "bf16", NULL };
const char *const ac_names[] = { "none", "full", "selective", NULL };
const char *const loss_names[] = { "full", "chunked", NULL };
const char *const offload_names[] = { "none", "optim", "params", NULL };
const char *const runtime_names[] = { "testbed", "pytorch", NULL };

/* Every table has one name per enum value: checked once, at compile time. */
#define TABLE_LEN(t) (sizeof(t) / sizeof((t)[0]) - 1)
_Static_assert(TABLE_LEN(sharding_names) == SHARD_COUNT, "sharding_names");
_Static_assert(TABLE_LEN(accum_names) == ACC_COUNT, "accum_names");
_Static_assert(TABLE_LEN(wrap_names) == WRAP_COUNT, "wrap_names");
_Static_assert(TABLE_LEN(reshard_names) == RESHARD_COUNT, "reshard_names");
_Static_assert(TABLE_LEN(optim_names) == OPT_COUNT, "optim_names");
_Static_assert(TABLE_LEN(precision_names) == PREC_COUNT, "precision_names");
_Static_assert(TABLE_LEN(dtype_names) == DT_COUNT, "dtype_names");
_Static_assert(TABLE_LEN(ac_names) == AC_COUNT, "ac_names");
_Static_assert(TABLE_LEN(loss_names) == LOSS_COUNT, "loss_names");
_Static_assert(TABLE_LEN(offload_names) == OFF_COUNT, "offload_names");
_Static_assert(TABLE_LEN(runtime_names) == RT_COUNT, "runtime_names");

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
	int *rows = malloc(3 * (size_t)(lb + 1) * sizeof *rows);

	assert(rows);
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
	p->loss = LOSS_FULL;
	p->offload = OFF_NONE;
	p->prefetch = 1;
	p->flat_params = 0;
	p->concat_last_only = 0;
	p->runtime = RT_TESTBED;
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
