/* mounter.c - safebox-helper --mount: make a big policy's mounts inside a
 * sandbox bubblewrap has built (docs/layers.md, "Big policies").
 *
 *   safebox-helper --mount --namespace-fd N --plan-fd N [--hold-fd N]
 *
 * safebox runs this while the sandbox's first program waits at a handshake:
 * nothing of the command exists yet, and any failure (one "safebox-helper:"
 * line, exit 125) ends the run before it starts.  In order:
 *
 *   1. with --hold-fd, fork a holder: a process outside the sandbox's
 *      namespaces that keeps only the namespace descriptor and the read end
 *      of safebox's pipe, and exits at end of file.  The last reference to
 *      a mount namespace takes its mounts down one by one (put_mnt_ns ->
 *      umount_tree in fs/namespace.c, ~1.5 us each); held here, that cost
 *      comes after safebox has returned, not in the sandbox's last exit.
 *   2. enter the user namespace that owns the mount namespace, then the
 *      mount namespace (setns(2); bubblewrap made both as our user, so we
 *      have CAP_SYS_ADMIN in them);
 *   3. bind the write roots from a copy of the tree taken before them
 *      (open_tree(OPEN_TREE_CLONE)), each made read-write as --bind does;
 *   4. pins, read-only binds and masks, from a copy taken after the write
 *      roots and a read-only copy of it (one bind per read-only entry: the
 *      copy carries the flags); a file is masked by safebox's own empty
 *      file (the plan's E), never by /dev/null;
 *   5. the host unix sockets' masks (U), each a read-only copy of the empty
 *      file moved onto the socket's path; a path that no longer exists is
 *      skipped (sockets()).
 *
 * Each copy is detached by its descriptor, never by its path (detach()).
 *
 * Binding from a copy, never from the live tree, keeps the cost linear: a
 * recursive bind copies what is mounted beneath its source, and a live
 * source would have gained every earlier entry.  Each source is named from
 * its parent directory (one chdir per directory: the kernel walks one
 * component instead of the copy's prefix and the whole path, a fifth of a
 * bind's cost), and every mask after the first is bound from "." inside the
 * first.
 */
#include "mounter.h"

#include "compat.h"
#include "mountplan.h"
#include "util.h"

#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* include/uapi/linux/mount.h and nsfs.h, for headers older than 5.12. */
#ifndef __NR_open_tree
#define __NR_open_tree 428
#endif
#ifndef __NR_move_mount
#define __NR_move_mount 429
#endif
#ifndef __NR_mount_setattr
#define __NR_mount_setattr 442
#endif
#define SB_OPEN_TREE_CLONE 1
#define SB_MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#define SB_MOVE_MOUNT_T_SYMLINKS 0x00000010
#define SB_MOUNT_ATTR_RDONLY 0x00000001
#define SB_MOUNT_ATTR_NOSUID 0x00000002
#define SB_MOUNT_ATTR_NODEV 0x00000004
#define SB_NS_GET_USERNS 0xb701
#define SB_PLAN_MAX (64 << 20) /* bytes: MP_OPS_MAX short paths and then some */

struct sb_mount_attr {
	uint64_t attr_set, attr_clr, propagation, userns_fd;
};

struct mounter {
	const char *scratch;
	char cwd[2 * MP_PATH_MAX]; /* where the last chdir went; "" unknown, "\1" the first mask */
	const char *first_dir, *first_file;
	int empty_tree; /* a detached copy of the plan's E (what masks a file), or -1 */
	int empty_path; /* the plan's E, O_PATH, for the U masks' copies, or -1 */
};

/* DST = A + the first N bytes of B (all of B: N < 0).  Dies if it does not
 * fit in LEN: a path cut short could name an ancestor of the one meant (a
 * chdir or bind that succeeds in the wrong place), so it is never used. */
static void join(char *dst, size_t len, const char *a, const char *b, int n)
{
	int r = n < 0 ? snprintf(dst, len, "%s%s", a, b) : snprintf(dst, len, "%s%.*s", a, n, b);

	if (r < 0 || (size_t)r >= len)
		die("mount plan: %s%s is longer than %zu bytes", a, b, len - 1);
}

