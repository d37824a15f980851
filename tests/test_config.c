/*
 * test_config.c - experiment files, flags and their resolution
 * (core/config_*.c): parsed values, the exact text of every kind of error
 * message, suggestions, precedence of file and flags, the resolution
 * rules and the origins cross-key errors report, and the written
 * configuration reading back to the same experiment.
 *
 * Messages are captured by pointing config_errfile at a memory stream.
 * Experiment files are written to /tmp; "@" in an expected message stands
 * for the file's path. Tests run from the repository root (tests/run.sh).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "config.h"
#include "config_internal.h" /* the key table, to draw random values of every key */
#include "testutil.h"

/* ---- helpers ------------------------------------------------------------ */

static char *cap_buf;
static size_t cap_len;

static void capture(void)
{
	cap_buf = NULL;
	config_errfile = open_memstream(&cap_buf, &cap_len);
	CU_ASSERT_PTR_NOT_NULL_FATAL(config_errfile);
}

/* The messages printed since capture(); the caller frees them. */
static char *captured(void)
{
	fclose(config_errfile);
	config_errfile = NULL;
	return cap_buf;
}

/* A temporary experiment file holding text; path gets its name. */
static void file_new(char *path, size_t n, const char *text)
{
	snprintf(path, n, "/tmp/test_config_XXXXXX.ini");
	int fd = mkstemps(path, 4);
	CU_ASSERT_FATAL(fd >= 0);
	FILE *f = fdopen(fd, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs(text, f);
	fclose(f);
}

/* expected with each '@' replaced by path */
static char *expand(const char *expected, const char *path)
{
	size_t n = strlen(expected) + 1;
	for (const char *c = expected; *c; c++)
		n += *c == '@' ? strlen(path) : 0;
	char *out = malloc(n), *o = out;
	for (const char *c = expected; *c; c++) {
		if (*c == '@') {
			strcpy(o, path);
			o += strlen(path);
		} else {
			*o++ = *c;
		}
	}
	*o = '\0';
	return out;
}

static void assert_text(const char *got, const char *want)
{
	CU_ASSERT_STRING_EQUAL(got, want);
	if (strcmp(got, want) != 0)
		fprintf(stderr, "\n--- want\n%s--- got\n%s---\n", want, got);
}

/* Load text as a file into e; assert the return code and the messages. */
static void load_expect(struct experiment *e, const char *text, int rc, const char *messages)
{
	char path[64];

	file_new(path, sizeof path, text);
	capture();
	CU_ASSERT_EQUAL(config_load(e, path), rc);
	char *got = captured(), *want = expand(messages, path);
	assert_text(got, want);
	free(got);
	free(want);
	unlink(path);
}

/* Apply NULL-terminated `section.key=value` settings as --set, then resolve. */
static int set_resolve(struct experiment *e, char **msgs, ...)
{
	va_list ap;
	const char *kv;
	int rc = 0;

	capture();
	va_start(ap, msgs);
	while ((kv = va_arg(ap, const char *)))
		rc |= config_set(e, kv, "--set");
	va_end(ap);
	if (rc == 0)
		rc = config_resolve(e);
	*msgs = captured();
	return rc;
}

/* A fresh experiment, the settings, resolve: the return code and the messages. */
static void rule_expect(const char *want, ...)
{
	struct experiment e;
	va_list ap;
	const char *kv;
	int rc = 0;

	config_init(&e);
	capture();
	va_start(ap, want);
	while ((kv = va_arg(ap, const char *))) {
		const char *flag = strchr(kv, '|'); /* "--flag|section.key=value" */
		if (flag) {
			char origin[64];
			snprintf(origin, sizeof origin, "%.*s", (int)(flag - kv), kv);
			rc |= config_set(&e, flag + 1, origin);
		} else {
			rc |= config_set(&e, kv, "--set");
		}
	}
	va_end(ap);
	CU_ASSERT_EQUAL(rc, 0);
	int resolved = config_resolve(&e);
	char *got = captured();
	CU_ASSERT_EQUAL(resolved, *want ? -1 : 0);
	assert_text(got, want);
	free(got);
	config_release(&e);
}

/* ---- defaults and files ---------------------------------------------------- */

static void test_defaults(void)
{
	struct experiment e;

	config_init(&e);
	CU_ASSERT_STRING_EQUAL(e.path, "");
	CU_ASSERT_STRING_EQUAL(e.model_name, "tiny");
	CU_ASSERT_STRING_EQUAL(e.model.name, "tiny");
	CU_ASSERT_EQUAL(e.model.layers, 2);
	CU_ASSERT_EQUAL(e.model.seq, 32);
	CU_ASSERT_STRING_EQUAL(e.gpu_name, "cpu");
	CU_ASSERT_STRING_EQUAL(e.cluster.gpu.name, "cpu");
	CU_ASSERT_EQUAL(e.cluster.gpu.sms, 2);
	CU_ASSERT_EQUAL(e.cluster.nodes, 1);
	CU_ASSERT_EQUAL(e.cluster.gpus_per_node, 2);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.intra_gbps, 6, 1e-12); /* the catalog cpu entry's */
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.inter_gbps, 1.25 / 2, 1e-12);
	CU_ASSERT_EQUAL(e.policy.sharding, SHARD_FSDP);
	CU_ASSERT_EQUAL(e.policy.shard_group, 2); /* resolved: the world */
	CU_ASSERT_EQUAL(e.policy.reshard, RESHARD_YES);
	CU_ASSERT_EQUAL(e.policy.reduce_dtype, DT_FP32);
	CU_ASSERT_EQUAL(e.policy.prefetch, 1);
	CU_ASSERT_STRING_EQUAL(e.runtime.name, "testbed");
	CU_ASSERT_EQUAL(e.run.batch, 1);
	CU_ASSERT_EQUAL(e.run.steps, 10);
	CU_ASSERT_EQUAL(e.run.warmup, 2);
	CU_ASSERT_EQUAL(e.run.seed, 1234);
	CU_ASSERT_STRING_EQUAL(e.run.device, "cpu");
	CU_ASSERT_STRING_EQUAL(e.run.out, "");
	CU_ASSERT_DOUBLE_EQUAL(e.run.lr, 3e-4, 1e-15);
	CU_ASSERT_DOUBLE_EQUAL(e.run.weight_decay, 0.1, 1e-15);
	CU_ASSERT_DOUBLE_EQUAL(e.run.timeout_s, 600, 0);
	config_release(&e);
	config_release(&e); /* a second release is harmless */
	config_release(NULL);
}

static void test_experiment_files(void)
{
	struct experiment e;

	config_init(&e);
	CU_ASSERT_FATAL(config_load(&e, "experiments/llama3.ini") == 0);
	CU_ASSERT_FATAL(config_resolve(&e) == 0);
	CU_ASSERT_STRING_EQUAL(e.path, "experiments/llama3.ini");
	CU_ASSERT_STRING_EQUAL(e.model.name, "llama3-8b");
	CU_ASSERT_EQUAL(e.model.layers, 32);
	CU_ASSERT_EQUAL(e.model.vocab, 128256);
	CU_ASSERT_EQUAL(e.model.seq, 8192);
	CU_ASSERT_STRING_EQUAL(e.cluster.gpu.name, "h100-sxm");
	CU_ASSERT_EQUAL(e.cluster.gpu.sms, 132);
	CU_ASSERT_EQUAL(cluster_world(&e.cluster), 16);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.intra_gbps, 360, 1e-9);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.inter_gbps, 48, 1e-9); /* 8 NICs x 48 GB/s / 8 GPUs */
	CU_ASSERT_EQUAL(e.policy.sharding, SHARD_FSDP);
	CU_ASSERT_EQUAL(e.policy.shard_group, 16);
	CU_ASSERT_EQUAL(e.policy.microbatches, 1);
	CU_ASSERT_EQUAL(e.run.batch, 1);
	config_release(&e);

	config_init(&e);
	CU_ASSERT_FATAL(config_load(&e, "experiments/tiny.ini") == 0);
	CU_ASSERT_FATAL(config_resolve(&e) == 0);
	CU_ASSERT_STRING_EQUAL(e.model.name, "tiny");
	CU_ASSERT_STRING_EQUAL(e.cluster.gpu.name, "cpu");
	CU_ASSERT_EQUAL(cluster_world(&e.cluster), 2);
	CU_ASSERT_EQUAL(e.policy.microbatches, 2);
	CU_ASSERT_EQUAL(e.policy.precision, PREC_FP32);
	CU_ASSERT_STRING_EQUAL(e.run.device, "cpu");
	config_release(&e);
}

