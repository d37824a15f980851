/*
 * sweep.c - sweep files, and the configurations they describe (see
 * sweep.h).
 *
 * A value of an axis is checked once, when the file is read, by setting
 * it on a scratch experiment through config_set (the experiment key table
 * and its messages); its canonical text (config_get) is what every
 * configuration applies again. A configuration is the base experiment
 * (config_copy) with its axes' values set, resolved by config_resolve:
 * what ./sim would make of the base file with those values given as flags.
 * Messages of candidates that break a rule are caught (config_errfile),
 * never printed: the caller counts them.
 *
 * Costs: building a configuration copies the base and its origins (about
 * 40 KB), sets one value per axis and resolves, some 10 us; seeking over
 * other ranks' candidates costs nothing without the policy walk, and one
 * policy_next per candidate with it.
 */
#include "sweep.h"

#include <assert.h>
#include <errno.h>
#include <ini.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "calibration.h"
#include "config.h"
#include "text.h"
#include "xalloc.h"

#define OUTER_MAX (1ull << 40)      /* candidates a sweep may have */
#define WALK_MEMO 64                /* policy walks counted per sweep, remembered */

static const char *const sections[] = { "sweep", "model", "cluster", "policy", "run", NULL };
static const char *const sweep_keys[] = { "experiment", "policies", "global_batch", "memory_budget_gib",
					  "must_fit", "timelines", "what_if", NULL };

/* ---- reading the file ----------------------------------------------------------- */

struct reader {
	struct sweep *sw;
	FILE *f;
	int line;              /* of the line inih handles */
	int section_line;      /* of the last [section] header */
	int reported_section;  /* the header whose unknown section was reported */
	int cont;              /* that line starts with white space: it continues the previous value */
	int after_key;         /* a key line since the last header (config_ini_key_line) */
	struct sweep_axis *dangling; /* the axis whose list ended in ',' at dangling_line: continued, or an error */
	int dangling_line;
	int errors;
	char last_section[16], last_key[64];
	int last_line;
	/* [sweep] keys and axes seen, for "set twice" */
	char seen[SWEEP_AXES_MAX + 8][80];
	int seen_line[SWEEP_AXES_MAX + 8];
	int nseen;
	struct experiment scratch;  /* where axis values are checked */
	const char *origin;         /* an axis from the command line (line 0): its flag, for messages */
	char path[CONFIG_PATH_MAX]; /* the sweep file, for messages */
	char what_if[80];      /* [sweep] what_if, checked once the axes are known */
	int what_if_line;
};