/* A descriptor number given on the command line: decimal, >= 3.  Dies
 * otherwise. */
int mounter_fd_arg(const char *opt, const char *s)
{
	char *end;
	long n = strtol(s, &end, 10);

	if (*s == '\0' || *end != '\0' || n < 3 || n > INT_MAX)
		die("%s: expected a descriptor number >= 3, got '%s'", opt, s);
	return (int)n;
}

/* Read the whole plan from FD into a new buffer.  Dies on a read error or
 * a plan over SB_PLAN_MAX bytes. */
char *mounter_read_plan(int fd, size_t *len)
{
	struct stat st;
	char *buf;
	ssize_t n;

	if (fstat(fd, &st) < 0)
		die_errno("cannot read the mount plan");
	if (st.st_size < 0 || st.st_size > SB_PLAN_MAX)
		die("the mount plan is larger than %d bytes", SB_PLAN_MAX);
	buf = xcalloc((size_t)st.st_size + 1, 1);
	n = read_all(fd, buf, (size_t)st.st_size + 1);
	if (n < 0)
		die_errno("cannot read the mount plan");
	if (n != st.st_size)
		die("the mount plan changed size while being read");
	*len = (size_t)n;
	return buf;
}

/* Step 1: fork the holder.  The child closes every descriptor but NS and
 * HOLD, waits for end of file on HOLD and exits; it never returns.  Dies if
 * the fork fails (safebox would rather know). */
static void fork_holder(int ns, int hold)
{
	pid_t pid = fork();
	char byte;

	if (pid < 0)
		die_errno("cannot fork the namespace holder");
	if (pid > 0)
		return;
	for (int fd = 0; fd < 3; fd++)
		if (fd != ns && fd != hold)
			close(fd);
	{
		int lo = ns < hold ? ns : hold, hi = ns < hold ? hold : ns;

		if (lo > 3)
			syscall(__NR_close_range, 3U, (unsigned)lo - 1, 0U);
		if (hi > lo + 1)
			syscall(__NR_close_range, (unsigned)lo + 1, (unsigned)hi - 1, 0U);
		syscall(__NR_close_range, (unsigned)hi + 1, ~0U, 0U);
	}
	while (RETRY_EINTR(read(hold, &byte, 1)) > 0)
		;
	_exit(0); /* its exit drops the last reference: the mounts go down here */
}

/* Step 2: enter the mount namespace NS and the user namespace owning it.
 * Dies on failure. */
void mounter_enter(int ns)
{
	int user = ioctl(ns, SB_NS_GET_USERNS);

	if (user < 0)
		die_errno("cannot find the sandbox's user namespace");
	if (setns(user, CLONE_NEWUSER) < 0)
		die_errno("cannot enter the sandbox's user namespace");
	close(user);
	if (setns(ns, CLONE_NEWNS) < 0)
		die_errno("cannot enter the sandbox's mount namespace");
}

/* A recursive copy of the sandbox's tree, detached.  Dies on failure. */
static int snapshot(void)
{
	int fd = (int)syscall(__NR_open_tree, AT_FDCWD, "/", SB_OPEN_TREE_CLONE | O_CLOEXEC | AT_RECURSIVE);

	if (fd < 0)
		die_errno("cannot copy the sandbox's mount tree");
	return fd;
}

/* Attach the copy TREE at WHERE; TREE stays open, naming the attached
 * copy, for detach.  Dies on failure. */
static void attach(int tree, const char *where)
{
	if (syscall(__NR_move_mount, tree, "", AT_FDCWD, where, SB_MOVE_MOUNT_F_EMPTY_PATH) < 0)
		die_errno("cannot attach a copy at %s", where);
}

/* Detach the copy TREE that attach() put at WHERE, and close it.  By the
 * descriptor, never by the path: a write root bound above WHERE since
 * then hides the copy, and umount2(WHERE) would detach whatever the path
 * leads to now, the run dir's read-only bind in the root's new tree (found
 * in review: the run dir, and with it the state dir, became writable).
 * The working directory is the copy's root, and "." names that mount (no
 * plan entry lies at WHERE, so nothing is mounted on top of it: mountplan.c
 * refuses one).  Dies on failure. */
