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

/* 1 when attribute `name` of loc is the string `want` */
static int attr_is(hid_t loc, const char *name, const char *want)
{
	hid_t a, t, mt, space;
	char *v = NULL;
	int same = 0;

	if (H5Aexists(loc, name) <= 0)
		return 0;
	a = H5Aopen(loc, name, H5P_DEFAULT);
	if (a < 0)
		return 0;
	t = H5Aget_type(a);
	space = H5Aget_space(a);
	if (t >= 0 && H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) > 0 && space >= 0 &&
	    H5Sget_simple_extent_npoints(space) == 1) {
		mt = H5Tcopy(H5T_C_S1);
		H5Tset_size(mt, H5T_VARIABLE);
		H5Tset_cset(mt, H5Tget_cset(t));
		if (H5Aread(a, mt, &v) >= 0 && v) {
			same = !strcmp(v, want);
			H5free_memory(v);
		}
		H5Tclose(mt);
	}
	if (t >= 0)
		H5Tclose(t);
	if (space >= 0)
		H5Sclose(space);
	H5Aclose(a);
	return same;
}

static int write_info(struct h5file_session *s, hid_t file, void *ctx)
{
	const struct runinfo *ri = ctx;
	char name[64];
	hid_t runs, run;
	ssize_t len;

	if (h5file_check(s, runs = H5Gopen2(file, "runs", H5P_DEFAULT), "H5Gopen2(/runs)") < 0)
		return -1;
	/* names are six-digit indices: the last in name order is the newest */
	len = H5Lget_name_by_idx(runs, ".", H5_INDEX_NAME, H5_ITER_DEC, 0, name, sizeof(name), H5P_DEFAULT);
	if (h5file_check(s, len, "H5Lget_name_by_idx(/runs)") < 0) {
		H5Gclose(runs);
		return -1;
	}
	run = H5Gopen2(runs, name, H5P_DEFAULT);
	if (h5file_check(s, run, "H5Gopen2(run)") < 0) {
		H5Gclose(runs);
		return -1;
	}
	if (!attr_is(run, "source", "gpu_run") || H5Aexists(run, "backend") > 0) {
		fprintf(stderr, "gpu_run: %s: /runs/%s is not the run just written (another writer?): "
				"its facts are not added\n", s->path, name);
		H5Gclose(run);
		H5Gclose(runs);
		return -1;
	}
	for (int i = 0; i < ri->n; i++)
		h5file_attr_str(s, run, ri->key[i], ri->value[i]);
	H5Gclose(run);
	H5Gclose(runs);
	return s->failed ? -1 : 0;
}

int runinfo_append(const char *path, const struct runinfo *ri)
{
	return h5file_append("gpu_run", path, write_info, (void *)ri);
}