static void say(struct reader *r, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void say(struct reader *r, int line, const char *fmt, ...)
{
	char where[CONFIG_PATH_MAX + 16];
	va_list ap;

	if (line > 0 || !r->origin)
		snprintf(where, sizeof where, "%s:%d", r->sw->path, line);
	else
		snprintf(where, sizeof where, "%s", r->origin);
	va_start(ap, fmt);
	text_vline(stderr, where, fmt, ap);
	va_end(ap);
	r->errors++;
}

/* An unknown section, said once, at its header. */
static void unknown_section(struct reader *r, const char *section)
{
	const char *close = name_closest(sections, section);

	if (r->reported_section == r->section_line)
		return;
	r->reported_section = r->section_line;
	if (close)
		say(r, r->section_line, "unknown section [%s] (did you mean [%s]?)", section, close);
	else
		say(r, r->section_line, "unknown section [%s] (sections: [sweep] [model] [cluster] [policy] [run])",
		    section);
}

static char *reader_line(char *str, int num, void *stream)
{
	struct reader *r = stream;
	char err[1024];
	int more, got = config_ini_line(r->f, str, num, "a sweep", &more, err, sizeof err);

	if (!got)
		return NULL;
	r->line++;
	if (got < 0) { /* a line that is not text stops the reading, as in an experiment file */
		say(r, r->line, "%s", err);
		return NULL;
	}
	if (more) {
		say(r, r->line, "line is longer than %d characters (continue a list on an indented line)", num - 3);
		str[0] = '\0';
		return str;
	}
	r->cont = (str[0] == ' ' || str[0] == '\t') && str[strspn(str, " \t\r\n")] != '\0' &&
		  str[strspn(str, " \t")] != ';' && str[strspn(str, " \t")] != '#';
	if (r->cont) /* inih (55) keeps an inline comment on a continuation line: it ends here, as on a key's line */
		for (char *c = str + 1; *c; c++)
			if (*c == ';' && (c[-1] == ' ' || c[-1] == '\t')) {
				c[0] = '\n';
				c[1] = '\0';
				break;
			}
	char name[CONFIG_SECTION_CHARS];
	if (config_ini_section(str, name)) {
		r->section_line = r->line;
		if (name[0] && name_index(sections, name) < 0) /* said at its header */
			unknown_section(r, name);
	}
	if (config_ini_key_line(str, &r->after_key, err, sizeof err) != 0)
		say(r, r->line, "%s", err);
	return str;
}

static char *trimmed(char *s)
{
	size_t n;

	s += strspn(s, " \t");
	n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		s[--n] = '\0';
	return s;
}

/*
 * A calibration file the sweep names (where: file:line, or the flag):
 * readable, and able to price every world size it holds
 * (calibration_check), so that a bad file is an input error before the
 * sweep runs, not a candidate that breaks a rule. Then named as it stands
 * (FILE@NNNNNN, calibration_pin: what the rows record), in place (path
 * holds n bytes). -1 after a message.
 */
static int calibration_usable(const char *where, char *path, size_t n)
{
	char err[512];

	if (calibration_access(path) != 0) {
		text_line(stderr, "%s: cluster.calibration = %s cannot be read: %s (make one with gpu_run --calibrate)",
			where, path, strerror(errno));
		return -1;
	}
	if (calibration_check(path, err, sizeof err) != 0 || calibration_pin(path, path, n, err, sizeof err) != 0) {
		text_line(stderr, "%s: cluster.calibration = %s is not a valid calibration: %s", where, path, err);
		return -1;
	}
	return 0;
}

/* Add value text to axis a after checking it as the key's value; -1 after a message. */
static int axis_add(struct reader *r, struct sweep_axis *a, const char *text, int line)
{
	char assign[CONFIG_PATH_MAX + 128], canon[CONFIG_PATH_MAX + 8], where[CONFIG_PATH_MAX + 16];

	snprintf(assign, sizeof assign, "%s.%s=%s", a->section, a->name, text);
	if (line)
		snprintf(where, sizeof where, "%s:%d", r->path, line);
	else
		snprintf(where, sizeof where, "%s", a->where);
	if (config_set(&r->scratch, assign, where) != 0) {
		r->errors++;
		return -1;
	}
	config_get(&r->scratch, a->section, a->name, canon, sizeof canon);
	if (!strcmp(a->section, "cluster") && !strcmp(a->name, "calibration")) {
		if (!calibration_named(canon))
			snprintf(canon, sizeof canon, "none"); /* "" and none: the catalog, one value, one name */
		else if (calibration_usable(where, canon, CONFIG_PATH_MAX) != 0) {
			r->errors++;
			return -1;
		}
	}
	for (int i = 0; i < a->nvalues; i++)
		if (!strcmp(a->values[i], canon)) {
			say(r, line, "%s.%s = %s is listed twice", a->section, a->name, canon);
			return -1;
		}
	if (a->nvalues == SWEEP_VALUES_MAX) {
		say(r, line, "%s.%s has more than %d values, the most an axis may have", a->section, a->name,
		    SWEEP_VALUES_MAX);
		return -1;
	}
	a->values = xrealloc(a->values, sizeof(char *) * (size_t)(a->nvalues + 1));
	a->values[a->nvalues++] = xstrdup(canon);
	return 0;
}

/* text, one end or the step of a range of axis a (where: "before '..'"), as a number into v; -1 after a message. */
static int range_number(struct reader *r, const struct sweep_axis *a, int line, const char *text, const char *where,
			double *v)
{
	enum config_number st = config_parse_real(text, v);

	if (st == CONFIG_NUMBER_BAD)
		say(r, line, "%s.%s: '%s' %s is not a number%s", a->section, a->name, text, where,
		    config_number_why(text, st));
	else if (st == CONFIG_NUMBER_RANGE)
		say(r, line, "%s.%s: %s %s is out of range%s", a->section, a->name, text, where,
		    config_number_why(text, st));
	return st == CONFIG_NUMBER_OK ? 0 : -1;
}

/*
 * A range "lo..hi", "lo..hi step S" or "lo..hi times F" of a numeric key:
 * its values, each checked as the key's. -1 after a message.
 */
static int axis_range(struct reader *r, struct sweep_axis *a, char *item, int line)
{
	char *dots = strstr(item, ".."), *rest, hi_text[64], word[16], num[64];
	double lo, hi, by = 1;
	int times = 0, integer = a->type == 'i';
	long count = 0;
	size_t n;

	*dots = '\0';
	if (range_number(r, a, line, trimmed(item), "before '..'", &lo) != 0)
		return -1;
	rest = trimmed(dots + 2);
	n = strcspn(rest, " \t");
	snprintf(hi_text, sizeof hi_text, "%.*s", (int)n, rest);
	if (range_number(r, a, line, hi_text, "after '..'", &hi) != 0)
		return -1;
	rest = trimmed(rest + n);
	if (*rest) {
		int used = 0;
		if (sscanf(rest, "%15s %63s %n", word, num, &used) < 2 || rest[used] ||
		    (strcmp(word, "step") && strcmp(word, "times"))) {
			say(r, line, "%s.%s: '%s' after the range: write lo..hi, lo..hi step S or lo..hi times F",
			    a->section, a->name, rest);
			return -1;
		}
		times = !strcmp(word, "times");
		if (range_number(r, a, line, num, times ? "after 'times'" : "after 'step'", &by) != 0)
			return -1;
		if (times ? by <= 1 : by <= 0) {
			say(r, line, "%s.%s: %s %s: %s", a->section, a->name, word, num,
			    times ? "the factor must be a number above 1" : "the step must be a number above 0");
			return -1;
		}
		if (times && lo <= 0) {
			say(r, line, "%s.%s: a range of 'times' starts above 0 (%s times %s stays %s): write lo..hi step S, "
				     "or list the 0", a->section, a->name, trimmed(item), num, trimmed(item));
			return -1;
		}
	}
	if (hi < lo) {
		say(r, line, "%s.%s: the range %s..%s runs backwards", a->section, a->name, trimmed(item), trimmed(dots + 2));
		return -1;
	}
	if (integer && (lo != floor(lo) || hi != floor(hi) || (!times && by != floor(by)))) {
		say(r, line, "%s.%s is an integer: its range needs whole numbers", a->section, a->name);
		return -1;
	}
	if (integer && (fabs(lo) > 9007199254740992.0 || fabs(hi) > 9007199254740992.0)) {
		/* the range is counted in doubles, whole only up to 2^53 */
		say(r, line, "%s.%s: a range of integers ends within +-9007199254740992 (2^53): list larger values "
			     "one by one", a->section, a->name);
		return -1;
	}
	for (double v = lo, prev = -INFINITY;; count++) {
		double x = integer ? (double)llround(v) : v;
		char text[64];
		/* integers are exact here: no tolerance (a relative one lets 1e15..1e15+2 run on for 1,000) */
		if (integer ? x > hi : x > hi * (1 + 1e-12) + (hi == 0 ? 1e-300 : 0))
			break;
		if (x > prev) {
			if (integer)
				snprintf(text, sizeof text, "%lld", (long long)x);
			else
				config_real_text(x, text, sizeof text);
			if (axis_add(r, a, text, line) != 0)
				return -1;
			prev = x;
		}
		if (count >= SWEEP_VALUES_MAX) {
			if (a->nvalues < SWEEP_VALUES_MAX / 2) /* whole numbers that a factor near 1 repeats */
				say(r, line, "%s.%s: the range takes more than %d steps to reach %s (its whole values "
					     "repeat: a factor that moves each by at least 1, or a step)", a->section,
				    a->name, SWEEP_VALUES_MAX, hi_text);
			else
				say(r, line, "%s.%s: the range has more than %d values", a->section, a->name,
				    SWEEP_VALUES_MAX);
			return -1;
		}
		v = times ? v * by : lo + (double)(count + 1) * by;
	}
	return 0;
}

/* A list that ended in ',' and no indented line continued: said at its line (r->dangling_line). */
static void dangling_said(struct reader *r)
{
	if (!r->dangling)
		return;
	say(r, r->dangling_line, "%s.%s: an empty value at the end of the list (a ',' that no indented line continues)",
	    r->dangling->section, r->dangling->name);
	r->dangling = NULL;
}

/*
 * The values of axis a from its raw text: items separated by commas, each
 * a value or a range. An empty item is an error, but for a last one on a
 * line of the file (line > 0): the ',' then continues the list on the
 * next, indented, line (r->dangling, checked at the next key or the end).
 */
static int axis_values(struct reader *r, struct sweep_axis *a, char *raw, int line)
{
	char *item = raw, *comma;
	int rc = 0, first = 1;

	if (!*trimmed(raw))
		item = NULL; /* no value at all: said below */
	for (; item; item = comma ? comma + 1 : NULL) {
		if ((comma = strchr(item, ',')))
			*comma = '\0';
		item = trimmed(item);
		if (!*item && !comma && line > 0) {
			r->dangling = a;
			r->dangling_line = line;
			break;
		}
		if (!*item) {
			say(r, line, "%s.%s: an empty value in the list%s", a->section, a->name,
			    !comma ? " (a ',' at its end)" : first ? " (nothing before its first ',')"
							  : " (nothing between two commas)");
			return -1;
		}
		first = 0;
		if ((a->type == 'i' || a->type == 'r') && strstr(item, ".."))
			rc = axis_range(r, a, item, line);
		else
			rc = axis_add(r, a, item, line);
		if (rc)
			return -1;
	}
	if (a->nvalues == 0 && !r->dangling) {
		say(r, line, "%s.%s has no value", a->section, a->name);
		return -1;
	}
	return 0;
}

/* Is section.name set already in this file? Say so; else remember it. */
static int seen_twice(struct reader *r, const char *section, const char *name)
{
	char id[80];

	snprintf(id, sizeof id, "%s.%s", section, name);
	for (int i = 0; i < r->nseen; i++)
		if (!strcmp(r->seen[i], id)) {
			say(r, r->line, "%s is set twice (first at line %d)", id, r->seen_line[i]);
			return 1;
		}
	if (r->nseen < SWEEP_AXES_MAX + 8) {
		snprintf(r->seen[r->nseen], sizeof r->seen[0], "%s", id);
		r->seen_line[r->nseen++] = r->line;
	}
	return 0;
}

static int parse_bool(const char *v, int *out)
{
	static const char *const words[] = { "true", "false", "yes", "no", "1", "0", NULL };
	for (int i = 0; words[i]; i++)
		if (!strcasecmp(words[i], v)) {
			*out = i % 2 == 0;
			return 0;
		}
	return -1;
}

static void sweep_key(struct reader *r, const char *name, const char *value)
{
	struct sweep *sw = r->sw;

	if (!strcmp(name, "experiment")) {
		char dir[CONFIG_PATH_MAX], *copy = xstrdup(sw->path);
		snprintf(dir, sizeof dir, "%s", dirname(copy));
		free(copy);
		if (!*value) {
			say(r, r->line, "sweep.experiment is empty (leave it out to start from ./sim's defaults)");
		} else if ((size_t)snprintf(sw->experiment, sizeof sw->experiment, "%s%s%s",
					    value[0] == '/' ? "" : dir, value[0] == '/' ? "" : "/", value) >=
			   sizeof sw->experiment) {
			say(r, r->line, "sweep.experiment: the path is too long");
		} else if (access(sw->experiment, R_OK) != 0) {
			say(r, r->line, "sweep.experiment = %s: %s cannot be read: %s (a path relative to the sweep file)",
			    value, sw->experiment, strerror(errno));
		}
	} else if (!strcmp(name, "policies")) {
		if (!strcmp(value, "all"))
			sw->walk = 1;
		else if (!strcmp(value, "axes"))
			sw->walk = 0;
		else
			say(r, r->line, "sweep.policies = '%s' is not a policy set (allowed: all|axes)", value);
	} else if (!strcmp(name, "global_batch")) {
		long long v;
		enum config_number st = config_parse_integer(value, &v);
		if (st != CONFIG_NUMBER_OK || v < 1 || v > (1LL << 40))
			say(r, r->line, "sweep.global_batch = '%s' is not an integer from 1 to %lld%s", value, 1LL << 40,
			    config_number_why(value, st));
		else
			sw->global_batch = (long)v;
		snprintf(sw->global_batch_where, sizeof sw->global_batch_where, "%s:%d", sw->path, r->line);
	} else if (!strcmp(name, "memory_budget_gib")) {
		double v;
		enum config_number st = config_parse_real(value, &v);
		if (st != CONFIG_NUMBER_OK || v <= 0 || v > 1e9)
			say(r, r->line, "sweep.memory_budget_gib = '%s' is not a number of GiB from above 0 to 1e9%s", value,
			    config_number_why(value, st));
		else
			sw->memory_budget_gib = v;
	} else if (!strcmp(name, "must_fit") || !strcmp(name, "timelines")) {
		if (parse_bool(value, !strcmp(name, "must_fit") ? &sw->must_fit : &sw->timelines) != 0)
			say(r, r->line, "sweep.%s = '%s' is not a boolean (allowed: true|false|yes|no|1|0)", name, value);
	} else if (!strcmp(name, "what_if")) {
		/* checked against the axes once they are all read */
		snprintf(r->what_if, sizeof r->what_if, "%s", value);
		r->what_if_line = r->line;
	}
}

static int sweep_ini_line(void *user, const char *section, const char *name, const char *value)
{
	struct reader *r = user;
	struct sweep *sw = r->sw;
	int s = name_index(sections, section), type;

	/* an indented line continues the previous axis's list */
	if (r->cont && !strcmp(section, r->last_section) && !strcmp(name, r->last_key) && s > 0) {
		for (int i = 0; i < sw->naxes; i++)
			if (!strcmp(sw->axes[i].section, section) && !strcmp(sw->axes[i].name, name)) {
				char *raw = xstrdup(value);
				if (r->dangling == &sw->axes[i])
					r->dangling = NULL; /* the ',' it ended in is continued here */
				axis_values(r, &sw->axes[i], raw, r->line);
				free(raw);
				return 1;
			}
	}
	dangling_said(r);
	if (!*section) {
		say(r, r->line, "key '%s' is outside any section", name);
		return 1;
	}
	if (s < 0) {
		unknown_section(r, section);
		return 1;
	}
	snprintf(r->last_section, sizeof r->last_section, "%s", section);
	snprintf(r->last_key, sizeof r->last_key, "%s", name);
	if (seen_twice(r, section, name))
		return 1;
	if (s == 0) {
		if (name_index(sweep_keys, name) < 0) {
			const char *close = name_closest(sweep_keys, name);
			char list[256];
			if (close)
				say(r, r->line, "unknown key '%s' in [sweep] (did you mean '%s'?)", name, close);
			else
				say(r, r->line, "unknown key '%s' in [sweep] (keys: %s)", name,
				    names_joined(sweep_keys, list, sizeof list));
			return 1;
		}
		sweep_key(r, name, value);
		return 1;
	}
	type = config_key_type(section, name);
	if (!type) {
		char where[CONFIG_PATH_MAX + 16], assign[256];
		/* the experiment key table's own message: closest key, or the section it belongs in */
		snprintf(where, sizeof where, "%s:%d", sw->path, r->line);
		snprintf(assign, sizeof assign, "%s.%s=%s", section, name, value);
		config_set(&r->scratch, assign, where);
		r->errors++;
		return 1;
	}
	if (!strcmp(section, "run") && !strcmp(name, "out")) {
		say(r, r->line, "run.out cannot be swept: a sweep writes its rows to the file --out names");
		return 1;
	}
	if (sw->naxes == SWEEP_AXES_MAX) {
		say(r, r->line, "more than %d axes", SWEEP_AXES_MAX);
		return 1;
	}
	struct sweep_axis *a = &sw->axes[sw->naxes];
	memset(a, 0, sizeof(*a));
	snprintf(a->section, sizeof a->section, "%s", section);
	snprintf(a->name, sizeof a->name, "%s", name);
	a->type = type;
	a->policy = !strcmp(section, "policy");
	a->line = r->line;
	snprintf(a->where, sizeof a->where, "%s:%d", r->path, r->line);
	sw->naxes++;
	{
		char *raw = xstrdup(value);
		axis_values(r, a, raw, r->line);
		free(raw);
	}
	return 1;
}

/* Whether key section.name only prices a step: it changes neither the schedule nor the memory. */
static int price_only(const char *section, const char *name)
{
	static const char *const run_unread[] = { "seed", "lr", "weight_decay", "eps", "timeout_s", "device", NULL };

	if (!strcmp(section, "run"))
		return name_index(run_unread, name) >= 0;
	if (!strcmp(section, "model")) /* RoPE's base: what a rotation turns by, not what it costs */
		return !strcmp(name, "rope_theta");
	if (strcmp(section, "cluster"))
		return 0;
	if (!strcmp(name, "inter_gbps"))
		return 1;
	/*
	 * the GPU spec keys but the peak FLOP rates, which the schedule states
	 * (schedule.peak_flops), and the memory, the caching allocator's capacity
	 */
	if (!strcmp(name, "bf16_tflops") || !strcmp(name, "fp32_tflops") || !strcmp(name, "hbm_gib"))
		return 0;
	for (const struct hw_field *f = hw_gpu_fields; f->name; f++)
		if (!strcmp(f->name, name))
			return 1;
	return 0;
}

static void sweep_init(struct sweep *sw, const char *path)
{
	memset(sw, 0, sizeof(*sw));
	snprintf(sw->path, sizeof sw->path, "%s", path);
	sw->what_if = -1;
}

/* The axes' enumeration order: schedule-changing ones outermost, in file order, then the pricing ones. */
static void order_axes(struct sweep *sw)
{
	int n = 0;

	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < sw->naxes; i++)
			if (sw->axes[i].price_only == pass)
				sw->order[n++] = i;
	sw->nouter = 0;
	for (int i = 0; i < sw->naxes; i++)
		sw->nouter += !sw->axes[i].price_only;
}

