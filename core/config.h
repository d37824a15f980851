/*
 * config.h - reading an experiment: files, flags, resolution, output.
 *
 * Both binaries read experiments (experiment.h) through this one module:
 * an INI file (sections [model], [cluster], [policy], [run]) parsed with
 * inih, then command-line overrides (`--layers 32`, `--set
 * model.layers=32`), then config_resolve(), which looks names up in the
 * catalog, makes the policy canonical and checks every rule (the policy's
 * own rules are policy.c's; config names where each key involved was set).
 * Input is strict: an unknown section or key, a value of the wrong type or
 * out of range, an unknown name is an error naming the file, line and key,
 * saying what is allowed and suggesting the closest valid name. Errors go
 * to stderr; the caller exits with status 2 and writes nothing.
 *
 * The module is split by concept (core/README.md): config_keys.c (the key
 * table, values, defaults, output), config_origin.c (where each key was
 * set, and the messages naming it), config_load.c (INI files),
 * config_args.c (the command line), config_resolve.c (catalog and policy
 * resolution). Their shared internals are in config_internal.h.
 */
#ifndef CORE_CONFIG_H
#define CORE_CONFIG_H

#include <stdio.h>
#include "experiment.h"

/*
 * Defaults: the tiny model on one node of two "cpu" GPUs, what gpu_run
 * computes on the CPU (config_init() in config_keys.c has the values).
 */
void config_init(struct experiment *e);
void config_release(struct experiment *e);

/*
 * ./sim's defaults, a realistic job: Llama 3 8B (catalog shape, sequence
 * 8192) on 2 nodes of 8 H100 SXM, the job of experiments/llama3.ini;
 * every other key as config_init() has it. A key a file or a flag sets
 * wins, as over any default: `--model tiny` names the tiny model.
 */
void config_init_job(struct experiment *e);

/*
 * dst becomes a copy of src, where each key was set included (so that
 * dst can be changed and resolved again on its own); dst holds nothing
 * (never initialised, or released). Release it with config_release.
 */
void config_copy(struct experiment *dst, const struct experiment *src);

/* The value of section.key in e, as a file writes it ("llama3-8b", "12.5"): 0, or -1 for no such key. */
int config_get(const struct experiment *e, const char *section, const char *key, char *buf, size_t n);

/*
 * The values section.key takes: 'i' integers, 'r' real numbers, 'b'
 * booleans, 'n' names or text; 0 when there is no such key.
 */
int config_key_type(const char *section, const char *key);

/* Read an INI file over the current values. 0, or -1 after printing errors. */
int config_load(struct experiment *e, const char *path);

/*
 * An input file opened for reading as experiment files are: only a regular
 * file of at most 1 MiB (a FIFO or a device is refused before it is
 * opened). NULL after a message naming path.
 */
FILE *config_open(const char *path);

/*
 * Set one key from the command line: `section.key=value`. `origin` names
 * the flag for messages ("--set", "--layers"). 0, or -1 after printing.
 */
int config_set(struct experiment *e, const char *assignment, const char *origin);

/* Look up names, derive values, check every rule. 0, or -1 after printing. */
int config_resolve(struct experiment *e);

/*
 * A resolved experiment's GPU model constants (hw_gpu_fields marked
 * model: efficiencies, tiles, what a collective holds) as today's catalog
 * entry of its cluster.gpu has them, whatever set them before (a run's
 * record); the machine's figures stay. A custom GPU, which has no entry,
 * stays as it is. Resolved again: 0, or -1 after printing.
 */
int config_gpu_model_from_catalog(struct experiment *e);

/*
 * Every key with its resolved value, as an INI file ([section] headers,
 * then `key = value` lines) that config_load() reads back to the same
 * experiment: what a results file records as its configuration.
 */
void config_write_ini(const struct experiment *e, FILE *f);

/* Iterate the resolved configuration: calls fn(section, key, value-as-text) for each key. */
void config_each(const struct experiment *e,
		 void (*fn)(void *ctx, const char *section, const char *key, const char *value),
		 void *ctx);

/*
 * The common command line of both binaries: `[FILE.ini] [--flag value]...
 * [--set s.k=v]...`. Flags the caller handles itself are left for it:
 * argv entries consumed here are replaced by NULL. 0, or -1 after printing.
 * Without a file, the defaults stand for it.
 *
 * The file is loaded first and the flags applied after it in argv order,
 * wherever they stand: a flag beats the file, a later flag an earlier one.
 * A flag takes its value as `--flag value` or `--flag=value`; a boolean
 * flag alone means true. The file is the first argument not starting with
 * '-' that no experiment flag took as its value; right after a flag of the
 * caller's it must end in ".ini" (else it is left as that flag's value).
 */
int config_parse_args(struct experiment *e, int argc, char **argv);

