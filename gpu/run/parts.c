/*
 * parts.c - host work split over threads (see parts.h).
 */
#include "parts.h"

#include <assert.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

void parts_run(void *(*run)(void *), void *parts, size_t size, int n)
{
	pthread_t tid[PARTS_MAX];
	int made;

	assert(n >= 1 && n <= PARTS_MAX);
	for (made = 1; made < n; made++)
		if (pthread_create(&tid[made], NULL, run, (char *)parts + (size_t)made * size) != 0)
			break;
	run(parts);
	for (int i = made; i < n; i++) /* the parts no thread could be made for */
		run((char *)parts + (size_t)i * size);
	for (int i = 1; i < made; i++)
		pthread_join(tid[i], NULL);
}

int parts_count(int threads, size_t total, size_t per)
{
	size_t most = per ? (total + per - 1) / per : total;

	if (threads > PARTS_MAX)
		threads = PARTS_MAX;
	if ((size_t)threads > most)
		threads = (int)most;
	return threads < 1 ? 1 : threads;
}

int parts_threads(int local_ranks)
{
	cpu_set_t set;
	int cpus = 0;

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		cpus = CPU_COUNT(&set);
	if (cpus < 1)
		cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (local_ranks < 1)
		local_ranks = 1;
	cpus /= local_ranks;
	return cpus < 1 ? 1 : cpus > PARTS_MAX ? PARTS_MAX : cpus;
}
