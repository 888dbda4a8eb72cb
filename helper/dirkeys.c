/* dirkeys.c - "--dir-keys": lstat every directory of a request on every
 * core (dirkeys.h has the format and why).  It only reads metadata, and
 * safebox checks every answer it gets: a missing or failed helper, or an
 * answer of the wrong shape, means safebox does the work itself.
 */
#include "dirkeys.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* At most this many workers: the lstats of one tree share its dentries'
 * locks and the page of every parent, so more workers gain less and less,
 * and a start must not take a big machine's every core. */
#define DK_THREADS_MAX 4
/* Below this many paths a second worker costs more than it saves. */
#define DK_PER_THREAD_MIN 2048

struct dk_header {
	char magic[8];
	uint32_t op;
	uint32_t n;
	int64_t floor_ns;
};

int dk_parse(const unsigned char *buf, size_t len, struct dk_req *req, const char **why)
{
	struct dk_header h;
	size_t off = sizeof h, i;

	memset(req, 0, sizeof *req);
	if (len < sizeof h)
		return *why = "shorter than its header", -1;
	memcpy(&h, buf, sizeof h);
	if (memcmp(h.magic, DK_MAGIC, sizeof h.magic) != 0)
		return *why = "not a dir-keys request", -1;
	if (h.op != DK_SAME && h.op != DK_SINCE)
		return *why = "unknown operation", -1;
	if (h.n == 0 || h.n > DK_N_MAX)
		return *why = "path count out of range", -1;
	if (h.op == DK_SAME) {
		size_t keys = (size_t)h.n * sizeof(struct dk_key);
		if (len - off < keys)
			return *why = "shorter than its keys", -1;
		req->keys = (const struct dk_key *)(buf + off);
		off += keys;
	}
	req->paths = calloc(h.n, sizeof *req->paths);
	if (!req->paths)
		return *why = "out of memory", -1;
	for (i = 0; i < h.n; i++) {
		const unsigned char *end = off < len ? memchr(buf + off, '\0', len - off) : NULL;
		if (!end || end == buf + off) {
			dk_free(req);
			return *why = !end ? "fewer paths than its count" : "an empty path", -1;
		}
		req->paths[i] = (const char *)(buf + off);
		off = (size_t)(end - buf) + 1;
	}
	if (off != len) {
		dk_free(req);
		return *why = "bytes after its last path", -1;
	}
	req->op = h.op;
	req->n = h.n;
	req->floor_ns = h.floor_ns;
	return 0;
}

void dk_free(struct dk_req *req)
{
	free(req->paths);
	req->paths = NULL;
}

struct dk_slice {
	const struct dk_req *req;
	unsigned char *hit;
	size_t from, to;
	volatile int *differs; /* DK_SAME: set by the first worker that finds one */
};

