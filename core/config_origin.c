/*
 * config_origin.c - where each key's value came from (a file and line, a
 * flag, the default, the catalog, a derivation), and the messages that
 * name those places: config_say() for one key's error, config_rule_error()
 * for a rule between keys, which names every key involved with its value
 * and origin. The origins live in struct experiment.origins, allocated by
 * config_init(), one per key of the table.
 */
#include "config_internal.h"

#include <assert.h>
#include <stdarg.h>
#include <string.h>

#include "text.h"

FILE *config_errfile;

/* ---- origins ------------------------------------------------------------ */

struct origin *config_origin(const struct experiment *e, int k)
{
	struct origins *o = e->origins;
	assert(o && "config_init() first");
	return &o->o[k];
}

int config_is_explicit(const struct experiment *e, int k)
{
	enum origin_kind kind = config_origin(e, k)->kind;
	return kind == OR_FILE || kind == OR_FLAG;
}

void config_origin_set(struct experiment *e, int k, enum origin_kind kind, const char *where)
{
	struct origin *o = config_origin(e, k);
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

FILE *config_err(void)
{
	return config_errfile ? config_errfile : stderr;
}

void config_say(const char *prefix, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	text_vline(config_err(), prefix, fmt, ap); /* the place and the values quoted are user text */
	va_end(ap);
}

/* "section.key = value" */
static void key_text(const struct experiment *e, int k, char *buf, size_t n)
{
	char v[CONFIG_PATH_MAX + 8];
	config_value_text(e, k, v, sizeof v);
	snprintf(buf, n, "%s.%s = %s", config_key(k)->section, config_key(k)->name, v);
}

void config_rule_error(const struct experiment *e, int primary, const char *what, const int *others)
{
	char prefix[WHERE_MAX + 32], text[4 * MSG_MAX], kt[MSG_MAX], where[WHERE_MAX + 32];
	size_t used = 0;
	int from = -1;

	if (config_is_explicit(e, primary))
		from = primary;
	for (int i = 0; from < 0 && others[i] >= 0; i++)
		if (config_is_explicit(e, others[i]))
			from = others[i];
	if (from >= 0)
		origin_prefix(config_origin(e, from), prefix, sizeof prefix);
	else
		snprintf(prefix, sizeof prefix, "%s", *e->path ? e->path : "experiment");

	key_text(e, primary, kt, sizeof kt);
	used += (size_t)snprintf(text + used, sizeof text - used, "%s", kt);
	if (from != primary) {
		origin_text(config_origin(e, primary), where, sizeof where);
		used += (size_t)snprintf(text + used, sizeof text - used, " (%s)", where);
	}
	used += (size_t)snprintf(text + used, sizeof text - used, " %s", what);
	for (int i = 0; others[i] >= 0 && used < sizeof text; i++) {
		key_text(e, others[i], kt, sizeof kt);
		origin_text(config_origin(e, others[i]), where, sizeof where);
		used += (size_t)snprintf(text + used, sizeof text - used, "%s%s %s", i ? ", " : " (", kt,
					 where);
		if (others[i + 1] < 0 && used < sizeof text)
			used += (size_t)snprintf(text + used, sizeof text - used, ")");
	}
	config_say(prefix, "%s", text);
}