static int what_if_axis(struct sweep *sw, const char *name, const char *where)
{
	for (int i = 0; i < sw->naxes; i++) {
		char id[80];
		snprintf(id, sizeof id, "%s.%s", sw->axes[i].section, sw->axes[i].name);
		if (!strcmp(id, name)) {
			if (sw->axes[i].policy) {
				text_line(stderr, "%s: what_if = %s: a policy key is a choice, not a resource (name a "
						"[model], [cluster] or [run] axis)", where, name);
				return -1;
			}
			if (sw->axes[i].nvalues < 2) {
				text_line(stderr, "%s: what_if = %s: the axis has one value; give it several", where, name);
				return -1;
			}
			sw->what_if = i;
			return 0;
		}
	}
	text_line(stderr, "%s: what_if = %s is not an axis of the sweep (write it as section.key, and give "
			"that key a list or a range)", where, name);
	return -1;
}

/* The checks between the axes once all are read: the walk's own axes, microbatches, what_if. */
static int check_axes(struct sweep *sw, const char *what_if, int what_if_line)
{
	static const char *const walked[] = { "sharding", "accum", "wrap", "reshard", "optim", "optim_in_backward",
					      "ac", "offload", "shard_group", NULL };
	int errors = 0;

	for (int i = 0; i < sw->naxes; i++) {
		struct sweep_axis *a = &sw->axes[i];
		a->price_only = price_only(a->section, a->name);
		if (sw->walk && a->policy && name_index(walked, a->name) >= 0) {
			text_line(stderr, "%s: policy.%s is varied by the policy walk (policies = all): leave it out, "
					"or write policies = axes", a->where, a->name);
			errors++;
		}
		if (a->policy && !strcmp(a->name, "microbatches")) {
			sw->microbatches_axis = 1;
			sw->key_microbatches_line = a->line;
		}
	}
	if (what_if && what_if[0]) {
		char where[CONFIG_PATH_MAX + 16];
		snprintf(where, sizeof where, "%s:%d", sw->path, what_if_line);
		errors += what_if_axis(sw, what_if, where) != 0;
	}
	order_axes(sw);
	return errors ? -1 : 0;
}

