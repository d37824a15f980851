/*
 * config_load.c - experiment files: INI text read with inih over the
 * current values of an experiment.
 *
 * Every error of a file is reported, in line order, as "path:line: ..."
 * (the first MESSAGES_MAX of them, then a count); a key set twice in one
 * file is an error (a key set by an earlier file is simply overridden).
 * Each key read records its file and line as its origin, for the messages
 * of config_resolve().
 *
 * Only a regular file of at most EXPERIMENT_MAX_BYTES is read: a FIFO, a
 * device (/dev/zero, /dev/urandom) or a directory is refused before it is
 * opened for reading, so nothing can block or grow without bound; a file
 * without a single `key = value` line (empty, or only comments) is an
 * error too, since it would silently run the defaults. The file is text:
 * a line with a NUL byte, a control character or CR-only line ends is an
 * error, and the reading stops there (load_reader).
 */
#include "config_internal.h"

#include <assert.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "text.h"
#include "xalloc.h"

#define EXPERIMENT_MAX_BYTES (1 << 20) /* an experiment file is a few hundred bytes */
#define MESSAGES_MAX 100               /* errors printed for one file; the rest are counted */

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
	int after_key;        /* a key line since the last header (config_ini_key_line) */
	int indented;         /* the line is indented after a key line: inih continues that key's value with it */
	int load_id;
	int nkeys;            /* `key = value` lines seen, valid or not */
	int nlost;            /* errors past MESSAGES_MAX, counted only */
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
	if (l->nmsgs == MESSAGES_MAX) {
		l->nlost++;
		return;
	}
	if (l->nmsgs == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 16;
		l->msgs = xrealloc(l->msgs, (size_t)l->cap * sizeof *l->msgs);
	}
	l->msgs[l->nmsgs] = (struct message){ line, l->nmsgs, xstrdup(text) };
	l->nmsgs++;
}

static int message_cmp(const void *a, const void *b)
{
	const struct message *x = a, *y = b;
	if (x->line != y->line)
		return x->line < y->line ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int config_ini_line(FILE *f, char *str, int num, const char *kind, int *too_long, char *err, size_t errlen)
{
	long at = ftell(f), to;
	size_t len;

	*too_long = 0;
	if (!fgets(str, num, f))
		return 0;
	/* the bytes read, which a NUL byte makes more than strlen() (a regular file: ftell works) */
	len = strlen(str);
	if (at >= 0 && (to = ftell(f)) > at && to - at < num)
		len = (size_t)(to - at);
	if (len == (size_t)num - 1 && str[len - 1] != '\n') {
		int c;
		while ((c = fgetc(f)) != EOF && c != '\n')
			*too_long = 1;
	}
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)str[i];
		if (c == '\0') {
			snprintf(err, errlen, "line holds a NUL byte: %s file is text (is this a binary file?); the lines "
				 "after it are not read", kind);
			return -1;
		}
		if (c == '\r' && i + 1 < len && str[i + 1] != '\n') {
			snprintf(err, errlen, "line holds a carriage return (CR) that no line feed follows: the file has old "
				 "Mac (CR) line endings, and %s file's lines end in LF or CR LF (convert it: tr '\\r' '\\n' "
				 "<OLD >NEW); the lines after it are not read", kind);
			return -1;
		}
		if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
			snprintf(err, errlen, "line holds the control character 0x%02x: %s file is text, tabs the only "
				 "control characters in a line (is this a binary file?); the lines after it are not read",
				 c, kind);
			return -1;
		}
	}
	return 1;
}

int config_ini_section(const char *line, char name[CONFIG_SECTION_CHARS])
{
	const char *p = line, *end;

	if (strncmp(p, "\xEF\xBB\xBF", 3) == 0)
		p += 3;
	p += strspn(p, " \t");
	if (*p != '[')
		return 0;
	name[0] = '\0';
	if ((end = strchr(p + 1, ']')) && end - p - 1 < CONFIG_SECTION_CHARS) {
		memcpy(name, p + 1, (size_t)(end - p - 1));
		name[end - p - 1] = '\0';
	}
	return 1;
}

