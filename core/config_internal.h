/*
 * config_internal.h - what the files of the config module share, and
 * nothing outside it may use: the key table, the values' text forms, the
 * origin of each key and the messages that name it.
 *
 * Every setting is a key of one table (config_keys.c): section, name,
 * flag, type, place in struct experiment, allowed range or names. The INI
 * reader, --set, the per-key flags, config_each() and config_write_ini()
 * all walk that one table, so a key cannot be readable in one place and
 * missing in another. Keys are numbered by their place in the table; that
 * number indexes the origins too.
 *
 * Each key records where its value came from (struct origin): a file and
 * line, a flag, the default, the catalog, or a derivation in
 * config_resolve(). "Explicit" means a file or a flag: explicit values win
 * over catalog and derived ones, and error messages name every key
 * involved in a rule with the place it was set.
 *
 * Values are parsed into a temporary and stored only when valid, so a bad
 * value leaves the previous one; errors are counted, never fatal, so one
 * pass reports all of them. Messages go to config_errfile (stderr when
 * NULL); the functions return -1 after any, and the caller exits 2.
 */
#ifndef CORE_CONFIG_INTERNAL_H
#define CORE_CONFIG_INTERNAL_H

#include <stddef.h>
#include "config.h"

#define KEYS_MAX 96
#define FLAG_MAX 40
#define WHERE_MAX (CONFIG_PATH_MAX + 80)
#define MSG_MAX 1024
#define LINE_MAX_CHARS 197 /* the longest line of a file: inih's buffer, INI_MAX_LINE (200), less 3 */
#define CUSTOM "custom" /* model.name or cluster.gpu given key by key, not from the catalog */

/* ---- the key table (config_keys.c) ---------------------------------------- */

enum key_type {
	KT_INT,    /* int in [min, max] */
	KT_ULONG,  /* unsigned long */
	KT_DOUBLE, /* finite double in [min, max] */
	KT_BOOL,   /* int 0/1 from true|false|yes|no|1|0 */
	KT_ENUM,   /* an enum, one of names[] */
	KT_ACCUM,  /* policy.accum and policy.partial_k */
	KT_WRAP,   /* policy.wrap and policy.wrap_k */
	KT_AC,     /* policy.ac and policy.ac_k */
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

/* "model", "cluster", "policy", "run", NULL */
extern const char *const config_sections[];

/* Number of keys, and key k (0 <= k < count) of the table. */
int config_key_count(void);
const struct key *config_key(int k);
/* The key of section.name, or -1. */
int config_key_find(const char *section, const char *name);
/* A key the code names: it exists, or the table is broken (assertion). */
int config_key_id(const char *section, const char *name);
/* The key a flag ("--layers", no value) sets, or -1. */
int config_key_of_flag(const char *flag);
/* Every flag without its "--" ("set", "layers", ...), NULL-terminated. */
const char *const *config_flags_bare(void);
/* Where key k's value lives in e. */
void *config_key_field(struct experiment *e, int k);

/* Whether s is one of true|false|yes|no|1|0, in any case. */
int config_is_bool_word(const char *s);

/*
 * Parse value into key k of e. 0, or -1 with the message (without its
 * place) in err; e is unchanged then.
 */
int config_value_parse(struct experiment *e, int k, const char *value, char *err, size_t errlen);
/* The value of key k as text (the form a file would give it). */
void config_value_text(const struct experiment *e, int k, char *buf, size_t n);

/* The message for a key or a section that does not exist, with the closest one. */
void config_unknown_key_text(const char *section, const char *name, char *buf, size_t n);
void config_unknown_section_text(const char *section, char *buf, size_t n);

/*
 * " (allowed: a|b|c; did you mean 'b'?)" for a value not in names. With
 * k_form, the entry of that name prints as "name:K", and a suggestion of
 * it keeps the value's own ":K" ("parital:4" -> "partial:4").
 */
void config_allowed_text(const char *const *names, const char *k_form, const char *value,
			 char *buf, size_t n);
/* NULL-terminated catalog names plus "custom", in a static buffer. */
const char *const *config_names_with_custom(const char *const *catalog);
/* The first strcspn(s, stop) characters of s into buf, cut to fit. */
char *config_head_of(const char *s, const char *stop, char *buf, size_t n);

/* ---- origins and messages (config_origin.c) -------------------------------- */

enum origin_kind { OR_DEFAULT, OR_FILE, OR_FLAG, OR_CATALOG, OR_DERIVED };

struct origin {
	enum origin_kind kind;
	int line;              /* OR_FILE */
	int load;              /* OR_FILE: which config_load() call */
	char where[WHERE_MAX]; /* OR_FILE: path; OR_FLAG: "--layers"; OR_CATALOG: "model llama3-8b";
				  OR_DERIVED: what it follows, "policy.precision" */
};

/* What struct experiment.origins points to: one origin per key. */
struct origins {
	struct origin o[KEYS_MAX];
	int loads;             /* config_load() calls so far */
};

struct origin *config_origin(const struct experiment *e, int k);
/* Set in a file or by a flag. */
int config_is_explicit(const struct experiment *e, int k);
/* Key k now comes from kind (line and load cleared); where as in struct origin, or NULL. */
void config_origin_set(struct experiment *e, int k, enum origin_kind kind, const char *where);

/* Where messages go: config_errfile, or stderr. */
FILE *config_err(void);
/* "<prefix>: <message>\n" to config_err(). */
void config_say(const char *prefix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * A rule between keys is broken: "<place>: <primary> = <value> <what>
 * (<other> = <value> <where>, ...)". The place is the primary key's when it
 * was set in a file or a flag, else the first such other key's (the
 * primary's origin then follows its value), else the experiment file.
 * others ends with -1.
 */
void config_rule_error(const struct experiment *e, int primary, const char *what, const int *others);

#endif
