/*
 * config.h - an experiment: model, cluster, policy and run settings.
 *
 * Both binaries read experiments through this one module: an INI file
 * (sections [model], [cluster], [policy], [run]) parsed with inih, then
 * command-line overrides (`--layers 32`, `--set model.layers=32`), then
 * config_resolve(), which looks names up in the catalog, fills derived
 * values and checks every rule. Input is strict: an unknown section or
 * key, a value of the wrong type or out of range, an unknown name is an
 * error naming the file, line and key, saying what is allowed and
 * suggesting the closest valid name. Errors go to stderr; the caller
 * exits with status 2 and writes nothing.
 */
#ifndef CORE_CONFIG_H
#define CORE_CONFIG_H

#include <stdio.h>
#include "model.h"
#include "hw.h"
#include "policy.h"

#define CONFIG_PATH_MAX 512

struct run_settings {
	int batch;        /* sequences per rank per microbatch */
	int steps;        /* optimizer steps gpu_run measures */
	int warmup;       /* steps gpu_run runs before measuring */
	unsigned long seed;
	char backend[16]; /* gpu_run: "cpu" or "cuda" */
	char out[CONFIG_PATH_MAX];   /* results file to append to, "" for none */
	double lr;        /* AdamW hyper-parameters for gpu_run */
	double weight_decay;
};

struct experiment {
	char path[CONFIG_PATH_MAX];  /* the experiment file, "" when none */
	char model_name[MODEL_NAME_MAX];
	char gpu_name[HW_NAME_MAX];
	struct model_shape model;    /* resolved */
	struct cluster cluster;      /* resolved */
	struct policy policy;
	struct runtime_spec runtime; /* resolved from policy.runtime */
	struct run_settings run;
	/* where each key was set, for error messages; private to config.c */
	void *origins;
};

/* Defaults: tiny model on one cpu "node"... see config.c for the values. */
void config_init(struct experiment *e);
void config_release(struct experiment *e);

/* Read an INI file over the current values. 0, or -1 after printing errors. */
int config_load(struct experiment *e, const char *path);

/*
 * Set one key from the command line: `section.key=value`. `origin` names
 * the flag for messages ("--set", "--layers"). 0, or -1 after printing.
 */
int config_set(struct experiment *e, const char *assignment, const char *origin);

/* Look up names, derive values, check every rule. 0, or -1 after printing. */
int config_resolve(struct experiment *e);

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

/* One-line help of the experiment flags, for --help */
void config_usage(FILE *f);

/*
 * Whether arg ("--layers" or "--layers=32") is an experiment flag, and the
 * experiment flag closest to an unknown one ("--layrs" -> "--layers", NULL
 * when none is close): for the caller's message about a flag it leaves.
 */
int config_is_flag(const char *arg);
const char *config_flag_closest(const char *arg);

/*
 * After config_parse_args and the caller's own flags: report the first argv
 * entry nobody took as an unknown flag, with the closest experiment flag
 * ("see PROG --help" when none is close). 0, or -1 after printing.
 */
int config_check_leftovers(int argc, char **argv, const char *prog);

/* Where the config functions print their messages; NULL (the default) is stderr. */
extern FILE *config_errfile;

#endif
