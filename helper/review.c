/* review.c - safebox-helper --review: hold a run's writes in overlayfs
 * upper layers (docs/review.md).
 *
 *   safebox-helper --review --namespace-fd N --plan-fd N
 *
 * safebox runs this at the same handshake as --mount, after it: every
 * mount of the normal run exists, nothing of the command does.  The plan
 * (python/safebox/review/mounts.py writes it) is records of an operation
 * letter and an absolute path, both NUL-terminated:
 *
 *   G /stage\0  exactly once, first: the held run's layers dir, bound
 *               read-write there by bubblewrap; K's layer is /stage/K/upper
 *               with /stage/K/work beside it (K = 0, 1, ... per V record)
 *   V /root\0   an overlay at a write root: lower = what is mounted there
 *               now (the host directory), upper = the next layer
 *   K /path\0   beneath the last V's root: the mount that was at PATH
 *               before the overlay (a read-only bind, a mask, a socket),
 *               copied from a snapshot and put back on top of the overlay
 *   I /path\0   beneath the last V's root: PATH in the overlay bound onto
 *               itself (a pin or a nested write root: still a mount point,
 *               but its writes are held too, never the host's)
 *
 * The K and I records come in the order of the sandbox's mount table, so
 * the stack above each root is rebuilt as the normal run has it: every
 * read-only, masked and protected path keeps its rule inside the layer.
 * Last, the stage is detached (and removed where it can be: the sandbox's
 * /tmp): the command never sees the layers' dirs, only the merged view.  Any failure dies (125) before the command exists.
 */
#include "review.h"

#include "compat.h"
#include "mounter.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_open_tree
#define __NR_open_tree 428
#endif
#ifndef __NR_move_mount
#define __NR_move_mount 429
#endif
#define RV_OPEN_TREE_CLONE 1
#define RV_MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#define RV_PATH_MAX 4096

/* Whether PATH is absolute, normalised (no empty, "." or ".." component, no
 * trailing slash) and free of the bytes overlayfs's option string gives a
 * meaning to (",", ":", "\\", "="). */
static int plain(const char *path)
{
	const char *c = path;

	if (path[0] != '/' || strlen(path) >= RV_PATH_MAX || strpbrk(path, ",:\\=") != NULL)
		return 0;
	while (*c == '/') {
		const char *next = strchr(c + 1, '/');
		size_t n = next ? (size_t)(next - c - 1) : strlen(c + 1);

		if (n == 0 || (n == 1 && c[1] == '.') || (n == 2 && c[1] == '.' && c[2] == '.'))
			return 0;
		if (!next)
			return 1;
		c = next;
	}
	return 0;
}

/* Whether PATH lies strictly beneath ROOT. */
static int beneath(const char *path, const char *root)
{
	size_t n = strlen(root);

	return strncmp(path, root, n) == 0 && path[n] == '/' && path[n + 1] != '\0';
}

/* The overlay at ROOT with layer K of STAGE.  Returns a recursive copy of
 * what was mounted at and beneath ROOT before (for K records). */
static int overlay(const char *stage, const char *root, int k)
{
	char opts[3 * RV_PATH_MAX + 128];
	int snap, r;

	snap = (int)syscall(__NR_open_tree, AT_FDCWD, root, RV_OPEN_TREE_CLONE | O_CLOEXEC | AT_RECURSIVE);
	if (snap < 0)
		die_errno("--review: cannot copy the mounts at %s", root);
	r = snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s/%d/upper,workdir=%s/%d/work,userxattr,volatile", root,
		     stage, k, stage, k);
	if (r < 0 || (size_t)r >= sizeof(opts))
		die("--review: the overlay's options for %s are too long", root);
	if (mount("safebox-review", root, "overlay", MS_NOSUID | MS_NODEV, opts) < 0)
		die_hint(errno,
			 "overlayfs in the sandbox's user namespace needs Linux 5.11 and an upper "
			 "directory on a file system with user extended attributes",
			 "--review: cannot mount the overlay on %s", root);
	return snap;
}

/* Put the mount that was at PATH (in SNAP, a copy of ROOT) back on top. */
static void restack(int snap, const char *root, const char *path)
{
	const char *rel = path + strlen(root) + 1;
	int m = (int)syscall(__NR_open_tree, snap, rel, RV_OPEN_TREE_CLONE | O_CLOEXEC);

	if (m < 0)
		die_errno("--review: cannot copy the mount at %s", path);
	if (syscall(__NR_move_mount, m, "", AT_FDCWD, path, RV_MOVE_MOUNT_F_EMPTY_PATH) < 0)
		die_errno("--review: cannot put the mount at %s back", path);
	close(m);
}

