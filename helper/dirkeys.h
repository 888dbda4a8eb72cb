/* dirkeys.h - an lstat of every directory of a big work tree, in C and on
 * every core (python/safebox/builder/walkcache.py and builder/deepwatch.py; issue 24).
 *
 * A warm start in a 100,000-file tree checks that none of its 13,657
 * directories changed since the start walks were kept, and the watch after
 * the run lists those whose ctime moved.  One lstat each, from Python, is
 * about 2.8 us; here, 1.7 us, on several cores, and the check before the
 * run goes on beside safebox's own imports instead of in front of them.
 *
 * The request, read whole from standard input (safebox writes it into a
 * memfd; host byte order, both ends on one machine):
 *
 *   struct dk_header { char magic[8] = "sbdkeys1"; u32 op; u32 n; i64 floor_ns; }
 *   op DK_SAME:  n x struct dk_key { u64 dev; u64 ino; i64 ctime_ns; }, then the paths
 *   op DK_SINCE: the paths
 *
 * The paths: exactly n non-empty NUL-terminated strings, to the last byte.
 *
 * The answer:
 *   DK_SAME:  exit 0 when every path's (st_dev, st_ino, ctime) is its key,
 *             exit 1 when one differs or cannot be lstat'ed;
 *   DK_SINCE: the indexes (u32, ascending) of the paths that are
 *             directories whose ctime is at or after floor_ns, on standard
 *             output; a path gone is left out (what replaced it is an entry
 *             of a changed parent); exit 0.
 *   Bad input: one "safebox-helper: " line, exit 2.  safebox then does the
 *   same work itself: this is only ever a faster way to the same answer.
 */
#ifndef SAFEBOX_DIRKEYS_H
#define SAFEBOX_DIRKEYS_H

#include <stddef.h>
#include <stdint.h>

#define DK_MAGIC "sbdkeys1"
#define DK_SAME 1u
#define DK_SINCE 2u
/* Ten times the directories of the 100,000-file benchmark tree, and then some. */
#define DK_N_MAX 1000000u
#define DK_INPUT_MAX (256u << 20)

struct dk_key {
	uint64_t dev;
	uint64_t ino;
	int64_t ctime_ns;
};

struct dk_req {
	uint32_t op;
	uint32_t n;
	int64_t floor_ns;
	const struct dk_key *keys; /* n of them for DK_SAME; else NULL */
	const char **paths;        /* n pointers into the buffer, malloc'ed */
};

/* Parse a request of len bytes at buf (aligned for struct dk_key).
 * 0 on success (req->paths to be freed by dk_free), -1 on any malformed
 * input, with *why naming the first problem. */
int dk_parse(const unsigned char *buf, size_t len, struct dk_req *req, const char **why);
void dk_free(struct dk_req *req);

/* Fill hit[i] (n bytes): for DK_SAME 1 where path i differs from its key;
 * for DK_SINCE 1 where it is a directory changed at or after floor_ns.
 * Uses up to `workers` processes (forked; the hits shared through an
 * anonymous mapping); DK_SAME stops at the first difference.
 * Returns the number of hits for DK_SINCE, and 0 or 1 (any) for DK_SAME. */
size_t dk_run(const struct dk_req *req, unsigned char *hit, unsigned workers);

/* "--dir-keys": the request on fd 0, the answer as above. */
int dirkeys_main(int argc, char **argv);

#endif