static void detach(int tree, const char *where)
{
	if (fchdir(tree) < 0)
		die_errno("cannot enter the copy at %s", where);
	if (umount2(".", MNT_DETACH) < 0)
		die_errno("cannot detach the copy from %s", where);
	if (chdir("/") < 0)
		die_errno("chdir /");
	close(tree);
}

/* mount_setattr(2) on PATH (DFD/FLAGS as the syscall's).  Returns its result. */
static int set_attr(int dfd, const char *path, unsigned flags, uint64_t set, uint64_t clr)
{
	struct sb_mount_attr a = { .attr_set = set, .attr_clr = clr };

	return (int)syscall(__NR_mount_setattr, dfd, path, flags, &a, sizeof(a));
}

/* Step 3: the write roots.  Dies naming the root that failed. */
static void write_roots(const struct mount_plan *p, const char *scratch)
{
	char src[2 * MP_PATH_MAX];
	int tree = snapshot();

	attach(tree, scratch);
	for (size_t i = 0; i < p->n; i++) {
		const char *path = p->ops[i].path;

		if (p->ops[i].op != 'W')
			continue;
		join(src, sizeof(src), scratch, path, -1);
		if (mount(src, path, NULL, MS_BIND | MS_REC, NULL) < 0)
			die_errno("cannot bind write root %s", path);
		/* As --bind: the mount itself read-write, what lies beneath it
		 * as it was.  EPERM: read-only on the host, and stays so. */
		if (set_attr(AT_FDCWD, path, 0, SB_MOUNT_ATTR_NOSUID | SB_MOUNT_ATTR_NODEV, SB_MOUNT_ATTR_RDONLY) < 0 &&
		    errno != EPERM)
			die_errno("cannot make write root %s writable", path);
	}
	detach(tree, scratch);
}

/* BASE + PATH as mount(2) should get it: the last component, from a
 * working directory at BASE + PATH's parent (entered when it is not the
 * last one), or the whole joined path if that cannot be entered (mount(2)
 * then says what is wrong with it).  SRC holds the result. */
static const char *source(struct mounter *m, const char *base, const char *path, char *src, size_t len)
{
	const char *slash = strrchr(path, '/');

	join(src, len, base, path, (int)(slash - path));
	if (slash[1] == '\0')
		goto whole;
	if (strcmp(src, m->cwd) != 0) {
		if (chdir(src[0] ? src : "/") < 0) {
			m->cwd[0] = '\0';
			goto whole;
		}
		snprintf(m->cwd, sizeof(m->cwd), "%s", src);
	}
	return slash + 1;
whole:
	join(src, len, base, path, -1);
	return src;
}

