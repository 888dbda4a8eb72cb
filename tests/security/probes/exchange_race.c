/* exchange_race.c - the supervisor-resolution race of the second review
 * (issue 22, item 11), run inside the sandbox.
 *
 *   exchange_race DIR LINK NAME TARGET SECONDS MAX
 *
 * One thread swaps DIR (a directory) and LINK (a symlink to an absolute
 * path) with renameat2(RENAME_EXCHANGE), as fast as it can; the main thread
 * renames DIR/NAME to TARGET, a place no layer lets it write, so that every
 * try is a refusal the supervisor resolves on its slow path.  NAME exists
 * only at the link's target as the host sees it, never inside the sandbox,
 * so every rename fails with ENOENT for its own reason and no honest
 * resolution finds DIR/NAME.  Stops after SECONDS or MAX tries; prints the
 * tries and the exchanges made.
 */
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

static const char *dir, *link_;
static volatile int stop;
static unsigned long exchanges;

/* The swapper and the renaming thread on two different CPUs (where the
 * command may use two): the supervisor runs on the renaming thread's CPU
 * (SYNC_WAKE_UP), and the swap must land while it walks. */
static void pin(int nth)
{
	cpu_set_t allowed, one;
	int cpu, seen = 0;

	if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || CPU_COUNT(&allowed) < 2)
		return;
	for (cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, &allowed) || seen++ != nth)
			continue;
		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		(void)sched_setaffinity(0, sizeof(one), &one);
		return;
	}
}

static void *swapper(void *arg)
{
	(void)arg;
	pin(1);
	while (!stop)
		if (syscall(SYS_renameat2, AT_FDCWD, dir, AT_FDCWD, link_, RENAME_EXCHANGE) == 0)
			exchanges++;
	return NULL;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	char from[4096];
	unsigned long tries = 0, max;
	double until;
	pthread_t t;

	if (argc != 7)
		return 2;
	dir = argv[1];
	link_ = argv[2];
	snprintf(from, sizeof(from), "%s/%s", dir, argv[3]);
	until = now() + atof(argv[5]);
	max = strtoul(argv[6], NULL, 10);
	if (pthread_create(&t, NULL, swapper, NULL) != 0)
		return 3;
	pin(0);
	while (tries < max && (tries % 256 != 0 || now() < until)) {
		(void)rename(from, argv[4]);
		tries++;
	}
	stop = 1;
	pthread_join(t, NULL);
	printf("%lu %lu\n", tries, exchanges);
	return 0;
}