static void test_values_parsed(void)
{
	struct experiment e;

	config_init(&e);
	load_expect(&e,
		    "# comment\n"
		    "; another\n"
		    "[model]\n"
		    "name = llama3-70b\n"
		    "layers = 4   ; fewer\n"
		    "[cluster]\n"
		    "gpu = a100-80g\n"
		    "nodes = 4\n"
		    "gpus_per_node = 4\n"
		    "gemm_eff = 0.7\n"
		    "[policy]\n"
		    "sharding = hsdp\n"
		    "accum = partial:2\n"
		    "microbatches = 8\n"
		    "wrap = every:2\n"
		    "reshard = all-but-last\n"
		    "optim = fused\n"
		    "optim_in_backward = yes\n"
		    "precision = pure-bf16\n"
		    "ac = selective\n"
		    "loss = chunked\n"
		    "offload = optim\n"
		    "prefetch = 2\n"
		    "flat_params = TRUE\n"
		    "concat_last_only = 1\n"
		    "runtime = pytorch\n"
		    "[run]\n"
		    "batch = 2\n"
		    "seed = 18446744073709551615\n"
		    "device = cuda\n"
		    "out = \"\"\n"
		    "lr = 1.5e-4\n",
		    0, "");
	CU_ASSERT_FATAL(config_resolve(&e) == 0);
	CU_ASSERT_EQUAL(e.model.layers, 4);     /* explicit beats the catalog */
	CU_ASSERT_EQUAL(e.model.hidden, 8192);  /* the rest from the catalog */
	CU_ASSERT_EQUAL(e.cluster.gpu.sms, 108);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.gpu.gemm_eff, 0.7, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.inter_gbps, 8 * 25 / 4.0, 1e-12);
	CU_ASSERT_EQUAL(e.policy.sharding, SHARD_HSDP);
	CU_ASSERT_EQUAL(e.policy.shard_group, 4); /* hsdp: gpus per node */
	CU_ASSERT_EQUAL(e.policy.accum, ACC_PARTIAL);
	CU_ASSERT_EQUAL(e.policy.partial_k, 2);
	CU_ASSERT_EQUAL(e.policy.microbatches, 8);
	CU_ASSERT_EQUAL(e.policy.wrap, WRAP_EVERY);
	CU_ASSERT_EQUAL(e.policy.wrap_k, 2);
	CU_ASSERT_EQUAL(e.policy.reshard, RESHARD_ALL_BUT_LAST);
	CU_ASSERT_EQUAL(e.policy.optim, OPT_FUSED);
	CU_ASSERT_EQUAL(e.policy.optim_in_backward, 1);
	CU_ASSERT_EQUAL(e.policy.precision, PREC_PURE_BF16);
	CU_ASSERT_EQUAL(e.policy.reduce_dtype, DT_BF16); /* follows pure-bf16 */
	CU_ASSERT_EQUAL(e.policy.accum_dtype, DT_BF16);
	CU_ASSERT_EQUAL(e.policy.ac, AC_SELECTIVE);
	CU_ASSERT_EQUAL(e.policy.loss, LOSS_CHUNKED);
	CU_ASSERT_EQUAL(e.policy.offload, OFF_OPTIM);
	CU_ASSERT_EQUAL(e.policy.prefetch, 2);
	CU_ASSERT_EQUAL(e.policy.flat_params, 1);
	CU_ASSERT_EQUAL(e.policy.concat_last_only, 1);
	CU_ASSERT_EQUAL(e.policy.runtime, RT_PYTORCH);
	CU_ASSERT_STRING_EQUAL(e.runtime.name, "pytorch");
	CU_ASSERT_EQUAL(e.run.batch, 2);
	CU_ASSERT_EQUAL(e.run.seed, 18446744073709551615UL);
	CU_ASSERT_STRING_EQUAL(e.run.device, "cuda");
	CU_ASSERT_STRING_EQUAL(e.run.out, "");
	CU_ASSERT_DOUBLE_EQUAL(e.run.lr, 1.5e-4, 1e-18);
	config_release(&e);
}

/* Every error of a file is reported, in line order, and nothing stops at the first. */
static void test_file_errors(void)
{
	struct experiment e;

	config_init(&e);
	load_expect(&e,
		    "[model]\n"                      /* 1 */
		    "name = llama3-8\n"              /* 2 */
		    "layrs = 3\n"                    /* 3 */
		    "layers = abc\n"                 /* 4 */
		    "heads = 0\n"                    /* 5 */
		    "seq = 8192  # tokens\n"         /* 6 */
		    "[modle]\n"                      /* 7 */
		    "x = 1\n"                        /* 8 */
		    "y = 2\n"                        /* 9 */
		    "[policy]\n"                     /* 10 */
		    "sharding = fdsp\n"              /* 11 */
		    "accum = partial:x\n"            /* 12 */
		    "accum = parital:3\n"            /* 13 */
		    "wrap = everyy\n"                /* 14 */
		    "gpu = h100\n"                   /* 15 */
		    "flat_params = maybe\n"          /* 16 */
		    "reshard = yes:2\n"              /* 17 */
		    "this line has no equals\n"      /* 18 */
		    "prefetch = 9\n"                 /* 19 */
		    "[run]\n"                        /* 20 */
		    "seed = -1\n"                    /* 21 */
		    "lr = 1e9\n"                     /* 22 */
		    "lr = nan\n"                     /* 23 */
		    "device = gpu\n"                 /* 24 */
		    "[cluster]\n"                    /* 25 */
		    "gpu = h100\n"                   /* 26 */
		    "nodes = 1.5\n",                 /* 27 */
		    -1,
		    "@:2: model.name = 'llama3-8' is not a catalog model (allowed: llama3-8b|llama3-70b|"
		    "llama3-405b|llama2-7b|tiny|small|custom; did you mean 'llama3-8b'?)\n"
		    "@:3: unknown key 'layrs' in [model] (did you mean 'layers'?)\n"
		    "@:4: model.layers = 'abc' is not an integer\n"
		    "@:5: model.heads = 0 is out of range (1 to 4096)\n"
		    "@:6: model.seq = '8192  # tokens' is not an integer (comments go on a line of "
		    "their own, or after ' ;')\n"
		    "@:7: unknown section [modle] (did you mean [model]?)\n"
		    "@:11: policy.sharding = 'fdsp' is not a sharding policy (allowed: ddp|fsdp|zero2|hsdp; "
		    "did you mean 'fsdp'?)\n"
		    "@:12: policy.accum = 'partial:x' needs a whole number K >= 1 (write partial:K)\n"
		    "@:13: policy.accum = 'parital:3' is not a gradient accumulation policy (allowed: "
		    "sync-each|no-sync|defer-replica|partial:K; did you mean 'partial:3'?)\n"
		    "@:14: policy.wrap = 'everyy' is not a wrapping policy (allowed: "
		    "block|block+io|whole|every:K; did you mean 'every:K'?)\n"
		    "@:15: unknown key 'gpu' in [policy] (it belongs in [cluster])\n"
		    "@:16: policy.flat_params = 'maybe' is not a boolean (allowed: true|false|yes|no|1|0)\n"
		    "@:17: policy.reshard = 'yes:2' is not a reshard setting (allowed: yes|no|all-but-last; "
		    "did you mean 'yes'?)\n"
		    "@:18: syntax error: expected '[section]' or 'key = value'\n"
		    "@:19: policy.prefetch = 9 is out of range (0 to 8)\n"
		    "@:21: run.seed = '-1' is not a non-negative integer\n"
		    "@:22: run.lr = 1e9 is out of range (0 to 10)\n"
		    "@:23: run.lr = 'nan' is not a number\n"
		    "@:24: run.device = 'gpu' is not a device (allowed: cpu|cuda; did you mean 'cpu'?)\n"
		    "@:26: cluster.gpu = 'h100' is not a catalog GPU (allowed: a100-80g|h100-sxm|h200|h100-96g|h100-nvl|h100-pcie|a100-40g|cpu|"
		    "custom; did you mean 'h100-sxm'?)\n"
		    "@:27: cluster.nodes = '1.5' is not an integer\n");
	/* bad values left the defaults in place */
	CU_ASSERT_STRING_EQUAL(e.model_name, "tiny");
	CU_ASSERT_EQUAL(e.model.heads, 4);
	CU_ASSERT_EQUAL(e.policy.sharding, SHARD_FSDP);
	CU_ASSERT_EQUAL(e.policy.accum, ACC_SYNC_EACH);
	CU_ASSERT_EQUAL(e.policy.prefetch, 1);
	CU_ASSERT_DOUBLE_EQUAL(e.run.lr, 3e-4, 1e-15);
	config_release(&e);
}

