/* dirkeys.c - "--dir-keys": lstat every directory of a request on every
 * core (dirkeys.h has the format and why).  It only reads metadata, and
 * safebox checks every answer it gets: a missing or failed helper, or an
 * answer of the wrong shape, means safebox does the work itself.
 */
#include "dirkeys.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* At most this many threads: the lstats of one tree share its dentries'
 * locks and the page of every parent, so more threads gain less and less,
 * and a start must not take a big machine's every core. */
#define DK_THREADS_MAX 4
/* Below this many paths a second thread costs more than it saves. */
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
	size_t from, to, hits;
	atomic_int *differs; /* DK_SAME: set by the first thread that finds one */
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

static void *dk_slice_run(void *arg)
{
	struct dk_slice *s = arg;
	size_t i;

	for (i = s->from; i < s->to; i++) {
		if (s->req->op == DK_SAME && atomic_load_explicit(s->differs, memory_order_relaxed))
			break;
		s->hit[i] = (unsigned char)dk_one(s->req, i);
		if (s->hit[i]) {
			s->hits++;
			if (s->req->op == DK_SAME)
				atomic_store_explicit(s->differs, 1, memory_order_relaxed);
		}
	}
	return NULL;
}

size_t dk_run(const struct dk_req *req, unsigned char *hit, unsigned threads)
{
	struct dk_slice s[DK_THREADS_MAX];
	pthread_t tid[DK_THREADS_MAX];
	int started[DK_THREADS_MAX] = { 0 };
	atomic_int differs = 0;
	size_t hits = 0, per;
	unsigned t, k;

	if (threads > DK_THREADS_MAX)
		threads = DK_THREADS_MAX;
	if (threads > req->n / DK_PER_THREAD_MIN)
		threads = (unsigned)(req->n / DK_PER_THREAD_MIN);
	if (threads == 0)
		threads = 1;
	memset(hit, 0, req->n);
	per = (req->n + threads - 1) / threads;
	for (t = 0; t < threads; t++) {
		size_t from = (size_t)t * per, to = from + per;
		s[t] = (struct dk_slice){ req, hit, from < req->n ? from : req->n, to < req->n ? to : req->n,
					  0, &differs };
	}
	/* Slice 0 runs on this thread; a thread that cannot be started leaves
	 * its slice to this one too. */
	for (t = 1; t < threads; t++)
		started[t] = pthread_create(&tid[t], NULL, dk_slice_run, &s[t]) == 0;
	dk_slice_run(&s[0]);
	for (t = 1; t < threads; t++) {
		if (started[t])
			pthread_join(tid[t], NULL);
		else
			dk_slice_run(&s[t]);
	}
	for (k = 0; k < threads; k++)
		hits += s[k].hits;
	return req->op == DK_SAME ? (size_t)(atomic_load(&differs) != 0 || hits != 0) : hits;
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