/*
 * Resolve the base, if it resolves on its own, for the values it derives
 * (what it records, the advice's own setting); each configuration
 * resolves again after its axes' values, so a base that does not resolve
 * alone is no error.
 */
static void resolve_quietly(struct experiment *e)
{
	FILE *saved = config_errfile, *null = fopen("/dev/null", "w");

	config_errfile = null ? null : saved;
	config_resolve(e);
	config_errfile = saved;
	if (null)
		fclose(null);
}

int sweep_load(struct sweep *sw, const char *path)
{
	struct reader r;
	int rc;

	sweep_init(sw, path);
	sw->from_file = 1;
	memset(&r, 0, sizeof r);
	r.sw = sw;
	snprintf(r.path, sizeof r.path, "%s", path);
	config_init_job(&r.scratch);
	r.f = config_open(path);
	if (!r.f) {
		config_release(&r.scratch);
		return -1;
	}
	rc = ini_parse_stream(reader_line, &r, sweep_ini_line, &r);
	dangling_said(&r);
	if (ferror(r.f)) {
		text_line(stderr, "%s: cannot read: %s", path, strerror(errno));
		r.errors++;
	} else if (rc > 0) {
		say(&r, rc, "syntax error: expected '[section]' or 'key = value'");
	} else if (rc < 0) {
		text_line(stderr, "%s: cannot parse (inih error %d)", path, rc);
		r.errors++;
	}
	fclose(r.f);
	if (!r.errors && sw->naxes == 0 && !sw->walk)
		say(&r, r.line ? r.line : 1, "the sweep has no axis: give a [model], [cluster], [policy] or [run] key "
					     "a list or a range, or write policies = all in [sweep]");
	config_release(&r.scratch);
	if (r.errors) {
		sweep_release(sw);
		return -1;
	}
	/* the base: ./sim's defaults, then the experiment file, then the axes of one value */
	config_init_job(&sw->base);
	if (sw->experiment[0] && config_load(&sw->base, sw->experiment) != 0) {
		sweep_release(sw);
		return -1;
	}
	for (int i = 0; i < sw->naxes; i++)
		if (sw->axes[i].nvalues == 1) {
			char assign[CONFIG_PATH_MAX + 128];
			snprintf(assign, sizeof assign, "%s.%s=%s", sw->axes[i].section, sw->axes[i].name,
				 sw->axes[i].values[0]);
			if (config_set(&sw->base, assign, sw->axes[i].where) != 0) {
				sweep_release(sw);
				return -1;
			}
		}
	resolve_quietly(&sw->base);
	/* the base's calibration, unless an axis names it (its values were checked) */
	int cal_axis = 0;
	for (int i = 0; i < sw->naxes; i++)
		cal_axis |= !strcmp(sw->axes[i].section, "cluster") && !strcmp(sw->axes[i].name, "calibration");
	if ((!cal_axis && sw->base.calibration[0] &&
	     calibration_usable(sw->experiment, sw->base.calibration, sizeof sw->base.calibration) != 0) ||
	    check_axes(sw, r.what_if, r.what_if_line) != 0) {
		sweep_release(sw);
		return -1;
	}
	return 0;
}