static void test_file_structure_errors(void)
{
	struct experiment e;
	char text[512];

	config_init(&e);
	/* a key before any section; one report per unknown section, at its header, keys under it or not */
	load_expect(&e,
		    "layers = 3\n"
		    "colour = red\n"
		    "[Model]\n"
		    "layers = 3\n"
		    "hidden = 8\n"
		    "[gpu]\n"
		    "[zzz]\n"
		    "a = 1\n",
		    -1,
		    "@:1: key 'layers' is outside any section (it belongs in [model])\n"
		    "@:2: key 'colour' is outside any section\n"
		    "@:3: unknown section [Model] (did you mean [model]?)\n"
		    "@:6: unknown section [gpu] (sections: [model] [cluster] [policy] [run])\n"
		    "@:7: unknown section [zzz] (sections: [model] [cluster] [policy] [run])\n");
	/* a key set twice in one file */
	load_expect(&e,
		    "[model]\n"
		    "layers = 3\n"
		    "\n"
		    "layers = 4\n",
		    -1, "@:4: model.layers is set twice (first at line 2)\n");
	/* a line longer than inih's buffer is one error, not two half-lines */
	snprintf(text, sizeof text, "[model]\nlayers = 3\n# %0300d\nseq = 16\n", 0);
	load_expect(&e, text, -1, "@:3: line is longer than 197 characters\n");
	CU_ASSERT_EQUAL(e.model.seq, 16); /* the lines around it were read */
	/* inih reads `key: value` as `key = value`: refused, the line read as meant; every line without a
	   separator said, not the first only; an indented line after a header is a key line */
	load_expect(&e,
		    "[model]\n"
		    "name: tiny\n"
		    "x\n"
		    "y\n"
		    "layers = 3 ; a: b\n"
		    "[run]\n"
		    "  seed: 7\n",
		    -1,
		    "@:2: syntax error: expected 'key = value', not 'name: tiny' (write 'name = tiny')\n"
		    "@:3: syntax error: expected '[section]' or 'key = value'\n"
		    "@:4: syntax error: expected '[section]' or 'key = value'\n"
		    "@:7: syntax error: expected 'key = value', not 'seed: 7' (write 'seed = 7')\n");
	CU_ASSERT_EQUAL(e.model.layers, 3);
	/* an unclosed section header opens no section */
	load_expect(&e, "[model\nlayers = 3\n", -1,
		    "@:1: syntax error: expected '[section]' or 'key = value'\n"
		    "@:2: key 'layers' is outside any section (it belongs in [model])\n");
	/* an unknown key with nothing close lists the section's keys */
	load_expect(&e, "[run]\nzzzzzz = 1\n", -1,
		    "@:2: unknown key 'zzzzzz' in [run] (keys: batch|steps|warmup|seed|device|out|lr|"
		    "weight_decay|eps|timeout_s)\n");

	capture();
	CU_ASSERT_EQUAL(config_load(&e, "/nonexistent/x.ini"), -1);
	char *got = captured();
	assert_text(got, "/nonexistent/x.ini: cannot open: No such file or directory\n");
	free(got);
	config_release(&e);
}

/* config_load(path): -1 and exactly the message want ("@" for the path). */
static void load_fails(const char *path, const char *want)
{
	struct experiment e;
	char *got, *w = expand(want, path);

	config_init(&e);
	capture();
	CU_ASSERT_EQUAL(config_load(&e, path), -1);
	got = captured();
	assert_text(got, w);
	free(got);
	free(w);
	config_release(&e);
}

/*
 * Only regular files are read, and only ones that set a key: a directory,
 * a FIFO (which would block), a device (/dev/zero, /dev/urandom: endless),
 * an empty or comment-only file (which would run the defaults), a huge
 * file; a file full of errors prints the first hundred and a count.
 */
static void test_file_kinds(void)
{
	char path[64], fifo[64], *text;
	size_t n;
	FILE *f;

	load_fails("/tmp", "@: is a directory: only a regular file is read as an experiment\n");
	load_fails("/dev/null", "@: is a character device: only a regular file is read as an experiment\n");
	load_fails("/dev/zero", "@: is a character device: only a regular file is read as an experiment\n");
	load_fails("/dev/urandom", "@: is a character device: only a regular file is read as an experiment\n");
	snprintf(fifo, sizeof fifo, "/tmp/test_config_fifo_%ld.ini", (long)getpid());
	unlink(fifo);
	CU_ASSERT_FATAL(mkfifo(fifo, 0600) == 0);
	load_fails(fifo, "@: is a FIFO: only a regular file is read as an experiment\n");
	unlink(fifo);

	static const char *const empty[] = { "", "\n\n", "# only a comment\n; and another\n",
					     "[model]\n[run]\n" };
	for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++) {
		file_new(path, sizeof path, empty[i]);
		load_fails(path, "@: has no 'key = value' line: an empty experiment file is refused (run "
				 "without a file to use the defaults)\n");
		unlink(path);
	}

	/* larger than an experiment file can be */
	file_new(path, sizeof path, "");
	CU_ASSERT_FATAL(truncate(path, (1 << 20) + 1) == 0);
	load_fails(path, "@: is 1048577 bytes: an experiment file is at most 1048576\n");
	unlink(path);
	/* as large as one can be: a key, then comment lines up to exactly 1 MiB, is read */
	{
		static const char head[] = "[model]\nlayers = 3\n";
		size_t left = (1u << 20) - (sizeof head - 1);
		f = open_memstream(&text, &n);
		fputs(head, f);
		for (; left; left -= left < 100 ? left : 100)
			fprintf(f, "#%0*d\n", (int)(left < 100 ? left : 100) - 2, 0);
		fclose(f);
		CU_ASSERT_EQUAL_FATAL(n, (size_t)1 << 20);
		file_new(path, sizeof path, text);
		free(text);
		struct experiment big;
		config_init(&big);
		CU_ASSERT_EQUAL(config_load(&big, path), 0);
		CU_ASSERT_EQUAL(big.model.layers, 3);
		config_release(&big);
		unlink(path);
	}

	/* 150 bad lines: the first 100 messages, then the count */
	f = open_memstream(&text, &n);
	fputs("[model]\n", f);
	for (int i = 0; i < 150; i++)
		fprintf(f, "k%d = 1\n", i);
	fclose(f);
	file_new(path, sizeof path, text);
	free(text);
	struct experiment e;
	config_init(&e);
	capture();
	CU_ASSERT_EQUAL(config_load(&e, path), -1);
	text = captured();
	int lines = 0;
	for (const char *c = text; *c; c++)
		lines += *c == '\n';
	CU_ASSERT_EQUAL(lines, 101);
	CU_ASSERT(strstr(text, ":101: unknown key 'k99' in [model]") != NULL);
	CU_ASSERT(strstr(text, "k100") == NULL);
	CU_ASSERT(strstr(text, ": 50 more errors not shown\n") != NULL);
	free(text);
	config_release(&e);
	unlink(path);
}

/* ---- the command line ------------------------------------------------------ */

static void test_set_errors(void)
{
	struct experiment e;
	char *got;

	config_init(&e);
	capture();
	CU_ASSERT_EQUAL(config_set(&e, "model.layrs=2", "--set"), -1);
	CU_ASSERT_EQUAL(config_set(&e, "modle.layers=2", "--set"), -1);
	CU_ASSERT_EQUAL(config_set(&e, "layers=2", "--set"), -1);
	CU_ASSERT_EQUAL(config_set(&e, "model.layers", "--set"), -1);
	CU_ASSERT_EQUAL(config_set(&e, "model.layers=abc", "--layers"), -1);
	CU_ASSERT_EQUAL(config_set(&e, "model.layers=0", "--layers"), -1);
	CU_ASSERT_EQUAL(config_set(&e, "policy.sharding=fdsp", "--policy"), -1);
	CU_ASSERT_EQUAL(config_set(&e, " model.layers = 7 ", "--set"), 0);
	got = captured();
	assert_text(got,
		    "--set model.layrs=2: unknown key 'layrs' in [model] (did you mean 'layers'?)\n"
		    "--set modle.layers=2: unknown section [modle] (did you mean [model]?)\n"
		    "--set layers=2: expected section.key=value\n"
		    "--set model.layers: expected section.key=value\n"
		    "--layers: model.layers = 'abc' is not an integer\n"
		    "--layers: model.layers = 0 is out of range (1 to 1000)\n"
		    "--policy: policy.sharding = 'fdsp' is not a sharding policy (allowed: "
		    "ddp|fsdp|zero2|hsdp; did you mean 'fsdp'?)\n");
	free(got);
	CU_ASSERT_EQUAL(e.model.layers, 7);
	config_release(&e);
}

/* file < flag < later flag, wherever the file stands in argv */
static void test_precedence(void)
{
	struct experiment e;
	char path[64];

	file_new(path, sizeof path, "[model]\nlayers = 4\nseq = 64\nhidden = 128\n");

	config_init(&e);
	char *a1[] = { "prog", "--layers", "6", path, "--set", "model.layers=8", "--seq=16", NULL };
	CU_ASSERT_EQUAL(config_parse_args(&e, 7, a1), 0);
	CU_ASSERT_EQUAL(e.model.layers, 8);
	CU_ASSERT_EQUAL(e.model.seq, 16);
	CU_ASSERT_EQUAL(e.model.hidden, 128); /* from the file */
	CU_ASSERT_STRING_EQUAL(e.path, path);
	config_release(&e);

	config_init(&e);
	char *a2[] = { "prog", "--layers", "6", path, NULL };
	CU_ASSERT_EQUAL(config_parse_args(&e, 4, a2), 0);
	CU_ASSERT_EQUAL(e.model.layers, 6); /* the flag before the file still wins */
	config_release(&e);

	config_init(&e);
	char *a3[] = { "prog", path, "--set=model.layers=8", "--layers", "5", NULL };
	CU_ASSERT_EQUAL(config_parse_args(&e, 5, a3), 0);
	CU_ASSERT_EQUAL(e.model.layers, 5);
	CU_ASSERT_EQUAL(config_resolve(&e), 0);
	config_release(&e);
	unlink(path);
}

