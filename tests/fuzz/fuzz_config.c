/*
 * fuzz_config.c - libFuzzer target: the experiment parser and the command
 * line (`make fuzz`, under ASan and UBSan).
 *
 * An input is an experiment file, optionally followed by a NUL byte and
 * command-line arguments, one per line ("--set", "policy.wrap=every:3",
 * "--layers=4", ...). The file is written to a memfd and read through
 * config_parse_args() as the binaries read it (file first, then the flags,
 * then config_check_leftovers() and config_resolve()). Besides crashes,
 * leaks and undefined behaviour, one property is checked: a configuration
 * that resolves is written back as an experiment file (what a results file
 * records) and that file must read back, resolve and write the same text;
 * otherwise the target aborts.
 *
 * Seeds: the experiment files and tests/bad; dictionary:
 * tests/fuzz/config.dict (every section, key, flag and name; the config
 * suite checks it stays complete).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"

#define ARGS_MAX 64

static FILE *quiet;
static int file_fd = -1, back_fd = -1;
static char file_path[64], back_path[64];

static void once(void)
{
	quiet = fopen("/dev/null", "w");
	config_errfile = quiet;
	file_fd = memfd_create("experiment.ini", 0);
	back_fd = memfd_create("written.ini", 0);
	if (!quiet || file_fd < 0 || back_fd < 0) {
		perror("fuzz_config: setup");
		abort();
	}
	snprintf(file_path, sizeof file_path, "/proc/self/fd/%d", file_fd);
	snprintf(back_path, sizeof back_path, "/proc/self/fd/%d", back_fd);
}

/* Replace the contents of the memfd fd with n bytes of data. */
static void fill(int fd, const void *data, size_t n)
{
	if (ftruncate(fd, 0) != 0 || (n && pwrite(fd, data, n, 0) != (ssize_t)n)) {
		perror("fuzz_config: memfd");
		abort();
	}
}

/* The resolved experiment as an experiment file's text (malloc'd). */
static char *ini_text(const struct experiment *e, size_t *len)
{
	char *text = NULL;
	FILE *f = open_memstream(&text, len);

	if (!f)
		abort();
	config_write_ini(e, f);
	fclose(f);
	return text;
}

/* What a resolved experiment writes reads back as itself. */
static void check_read_back(const struct experiment *e)
{
	struct experiment b;
	size_t la, lb;
	char *a = ini_text(e, &la), *t;

	fill(back_fd, a, la);
	config_init(&b);
	if (config_load(&b, back_path) != 0 || config_resolve(&b) != 0) {
		fprintf(stderr, "fuzz_config: a resolved configuration does not read back:\n%s", a);
		abort();
	}
	t = ini_text(&b, &lb);
	if (la != lb || memcmp(a, t, la) != 0) {
		fprintf(stderr, "fuzz_config: written\n%s\nreads back as\n%s", a, t);
		abort();
	}
	free(t);
	free(a);
	config_release(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, 0, size);
	size_t file_len = nul ? (size_t)(nul - data) : size;
	char *args = NULL, *argv[ARGS_MAX + 3];
	int argc = 0;
	struct experiment e;

	if (file_fd < 0)
		once();
	fill(file_fd, data, file_len);
	argv[argc++] = "fuzz_config";
	argv[argc++] = file_path;
	if (nul) {
		size_t n = size - file_len - 1;
		args = malloc(n + 1);
		memcpy(args, nul + 1, n);
		args[n] = '\0';
		for (char *p = args, *line; argc < ARGS_MAX + 2 && (line = strsep(&p, "\n"));)
			argv[argc++] = line;
	}
	argv[argc] = NULL;

	config_init(&e);
	if (config_parse_args(&e, argc, argv) == 0 && config_check_leftovers(argc, argv, "fuzz_config", NULL) == 0 &&
	    config_resolve(&e) == 0)
		check_read_back(&e);
	config_release(&e);
	free(args);
	return 0;
}