int config_ini_key_line(char *line, int *after_key, char *err, size_t errlen)
{
	char *start = line, *p, *end;
	int was_space = 0;

	if (strncmp(start, "\xEF\xBB\xBF", 3) == 0)
		start += 3;
	start += strspn(start, " \t\n\v\f\r");
	if (!*start || *start == ';' || *start == '#')
		return 0;              /* blank, or a comment */
	if (*after_key && start > line)
		return 0;              /* inih continues the last key's value with it */
	if (*start == '[') {
		if (strchr(start, ']'))
			*after_key = 0; /* a header (one without ']' is inih's syntax error) */
		return 0;
	}
	/* a key line: the first '=', ':' or inline comment (';' after white space), as inih looks */
	for (p = start; *p && *p != '=' && *p != ':' && !(was_space && *p == ';'); p++)
		was_space = *p == ' ' || *p == '\t';
	if (*p == '=') {
		*after_key = 1;
		return 0;
	}
	if (*p == ':') {
		size_t klen = (size_t)(p - start), vlen;
		const char *v = p + 1 + strspn(p + 1, " \t");
		while (klen && (start[klen - 1] == ' ' || start[klen - 1] == '\t'))
			klen--;
		for (end = (char *)v, was_space = 0; *end && !(was_space && *end == ';'); end++)
			was_space = *end == ' ' || *end == '\t';
		vlen = (size_t)(end - v);
		while (vlen && strchr(" \t\r\n;", v[vlen - 1]))
			vlen--;
		snprintf(err, errlen, "syntax error: expected 'key = value', not '%.*s: %.*s' (write '%.*s = %.*s')",
			 (int)klen, start, (int)vlen, v, (int)klen, start, (int)vlen, v);
		*p = '=';              /* the rest of the file reads as if it were written so */
		*after_key = 1;
		return -1;
	}
	snprintf(err, errlen, "syntax error: expected '[section]' or 'key = value'");
	line[0] = '\0';                /* said here, every such line: inih would say the first only */
	return -1;
}

/*
 * inih's reader: a line (config_ini_line) counted (this inih calls
 * handlers without line numbers), section headers noted, and a line too
 * long for inih's buffer turned into an error instead of two half-lines.
 */
static char *load_reader(char *str, int num, void *stream)
{
	struct load *l = stream;
	char err[MSG_MAX];
	int more, got = config_ini_line(l->f, str, num, "an experiment", &more, err, sizeof err);

	if (!got)
		return NULL;
	l->line++;
	if (got < 0) {
		load_error(l, l->line, "%s", err);
		return NULL;
	}
	if (more) {
		assert(num - 3 == LINE_MAX_CHARS);
		load_error(l, l->line, "line is longer than %d characters", LINE_MAX_CHARS);
		str[0] = '\0';
		return str;
	}
	char name[CONFIG_SECTION_CHARS];
	l->indented = l->after_key && (str[0] == ' ' || str[0] == '\t');
	if (config_ini_section(str, name)) {
		l->section_line = l->line;
		if (name[0] && name_index(config_sections, name) < 0) { /* said at its header */
			config_unknown_section_text(name, err, sizeof err);
			load_error(l, l->line, "%s", err);
			l->reported_line = l->line;
		}
	}
	if (config_ini_key_line(str, &l->after_key, err, sizeof err) != 0)
		load_error(l, l->line, "%s", err);
	return str;
}