/* Bind PATH, as the overlay shows it now, onto itself. */
static void rebind(const char *path)
{
	int m = (int)syscall(__NR_open_tree, AT_FDCWD, path, RV_OPEN_TREE_CLONE | O_CLOEXEC);

	if (m < 0)
		die_errno("--review: cannot copy %s", path);
	if (syscall(__NR_move_mount, m, "", AT_FDCWD, path, RV_MOVE_MOUNT_F_EMPTY_PATH) < 0)
		die_errno("--review: cannot bind %s onto itself", path);
	close(m);
}

#define RV_PLAN_MAX (64 << 20) /* bytes, as the mounter's */

/* The plan, read to its end: from a memfd (sized: the mounter's reader), or
 * from the pipe safebox writes it into once bubblewrap has built the
 * sandbox (safebox starts this helper while bubblewrap works, so that its
 * exec is not on the run's way; end of file before a plan: safebox gave
 * up, and the empty plan dies below). */
static char *read_plan(int fd, size_t *len)
{
	struct stat st;
	size_t cap = 1 << 16, n = 0;
	char *buf;

	if (fstat(fd, &st) < 0)
		die_errno("--review: cannot read the plan");
	if (!S_ISFIFO(st.st_mode))
		return mounter_read_plan(fd, len);
	buf = xcalloc(cap + 1, 1);
	for (;;) {
		ssize_t r = read_all(fd, buf + n, cap - n);
		char *bigger;

		if (r < 0)
			die_errno("--review: cannot read the plan");
		n += (size_t)r;
		if (n < cap)
			break; /* end of file */
		if (cap >= RV_PLAN_MAX)
			die("--review: the plan is larger than %d bytes", RV_PLAN_MAX);
		bigger = realloc(buf, 2 * cap + 1);
		if (bigger == NULL)
			die("--review: out of memory for the plan");
		memset(bigger + cap, 0, cap + 1);
		buf = bigger;
		cap *= 2;
	}
	*len = n;
	return buf;
}

int review_main(int argc, char **argv)
{
	int ns = -1, plan_fd = -1, snap = -1, k = 0;
	const char *stage = NULL, *root = NULL;
	size_t len, at = 0;
	char *buf;

	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--namespace-fd") == 0 && i + 1 < argc && ns < 0)
			ns = mounter_fd_arg(argv[i], argv[i + 1]), i++;
		else if (strcmp(argv[i], "--plan-fd") == 0 && i + 1 < argc && plan_fd < 0)
			plan_fd = mounter_fd_arg(argv[i], argv[i + 1]), i++;
		else
			die("--review: unexpected argument '%s' (usage: --review --namespace-fd N --plan-fd N)",
			    argv[i]);
	}
	if (ns < 0 || plan_fd < 0)
		die("--review needs --namespace-fd and --plan-fd");
	buf = read_plan(plan_fd, &len);
	close(plan_fd);
	mounter_enter(ns);
	while (at < len) {
		const char *op = buf + at, *path;
		size_t n = strnlen(op, len - at);

		if (n != 1 || at + 2 >= len)
			die("review plan: record %d: unknown operation", k + 1);
		path = op + 2;
		at += 2 + strnlen(path, len - at - 2) + 1;
		if (at > len || !plain(path))
			die("review plan: %s: not a plain normalised absolute path", path);
		if (*op == 'G' && stage == NULL && root == NULL) {
			stage = path;
		} else if (*op == 'V' && stage != NULL && strcmp(path, "/") != 0) {
			if (snap >= 0)
				close(snap);
			root = path;
			snap = overlay(stage, root, k++);
		} else if ((*op == 'K' || *op == 'I') && root != NULL && beneath(path, root)) {
			if (*op == 'K')
				restack(snap, root, path);
			else
				rebind(path);
		} else {
			die("review plan: '%c %s' out of place", *op, path);
		}
	}
	if (snap >= 0)
		close(snap);
	if (stage == NULL)
		die("review plan: no stage (G)");
	if (umount2(stage, MNT_DETACH) < 0)
		die_errno("--review: cannot detach the layers' stage %s", stage);
	/* A stage bubblewrap made in the sandbox's private /tmp goes too (one
	 * in the read-only run dir stays: EROFS, safebox removes it). */
	if (rmdir(stage) < 0 && errno != EROFS)
		die_errno("--review: cannot remove the layers' stage %s", stage);
	free(buf);
	return 0;
}