int sweep_of_experiment(struct sweep *sw, const struct experiment *e, int walk)
{
	sweep_init(sw, e->path[0] ? e->path : "sim");
	snprintf(sw->experiment, sizeof sw->experiment, "%s", e->path);
	config_copy(&sw->base, e);
	sw->walk = walk;
	if (sw->base.calibration[0] &&
	    calibration_usable(sw->path, sw->base.calibration, sizeof sw->base.calibration) != 0) {
		sweep_release(sw);
		return -1;
	}
	return check_axes(sw, NULL, 0);
}

int sweep_add_axis(struct sweep *sw, const char *assignment, const char *origin)
{
	struct reader r;
	const char *eq = strchr(assignment, '='), *dot = strchr(assignment, '.');
	char section[16], name[32];
	int type;

	if (!eq || !dot || dot > eq || (size_t)(dot - assignment) >= sizeof section ||
	    (size_t)(eq - dot - 1) >= sizeof name) {
		text_line(stderr, "%s: expected section.key=VALUES (a list a, b, c or a range lo..hi [step S | times F])",
			origin);
		return -1;
	}
	snprintf(section, sizeof section, "%.*s", (int)(dot - assignment), assignment);
	snprintf(name, sizeof name, "%.*s", (int)(eq - dot - 1), dot + 1);
	type = config_key_type(section, name);
	if (!type || !strcmp(section, "policy") || (!strcmp(section, "run") && !strcmp(name, "out"))) {
		if (!type) {
			struct experiment x;
			config_init(&x);
			config_set(&x, assignment, origin); /* the key table's message */
			config_release(&x);
		} else {
			text_line(stderr, "%s: %s.%s is not a resource: name a [model], [cluster] or [run] key", origin,
				section, name);
		}
		return -1;
	}
	for (int i = 0; i < sw->naxes; i++)
		if (!strcmp(sw->axes[i].section, section) && !strcmp(sw->axes[i].name, name)) {
			text_line(stderr, "%s: %s.%s is given twice", origin, section, name);
			return -1;
		}
	if (sw->naxes == SWEEP_AXES_MAX) {
		text_line(stderr, "%s: more than %d axes", origin, SWEEP_AXES_MAX);
		return -1;
	}
	memset(&r, 0, sizeof r);
	r.sw = sw;
	r.origin = origin;
	config_init_job(&r.scratch);
	struct sweep_axis *a = &sw->axes[sw->naxes];
	memset(a, 0, sizeof(*a));
	snprintf(a->section, sizeof a->section, "%s", section);
	snprintf(a->name, sizeof a->name, "%s", name);
	a->type = type;
	snprintf(a->where, sizeof a->where, "%s", origin);
	char *raw = xstrdup(eq + 1);
	int rc = axis_values(&r, a, raw, 0);
	free(raw);
	config_release(&r.scratch);
	if (rc != 0 || r.errors) {
		for (int i = 0; i < a->nvalues; i++)
			free(a->values[i]);
		free(a->values);
		memset(a, 0, sizeof(*a));
		return -1;
	}
	sw->naxes++;
	a->price_only = price_only(section, name);
	if (sw->what_if < 0 && a->nvalues > 1)
		sw->what_if = sw->naxes - 1;
	order_axes(sw);
	return 0;
}

