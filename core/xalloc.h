/*
 * xalloc.h - memory allocation that does not return NULL.
 *
 * The host memory the binaries allocate (schedules, results, tables) is
 * small next to the machine's; running out of it is not an error a caller
 * can handle. These wrappers print one line naming the size and exit with
 * status 1 instead of returning NULL, so callers need no check and never
 * assert on malloc's result. Device memory and the runtime's buffers go
 * through their own allocators, which report out-of-memory themselves.
 */
#ifndef CORE_XALLOC_H
#define CORE_XALLOC_H

#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

/* Called before exiting on out-of-memory (gpu_run sets it to abort the MPI job); NULL: exit(1). */
extern void (*xalloc_failed)(void);

#endif