static int64_t ctime_ns(const struct stat *st)
{
	return (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
}

/* One path: 1 when it is a hit (dirkeys.h). */
static int dk_one(const struct dk_req *req, size_t i)
{
	struct stat st;

	if (lstat(req->paths[i], &st) != 0)
		return req->op == DK_SAME; /* gone: a difference, or no longer a directory to list */
	if (req->op == DK_SAME)
		return (uint64_t)st.st_dev != req->keys[i].dev || (uint64_t)st.st_ino != req->keys[i].ino ||
		       ctime_ns(&st) != req->keys[i].ctime_ns;
	return S_ISDIR(st.st_mode) && ctime_ns(&st) >= req->floor_ns;
}

static void dk_slice_run(const struct dk_slice *s)
{
	size_t i;

	for (i = s->from; i < s->to; i++) {
		if (s->req->op == DK_SAME && __atomic_load_n(s->differs, __ATOMIC_RELAXED))
			break;
		s->hit[i] = (unsigned char)dk_one(s->req, i);
		if (s->hit[i] && s->req->op == DK_SAME)
			__atomic_store_n(s->differs, 1, __ATOMIC_RELAXED);
	}
}

/* The workers are processes, not threads: the hits go to a shared
 * anonymous mapping, and fork() binds no newer glibc symbol than the rest
 * of the helper (pthread_create is GLIBC_2.34 in a libc that merged
 * libpthread, and a separate library before: the wheel must still build,
 * and run, on manylinux2014's glibc 2.17; tests/integration/test_packaging.py). */
size_t dk_run(const struct dk_req *req, unsigned char *hit, unsigned workers)
{
	size_t len = 16 + req->n, hits = 0, per, i;
	/* The shared flag first (aligned), the workers' hits after it. */
	unsigned char *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	unsigned char *shared = map == MAP_FAILED ? NULL : map + 16;
	pid_t pid[DK_THREADS_MAX] = { 0 };
	struct dk_slice s;
	volatile int *differs;
	unsigned w;

	if (!shared) { /* no room for workers: all of it here */
		volatile int alone = 0;
		memset(hit, 0, req->n);
		s = (struct dk_slice){ req, hit, 0, req->n, &alone };
		dk_slice_run(&s);
		for (i = 0; i < req->n; i++)
			hits += hit[i];
		return req->op == DK_SAME ? (size_t)(hits != 0) : hits;
	}
	differs = (volatile int *)(void *)map;
	if (workers > DK_THREADS_MAX)
		workers = DK_THREADS_MAX;
	if (workers > req->n / DK_PER_THREAD_MIN)
		workers = (unsigned)(req->n / DK_PER_THREAD_MIN);
	if (workers == 0)
		workers = 1;
	per = (req->n + workers - 1) / workers;
	/* Slice 0 runs in this process; a worker that cannot be forked leaves
	 * its slice to this one too. */
	for (w = 1; w < workers; w++) {
		s = (struct dk_slice){ req, shared, (size_t)w * per, (size_t)w * per + per, differs };
		if (s.from > req->n)
			s.from = req->n;
		if (s.to > req->n)
			s.to = req->n;
		pid[w] = fork();
		if (pid[w] == 0) {
			dk_slice_run(&s);
			_exit(0);
		}
	}
	s = (struct dk_slice){ req, shared, 0, per < req->n ? per : req->n, differs };
	dk_slice_run(&s);
	for (w = 1; w < workers; w++) {
		int status = 0;
		s = (struct dk_slice){ req, shared, (size_t)w * per, (size_t)w * per + per, differs };
		if (s.from > req->n)
			s.from = req->n;
		if (s.to > req->n)
			s.to = req->n;
		if (pid[w] > 0)
			while (waitpid(pid[w], &status, 0) < 0 && errno == EINTR)
				;
		/* Not forked, or died before its end: its slice again, here. */
		if (pid[w] <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			dk_slice_run(&s);
	}
	memcpy(hit, shared, req->n);
	for (i = 0; i < req->n; i++)
		hits += hit[i];
	if (*differs)
		hits += !hits;
	munmap(map, len);
	return req->op == DK_SAME ? (size_t)(hits != 0) : hits;
}

/* Standard input whole, into a buffer aligned for the keys; NULL past DK_INPUT_MAX. */
static unsigned char *read_input(size_t *len)
{
	size_t cap = 1 << 20, got = 0;
	unsigned char *buf = malloc(cap), *bigger;
	ssize_t r;

	while (buf) {
		if (got == cap) {
			if (cap >= DK_INPUT_MAX)
				break;
			bigger = realloc(buf, cap * 2);
			if (!bigger)
				break;
			buf = bigger;
			cap *= 2;
		}
		r = read(0, buf + got, cap - got);
		if (r == 0) {
			*len = got;
			return buf;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			break;
		got += (size_t)r;
	}
	free(buf);
	return NULL;
}

static int write_hits(const unsigned char *hit, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++) {
		if (hit[i] && fwrite(&i, sizeof i, 1, stdout) != 1)
			return -1;
	}
	return fflush(stdout) == 0 ? 0 : -1;
}

int dirkeys_main(int argc, char **argv)
{
	struct dk_req req;
	const char *why = NULL;
	unsigned char *buf, *hit;
	size_t len = 0, hits;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int rc;

	if (argc != 2) {
		fprintf(stderr, "safebox-helper: usage: safebox-helper --dir-keys < request\n");
		return 2;
	}
	buf = read_input(&len);
	if (!buf) {
		fprintf(stderr, "safebox-helper: --dir-keys: cannot read the request\n");
		return 2;
	}
	if (dk_parse(buf, len, &req, &why) != 0) {
		fprintf(stderr, "safebox-helper: --dir-keys: bad request: %s\n", why);
		free(buf);
		return 2;
	}
	hit = malloc(req.n);
	if (!hit) {
		fprintf(stderr, "safebox-helper: --dir-keys: out of memory\n");
		dk_free(&req);
		free(buf);
		return 2;
	}
	hits = dk_run(&req, hit, cpus > 0 ? (unsigned)cpus : 1);
	if (req.op == DK_SAME)
		rc = hits ? 1 : 0;
	else
		rc = write_hits(hit, req.n) == 0 ? 0 : 2;
	free(hit);
	dk_free(&req);
	free(buf);
	return rc;
}