static int load_handler(void *user, const char *section, const char *name, const char *value)
{
	struct load *l = user;
	struct experiment *e = l->e;
	char err[MSG_MAX];

	if (l->indented) {
		/* inih hands the line over as more of the value above: say that, not "set twice" */
		load_error(l, l->line, "line is indented: an indented line continues the value of the key above "
				       "(%s.%s) in an experiment file; start each 'key = value' at the beginning of its line",
			   section, name);
		return 1;
	}
	l->nkeys++;
	if (!*section) {
		int k = -1;
		for (int i = 0; i < config_key_count() && k < 0; i++)
			if (strcmp(config_key(i)->name, name) == 0)
				k = i;
		if (k >= 0)
			load_error(l, l->line, "key '%s' is outside any section (it belongs in [%s])", name,
				   config_key(k)->section);
		else
			load_error(l, l->line, "key '%s' is outside any section", name);
		return 1;
	}
	if (name_index(config_sections, section) < 0) {
		if (l->reported_line != l->section_line) {
			config_unknown_section_text(section, err, sizeof err);
			load_error(l, l->section_line, "%s", err);
			l->reported_line = l->section_line;
		}
		return 1;
	}
	int k = config_key_find(section, name);
	if (k < 0) {
		config_unknown_key_text(section, name, err, sizeof err);
		load_error(l, l->line, "%s", err);
		return 1;
	}
	struct origin *o = config_origin(e, k);
	if (o->kind == OR_FILE && o->load == l->load_id) {
		load_error(l, l->line, "%s.%s is set twice (first at line %d)", section, name, o->line);
		return 1;
	}
	if (config_value_parse(e, k, value, err, sizeof err) < 0) {
		load_error(l, l->line, "%s", err);
		return 1;
	}
	config_origin_set(e, k, OR_FILE, l->path);
	o->line = l->line;
	o->load = l->load_id;
	return 1;
}

/*
 * The experiment file at path, open for reading, when it is a regular
 * file of at most EXPERIMENT_MAX_BYTES; NULL after a message. It is
 * checked before it is opened (opening a FIFO for reading blocks), opened
 * without blocking, and checked again on the open descriptor. Sweep files
 * (core/sweep.c) are opened the same way.
 */
FILE *config_open(const char *path)
{
	struct stat st;
	FILE *f;
	int fd;

	if (stat(path, &st) < 0) {
		config_say(path, "cannot open: %s", strerror(errno));
		return NULL;
	}
	if (!S_ISREG(st.st_mode)) {
		config_say(path, "is %s: only a regular file is read as an experiment", text_file_kind(st.st_mode));
		return NULL;
	}
	fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		config_say(path, "cannot open: %s", strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		config_say(path, "is not a regular file any more: only a regular file is read as an experiment");
		close(fd);
		return NULL;
	}
	if (st.st_size > EXPERIMENT_MAX_BYTES) {
		config_say(path, "is %lld bytes: an experiment file is at most %d", (long long)st.st_size,
			   EXPERIMENT_MAX_BYTES);
		close(fd);
		return NULL;
	}
	f = fdopen(fd, "r");
	if (!f) {
		config_say(path, "cannot open: %s", strerror(errno));
		close(fd);
	}
	return f;
}

int config_load(struct experiment *e, const char *path)
{
	struct origins *os = e->origins;
	struct load l = { .e = e, .path = path };
	int rc;

	assert(os && "config_init() first");
	if (strlen(path) >= sizeof e->path) {
		config_say(path, "path is longer than %zu characters", sizeof e->path - 1);
		return -1;
	}
	snprintf(e->path, sizeof e->path, "%s", path);
	l.f = config_open(path);
	if (!l.f)
		return -1;
	l.load_id = ++os->loads;
	rc = ini_parse_stream(load_reader, &l, load_handler, &l);
	if (ferror(l.f)) {
		config_say(path, "cannot read: %s", strerror(errno));
		rc = -1;
	} else if (rc > 0) {
		load_error(&l, rc, "syntax error: expected '[section]' or 'key = value'");
	} else if (rc < 0) {
		config_say(path, "cannot parse (inih error %d)", rc);
	} else if (l.nkeys == 0 && l.nmsgs == 0) {
		config_say(path, "has no 'key = value' line: an empty experiment file is refused (run "
				 "without a file to use the defaults)");
		rc = -1;
	}
	fclose(l.f);

	if (l.nmsgs)
		qsort(l.msgs, (size_t)l.nmsgs, sizeof *l.msgs, message_cmp);
	for (int i = 0; i < l.nmsgs; i++) {
		text_line(config_err(), "%s:%d: %s", path, l.msgs[i].line, l.msgs[i].text);
		free(l.msgs[i].text);
	}
	if (l.nlost)
		text_line(config_err(), "%s: %d more error%s not shown", path, l.nlost, l.nlost == 1 ? "" : "s");
	free(l.msgs);
	return l.nmsgs || rc != 0 ? -1 : 0;
}