/* One pin, read-only bind or mask.  Dies naming PATH on failure. */
static void make(struct mounter *m, char op, const char *path, const char *ro_base)
{
	char src[2 * MP_PATH_MAX];
	const char *s;

	switch (op) {
	case 'P':
		s = source(m, m->scratch, path, src, sizeof(src));
		if (mount(s, path, NULL, MS_BIND | MS_REC, NULL) < 0)
			die_errno("cannot pin %s", path);
		break;
	case 'R':
		s = source(m, ro_base, path, src, sizeof(src));
		if (mount(s, path, NULL, MS_BIND | MS_REC, NULL) < 0)
			die_errno("cannot bind read-only %s", path);
		break;
	case 'D':
		if (m->first_dir == NULL) {
			if (mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=0755") < 0)
				die_errno("cannot mask %s", path);
			m->first_dir = path;
			break;
		}
		/* The same empty read-only tmpfs, bound from inside it: one
		 * lookup, whatever is mounted on its path later. */
		if (strcmp(m->cwd, "\1") != 0) {
			if (chdir(m->first_dir) < 0)
				die_errno("cannot enter the first mask %s", m->first_dir);
			snprintf(m->cwd, sizeof(m->cwd), "\1");
		}
		if (mount(".", path, NULL, MS_BIND, NULL) < 0)
			die_errno("cannot mask %s", path);
		break;
	case 'F':
		if (m->first_file == NULL) {
			/* safebox's own empty file (0200, in the run dir), never
			 * /dev/null: a host whose /dev/null had become a regular
			 * file (a root `--learn /dev/null` once did that) showed
			 * every masked file's new contents.  Its copy was taken
			 * before the copies of the tree hid the run dir. */
			if (m->empty_tree < 0)
				die("mount plan: a file mask without the empty file");
			if (syscall(__NR_move_mount, m->empty_tree, "", AT_FDCWD, path, SB_MOVE_MOUNT_F_EMPTY_PATH) < 0)
				die_errno("cannot mask %s", path);
			close(m->empty_tree);
			m->empty_tree = -1;
			if (set_attr(AT_FDCWD, path, 0, SB_MOUNT_ATTR_RDONLY | SB_MOUNT_ATTR_NOSUID | SB_MOUNT_ATTR_NODEV,
				     0) < 0)
				die_errno("cannot make %s read-only", path);
			m->first_file = path;
			break;
		}
		if (mount(m->first_file, path, NULL, MS_BIND, NULL) < 0)
			die_errno("cannot mask %s", path);
		break;
	default:
		die("mount plan: operation '%c' out of place", op);
	}
}

/* Step 4: everything but the write roots, in the plan's order.  Dies
 * naming the entry that failed. */
static void others(const struct mount_plan *p, struct mounter *m)
{
	char ro_base[2 * MP_PATH_MAX];
	int tree = snapshot(), ro = -1, any_ro = 0;

	for (size_t i = 0; i < p->n; i++)
		any_ro |= p->ops[i].op == 'R';
	if (any_ro) {
		ro = snapshot();
		if (set_attr(ro, "", AT_EMPTY_PATH | AT_RECURSIVE,
			     SB_MOUNT_ATTR_RDONLY | SB_MOUNT_ATTR_NOSUID | SB_MOUNT_ATTR_NODEV, 0) < 0)
			die_errno("cannot make the copy read-only");
	}
	attach(tree, m->scratch);
	/* The run dir inside the first copy: no entry lies beneath it. */
	join(ro_base, sizeof(ro_base), m->scratch, m->scratch, -1);
	if (ro >= 0) {
		attach(ro, ro_base);
		close(ro); /* a child of TREE: detached with it */
	}
	for (size_t i = 0; i < p->n; i++)
		if (p->ops[i].op != 'W' && p->ops[i].op != 'U')
			make(m, p->ops[i].op, p->ops[i].path, ro_base);
	detach(tree, m->scratch);
}

/* Whether PATH, whose mask move_mount just refused (errno says why, and is
 * kept), leads nowhere the command could connect() to: gone (ENOENT,
 * ENOTDIR: all move_mount says of its target), or beyond a directory this
 * user cannot search in the sandbox's user namespace (EACCES).  The latter
 * is root's run and another user's socket in a directory of that user's
 * own (/run/user/UID/bus): listed on the host, where root's capabilities
 * reach it, and out of reach here, where they do not cover an unmapped
 * owner's files.  The command has these credentials and fewer
 * capabilities: what this look-up cannot reach, neither can it.  Checked
 * by a look-up of its own (O_PATH, following as the mask would), so that
 * a mount refused on a path the command could reach (a security module's
 * EACCES) still dies. */
static int unreachable(const char *path)
{
	int err = errno, fd, gone;

	if (err == ENOENT || err == ENOTDIR)
		return 1;
	if (err != EACCES)
		return 0;
	fd = open(path, O_PATH | O_CLOEXEC);
	gone = fd < 0 && (errno == EACCES || errno == ENOENT || errno == ENOTDIR);
	if (fd >= 0)
		close(fd);
	errno = err;
	return gone;
}

/* Step 5: the host unix sockets' masks, after every other mount (what
 * bubblewrap binds after its masks never holds one: builder/bulk.py).
 * safebox listed the sockets (/proc/net/unix) before bubblewrap built the
 * sandbox, and one may be gone since, with its directory (another run of
 * the user ended): bubblewrap then failed the start creating the mount
 * point on the read-only root.  Here ENOENT or ENOTDIR from the target,
 * which is all move_mount can say of it (the source is a descriptor), means
 * the path leads nowhere in the sandbox: connect() there fails the same
 * way, so there is nothing to hide, and the mask is skipped; so is one
 * this user cannot reach in the sandbox at all (unreachable()).  A socket
 * bound at the path again before this call is masked like the first (the
 * mask covers the path).  Each mask is its own copy of the empty file, made
 * read-only before it is attached: no step of it names a path another
 * process could remove meanwhile, as binding from the first mask would
 * (removed on the host, the first mask is detached here too).  Dies on
 * anything else. */
static void sockets(const struct mount_plan *p, int empty)
{
	for (size_t i = 0; i < p->n; i++) {
		const char *path = p->ops[i].path;
		int copy;

		if (p->ops[i].op != 'U')
			continue;
		copy = (int)syscall(__NR_open_tree, empty, "", SB_OPEN_TREE_CLONE | O_CLOEXEC | AT_EMPTY_PATH);
		if (copy < 0)
			die_errno("cannot copy the empty file to mask %s", path);
		if (set_attr(copy, "", AT_EMPTY_PATH, SB_MOUNT_ATTR_RDONLY | SB_MOUNT_ATTR_NOSUID | SB_MOUNT_ATTR_NODEV,
			     0) < 0)
			die_errno("cannot make the mask of %s read-only", path);
		/* T_SYMLINKS: the target followed as bubblewrap's mount(2) did. */
		if (syscall(__NR_move_mount, copy, "", AT_FDCWD, path,
			    SB_MOVE_MOUNT_F_EMPTY_PATH | SB_MOVE_MOUNT_T_SYMLINKS) < 0 &&
		    !unreachable(path))
			die_errno("cannot mask %s", path);
		close(copy); /* attached: stays; not attached: gone with it */
	}
}

int mounter_main(int argc, char **argv)
{
	int ns = -1, plan_fd = -1, hold = -1;
	struct mount_plan p;
	struct mounter m = { 0 };
	char err[256], *buf;
	size_t len, writes = 0, sockets_n = 0;

	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--namespace-fd") == 0 && i + 1 < argc && ns < 0)
			ns = mounter_fd_arg(argv[i], argv[i + 1]), i++;
		else if (strcmp(argv[i], "--plan-fd") == 0 && i + 1 < argc && plan_fd < 0)
			plan_fd = mounter_fd_arg(argv[i], argv[i + 1]), i++;
		else if (strcmp(argv[i], "--hold-fd") == 0 && i + 1 < argc && hold < 0)
			hold = mounter_fd_arg(argv[i], argv[i + 1]), i++;
		else
			die("--mount: unexpected argument '%s' (usage: --mount --namespace-fd N --plan-fd N "
			    "[--hold-fd N])",
			    argv[i]);
	}
	if (ns < 0 || plan_fd < 0)
		die("--mount needs --namespace-fd and --plan-fd");
	buf = mounter_read_plan(plan_fd, &len);
	close(plan_fd);
	if (mount_plan_parse(buf, len, &p, err, sizeof(err)) < 0)
		die("mount plan: %s", err);
	if (hold >= 0) /* 1 */
		fork_holder(ns, hold);
	mounter_enter(ns); /* 2 */
	m.scratch = p.scratch;
	m.empty_tree = -1;
	m.empty_path = -1;
	for (size_t i = 0; i < p.n; i++) {
		writes += p.ops[i].op == 'W';
		sockets_n += p.ops[i].op == 'U';
	}
	if (sockets_n) {
		/* As the empty tree below, while the run dir is in view. */
		m.empty_path = open(p.empty, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (m.empty_path < 0)
			die_errno("cannot open the empty file %s", p.empty);
	}
	if (p.empty != NULL && p.n > writes + sockets_n) {
		/* Now, while the run dir is in view: the copies of the tree
		 * are attached over it later. */
		m.empty_tree = (int)syscall(__NR_open_tree, AT_FDCWD, p.empty, SB_OPEN_TREE_CLONE | O_CLOEXEC);
		if (m.empty_tree < 0)
			die_errno("cannot copy the empty file %s", p.empty);
	}
	if (writes) /* 3 */
		write_roots(&p, p.scratch);
	if (writes + sockets_n < p.n) /* 4 */
		others(&p, &m);
	if (sockets_n) /* 5 */
		sockets(&p, m.empty_path);
	mount_plan_free(&p);
	free(buf);
	return 0;
}