/* What is not an experiment flag stays in argv for the caller. */
static void test_args_left_for_caller(void)
{
	struct experiment e;
	char path[64];

	file_new(path, sizeof path, "[model]\nlayers = 4\n");
	config_init(&e);
	char *a[] = { "prog", "--json", path, "--nosuch", "1", "--layers", "3", "-v", "--policy",
		      "zero2", "--flat-params", "--concat-last-only", "no", NULL };
	CU_ASSERT_EQUAL(config_parse_args(&e, 13, a), 0);
	CU_ASSERT_STRING_EQUAL(a[1], "--json");
	CU_ASSERT_PTR_NULL(a[2]); /* the file: ends in .ini after a caller's flag */
	CU_ASSERT_STRING_EQUAL(a[3], "--nosuch");
	CU_ASSERT_STRING_EQUAL(a[4], "1"); /* perhaps --nosuch's value: not the file */
	CU_ASSERT_PTR_NULL(a[5]);
	CU_ASSERT_PTR_NULL(a[6]);
	CU_ASSERT_STRING_EQUAL(a[7], "-v");
	for (int i = 8; i < 13; i++)
		CU_ASSERT_PTR_NULL(a[i]);
	CU_ASSERT_STRING_EQUAL(e.path, path);
	CU_ASSERT_EQUAL(e.model.layers, 3);
	CU_ASSERT_EQUAL(e.policy.sharding, SHARD_ZERO2);
	CU_ASSERT_EQUAL(e.policy.flat_params, 1);
	CU_ASSERT_EQUAL(e.policy.concat_last_only, 0);
	config_release(&e);
	unlink(path);

	config_init(&e);
	char *b[] = { "prog", "--nosuch", "1", NULL };
	CU_ASSERT_EQUAL(config_parse_args(&e, 3, b), 0);
	CU_ASSERT_STRING_EQUAL(b[2], "1");
	CU_ASSERT_STRING_EQUAL(e.path, "");
	config_release(&e);
}

static void test_flag_errors(void)
{
	struct experiment e;

	config_init(&e);
	capture();
	char *a[] = { "prog", "/nonexistent.ini", "--layers", "abc", "--gpu", "h100", "--set", "foo",
		      "--wrap", "every:0", "--optim-in-backward=maybe", "--sharding", NULL };
	CU_ASSERT_EQUAL(config_parse_args(&e, 12, a), -1);
	char *got = captured();
	assert_text(got,
		    "/nonexistent.ini: cannot open: No such file or directory\n"
		    "--layers: model.layers = 'abc' is not an integer\n"
		    "--gpu: cluster.gpu = 'h100' is not a catalog GPU (allowed: a100-80g|h100-sxm|h200|h100-96g|h100-nvl|h100-pcie|a100-40g|"
		    "cpu|custom; did you mean 'h100-sxm'?)\n"
		    "--set foo: expected section.key=value\n"
		    "--wrap: policy.wrap = 'every:0' needs a whole number K >= 1 (write every:K)\n"
		    "--optim-in-backward: policy.optim_in_backward = 'maybe' is not a boolean "
		    "(allowed: true|false|yes|no|1|0)\n"
		    "--sharding: missing value\n");
	free(got);
	config_release(&e);
}

static void test_flags_known(void)
{
	CU_ASSERT(config_is_flag("--layers"));
	CU_ASSERT(config_is_flag("--layers=3"));
	CU_ASSERT(config_is_flag("--kv-heads"));
	CU_ASSERT(config_is_flag("--gpus-per-node"));
	CU_ASSERT(config_is_flag("--policy"));
	CU_ASSERT(config_is_flag("--sharding"));
	CU_ASSERT(config_is_flag("--model"));
	CU_ASSERT(config_is_flag("--set"));
	CU_ASSERT(config_is_flag("--nccl-sms"));
	CU_ASSERT(config_is_flag("--weight-decay"));
	CU_ASSERT(!config_is_flag("--kv_heads"));
	CU_ASSERT(!config_is_flag("--name"));
	CU_ASSERT(!config_is_flag("--json"));
	CU_ASSERT(!config_is_flag("layers"));
	static const char *const own[] = { "--schedule", "--advise", "--json", NULL };
	CU_ASSERT_STRING_EQUAL(config_flag_closest("--layrs", NULL), "--layers");
	CU_ASSERT_STRING_EQUAL(config_flag_closest("--kv_heads", NULL), "--kv-heads");
	CU_ASSERT_STRING_EQUAL(config_flag_closest("--microbatch=2", NULL), "--microbatches");
	CU_ASSERT_STRING_EQUAL(config_flag_closest("-seq", NULL), "--seq");
	CU_ASSERT_PTR_NULL(config_flag_closest("--nosuch", NULL));
	CU_ASSERT_PTR_NULL(config_flag_closest("1", NULL));
	/* the caller's own flags too: the nearest of both lists, not the nearest experiment flag */
	CU_ASSERT_STRING_EQUAL(config_flag_closest("--schedul", own), "--schedule");
	CU_ASSERT_STRING_EQUAL(config_flag_closest("--advice", own), "--advise");
	CU_ASSERT_STRING_EQUAL(config_flag_closest("--jsn", own), "--json");
	CU_ASSERT_STRING_EQUAL(config_flag_closest("--layrs", own), "--layers");

	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	config_usage(f);
	fclose(f);
	CU_ASSERT(strstr(buf, "--layers V") != NULL);
	CU_ASSERT(strstr(buf, "--sharding V (or --policy)") != NULL);
	CU_ASSERT(strstr(buf, " --flat-params ") != NULL);
	CU_ASSERT(strstr(buf, "--set section.key=value") != NULL);
	free(buf);
}

/* ---- resolution ------------------------------------------------------------ */

static void test_catalog_overrides(void)
{
	struct experiment e;
	char *msgs;

	config_init(&e);
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "model.name=llama3-8b", "model.layers=4",
				    "cluster.gpu=h100-sxm", "cluster.sms=100", "cluster.intra_gbps=100",
				    "cluster.inter_gbps=20", NULL), 0);
	free(msgs);
	CU_ASSERT_EQUAL(e.model.layers, 4);
	CU_ASSERT_EQUAL(e.model.hidden, 4096);
	CU_ASSERT_EQUAL(e.model.rope_theta, 500000.0); /* Llama 3's base, from the catalog */
	CU_ASSERT_EQUAL(e.cluster.gpu.sms, 100);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.gpu.bf16_tflops, 989, 1e-9);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.gpu.intra_gbps, 100, 1e-9);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.intra_gbps, 100, 1e-9);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.inter_gbps, 20, 1e-9);

	/* a new catalog name replaces what came from the old one, not what was set */
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "model.name=llama2-7b", "cluster.gpu=a100-80g", NULL), 0);
	free(msgs);
	CU_ASSERT_EQUAL(e.model.layers, 4);
	CU_ASSERT_EQUAL(e.model.vocab, 32000);
	CU_ASSERT_EQUAL(e.model.rope_theta, 10000.0); /* Llama 2's */
	CU_ASSERT_EQUAL(e.cluster.gpu.sms, 100);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.gpu.bf16_tflops, 312, 1e-9);
	/* a base set stays through a change of model; a base out of range names its key */
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "model.rope_theta=1e6", "model.name=llama3-70b", NULL), 0);
	free(msgs);
	CU_ASSERT_EQUAL(e.model.rope_theta, 1e6);
	CU_ASSERT_EQUAL(e.model.layers, 4);
	CU_ASSERT_NOT_EQUAL(set_resolve(&e, &msgs, "model.rope_theta=0.5", NULL), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(msgs, "model.rope_theta = 0.5"));
	free(msgs);
	config_release(&e);

	/* custom shapes and GPUs: every key given */
	config_init(&e);
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "model.name=custom", "model.layers=3", "model.hidden=96",
				    "model.ffn=256", "model.heads=6", "model.kv_heads=3",
				    "model.vocab=1000", NULL), 0);
	assert_text(msgs, "");
	free(msgs);
	CU_ASSERT_STRING_EQUAL(e.model.name, "custom");
	CU_ASSERT_EQUAL(e.model.seq, 2048);
	CU_ASSERT_EQUAL(e.model.heads, 6);
	CU_ASSERT_EQUAL(e.model.rope_theta, 500000.0); /* Llama 3's, unless set */
	config_release(&e);

	config_init(&e);
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "cluster.gpu=custom", "cluster.sms=10",
				    "cluster.bf16_tflops=50", "cluster.fp32_tflops=5", "cluster.hbm_gbps=500",
				    "cluster.hbm_gib=16", "cluster.intra_gbps=50", "cluster.nics_per_node=2",
				    "cluster.nic_gbps=12.5", "cluster.pcie_gbps=16", "cluster.gemm_tile_m=64",
				    "cluster.gemm_tile_n=64", "cluster.tiles_per_sm=2", "cluster.gemm_eff=0.7",
				    "cluster.attn_eff=0.5", "cluster.nccl_sms=4", "cluster.nccl_hbm_factor=2",
				    "cluster.elementwise_sms_frac=0.3", "cluster.cpu_adam_gparams=0.5",
				    "cluster.net_latency_us=10", "cluster.nvlink_latency_us=3", "cluster.fa2_fwd_eff=0.3",
				    "cluster.fa2_bwd_eff=0.3", "cluster.cudnn_fwd_eff=0.4", "cluster.cudnn_bwd_eff=0.4",
				    "cluster.attn_half_seq=100", "cluster.hbm_eff=0.9", "cluster.kernel_min_us=2",
				    "cluster.tdp_w=300", "cluster.power_cap_w=300", NULL), 0);
	assert_text(msgs, "");
	free(msgs);
	CU_ASSERT_STRING_EQUAL(e.cluster.gpu.name, "custom");
	CU_ASSERT_EQUAL(e.cluster.gpu.sms, 10);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.gpu.attn_bwd_eff, 0.5, 1e-12); /* attn_eff alone: both ways */
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.inter_gbps, 2 * 12.5 / 2, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.node_inter_gbps, 2 * 12.5, 1e-12);
	config_release(&e);
}

