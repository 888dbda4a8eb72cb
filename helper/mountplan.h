/* mountplan.h - the mounter's plan: which mounts safebox makes itself.
 *
 * safebox's builder/bulk.py decides them (docs/layers.md, "Big policies");
 * this is only its wire format.  The plan is a sequence of records, each an
 * operation letter and an absolute path, both NUL-terminated:
 *
 *   S /scratch\0   exactly once, first: where the copies of the tree are attached
 *   E /empty\0     at most once, second: the empty file that masks a file
 *                  (needed by F; safebox's own, never /dev/null)
 *   W /path\0      a write root, read-write           (bwrap --bind W W)
 *   P /path\0      a directory pinned onto itself     (bwrap --bind P P)
 *   R /path\0      a recursive read-only bind         (bwrap --ro-bind R R)
 *   D /path\0      masked by an empty read-only tmpfs (bwrap --tmpfs D)
 *   F /path\0      masked by the empty file, read-only (bwrap --ro-bind EMPTY F)
 *   U /path\0      a host unix socket masked as F, skipped when the path no
 *                  longer exists (listed before the sandbox was built; needs E)
 *
 * i.e. "S\0/scratch\0R\0/a\0...".  Raw paths, not hex: NUL is the one byte
 * a path cannot hold.  The order is the plan's: W first, then P, then the
 * rest, ancestors before what lies beneath them, and U last (bulk.py keeps
 * it; the mounter makes every U after the rest whatever the order).  No
 * operation lies at or beneath the scratch dir: the mounter attaches its
 * copies there, and must find them there to detach them.
 */
#ifndef SAFEBOX_MOUNTPLAN_H
#define SAFEBOX_MOUNTPLAN_H

#include <stddef.h>

/* The longest path the plan may hold (PATH_MAX, with its NUL). */
#define MP_PATH_MAX 4096
/* At most this many operations: ten times the benchmarked 10,000. */
#define MP_OPS_MAX 100000

struct mp_op {
	char op;          /* 'W', 'P', 'R', 'D', 'F' or 'U' */
	const char *path; /* inside the parsed buffer */
};

struct mount_plan {
	const char *scratch;
	const char *empty; /* NULL: no E record */
	struct mp_op *ops; /* malloc'd; free with mount_plan_free */
	size_t n;
};

/* Parse BUF (LEN bytes, which the plan's paths then point into: it must
 * outlive P).  Returns 0, or -1 with a message in ERR (at most ERRLEN bytes)
 * on anything but a well-formed plan: a missing or repeated S, an E that
 * is repeated or not second, an F or U without E, an operation at or beneath
 * the scratch dir, an unknown
 * letter, an empty, relative, over-long or unterminated path, a path with
 * a "." or ".." component or a doubled or trailing slash, or too many
 * operations.  Pure; allocates only P->ops. */
int mount_plan_parse(const char *buf, size_t len, struct mount_plan *p, char *err, size_t errlen);

/* Release what mount_plan_parse allocated (safe on a zeroed plan). */
void mount_plan_free(struct mount_plan *p);

#endif
