/*
 * xalloc.c - allocation that exits on out-of-memory (see xalloc.h).
 */
#include "xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void (*xalloc_failed)(void);

static void *check(void *p, size_t n)
{
	if (p)
		return p;
	fprintf(stderr, "out of memory allocating %zu bytes\n", n);
	fflush(stderr);
	if (xalloc_failed)
		xalloc_failed();
	exit(1);
}

void *xmalloc(size_t n)
{
	return check(malloc(n ? n : 1), n);
}

void *xcalloc(size_t n, size_t size)
{
	if (size && n > (size_t)-1 / size)
		return check(NULL, (size_t)-1);
	return check(calloc(n ? n : 1, size ? size : 1), n * size);
}

void *xrealloc(void *p, size_t n)
{
	return check(realloc(p, n ? n : 1), n);
}

char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	return memcpy(xmalloc(n), s, n);
}