static void test_derived_values(void)
{
	struct experiment e;
	char *msgs;

	/* this project's attention: the catalog's figures each way; attn_eff set alone sets both */
	config_init(&e);
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "cluster.gpu=h100-sxm", NULL), 0);
	free(msgs);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.gpu.attn_eff, 0.216, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.gpu.attn_bwd_eff, 0.193, 1e-12);
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "cluster.attn_eff=0.4", NULL), 0);
	free(msgs);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.gpu.attn_eff, 0.4, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.gpu.attn_bwd_eff, 0.4, 1e-12);
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "cluster.attn_bwd_eff=0.3", NULL), 0);
	free(msgs);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.gpu.attn_eff, 0.4, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.gpu.attn_bwd_eff, 0.3, 1e-12);
	config_release(&e);
	config_init(&e);
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "cluster.gpu=h100-sxm", "cluster.attn_bwd_eff=0.3", NULL), 0);
	free(msgs);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.gpu.attn_eff, 0.216, 1e-12); /* the backward alone leaves the forward */
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.gpu.attn_bwd_eff, 0.3, 1e-12);
	/* today's catalog's model constants over whatever set them; the machine's figures stay */
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "cluster.gemm_eff=0.5", "cluster.hbm_gbps=100", NULL), 0);
	free(msgs);
	CU_ASSERT_EQUAL(config_gpu_model_from_catalog(&e), 0);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.gpu.gemm_eff, 0.75, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.gpu.attn_bwd_eff, 0.193, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.gpu.hbm_gbps, 100, 1e-12);
	config_release(&e);

	config_init(&e);
	/* shard group: world for fsdp and zero2, gpus per node for hsdp, 1 for ddp */
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "cluster.nodes=3", "cluster.gpus_per_node=4", NULL), 0);
	free(msgs);
	CU_ASSERT_EQUAL(e.policy.shard_group, 12);
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "policy.sharding=hsdp", NULL), 0);
	free(msgs);
	CU_ASSERT_EQUAL(e.policy.shard_group, 4);
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "policy.shard_group=6", NULL), 0);
	free(msgs);
	CU_ASSERT_EQUAL(e.policy.shard_group, 6);
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "policy.sharding=ddp", "policy.shard_group=0", NULL), 0);
	free(msgs);
	CU_ASSERT_EQUAL(e.policy.shard_group, 1);
	CU_ASSERT_EQUAL(e.policy.reshard, RESHARD_NO);
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "policy.sharding=zero2", NULL), 0);
	free(msgs);
	CU_ASSERT_EQUAL(e.policy.shard_group, 12);
	CU_ASSERT_EQUAL(e.policy.reshard, RESHARD_NO);
	/* "yes", the default's spelling, resolves to no for zero2 */
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "policy.reshard=yes", NULL), 0);
	free(msgs);
	CU_ASSERT_EQUAL(e.policy.reshard, RESHARD_NO);
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "policy.sharding=fsdp", "policy.shard_group=12", NULL), 0);
	free(msgs);
	CU_ASSERT_EQUAL(e.policy.reshard, RESHARD_YES);
	CU_ASSERT_EQUAL(e.policy.shard_group, 12); /* explicit and equal to the default: fine */

	/* gradient dtypes follow the precision unless set */
	CU_ASSERT_EQUAL(e.policy.reduce_dtype, DT_FP32);
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "policy.precision=pure-bf16", NULL), 0);
	free(msgs);
	CU_ASSERT_EQUAL(e.policy.reduce_dtype, DT_BF16);
	CU_ASSERT_EQUAL(e.policy.accum_dtype, DT_BF16);
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "policy.reduce_dtype=fp32", NULL), 0);
	free(msgs);
	CU_ASSERT_EQUAL(e.policy.reduce_dtype, DT_FP32);
	CU_ASSERT_EQUAL(e.policy.accum_dtype, DT_BF16);
	CU_ASSERT_EQUAL(set_resolve(&e, &msgs, "policy.precision=fp32", NULL), 0);
	free(msgs);
	CU_ASSERT_EQUAL(e.policy.reduce_dtype, DT_FP32);
	CU_ASSERT_EQUAL(e.policy.accum_dtype, DT_FP32);
	config_release(&e);
}

/* Each rule, with the keys involved and where each was set. */
static void test_rules(void)
{
	char path[64];

	/* shard group and world size, from a file: the example of the brief */
	file_new(path, sizeof path,
		 "[cluster]\n"
		 "gpu = h100-sxm\n"
		 "nodes = 2\n"
		 "gpus_per_node = 8\n"
		 "[policy]\n"
		 "sharding = hsdp\n"
		 "shard_group = 3\n");
	{
		struct experiment e;
		config_init(&e);
		char *a[] = { "prog", path, "--gpus-per-node", "8", NULL };
		CU_ASSERT_EQUAL(config_parse_args(&e, 4, a), 0);
		capture();
		CU_ASSERT_EQUAL(config_resolve(&e), -1);
		char *got = captured(), *want = expand(
			"@:7: policy.shard_group = 3 does not divide the world size 16 (cluster.nodes = 2 "
			"at @:3, cluster.gpus_per_node = 8 from --gpus-per-node)\n", path);
		assert_text(got, want);
		free(got);
		free(want);
		config_release(&e);
	}
	unlink(path);

	rule_expect("--set policy.shard_group=3: policy.shard_group = 3 does not divide the world size 2 "
		    "(cluster.nodes = 1 by default, cluster.gpus_per_node = 2 by default)\n",
		    "policy.sharding=hsdp", "policy.shard_group=3", NULL);
	rule_expect("--shard-group: policy.shard_group = 1 applies to hsdp only; fsdp shards over all 2 "
		    "ranks (policy.sharding = fsdp by default)\n",
		    "--shard-group|policy.shard_group=1", NULL);
	rule_expect("--shard-group: policy.shard_group = 2 applies to hsdp only; ddp shards nothing "
		    "(policy.sharding = ddp from --policy)\n",
		    "--policy|policy.sharding=ddp", "--shard-group|policy.shard_group=2", NULL);
	rule_expect("--reshard: policy.reshard = all-but-last does not apply: zero2 keeps full "
		    "parameters from forward to backward (policy.sharding = zero2 from --sharding)\n",
		    "--sharding|policy.sharding=zero2", "--reshard|policy.reshard=all-but-last", NULL);
	rule_expect("--accum: policy.accum = defer-replica needs policy.sharding = hsdp: it defers "
		    "the all-reduce across replicas (policy.sharding = fsdp by default)\n",
		    "--accum|policy.accum=defer-replica", NULL);
	rule_expect("", "policy.sharding=hsdp", "policy.accum=defer-replica", NULL);
	rule_expect("--accum: policy.accum = partial:3 needs K from 1 to the number of layers, 2 "
		    "(model.layers = 2 from model tiny)\n",
		    "--accum|policy.accum=partial:3", NULL);
	rule_expect("--set policy.wrap=every:9: policy.wrap = every:9 needs K from 1 to the number of "
		    "layers, 8 (model.layers = 8 from --layers)\n",
		    "--layers|model.layers=8", "policy.wrap=every:9", NULL);
	rule_expect("", "policy.wrap=every:2", "policy.accum=partial:2", NULL);
	rule_expect("--concat-last-only: policy.concat_last_only = true needs policy.flat_params = true "
		    "(policy.flat_params = false by default)\n",
		    "--concat-last-only|policy.concat_last_only=true", NULL);
	rule_expect("", "policy.concat_last_only=true", "policy.flat_params=true", NULL);
	rule_expect("--flat-params: policy.flat_params = true does not apply to ddp: it has no shards "
		    "to flatten (policy.sharding = ddp from --sharding)\n"
		    "--offload: policy.offload = params does not apply to ddp: it has no shards to "
		    "offload (policy.sharding = ddp from --sharding)\n",
		    "--sharding|policy.sharding=ddp", "--flat-params|policy.flat_params=true",
		    "--offload|policy.offload=params", NULL);
	rule_expect("--model: model.name = custom needs every dimension; not set: model.hidden, "
		    "model.ffn, model.heads, model.kv_heads, model.vocab\n",
		    "--model|model.name=custom", "--layers|model.layers=3", NULL);
	rule_expect("--gpu: cluster.gpu = custom needs every GPU spec key; not set: cluster.bf16_tflops, "
		    "cluster.fp32_tflops, cluster.hbm_gbps, cluster.hbm_gib, cluster.intra_gbps, "
		    "cluster.nics_per_node, cluster.nic_gbps, cluster.pcie_gbps, cluster.gemm_tile_m, "
		    "cluster.gemm_tile_n, cluster.tiles_per_sm, cluster.gemm_eff, cluster.attn_eff, "
		    "cluster.attn_bwd_eff, cluster.fa2_fwd_eff, cluster.fa2_bwd_eff, cluster.cudnn_fwd_eff, cluster.cudnn_bwd_eff, "
		    "cluster.attn_half_seq, cluster.hbm_eff, "
		    "cluster.nccl_sms, cluster.nccl_hbm_factor, cluster.elementwise_sms_frac, "
		    "cluster.cpu_adam_gparams, cluster.net_latency_us, cluster.nvlink_latency_us, "
		    "cluster.kernel_min_us, cluster.tdp_w, cluster.power_cap_w\n",
		    "--gpu|cluster.gpu=custom", "--sms|cluster.sms=4", NULL);
	rule_expect("--nccl-sms: cluster.nccl_sms = 3 is more SMs than the GPU has (cluster.sms = 2 "
		    "from gpu cpu)\n",
		    "--nccl-sms|cluster.nccl_sms=3", NULL);
	rule_expect("--sms: cluster.sms = 16 is fewer SMs than one collective holds (cluster.nccl_sms = "
		    "24 from gpu h100-sxm)\n",
		    "--gpu|cluster.gpu=h100-sxm", "--sms|cluster.sms=16", NULL);
}

