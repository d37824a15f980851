/*
 * runinfo.c - a run's facts as key = value pairs, printed and written as
 * attributes of its results group (see runinfo.h).
 */
#include "runinfo.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "h5file.h"
#include "results.h"
#include "xalloc.h"

void runinfo_binary(char *buf, size_t len)
{
	unsigned char chunk[1 << 16];
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, 64 bits */
	size_t n;
	FILE *f = fopen("/proc/self/exe", "rb");

	if (len)
		buf[0] = '\0';
	if (!f)
		return;
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
		for (size_t i = 0; i < n; i++)
			h = (h ^ chunk[i]) * 0x100000001b3ull;
	if (!ferror(f))
		snprintf(buf, len, "%016llx", (unsigned long long)h);
	fclose(f);
}

void runinfo_init(struct runinfo *ri)
{
	memset(ri, 0, sizeof(*ri));
}

void runinfo_release(struct runinfo *ri)
{
	free(ri->key);
	free(ri->value);
	memset(ri, 0, sizeof(*ri));
}

void runinfo_put(void *ctx, const char *key, const char *value)
{
	struct runinfo *ri = ctx;

	/* a results file reads section.key attributes as the run's configuration (core/results.c) */
	assert(!config_is_section_key(key) && "a run fact named like a configuration key");
	if (ri->n == ri->cap) {
		ri->cap = ri->cap ? 2 * ri->cap : 32;
		ri->key = xrealloc(ri->key, sizeof(*ri->key) * (size_t)ri->cap);
		ri->value = xrealloc(ri->value, sizeof(*ri->value) * (size_t)ri->cap);
	}
	snprintf(ri->key[ri->n], sizeof(ri->key[0]), "%s", key);
	snprintf(ri->value[ri->n], sizeof(ri->value[0]), "%s", value);
	ri->n++;
}

void runinfo_print(const struct runinfo *ri, FILE *f)
{
	for (int i = 0; i < ri->n; i++)
		fprintf(f, "run: %s = %s\n", ri->key[i], ri->value[i]);
}

struct run_with_info {
	const struct run_result *r;
	const struct runinfo *ri;
};

/* The run as the next group of /runs, then the facts on that group, in one session (under the file's lock). */
static int write_run_info(struct h5file_session *s, hid_t file, void *ctx)
{
	const struct run_with_info *x = ctx;
	char name[16], where[32];
	hid_t run;

	if (results_write_run(s, file, x->r, name) != 0)
		return -1;
	snprintf(where, sizeof where, "runs/%s", name);
	run = H5Gopen2(file, where, H5P_DEFAULT);
	if (h5file_check(s, run, "H5Gopen2(run)") < 0)
		return -1;
	for (int i = 0; i < x->ri->n; i++)
		h5file_attr_str(s, run, x->ri->key[i], x->ri->value[i]);
	H5Gclose(run);
	return s->failed ? -1 : 0;
}

int runinfo_append_run(const char *path, const struct run_result *r, const struct runinfo *ri)
{
	struct run_with_info x = { r, ri };

	return h5file_append("results", path, write_run_info, &x);
}
