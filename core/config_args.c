/*
 * config_args.c - the command line: one key set as `section.key=value`
 * (config_set), the common flags of both binaries (config_parse_args),
 * their help, and the names a caller needs to report a flag it does not
 * know. Each key set here records the flag as its origin.
 */
#include "config_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"
#include "xalloc.h"

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
	if (strcmp(origin, "--set") == 0)
		snprintf(prefix, sizeof prefix, "--set %s", assignment);
	else
		snprintf(prefix, sizeof prefix, "%s", origin);

	if (!eq || (size_t)(eq - assignment) >= sizeof lhs) {
		config_say(prefix, "expected section.key=value");
		return -1;
	}
	snprintf(lhs, sizeof lhs, "%.*s", (int)(eq - assignment), assignment);
	if (strlen(eq + 1) >= sizeof value) {
		config_say(prefix, "value is longer than %zu characters", sizeof value - 1);
		return -1;
	}
	snprintf(value, sizeof value, "%s", eq + 1);
	trim(lhs);
	trim(value);
	char *dot = strchr(lhs, '.');
	if (!dot) {
		config_say(prefix, "expected section.key=value");
		return -1;
	}
	*dot = '\0';
	const char *section = lhs, *name = dot + 1;
	if (name_index(config_sections, section) < 0) {
		config_unknown_section_text(section, err, sizeof err);
		config_say(prefix, "%s", err);
		return -1;
	}
	int k = config_key_find(section, name);
	if (k < 0) {
		config_unknown_key_text(section, name, err, sizeof err);
		config_say(prefix, "%s", err);
		return -1;
	}
	if (config_value_parse(e, k, value, err, sizeof err) < 0) {
		config_say(prefix, "%s", err);
		return -1;
	}
	config_origin_set(e, k, OR_FLAG, prefix);
	return 0;
}

/* ---- the flags ------------------------------------------------------------ */

int config_is_flag(const char *arg)
{
	char name[FLAG_MAX + 8];

	if (strncmp(arg, "--", 2) != 0)
		return 0;
	config_head_of(arg, "=", name, sizeof name);
	return strcmp(name, "--set") == 0 || config_key_of_flag(name) >= 0;
}

const char *config_flag_closest(const char *arg, const char *const *own)
{
	const char *const *cfg = config_flags_bare();
	char name[FLAG_MAX + 8];
	const char **all, *close;
	int n = 0, m = 0;

	if (arg[0] != '-')
		return NULL;
	arg += strspn(arg, "-");
	config_head_of(arg, "=", name, sizeof name);
	while (cfg[n])
		n++;
	while (own && own[m])
		m++;
	all = xcalloc((size_t)(n + m + 1), sizeof *all);
	memcpy(all, cfg, sizeof *all * (size_t)n);
	for (int i = 0; i < m; i++)
		all[n + i] = own[i] + 2; /* "--schedule": the bare name, "--" before it */
	close = name_closest(all, name);
	free(all);
	return close ? close - 2 : NULL;
}

struct pending {
	int key;             /* -1 for --set */
	const char *flag;    /* as written, without "=value" */
	const char *value;   /* NULL: missing */
};

int config_parse_args(struct experiment *e, int argc, char **argv)
{
	struct pending *todo = xcalloc((size_t)argc + 1, sizeof *todo);
	char flag[FLAG_MAX + 8];
	const char *file = NULL;
	int n = 0, errors = 0;

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
		int k = strcmp(flag, "--set") == 0 ? -1 : config_key_of_flag(flag);
		if (k < 0 && strcmp(flag, "--set") != 0)
			continue; /* the caller's */

		const struct key *key = k >= 0 ? config_key(k) : NULL;
		struct pending *t = &todo[n++];
		t->key = k;
		t->flag = !key ? "--set" : key->alias && strcmp(key->alias, flag) == 0 ? key->alias : key->flag;
		argv[i] = NULL;
		if (eq) {
			t->value = eq + 1;
		} else if (key && key->type == KT_BOOL) {
			t->value = "true";
			if (i + 1 < argc && argv[i + 1] && config_is_bool_word(argv[i + 1])) {
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
				config_say(t->flag, "missing value (write --set section.key=value)");
			else
				config_say(t->flag, "missing value");
			errors++;
			continue;
		}
		if (t->key < 0) {
			errors += config_set(e, t->value, "--set") < 0;
		} else {
			char assignment[CONFIG_PATH_MAX + 128];
			snprintf(assignment, sizeof assignment, "%s.%s=%s", config_key(t->key)->section,
				 config_key(t->key)->name, t->value);
			errors += config_set(e, assignment, t->flag) < 0;
		}
	}
	free(todo);
	return errors ? -1 : 0;
}

void config_usage(FILE *f)
{
	fprintf(f, "experiment: [FILE.ini] [--set section.key=value]... and one flag per key:\n");
	for (int s = 0; config_sections[s]; s++) {
		int col = fprintf(f, "  [%s]", config_sections[s]);
		for (int i = 0; i < config_key_count(); i++) {
			const struct key *k = config_key(i);
			if (strcmp(k->section, config_sections[s]) != 0)
				continue;
			const char *arg = k->type == KT_BOOL ? "" : " V";
			int w = (int)strlen(k->flag) + (int)strlen(arg) + 1;
			if (col + w > 79) {
				fprintf(f, "\n%*s", 11, "");
				col = 11;
			}
			col += fprintf(f, " %s%s", k->flag, arg);
			if (k->alias)
				col += fprintf(f, " (or %s)", k->alias);
		}
		fputc('\n', f);
	}
	fprintf(f, "  see experiments/README.md for every key, its values and default\n");
}

int config_check_leftovers(int argc, char **argv, const char *prog, const char *const *own)
{
	for (int i = 1; i < argc; i++) {
		const char *near;
		if (!argv[i])
			continue;
		near = config_flag_closest(argv[i], own);
		if (argv[i][0] != '-')
			text_line(config_err(), "'%s' after the experiment file: one experiment file is read (more settings "
					        "with --set section.key=value; see %s --help)", argv[i], prog);
		else if (near)
			text_line(config_err(), "unknown flag '%s' (did you mean '%s'?)", argv[i], near);
		else
			text_line(config_err(), "unknown flag '%s' (see %s --help)", argv[i], prog);
		return -1;
	}
	return 0;
}