/* model_check's own words are model.c's; the place and the keys are config's. */
static void test_shape_error(void)
{
	struct experiment e;
	const char *head = "--kv-heads: model.name = tiny (by default) has an unusable shape: ";
	const char *tail = " (model.kv_heads = 3 from --kv-heads)\n";

	config_init(&e);
	capture();
	CU_ASSERT_EQUAL(config_set(&e, "model.kv_heads=3", "--kv-heads"), 0);
	CU_ASSERT_EQUAL(config_resolve(&e), -1);
	char *got = captured();
	size_t n = strlen(got);
	CU_ASSERT(strncmp(got, head, strlen(head)) == 0);
	CU_ASSERT(n > strlen(tail) && strcmp(got + n - strlen(tail), tail) == 0);
	CU_ASSERT(strstr(got, "kv_heads") != NULL);
	CU_ASSERT(strchr(got, '\n') == got + n - 1); /* one message */
	free(got);
	config_release(&e);
}

/* ---- output ------------------------------------------------------------ */

struct each_ctx {
	int n;
	char group[32], accum[32], out[32];
};

static void each_fn(void *ctx, const char *section, const char *key, const char *value)
{
	struct each_ctx *c = ctx;
	c->n++;
	if (strcmp(section, "policy") == 0 && strcmp(key, "shard_group") == 0)
		snprintf(c->group, sizeof c->group, "%s", value);
	if (strcmp(section, "policy") == 0 && strcmp(key, "accum") == 0)
		snprintf(c->accum, sizeof c->accum, "%s", value);
	if (strcmp(section, "run") == 0 && strcmp(key, "out") == 0)
		snprintf(c->out, sizeof c->out, "[%s]", value);
}

/* What config_write_ini writes reads back to the same experiment. */
static void test_write_read_back(void)
{
	struct experiment a, b;
	char *text_a = NULL, *text_b = NULL, path[64];
	size_t len;

	config_init(&a);
	char *args[] = { "prog", "experiments/llama3.ini", "--accum", "partial:4", "--microbatches", "4",
			 "--wrap", "every:2", "--out", "x y.h5", "--lr", "1e-4", "--gemm-eff", "0.71",
			 NULL };
	CU_ASSERT_FATAL(config_parse_args(&a, 14, args) == 0);
	CU_ASSERT_FATAL(config_resolve(&a) == 0);
	FILE *f = open_memstream(&text_a, &len);
	config_write_ini(&a, f);
	fclose(f);
	CU_ASSERT(strstr(text_a, "[model]\nname = llama3-8b\nlayers = 32\n") == text_a);
	CU_ASSERT(strstr(text_a, "\n[policy]\nsharding = fsdp\nshard_group = 16\naccum = partial:4\n") != NULL);
	CU_ASSERT(strstr(text_a, "\nwrap = every:2\n") != NULL);
	CU_ASSERT(strstr(text_a, "\nout = x y.h5\n") != NULL);
	CU_ASSERT(strstr(text_a, "\nlr = 0.0001\n") != NULL);
	CU_ASSERT(strstr(text_a, "\ngemm_eff = 0.71\n") != NULL);
	CU_ASSERT(strstr(text_a, "\ninter_gbps = 48\n") != NULL);

	struct each_ctx c = { 0 };
	config_each(&a, each_fn, &c);
	int lines = 0;
	for (const char *p = text_a; *p; p++)
		lines += *p == '=';
	CU_ASSERT_EQUAL(c.n, lines);
	CU_ASSERT_STRING_EQUAL(c.group, "16");
	CU_ASSERT_STRING_EQUAL(c.accum, "partial:4");
	CU_ASSERT_STRING_EQUAL(c.out, "[x y.h5]");

	file_new(path, sizeof path, text_a);
	config_init(&b);
	CU_ASSERT_FATAL(config_load(&b, path) == 0);
	CU_ASSERT_FATAL(config_resolve(&b) == 0);
	f = open_memstream(&text_b, &len);
	config_write_ini(&b, f);
	fclose(f);
	assert_text(text_b, text_a);
	CU_ASSERT_EQUAL(b.policy.partial_k, 4);
	CU_ASSERT_DOUBLE_EQUAL(b.run.lr, 1e-4, 0);
	unlink(path);
	free(text_a);
	free(text_b);
	config_release(&a);
	config_release(&b);
}

/* ---- every value written reads back --------------------------------------- */

/* The experiment as config_write_ini writes it; the caller frees it. */
static char *ini_text(const struct experiment *e)
{
	char *text = NULL;
	size_t len;
	FILE *f = open_memstream(&text, &len);

	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	config_write_ini(e, f);
	fclose(f);
	return text;
}

struct set_ctx {
	struct experiment *e;
	int errors;
};

static void set_each(void *ctx, const char *section, const char *key, const char *value)
{
	struct set_ctx *c = ctx;
	char kv[1024];

	snprintf(kv, sizeof kv, "%s.%s=%s", section, key, value);
	c->errors += config_set(c->e, kv, "--set") != 0;
}

/*
 * a's configuration, written as a results file records it, reads back to
 * the same configuration both ways: config_write_ini's text through
 * config_load, and config_each's values through --set. Returns 0, or -1
 * with the messages printed to stderr.
 */
static int read_back(const struct experiment *a)
{
	struct experiment b, c;
	struct set_ctx ctx = { &c, 0 };
	char path[64], *want = ini_text(a), *msgs, *got_b = NULL, *got_c = NULL;
	int ok;

	file_new(path, sizeof path, want);
	config_init(&b);
	config_init(&c);
	capture();
	ok = config_load(&b, path) == 0 && config_resolve(&b) == 0;
	if (ok)
		got_b = ini_text(&b);
	config_each(a, set_each, &ctx);
	ok = ok && ctx.errors == 0 && config_resolve(&c) == 0;
	if (ok)
		got_c = ini_text(&c);
	msgs = captured();
	ok = ok && strcmp(got_b, want) == 0 && strcmp(got_c, want) == 0;
	if (!ok)
		fprintf(stderr, "\n--- written\n%s--- messages\n%s--- read back\n%s---\n", want, msgs,
			got_b ? got_b : "");
	free(msgs);
	free(got_b);
	free(got_c);
	free(want);
	unlink(path);
	config_release(&b);
	config_release(&c);
	return ok ? 0 : -1;
}