void sweep_set_constraints(struct sweep *sw, long global_batch, double memory_budget_gib)
{
	if (global_batch > 0) {
		sw->global_batch = global_batch;
		snprintf(sw->global_batch_where, sizeof sw->global_batch_where, "--global-batch");
	}
	if (memory_budget_gib > 0)
		sw->memory_budget_gib = memory_budget_gib;
}

void sweep_release(struct sweep *sw)
{
	for (int i = 0; i < sw->naxes; i++) {
		for (int j = 0; j < sw->axes[i].nvalues; j++)
			free(sw->axes[i].values[j]);
		free(sw->axes[i].values);
	}
	config_release(&sw->base);
	free(sw->outer_first);
	memset(sw, 0, sizeof(*sw));
}

/* ---- configurations --------------------------------------------------------------- */

void sweep_policy_pack(const struct policy *p, struct sweep_policy *o)
{
	memset(o, 0, sizeof(*o));
	o->shard_group = (uint32_t)p->shard_group;
	o->partial_k = (uint16_t)p->partial_k;
	o->wrap_k = (uint16_t)p->wrap_k;
	o->ac_k = (uint16_t)p->ac_k;
	o->microbatches = (uint16_t)p->microbatches;
	o->sharding = (uint8_t)p->sharding;
	o->accum = (uint8_t)p->accum;
	o->accum_dtype = (uint8_t)p->accum_dtype;
	o->wrap = (uint8_t)p->wrap;
	o->reshard = (uint8_t)p->reshard;
	o->optim = (uint8_t)p->optim;
	o->optim_in_backward = (uint8_t)p->optim_in_backward;
	o->precision = (uint8_t)p->precision;
	o->reduce_dtype = (uint8_t)p->reduce_dtype;
	o->ac = (uint8_t)p->ac;
	o->loss = (uint8_t)p->loss;
	o->offload = (uint8_t)p->offload;
	o->prefetch = (uint8_t)p->prefetch;
	o->flat_params = (uint8_t)p->flat_params;
	o->concat_last_only = (uint8_t)p->concat_last_only;
	o->runtime = (uint8_t)p->runtime;
	o->expandable_segments = (uint8_t)p->expandable_segments;
	o->compile = (uint8_t)p->compile;
	o->sdpa = (uint8_t)p->sdpa;
	o->hold_logits = (uint8_t)p->hold_logits;
	/* every field fits its packed width (checked by config's ranges: microbatches <= 4096, prefetch <= 8) */
	assert(p->partial_k < 65536 && p->wrap_k < 65536 && p->ac_k < 65536 && p->microbatches < 65536);
}

void sweep_policy_unpack(const struct sweep_policy *o, struct policy *p)
{
	policy_default(p);
	p->shard_group = (int)o->shard_group;
	p->partial_k = o->partial_k;
	p->wrap_k = o->wrap_k;
	p->ac_k = o->ac_k;
	p->microbatches = o->microbatches;
	p->sharding = (enum sharding)o->sharding;
	p->accum = (enum accum)o->accum;
	p->accum_dtype = (enum dtype)o->accum_dtype;
	p->wrap = (enum wrap)o->wrap;
	p->reshard = (enum reshard)o->reshard;
	p->optim = (enum optim)o->optim;
	p->optim_in_backward = o->optim_in_backward;
	p->precision = (enum precision)o->precision;
	p->reduce_dtype = (enum dtype)o->reduce_dtype;
	p->ac = (enum ac_mode)o->ac;
	p->loss = (enum loss_mode)o->loss;
	p->offload = (enum offload)o->offload;
	p->prefetch = o->prefetch;
	p->flat_params = o->flat_params;
	p->concat_last_only = o->concat_last_only;
	p->runtime = (enum runtime)o->runtime;
	p->expandable_segments = o->expandable_segments;
	p->compile = (enum compile_scope)o->compile;
	p->sdpa = (enum sdpa)o->sdpa;
	p->hold_logits = o->hold_logits;
}

/* The digits of outer combination k and inner combination j, per axis (file order), into v. */
static void decode(const struct sweep *sw, uint64_t k, uint64_t j, uint16_t *v)
{
	for (int i = sw->naxes - 1; i >= 0; i--) {
		const struct sweep_axis *a = &sw->axes[sw->order[i]];
		uint64_t *x = i >= sw->nouter ? &j : &k;
		v[sw->order[i]] = (uint16_t)(*x % (uint64_t)a->nvalues);
		*x /= (uint64_t)a->nvalues;
	}
}

/* A message caught from config, first line only, into why; the catch restarts. */
static void caught(struct sweep_iter *it, char *why, size_t n)
{
	FILE *f = it->errbuf;
	char line[1024] = "";

	fflush(f);
	rewind(f);
	if (!fgets(line, sizeof line, f))
		line[0] = '\0';
	line[strcspn(line, "\n")] = '\0';
	if (why && n)
		snprintf(why, n, "%s", line);
	rewind(f);
}

/*
 * e = the base with the values v applied and, under a global batch,
 * microbatches derived; resolved. SWEEP_OK, or why not (message caught).
 */
static enum sweep_status build(const struct sweep *sw, const uint16_t *v, struct experiment *e, FILE *err)
{
	char assign[CONFIG_PATH_MAX + 128];
	FILE *saved = config_errfile;
	enum sweep_status st = SWEEP_OK;

