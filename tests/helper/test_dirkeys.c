/* test_dirkeys.c - tests of helper/dirkeys.c ("--dir-keys"): the request
 * parser, table-driven, and the lstats on a real directory tree; TAP
 * output, built and run under ASan+UBSan by run.py. */
#include "dirkeys.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int failures, test_no;

static void ok(int cond, const char *name)
{
	test_no++;
	printf("%s %d - %s\n", cond ? "ok" : "not ok", test_no, name);
	failures += !cond;
}

/* A request: header, then `keys` bytes of keys, then `tail` (its paths). */
static size_t request(unsigned char *buf, const char *magic, uint32_t op, uint32_t n, size_t keys, const char *tail,
		      size_t tail_len)
{
	size_t off = 0;
	int64_t floor_ns = 0;

	memcpy(buf, magic, 8);
	off += 8;
	memcpy(buf + off, &op, 4);
	off += 4;
	memcpy(buf + off, &n, 4);
	off += 4;
	memcpy(buf + off, &floor_ns, 8);
	off += 8;
	memset(buf + off, 0, keys);
	off += keys;
	memcpy(buf + off, tail, tail_len);
	return off + tail_len;
}

#define K (sizeof(struct dk_key))
#define ROW(name, magic, op, n, keys, tail, err)                      \
	{                                                             \
		name, magic, op, n, keys, tail, sizeof(tail) - 1, err \
	}

static const struct {
	const char *name, *magic;
	uint32_t op, n;
	size_t keys;
	const char *tail;
	size_t tail_len;
	const char *err; /* NULL: must parse */
} rows[] = {
	ROW("one path to look at", DK_MAGIC, DK_SINCE, 1, 0, "/a\0", NULL),
	ROW("three paths with their keys", DK_MAGIC, DK_SAME, 3, 3 * K, "/a\0/a/b\0/c\0", NULL),
	ROW("another magic", "sbdkeys2", DK_SINCE, 1, 0, "/a\0", "not a dir-keys request"),
	ROW("an unknown operation", DK_MAGIC, 3, 1, 0, "/a\0", "unknown operation"),
	ROW("no paths at all", DK_MAGIC, DK_SINCE, 0, 0, "", "path count out of range"),
	ROW("more paths than allowed", DK_MAGIC, DK_SINCE, DK_N_MAX + 1, 0, "/a\0", "path count out of range"),
	ROW("fewer keys than paths", DK_MAGIC, DK_SAME, 2, K, "", "shorter than its keys"),
	ROW("fewer paths than its count", DK_MAGIC, DK_SINCE, 2, 0, "/a\0", "fewer paths than its count"),
	ROW("a last path without its NUL", DK_MAGIC, DK_SINCE, 1, 0, "/a", "fewer paths than its count"),
	ROW("an empty path", DK_MAGIC, DK_SINCE, 2, 0, "/a\0\0", "an empty path"),
	ROW("a path with a NUL inside counts as two", DK_MAGIC, DK_SINCE, 1, 0, "/a\0b\0", "bytes after its last path"),
	ROW("bytes after the last path", DK_MAGIC, DK_SINCE, 1, 0, "/a\0x", "bytes after its last path"),
};

static void parse_rows(void)
{
	static unsigned char buf[1 << 12] __attribute__((aligned(16)));
	size_t i;

	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct dk_req req;
		const char *why = NULL;
		size_t len = request(buf, rows[i].magic, rows[i].op, rows[i].n, rows[i].keys, rows[i].tail,
				     rows[i].tail_len);
		int rc = dk_parse(buf, len, &req, &why);

		if (rows[i].err == NULL)
			ok(rc == 0 && req.n == rows[i].n && req.paths && strcmp(req.paths[0], "/a") == 0, rows[i].name);
		else
			ok(rc == -1 && why && strcmp(why, rows[i].err) == 0 && req.paths == NULL, rows[i].name);
		if (rc == 0)
			dk_free(&req);
	}
	ok(dk_parse(buf, 10, &(struct dk_req){ 0 }, &(const char *){ NULL }) == -1, "shorter than its header");
}

static struct dk_key key_of(const char *path)
{
	struct stat st;

	if (lstat(path, &st) != 0)
		return (struct dk_key){ 0 };
	return (struct dk_key){ st.st_dev, st.st_ino,
				(int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec };
}

/* 5000 directories (enough for two workers), their keys, then changes. */
static void real_tree(void)
{
	enum {
		N = 5000
	};
	char tmpl[] = "dirkeys-XXXXXX", *root = mkdtemp(tmpl); /* in run.py's temporary dir */
	static char names[N][64];
	static const char *paths[N];
	static struct dk_key keys[N];
	static unsigned char hit[N];
	struct dk_req req = { DK_SAME, N, 0, keys, paths };
	struct timespec now;
	size_t i, hits;

	if (!root) {
		ok(0, "a temporary tree");
		return;
	}
	for (i = 0; i < N; i++) {
		snprintf(names[i], sizeof names[i], "%s/%zu", root, i);
		mkdir(names[i], 0700);
		paths[i] = names[i];
		keys[i] = key_of(names[i]);
	}
	ok(dk_run(&req, hit, 4) == 0, "an unchanged tree is the same, on up to four workers");
	chmod(names[N - 1], 0750); /* a ctime change, in the last worker's slice */
	ok(dk_run(&req, hit, 4) == 1, "a directory whose ctime changed is a difference");
	keys[N - 1] = key_of(names[N - 1]);
	rmdir(names[7]);
	ok(dk_run(&req, hit, 1) == 1, "a directory gone is a difference, on one worker");

	clock_gettime(CLOCK_REALTIME, &now);
	req = (struct dk_req){ DK_SINCE, N, (int64_t)now.tv_sec * 1000000000 + now.tv_nsec - 60000000000LL, NULL, paths };
	hits = dk_run(&req, hit, 4);
	ok(hits == N - 1 && hit[7] == 0 && hit[0] == 1, "since a minute ago: every directory but the one gone");
	req.floor_ns += 120000000000LL;
	ok(dk_run(&req, hit, 4) == 0, "since a minute ahead: none");

	for (i = 0; i < N; i++)
		rmdir(names[i]);
	rmdir(root);
}

int main(void)
{
	parse_rows();
	real_tree();
	printf("1..%d\n", test_no);
	return failures ? 1 : 0;
}