/* The issue's example: the largest cluster's derived shard group is a value the parser accepts. */
static void test_largest_cluster_reads_back(void)
{
	struct experiment e;

	test_experiment(&e, "cluster.nodes=65536", "cluster.gpus_per_node=64", NULL);
	CU_ASSERT_EQUAL(e.policy.shard_group, 65536 * 64);
	CU_ASSERT_EQUAL(read_back(&e), 0);
	config_release(&e);
	/* the derived inter-node bandwidth at both ends of its inputs' ranges */
	test_experiment(&e, "cluster.nics_per_node=64", "cluster.nic_gbps=1e5", "cluster.gpus_per_node=1", NULL);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.inter_gbps, 6.4e6, 0);
	CU_ASSERT_EQUAL(read_back(&e), 0);
	config_release(&e);
	test_experiment(&e, "cluster.nics_per_node=1", "cluster.nic_gbps=0.001", "cluster.gpus_per_node=64", NULL);
	CU_ASSERT_DOUBLE_EQUAL(e.cluster.inter_gbps, 0.001 / 64, 0);
	CU_ASSERT_EQUAL(read_back(&e), 0);
	config_release(&e);
}

/*
 * Numbers: decimal only, and held by their type; every reader of a number
 * (keys, sweep values and ranges, ./sim's and gpu_run's own flags) takes
 * them through these.
 */
static void test_numbers(void)
{
	static const struct { const char *s; enum config_number real, integer; } cases[] = {
		{ "32", CONFIG_NUMBER_OK, CONFIG_NUMBER_OK },       { "-3", CONFIG_NUMBER_OK, CONFIG_NUMBER_OK },
		{ "0.5", CONFIG_NUMBER_OK, CONFIG_NUMBER_BAD },     { ".5", CONFIG_NUMBER_OK, CONFIG_NUMBER_BAD },
		{ "2.", CONFIG_NUMBER_OK, CONFIG_NUMBER_BAD },      { "6e-4", CONFIG_NUMBER_OK, CONFIG_NUMBER_BAD },
		{ "1E+5", CONFIG_NUMBER_OK, CONFIG_NUMBER_BAD },    { "0e-400", CONFIG_NUMBER_OK, CONFIG_NUMBER_BAD },
		{ "2.2250738585072014e-308", CONFIG_NUMBER_OK, CONFIG_NUMBER_BAD },
		{ "+2", CONFIG_NUMBER_BAD, CONFIG_NUMBER_BAD },     { "0x10", CONFIG_NUMBER_BAD, CONFIG_NUMBER_BAD },
		{ "0x1p-3", CONFIG_NUMBER_BAD, CONFIG_NUMBER_BAD }, { "inf", CONFIG_NUMBER_BAD, CONFIG_NUMBER_BAD },
		{ "nan", CONFIG_NUMBER_BAD, CONFIG_NUMBER_BAD },    { " 2", CONFIG_NUMBER_BAD, CONFIG_NUMBER_BAD },
		{ "2 ", CONFIG_NUMBER_BAD, CONFIG_NUMBER_BAD },     { "", CONFIG_NUMBER_BAD, CONFIG_NUMBER_BAD },
		{ ".", CONFIG_NUMBER_BAD, CONFIG_NUMBER_BAD },      { "-", CONFIG_NUMBER_BAD, CONFIG_NUMBER_BAD },
		{ "1e", CONFIG_NUMBER_BAD, CONFIG_NUMBER_BAD },     { "1e+", CONFIG_NUMBER_BAD, CONFIG_NUMBER_BAD },
		{ "1e-400", CONFIG_NUMBER_RANGE, CONFIG_NUMBER_BAD },  { "-1e-400", CONFIG_NUMBER_RANGE, CONFIG_NUMBER_BAD },
		{ "1e-310", CONFIG_NUMBER_RANGE, CONFIG_NUMBER_BAD },  { "1e400", CONFIG_NUMBER_RANGE, CONFIG_NUMBER_BAD },
		{ "9223372036854775807", CONFIG_NUMBER_OK, CONFIG_NUMBER_OK },
		{ "9223372036854775808", CONFIG_NUMBER_OK, CONFIG_NUMBER_RANGE },
	};
	unsigned long long u;
	long long i;
	double d;

	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		CU_ASSERT_EQUAL(config_parse_real(cases[k].s, &d), cases[k].real);
		CU_ASSERT_EQUAL(config_parse_integer(cases[k].s, &i), cases[k].integer);
		if (config_parse_real(cases[k].s, &d) != cases[k].real || config_parse_integer(cases[k].s, &i) != cases[k].integer)
			fprintf(stderr, "\nnumber '%s'\n", cases[k].s);
	}
	CU_ASSERT(config_parse_real("6e-4", &d) == CONFIG_NUMBER_OK && d == 6e-4);
	CU_ASSERT(config_parse_integer("-3", &i) == CONFIG_NUMBER_OK && i == -3);
	CU_ASSERT(config_parse_unsigned("18446744073709551615", &u) == CONFIG_NUMBER_OK && u == 18446744073709551615ull);
	CU_ASSERT_EQUAL(config_parse_unsigned("18446744073709551616", &u), CONFIG_NUMBER_RANGE);
	CU_ASSERT_EQUAL(config_parse_unsigned("-1", &u), CONFIG_NUMBER_BAD);
	CU_ASSERT_STRING_EQUAL(config_number_why("0x10", CONFIG_NUMBER_BAD), " (numbers are decimal: hexadecimal is not read)");
	CU_ASSERT_STRING_EQUAL(config_number_why("+2", CONFIG_NUMBER_BAD), " (write it without the '+')");
	CU_ASSERT_STRING_EQUAL(config_number_why("abc", CONFIG_NUMBER_BAD), "");
	CU_ASSERT_STRING_EQUAL(config_number_why("99999999999999999999", CONFIG_NUMBER_RANGE), "");
	CU_ASSERT_PTR_NOT_NULL(strstr(config_number_why("1e-400", CONFIG_NUMBER_RANGE), "under 2.2e-308"));
	CU_ASSERT_PTR_NOT_NULL(strstr(config_number_why("1e400", CONFIG_NUMBER_RANGE), "the largest is 1.8e308"));
}

/* Text values that could not be written and read back as themselves are refused when set (quoted escaped). */
static void test_text_values(void)
{
	static const char *const bad[][2] = {
		{ "run.out=a\tb", "run.out = 'a\\tb' holds a control character" },
		{ "run.out=\"\"a\"\"", "run.out = '\"a\"' is quoted twice" },
		{ "run.out=\" a\"", "run.out = ' a' starts or ends with a space" },
		{ "run.out=a ;b", "run.out = 'a ;b' holds ' ;', which starts a comment in a file" },
		{ "run.out=;x", "run.out = ';x' starts with ';', which starts a comment in a file" },
		{ "run.out=\xff.h5", "run.out = '\\xff.h5' is not valid UTF-8" },
		{ "run.out=\xc3(.h5", "run.out = '\\xc3(.h5' is not valid UTF-8" },
		{ "run.out=\xed\xa0\x80.h5", "run.out = '\\xed\\xa0\\x80.h5' is not valid UTF-8" },
	};
	static const char *const good[] = { "run.out=données.h5", "run.out=\"a", "run.out=#x;y: z=1.h5",
					    "run.out=\"\"", "run.out=x;y" };
	struct experiment e;
	char kv[300], want[400];

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		config_init(&e);
		capture();
		CU_ASSERT_EQUAL(config_set(&e, bad[i][0], "--out"), -1);
		char *got = captured();
		snprintf(want, sizeof want, "--out: %s\n", bad[i][1]);
		assert_text(got, want);
		free(got);
		config_release(&e);
	}
	/* a value longer than any key takes (CONFIG_PATH_MAX + 7) is refused before its key is read */
	{
		char huge[CONFIG_PATH_MAX + 32];
		snprintf(huge, sizeof huge, "run.out=%0*d", CONFIG_PATH_MAX + 8, 0);
		config_init(&e);
		capture();
		CU_ASSERT_EQUAL(config_set(&e, huge, "--out"), -1);
		char *said = captured();
		assert_text(said, "--out: value is longer than 519 characters\n");
		free(said);
		snprintf(huge, sizeof huge, "run.out=%0*d", CONFIG_PATH_MAX + 7, 0);
		capture();
		CU_ASSERT_EQUAL(config_set(&e, huge, "--out"), -1); /* past that check: longer than run.out takes */
		said = captured();
		CU_ASSERT_PTR_NOT_NULL(strstr(said, "--out: run.out is longer than 511 characters"));
		free(said);
		config_release(&e);
	}
	/* the longest value a line holds: 197 - strlen("out = ") */
	snprintf(kv, sizeof kv, "run.out=%0191d", 0);
	config_init(&e);
	CU_ASSERT_EQUAL(config_set(&e, kv, "--set"), 0);
	CU_ASSERT_EQUAL(read_back(&e), 0);
	snprintf(kv, sizeof kv, "run.out=%0192d", 0);
	capture();
	CU_ASSERT_EQUAL(config_set(&e, kv, "--out"), -1);
	char *got = captured();
	assert_text(got, "--out: run.out is longer than 191 characters (a `out = ...` line of an experiment "
			 "file holds at most 197)\n");
	free(got);
	config_release(&e);
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		config_init(&e);
		CU_ASSERT_EQUAL(config_set(&e, good[i], "--set"), 0);
		CU_ASSERT_EQUAL(config_resolve(&e), 0);
		CU_ASSERT_EQUAL(read_back(&e), 0);
		config_release(&e);
	}
}