	config_copy(e, &sw->base);
	config_errfile = err;
	for (int i = 0; i < sw->naxes; i++) {
		const struct sweep_axis *a = &sw->axes[i];
		snprintf(assign, sizeof assign, "%s.%s=%s", a->section, a->name, a->values[v[i]]);
		if (config_set(e, assign, a->where) != 0) {
			st = SWEEP_INVALID; /* checked when read: a value that no longer applies */
			goto out;
		}
	}
	if (sw->global_batch && !sw->microbatches_axis) {
		long per = (long)e->run.batch * cluster_world(&e->cluster);
		if (sw->global_batch % per) {
			fprintf(err, "global batch %ld is not a whole number of microbatches of batch %d on %d ranks\n",
				sw->global_batch, e->run.batch, cluster_world(&e->cluster));
			st = SWEEP_OFF_BATCH;
			goto out;
		}
		snprintf(assign, sizeof assign, "policy.microbatches=%ld", sw->global_batch / per);
		if (sw->global_batch / per > 4096 || config_set(e, assign, sw->global_batch_where) != 0) {
			if (sw->global_batch / per > 4096)
				fprintf(err, "global batch %ld needs %ld microbatches of batch %d on %d ranks (at most 4096)\n",
					sw->global_batch, sw->global_batch / per, e->run.batch, cluster_world(&e->cluster));
			st = SWEEP_OFF_BATCH;
			goto out;
		}
	}
	if (config_resolve(e) != 0) {
		st = SWEEP_INVALID;
		goto out;
	}
	if (sw->global_batch && sw->microbatches_axis &&
	    (long)e->run.batch * e->policy.microbatches * cluster_world(&e->cluster) != sw->global_batch) {
		fprintf(err, "batch %d x %d microbatches x %d ranks is not the global batch %ld\n", e->run.batch,
			e->policy.microbatches, cluster_world(&e->cluster), sw->global_batch);
		st = SWEEP_OFF_BATCH;
	}
out:
	config_errfile = saved;
	return st;
}

/*
 * Without the walk: is configuration v (resolved as e) another combination
 * of the sweep under another name? It is when the rules changed some of
 * its policy values and the values they resolved to are all values of
 * their axes (zero2 with reshard yes, beside zero2 with reshard no).
 */
static int duplicate(const struct sweep *sw, const uint16_t *v, const struct experiment *e, char *why, size_t n)
{
	int changed = 0;
	size_t used = 0;

	for (int i = 0; i < sw->naxes; i++) {
		const struct sweep_axis *a = &sw->axes[i];
		char text[64];
		int f, found = -1;
		if (!a->policy)
			continue;
		f = name_index(policy_field_names, a->name);
		assert(f >= 0);
		policy_field_str(&e->policy, (enum policy_field)f, text, sizeof text);
		if (!strcmp(text, a->values[v[i]]))
			continue;
		for (int j = 0; j < a->nvalues && found < 0; j++)
			if (!strcmp(text, a->values[j]))
				found = j;
		if (found < 0)
			return 0;
		changed = 1;
		if (why && used < n)
			used += (size_t)snprintf(why + used, n - used, "%spolicy.%s = %s resolves to %s", used ? ", " : "",
						 a->name, a->values[v[i]], text);
	}
	if (changed && why && used < n)
		snprintf(why + used, n - used, ", another combination of the sweep");
	return changed;
}

/* Memoized policy counts of the walk: by what the walk depends on. */
struct walk_memo {
	struct policy base;
	int layers, nodes, gpus_per_node;
	uint64_t count;
};

static uint64_t walk_count(const struct experiment *e, struct walk_memo *memo, int *nmemo)
{
	struct policy_walk w;
	struct policy p;
	uint64_t n = 0;

	for (int i = 0; i < *nmemo; i++)
		if (memo[i].layers == e->model.layers && memo[i].nodes == e->cluster.nodes &&
		    memo[i].gpus_per_node == e->cluster.gpus_per_node && !memcmp(&memo[i].base, &e->policy, sizeof p))
			return memo[i].count;
	policy_walk_init(&w, &e->policy, &e->cluster, &e->model);
	while (policy_next(&w, &p))
		n++;
	if (*nmemo < WALK_MEMO) {
		memo[*nmemo] = (struct walk_memo){ e->policy, e->model.layers, e->cluster.nodes,
						   e->cluster.gpus_per_node, n };
		(*nmemo)++;
	}
	return n;
}

int sweep_plan(struct sweep *sw, sweep_plan_progress *progress, void *ctx)
{
	uint64_t outer = 1, inner = 1;

	for (int i = 0; i < sw->naxes; i++) {
		uint64_t *x = sw->axes[i].price_only ? &inner : &outer;
		*x *= (uint64_t)sw->axes[i].nvalues;
		if (outer * inner > OUTER_MAX) {
			text_line(stderr, "%s: the axes have more than %llu combinations", sw->path,
				(unsigned long long)OUTER_MAX);
			return -1;
		}
	}
	sw->ninner = inner;
	sw->nouter_combos = outer;
	free(sw->outer_first);
	sw->outer_first = NULL;
	if (!sw->walk) {
		sw->ncandidates = outer * inner;
		return 0;
	}
	/* the walk: each outer combination's policies are counted once */
	struct walk_memo memo[WALK_MEMO];
	int nmemo = 0;
	char *errtext = NULL;
	size_t errsize = 0;
	FILE *err = open_memstream(&errtext, &errsize);
	uint16_t v[SWEEP_AXES_MAX];

	sw->outer_first = xmalloc(sizeof(uint64_t) * (size_t)(outer + 1));
	sw->outer_first[0] = 0;
	for (uint64_t k = 0; k < outer; k++) {
		struct experiment e;
		uint64_t n = 1;
		decode(sw, k, 0, v);
		if (build(sw, v, &e, err) == SWEEP_OK)
			n = walk_count(&e, memo, &nmemo);
		config_release(&e);
		if (n == 0)
			n = 1; /* no policy at all: one candidate, reported as invalid */
		sw->outer_first[k + 1] = sw->outer_first[k] + n * inner;
		if (progress)
			progress(ctx, k + 1, outer, sw->outer_first[k + 1]);
		if (sw->outer_first[k + 1] > OUTER_MAX) {
			text_line(stderr, "%s: the sweep has more than %llu configurations", sw->path,
				(unsigned long long)OUTER_MAX);
			fclose(err);
			free(errtext);
			return -1;
		}
		rewind(err);
	}
	fclose(err);
	free(errtext);
	sw->ncandidates = sw->outer_first[outer];
	return 0;
}