/*
 * Whether name ("policy.sharding", an attribute's name) is in a section of
 * the configuration ([model], [cluster], [policy], [run]): what a results
 * file records as section.key; the key itself need not exist.
 */
int config_is_section_key(const char *name);

/* One-line help of the experiment flags, for --help */
void config_usage(FILE *f);

/*
 * Whether arg ("--layers" or "--layers=32") is an experiment flag, and the
 * flag closest to an unknown one among the experiment flags and the
 * caller's own (`own`: "--schedule", ..., NULL-terminated; NULL for none):
 * "--layrs" -> "--layers", "--schedul" -> "--schedule", NULL when none is
 * close. For the caller's message about a flag it leaves.
 */
int config_is_flag(const char *arg);
const char *config_flag_closest(const char *arg, const char *const *own);

/*
 * After config_parse_args and the caller's own flags (`own`, as above):
 * report the first argv entry nobody took as an unknown flag, with the
 * closest flag ("see PROG --help" when none is close). 0, or -1 after
 * printing.
 */
int config_check_leftovers(int argc, char **argv, const char *prog, const char *const *own);

/*
 * One line of an INI file, for inih's reader (experiment and sweep files):
 * fgets into str (num bytes); 1 when a line was read (*too_long: it was
 * longer than the buffer, its rest skipped), 0 at the end of the file, -1
 * when the line is not text, with the reason in err ("<kind> file is
 * text"): a NUL byte (fgets' string would end there, silently cutting the
 * line), a control character other than a tab (a binary file's bytes
 * would reach the terminal), a carriage return no line feed follows (old
 * Mac line ends would read as one line).
 */
int config_ini_line(FILE *f, char *str, int num, const char *kind, int *too_long, char *err, size_t errlen);

/*
 * Whether an INI line is a section header ("[model]", white space or a
 * UTF-8 byte order mark before it): 1 with its name as inih reads it (the
 * text up to ']') in name, "" when that is not a name inih could hold; 0
 * for any other line. The readers say an unknown section at its header
 * with it: inih's handler sees only the keys under a header, and a header
 * with none would pass unnoticed.
 */
#define CONFIG_SECTION_CHARS 50 /* inih's longest section name (MAX_SECTION) + 1 */
int config_ini_section(const char *line, char name[CONFIG_SECTION_CHARS]);

/*
 * A number as every reader of input takes it (experiment and sweep files,
 * the flags of ./sim and gpu_run): decimal, as C writes it and no more
 * than that: an optional '-', digits, and for a real number a '.' with a
 * fraction ("2", "2.", ".5") and an exponent ("6e-4", "1E+5"). Not a
 * number: a leading '+', white space, hexadecimal ("0x10", "0x1p-3"),
 * "inf", "nan"; an integer is digits only. CONFIG_NUMBER_RANGE: one its
 * type cannot hold: past a long long, an unsigned long long (no '-') or a
 * double ("1e400"), or a real number too close to 0 to be told from it
 * ("1e-400" reads as 0, "1e-310" loses digits). *v is set on
 * CONFIG_NUMBER_OK only.
 */
enum config_number { CONFIG_NUMBER_OK, CONFIG_NUMBER_BAD, CONFIG_NUMBER_RANGE };
enum config_number config_parse_real(const char *s, double *v);
enum config_number config_parse_integer(const char *s, long long *v);
enum config_number config_parse_unsigned(const char *s, unsigned long long *v);

/*
 * Why s is refused, for the end of a message: after "'0x10' is not an
 * integer" (CONFIG_NUMBER_BAD) " (numbers are decimal: hexadecimal is not
 * read)", and the like for a leading '+', white space, a '#' comment;
 * after "1e-400 is out of range (0 to 10)" (CONFIG_NUMBER_RANGE) ": a
 * double cannot hold it (...)" for a real number too close to 0. "" when
 * the message says enough.
 */
const char *config_number_why(const char *s, enum config_number st);
/* The shortest %g text of v (up to n bytes, at most 17 digits) that reads back as the same double. */
void config_real_text(double v, char *buf, size_t n);

/*
 * An INI line (from config_ini_line) that inih would read other than as
 * written, said for both readers: `key: value` (inih also splits a key at
 * ':'), and a line that is no comment, header or `key = value` (inih says
 * the first only, and the readers each one). *after_key is inih's state,
 * whether a key line came since the last header, when an indented line
 * continues that key's value and is not checked; kept up to date. 0, or -1
 * with the message in err ("syntax error: expected 'key = value', not
 * 'name: tiny' (write 'name = tiny')") and the line changed into what inih
 * reads as meant: the ':' made '=', a line without either blanked.
 */
int config_ini_key_line(char *line, int *after_key, char *err, size_t errlen);

/* Where the config functions print their messages; NULL (the default) is stderr. */
extern FILE *config_errfile;

#endif