/* A random value of key k, as text; often an end of its range. */
static void random_value(gsl_rng *r, const struct key *k, int layers, char *buf, size_t n)
{
	double u = gsl_rng_uniform(r);
	const char *const *names = k->names;
	int count = 0;

	switch (k->type) {
	case KT_INT: {
		double lo = k->min, hi = k->max, v;
		if (u < 0.2)
			v = lo;
		else if (u < 0.4)
			v = hi;
		else /* log-uniform over [max(lo, 1), hi]: small values as often as large ones */
			v = floor(exp(log(fmax(lo, 1)) + gsl_rng_uniform(r) * (log(hi + 1) - log(fmax(lo, 1)))));
		snprintf(buf, n, "%d", (int)fmin(fmax(v, lo), hi));
		return;
	}
	case KT_DOUBLE: {
		double lo = k->min, hi = k->max, v;
		if (u < 0.2)
			v = lo;
		else if (u < 0.4)
			v = hi;
		else if (lo > 0)
			v = exp(log(lo) + gsl_rng_uniform(r) * (log(hi) - log(lo)));
		else
			v = lo + gsl_rng_uniform(r) * (hi - lo);
		snprintf(buf, n, "%.17g", fmin(fmax(v, lo), hi));
		return;
	}
	case KT_ULONG:
		snprintf(buf, n, "%lu", u < 0.2 ? 0UL : u < 0.4 ? ~0UL :
			 (unsigned long)gsl_rng_get(r) << 32 ^ gsl_rng_get(r));
		return;
	case KT_BOOL:
		snprintf(buf, n, "%s", (const char *[]){ "true", "false", "yes", "no", "1", "0", "TRUE" }
			 [gsl_rng_uniform_int(r, 7)]);
		return;
	case KT_MODEL:
	case KT_GPU:
		names = config_names_with_custom(k->type == KT_MODEL ? model_names() : hw_gpu_names());
		/* fall through */
	case KT_ENUM:
	case KT_CHOICE:
	case KT_ACCUM:
	case KT_WRAP:
	case KT_AC:
		while (names[count])
			count++;
		int i = (int)gsl_rng_uniform_int(r, (unsigned long)count);
		if ((k->type == KT_ACCUM && i == ACC_PARTIAL) || (k->type == KT_WRAP && i == WRAP_EVERY) ||
		    (k->type == KT_AC && i == AC_PER_LAYER))
			snprintf(buf, n, "%s:%d", names[i], 1 + (int)gsl_rng_uniform_int(r, (unsigned long)layers + 1));
		else
			snprintf(buf, n, "%s", names[i]);
		return;
	case KT_TEXT: {
		static const char *const parts[] = { "a", "Z", "0", "/", ".", "-", "_", " ", "#", ";", ":", "=",
						     "\"", "'", "[", "]", "é", "数", "\xf0\x9f\x98\x80", "\\" };
		size_t len = 0, want = gsl_rng_uniform_int(r, 6) == 0 ? 0 : 1 + gsl_rng_uniform_int(r, 40);
		buf[0] = '\0';
		while (len < want && len + 8 < n) {
			const char *p = parts[gsl_rng_uniform_int(r, sizeof parts / sizeof parts[0])];
			len += (size_t)snprintf(buf + len, n - len, "%s", p);
		}
		/* what a value may not be: control characters are never drawn; spaces at the ends and ' ;' are */
		while (len && buf[len - 1] == ' ')
			buf[--len] = '\0';
		while (buf[0] == ' ')
			memmove(buf, buf + 1, len--);
		for (char *c = buf; (c = strstr(c, " ;")); )
			*c = '_';
		if (buf[0] == ';')
			buf[0] = '_';
		if (len >= 2 && buf[0] == '"' && buf[len - 1] == '"')
			buf[0] = 'q';
		return;
	}
	}
}

/*
 * Random valid configurations read back as they were written: a few keys
 * at a time set to random values (ends of their ranges included: the
 * largest cluster, the smallest bandwidths), custom models and GPUs with
 * every key, and every configuration that resolves is written and read
 * back both ways (the file a results file's attributes amount to, and
 * --set of each value).
 */
static void test_random_configs_read_back(void)
{
	gsl_rng *r = test_rng(20261122);
	int valid = 0, tries = 0, failed = 0;
	char kv[512], v[400];

	while (valid < 1500 && tries < 200000) {
		struct experiment e;
		int ok = 1;

		tries++;
		config_init(&e);
		for (int k = 0; k < config_key_count(); k++) {
			const struct key *key = config_key(k);
			int custom = (strcmp(key->section, "model") == 0 && strcmp(e.model_name, "custom") == 0) ||
				     (strcmp(key->section, "cluster") == 0 && strcmp(e.gpu_name, "custom") == 0 &&
				      strcmp(key->name, "nodes") != 0 && strcmp(key->name, "gpus_per_node") != 0 &&
				      strcmp(key->name, "inter_gbps") != 0);
			if (!custom && gsl_rng_uniform(r) > 0.15)
				continue;
			random_value(r, key, e.model.layers, v, sizeof v);
			if (custom && (key->type == KT_MODEL || key->type == KT_GPU))
				snprintf(v, sizeof v, "custom");
			snprintf(kv, sizeof kv, "%s.%s=%s", key->section, key->name, v);
			capture();
			ok &= config_set(&e, kv, "--set") == 0;
			char *msgs = captured();
			if (!ok)
				fprintf(stderr, "\nrandom value refused: %s", msgs);
			free(msgs);
		}
		CU_ASSERT_FATAL(ok);
		capture();
		int resolved = config_resolve(&e) == 0;
		free(captured());
		if (resolved) {
			valid++;
			if (read_back(&e) != 0 && ++failed >= 3)
				break;
		}
		config_release(&e);
	}
	gsl_rng_free(r);
	CU_ASSERT_EQUAL(failed, 0);
	CU_ASSERT(valid >= 1500);
}

/* The fuzzer's dictionary (tests/fuzz/config.dict) names every section, key and flag. */
static void test_fuzz_dictionary(void)
{
	FILE *f = fopen("tests/fuzz/config.dict", "r");
	char line[256], *words = NULL, want[64];
	size_t len = 0;
	FILE *w = open_memstream(&words, &len);

	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	while (fgets(line, sizeof line, f)) /* entries as "\n<word>\n" for exact look-ups */
		if (line[0] == '"')
			fprintf(w, "\n%.*s\n", (int)strcspn(line + 1, "\""), line + 1);
	fclose(f);
	fclose(w);
	for (int i = 0; config_sections[i]; i++) {
		snprintf(want, sizeof want, "\n[%s]\n", config_sections[i]);
		CU_ASSERT_PTR_NOT_NULL(strstr(words, want));
	}
	for (int k = 0; k < config_key_count(); k++) {
		const struct key *key = config_key(k);
		const char *names[] = { key->name, key->flag, key->alias };
		for (int j = 0; j < 3; j++) {
			if (!names[j])
				continue;
			snprintf(want, sizeof want, "\n%s\n", names[j]);
			if (!strstr(words, want))
				fprintf(stderr, "\ntests/fuzz/config.dict lacks \"%s\"\n", names[j]);
			CU_ASSERT_PTR_NOT_NULL(strstr(words, want));
		}
	}
	free(words);
}

void suite_config(void)
{
	CU_pSuite s = CU_add_suite("config", NULL, NULL);
	CU_add_test(s, "defaults", test_defaults);
	CU_add_test(s, "experiments/*.ini", test_experiment_files);
	CU_add_test(s, "every kind of value parsed", test_values_parsed);
	CU_add_test(s, "all errors of a file, exact messages", test_file_errors);
	CU_add_test(s, "sections, duplicates, long lines, missing files", test_file_structure_errors);
	CU_add_test(s, "only regular files with keys: FIFO, devices, empty files", test_file_kinds);
	CU_add_test(s, "--set messages", test_set_errors);
	CU_add_test(s, "file < flag < later flag", test_precedence);
	CU_add_test(s, "unknown flags left for the caller", test_args_left_for_caller);
	CU_add_test(s, "flag messages", test_flag_errors);
	CU_add_test(s, "flag names and suggestions", test_flags_known);
	CU_add_test(s, "explicit keys beat the catalog", test_catalog_overrides);
	CU_add_test(s, "derived values", test_derived_values);
	CU_add_test(s, "rules name every key and its origin", test_rules);
	CU_add_test(s, "model shape errors", test_shape_error);
	CU_add_test(s, "written configuration reads back", test_write_read_back);
	CU_add_test(s, "the largest cluster's derived values read back", test_largest_cluster_reads_back);
	CU_add_test(s, "numbers: decimal, held by their type", test_numbers);
	CU_add_test(s, "text values that would not read back are refused", test_text_values);
	CU_add_test(s, "random valid configurations read back", test_random_configs_read_back);
	CU_add_test(s, "the fuzz dictionary names every section, key and flag", test_fuzz_dictionary);
}