void sweep_iter_init(struct sweep_iter *it, const struct sweep *sw)
{
	memset(it, 0, sizeof(*it));
	it->sw = sw;
	it->outer = UINT64_MAX;
	it->walk_pos = UINT64_MAX;
	it->errbuf = open_memstream(&it->errtext, &it->errsize);
}

void sweep_iter_release(struct sweep_iter *it)
{
	if (it->have_e)
		config_release(&it->e);
	if (it->outer != UINT64_MAX)
		config_release(&it->outer_exp);
	if (it->errbuf)
		fclose(it->errbuf);
	free(it->errtext);
	memset(it, 0, sizeof(*it));
}

/* The walk's outer combination k: resolved, and its walk started. */
static void walk_outer(struct sweep_iter *it, uint64_t k)
{
	const struct sweep *sw = it->sw;
	uint16_t v[SWEEP_AXES_MAX];

	if (it->outer != UINT64_MAX)
		config_release(&it->outer_exp);
	it->outer = k;
	decode(sw, k, 0, v);
	it->outer_ok = build(sw, v, &it->outer_exp, it->errbuf);
	if (it->outer_ok != SWEEP_OK)
		caught(it, it->outer_why, sizeof it->outer_why);
	it->walk_pos = UINT64_MAX;
}

/* Advance the walk to policy pos; 0, or -1 when the walk has no such policy. */
static int walk_to(struct sweep_iter *it, uint64_t pos)
{
	if (it->walk_pos != UINT64_MAX && it->walk_pos > pos)
		it->walk_pos = UINT64_MAX; /* behind: start again */
	if (it->walk_pos == UINT64_MAX)
		policy_walk_init(&it->walk, &it->outer_exp.policy, &it->outer_exp.cluster, &it->outer_exp.model);
	while (it->walk_pos == UINT64_MAX || it->walk_pos < pos) {
		if (!policy_next(&it->walk, &it->policy))
			return -1;
		it->walk_pos = it->walk_pos == UINT64_MAX ? 0 : it->walk_pos + 1;
	}
	return 0;
}

enum sweep_status sweep_iter_at(struct sweep_iter *it, uint64_t index, const struct experiment **e,
				struct sweep_row *row, char *why, size_t n)
{
	const struct sweep *sw = it->sw;
	enum sweep_status st;
	uint64_t k, j, pos = 0;

	if (why && n)
		why[0] = '\0';
	if (index >= sw->ncandidates)
		return SWEEP_END;
	memset(row, 0, sizeof(*row));
	row->index = index;
	if (!sw->walk) {
		k = index / sw->ninner;
		j = index % sw->ninner;
	} else {
		/* the outer combination holding index: a binary search over the counts */
		uint64_t lo = 0, hi = sw->nouter_combos;
		while (hi - lo > 1) {
			uint64_t mid = lo + (hi - lo) / 2;
			if (sw->outer_first[mid] <= index)
				lo = mid;
			else
				hi = mid;
		}
		k = lo;
		pos = (index - sw->outer_first[k]) / sw->ninner;
		j = (index - sw->outer_first[k]) % sw->ninner;
		if (it->outer != k)
			walk_outer(it, k);
		if (it->outer_ok != SWEEP_OK) {
			if (why && n)
				snprintf(why, n, "%s", it->outer_why);
			return (enum sweep_status)it->outer_ok;
		}
		if (walk_to(it, pos) != 0) {
			if (why && n)
				snprintf(why, n, "no policy of the walk is valid for this configuration");
			return SWEEP_INVALID;
		}
	}
	decode(sw, k, j, row->value);
	if (it->have_e)
		config_release(&it->e);
	it->have_e = 1;
	if (sw->walk && sw->ninner == 1) {
		config_copy(&it->e, &it->outer_exp);
		st = SWEEP_OK;
	} else {
		st = build(sw, row->value, &it->e, it->errbuf);
	}
	if (st != SWEEP_OK) {
		caught(it, why, n);
		return st;
	}
	if (sw->walk)
		it->e.policy = it->policy;
	else if (duplicate(sw, row->value, &it->e, why, n))
		return SWEEP_DUPLICATE;
	sweep_policy_pack(&it->e.policy, &row->policy);
	*e = &it->e;
	return SWEEP_OK;
}

int sweep_experiment_of(const struct sweep *sw, const struct sweep_row *row, struct experiment *e)
{
	char *errtext = NULL;
	size_t errsize = 0;
	FILE *err = open_memstream(&errtext, &errsize);
	enum sweep_status st = build(sw, row->value, e, err);

	fclose(err);
	free(errtext);
	if (st != SWEEP_OK)
		return -1;
	sweep_policy_unpack(&row->policy, &e->policy);
	return 0;
}

const char *sweep_row_text(const struct sweep *sw, const struct sweep_row *row, int axis)
{
	static char buf[64];
	const struct sweep_axis *a = &sw->axes[axis];
	struct policy p;

	if (!a->policy)
		return a->values[row->value[axis]];
	sweep_policy_unpack(&row->policy, &p);
	return policy_field_str(&p, (enum policy_field)name_index(policy_field_names, a->name), buf, sizeof buf);
}

const char *sweep_row_label(const struct sweep *sw, const struct sweep_row *row, char *buf, size_t n)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int i = 0; i < sw->naxes && used < n; i++)
		if (sw->axes[i].nvalues > 1)
			used += (size_t)snprintf(buf + used, n - used, "%s%s=%s", used ? " " : "", sw->axes[i].name,
						 sweep_row_text(sw, row, i));
	return buf;
}
