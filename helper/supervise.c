/* supervise.c - `safebox-helper --supervise`: answers the observing filter.
 *
 * The helper, inside the sandbox, installs the observing seccomp program with
 * a listener (seccomp.c) and hands the listener to safebox, which hands it to
 * this process, started on the host next to bwrap.  For every notification:
 *
 *   - a call on the seccomp denylist is answered with its errno (the filter
 *     says "notify" instead of "errno" for it): the call never runs;
 *   - a watched call (a write-intent file call, an exec, a connect) is
 *     answered SECCOMP_USER_NOTIF_FLAG_CONTINUE: the kernel then runs it with
 *     every layer's checks, exactly as without observation.  The supervisor
 *     only looks at the arguments to predict whether a layer will refuse it,
 *     and if so writes one record for safebox to explain.
 *
 * So the supervisor never decides whether a file call is allowed, and a
 * command that rewrites its arguments after the notification (the TOCTOU
 * that seccomp_unotify(2) warns about) can only make the feed wrong, never
 * the sandbox weaker.  If this process dies, the kernel answers ENOSYS to
 * every notified call: denied calls stay denied.  docs/violations.md has the
 * whole design; docs/threat-model.md the new attack surface (this process
 * parses another process's memory, with its own bounds and a fuzzed decoder).
 */
#include "supervise.h"
#include "compat.h"
#include "notify.h"
#include "policy.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#ifndef SECCOMP_ADDFD_FLAG_SEND
#define SECCOMP_ADDFD_FLAG_SEND (1UL << 1) /* Linux 5.14; the ioctl itself is 5.9 */
#endif
#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#endif
#ifndef SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (1UL << 0)
#endif

#define CAPTURE_KEY 32    /* hex characters of each capture key */
#define MAX_RECORDS 10000 /* beyond this, refusals are only counted */
#define RECORD_MAX (4 * NT_PATH_MAX + 512)
#define NO_ARG -1

enum wop {
	W_OPEN,    /* dirfd?, path, flags */
	W_OPENAT2, /* dirfd, path, struct open_how * (flags first) */
	W_CREAT,   /* path: O_CREAT|O_WRONLY|O_TRUNC */
	W_MODIFY,  /* dirfd?, path, at-flags? */
	W_CREATE,  /* dirfd?, path */
	W_REMOVE,  /* dirfd?, path */
	W_RENAME,  /* dirfd?, path, dirfd2?, path2 */
	W_NEWNAME, /* dirfd2?, path2: the new name of link/symlink */
	W_EXEC,    /* dirfd?, path */
	W_CONNECT, /* fd, addr, len */
	W_CHDIR,   /* the cwd cache's invalidation: never a record */
};

struct watch {
	long nr;
	const char *name;
	enum wop op;
	int dirfd, path, flags, dirfd2, path2;
	int nofollow; /* 1: the last component is never followed (lchown) */
};

/* The watched calls and where their arguments are (syscalls(2)).  Must
 * match WATCH in python/safebox/builder/seccomp.py: a watched call missing
 * here is answered EPERM, never continued (fail closed). */
static const struct watch WATCHES[] = {
#ifdef __NR_open
	{ __NR_open, "open", W_OPEN, NO_ARG, 0, 1, NO_ARG, NO_ARG, 0 },
#endif
	{ __NR_openat, "openat", W_OPEN, 0, 1, 2, NO_ARG, NO_ARG, 0 },
	{ __NR_openat2, "openat2", W_OPENAT2, 0, 1, 2, NO_ARG, NO_ARG, 0 },
#ifdef __NR_creat
	{ __NR_creat, "creat", W_CREAT, NO_ARG, 0, NO_ARG, NO_ARG, NO_ARG, 0 },
#endif
	{ __NR_truncate, "truncate", W_MODIFY, NO_ARG, 0, NO_ARG, NO_ARG, NO_ARG, 0 },
#ifdef __NR_chmod
	{ __NR_chmod, "chmod", W_MODIFY, NO_ARG, 0, NO_ARG, NO_ARG, NO_ARG, 0 },
#endif
	{ __NR_fchmodat, "fchmodat", W_MODIFY, 0, 1, NO_ARG, NO_ARG, NO_ARG, 0 },
	{ __NR_fchmodat2, "fchmodat2", W_MODIFY, 0, 1, 3, NO_ARG, NO_ARG, 0 },
#ifdef __NR_chown
	{ __NR_chown, "chown", W_MODIFY, NO_ARG, 0, NO_ARG, NO_ARG, NO_ARG, 0 },
#endif
#ifdef __NR_lchown
	{ __NR_lchown, "lchown", W_MODIFY, NO_ARG, 0, NO_ARG, NO_ARG, NO_ARG, 1 },
#endif
	{ __NR_fchownat, "fchownat", W_MODIFY, 0, 1, 4, NO_ARG, NO_ARG, 0 },
#ifdef __NR_utime
	{ __NR_utime, "utime", W_MODIFY, NO_ARG, 0, NO_ARG, NO_ARG, NO_ARG, 0 },
#endif
#ifdef __NR_utimes
	{ __NR_utimes, "utimes", W_MODIFY, NO_ARG, 0, NO_ARG, NO_ARG, NO_ARG, 0 },
#endif
#ifdef __NR_futimesat
	{ __NR_futimesat, "futimesat", W_MODIFY, 0, 1, NO_ARG, NO_ARG, NO_ARG, 0 },
#endif
	{ __NR_utimensat, "utimensat", W_MODIFY, 0, 1, 3, NO_ARG, NO_ARG, 0 },
#ifdef __NR_mkdir
	{ __NR_mkdir, "mkdir", W_CREATE, NO_ARG, 0, NO_ARG, NO_ARG, NO_ARG, 0 },
#endif
	{ __NR_mkdirat, "mkdirat", W_CREATE, 0, 1, NO_ARG, NO_ARG, NO_ARG, 0 },
#ifdef __NR_mknod
	{ __NR_mknod, "mknod", W_CREATE, NO_ARG, 0, NO_ARG, NO_ARG, NO_ARG, 0 },
#endif
	{ __NR_mknodat, "mknodat", W_CREATE, 0, 1, NO_ARG, NO_ARG, NO_ARG, 0 },
#ifdef __NR_rmdir
	{ __NR_rmdir, "rmdir", W_REMOVE, NO_ARG, 0, NO_ARG, NO_ARG, NO_ARG, 0 },
#endif
#ifdef __NR_unlink
	{ __NR_unlink, "unlink", W_REMOVE, NO_ARG, 0, NO_ARG, NO_ARG, NO_ARG, 0 },
#endif
	{ __NR_unlinkat, "unlinkat", W_REMOVE, 0, 1, NO_ARG, NO_ARG, NO_ARG, 0 },
#ifdef __NR_rename
	{ __NR_rename, "rename", W_RENAME, NO_ARG, 0, NO_ARG, NO_ARG, 1, 0 },
#endif
#ifdef __NR_renameat
	{ __NR_renameat, "renameat", W_RENAME, 0, 1, NO_ARG, 2, 3, 0 },
#endif
	{ __NR_renameat2, "renameat2", W_RENAME, 0, 1, NO_ARG, 2, 3, 0 },
#ifdef __NR_link
	{ __NR_link, "link", W_NEWNAME, NO_ARG, NO_ARG, NO_ARG, NO_ARG, 1, 0 },
#endif
	{ __NR_linkat, "linkat", W_NEWNAME, NO_ARG, NO_ARG, NO_ARG, 2, 3, 0 },
#ifdef __NR_symlink
	{ __NR_symlink, "symlink", W_NEWNAME, NO_ARG, NO_ARG, NO_ARG, NO_ARG, 1, 0 },
#endif
	{ __NR_symlinkat, "symlinkat", W_NEWNAME, NO_ARG, NO_ARG, NO_ARG, 1, 2, 0 },
	{ __NR_execve, "execve", W_EXEC, NO_ARG, 0, NO_ARG, NO_ARG, NO_ARG, 0 },
	{ __NR_execveat, "execveat", W_EXEC, 0, 1, 4, NO_ARG, NO_ARG, 0 },
	{ __NR_connect, "connect", W_CONNECT, NO_ARG, NO_ARG, NO_ARG, NO_ARG, NO_ARG, 0 },
	{ __NR_chdir, "chdir", W_CHDIR, NO_ARG, NO_ARG, NO_ARG, NO_ARG, NO_ARG, 0 },
	{ __NR_fchdir, "fchdir", W_CHDIR, NO_ARG, NO_ARG, NO_ARG, NO_ARG, NO_ARG, 0 },
};

#define AT_FDCWD_ARG ((int)-100)
#define AT_SYMLINK_NOFOLLOW_FLAG 0x100
#define AT_EMPTY_PATH_FLAG 0x1000
#define O_NOFOLLOW_FLAG 0400000UL

/* The cwd cache: readlink("/proc/TID/cwd") is the costliest step of a
 * notification (about 6 us of the 15 measured), and nearly every relative
 * path is relative to the cwd.  Entries are dropped at every chdir/fchdir
 * notification, and nothing is cached again until the task that changed
 * directory makes its next notification: its chdir has completed by then,
 * for every thread sharing its cwd too (CLONE_FS).  Before that, a cached
 * value could be the old directory.  The cache is also emptied every
 * CWD_CACHE_LIFE notifications, which bounds how long a reused thread id
 * could be served another task's directory. */
#define CWD_CACHE_SLOTS 64
#define CWD_CACHE_LIFE 65536

struct cwd_slot {
	pid_t tid; /* 0: empty */
	char path[NT_PATH_MAX];
};

struct sup {
	const struct nt_table *t;
	int listener;
	int events;
	unsigned long records, dropped;
	struct cwd_slot cwd[CWD_CACHE_SLOTS];
	pid_t chdir_pending; /* a task whose chdir may not have completed; 0: none */
	unsigned long since_flush;
	unsigned capture_port;            /* safebox's capture listener on the host's 127.0.0.1; 0: no capture */
	char key_ask[CAPTURE_KEY + 1];    /* shown to the proxy with every request */
	char key_answer[CAPTURE_KEY + 1]; /* the proxy's answer must carry it */
};

static struct sup *the_sup; /* the one supervisor of this process */

/* The watch entry for NR, or NULL.  Never fails. */
static const struct watch *find_watch(long nr)
{
	size_t i;

	for (i = 0; i < sizeof(WATCHES) / sizeof(WATCHES[0]); i++)
		if (WATCHES[i].nr == nr)
			return &WATCHES[i];
	return NULL;
}

/* Read a NUL-terminated string at ADDR in task PID into BUF (capacity CAP),
 * page by page so that an unmapped page after a short string does not fail
 * the read.  Returns the length, or -1 (unreadable, or no NUL within CAP). */
static long read_string(pid_t pid, unsigned long long addr, char *buf, size_t cap)
{
	size_t got = 0;

	if (addr == 0)
		return -1;
	while (got < cap) {
		unsigned long long at = addr + got;
		size_t page_left = 4096 - (size_t)(at & 4095);
		/* A path is short: 256 bytes first, then whole pages. */
		size_t limit = got == 0 && page_left > 256 ? 256 : page_left;
		size_t want = cap - got < limit ? cap - got : limit;
		struct iovec local = { .iov_base = buf + got, .iov_len = want };
		struct iovec remote = { .iov_base = (void *)(uintptr_t)at, .iov_len = want };
		ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
		long len;

		if (n <= 0)
			return -1;
		len = nt_cstring(buf + got, (size_t)n);
		if (len >= 0)
			return (long)got + len;
		got += (size_t)n;
	}
	return -1;
}

/* Read LEN bytes at ADDR of task PID into BUF.  Returns 0, or -1. */
static int read_bytes(pid_t pid, unsigned long long addr, void *buf, size_t len)
{
	struct iovec local = { .iov_base = buf, .iov_len = len };
	struct iovec remote = { .iov_base = (void *)(uintptr_t)addr, .iov_len = len };

	return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

/* Empty the cwd cache.  Never fails. */
static void cwd_flush(struct sup *s)
{
	size_t i;

	for (i = 0; i < CWD_CACHE_SLOTS; i++)
		s->cwd[i].tid = 0;
	s->since_flush = 0;
}

/* The directory a relative path of task TID starts from: its cwd (cached,
 * see struct cwd_slot), or the directory open on DIRFD.  Returns 0 with
 * BASE filled, or -1. */
static int base_dir(pid_t tid, int dirfd, char *base, size_t cap)
{
	struct sup *s = the_sup;
	struct cwd_slot *slot = NULL;
	char link[64];
	ssize_t n;

	if (dirfd == AT_FDCWD_ARG) {
		if (s != NULL) {
			slot = &s->cwd[(unsigned)tid % CWD_CACHE_SLOTS];
			if (slot->tid == tid && strlen(slot->path) < cap) {
				strcpy(base, slot->path);
				return 0;
			}
		}
		snprintf(link, sizeof(link), "/proc/%d/cwd", (int)tid);
	} else if (dirfd >= 0) {
		snprintf(link, sizeof(link), "/proc/%d/fd/%d", (int)tid, dirfd);
	} else {
		return -1;
	}
	n = readlink(link, base, cap - 1);
	if (n <= 0 || base[0] != '/')
		return -1; /* "pipe:[..]", "anon_inode:..": not a directory */
	base[n] = '\0';
	if (slot != NULL && s->chdir_pending == 0 && (size_t)n < sizeof(slot->path)) {
		slot->tid = tid;
		memcpy(slot->path, base, (size_t)n + 1);
	}
	return 0;
}

/* The most components one walk opens, links' targets included.  A path
 * is at most NT_PATH_MAX bytes and at most RESOLVE_LINKS links are
 * followed, each adding up to NT_PATH_MAX; beyond this budget the path is
 * shown as written (NT_UNKNOWN).  A component costs two or three system
 * calls, so the walk of a path with a link in it costs at most a few
 * milliseconds; a path without one costs a single openat2
 * (resolve_plain).  Measured in docs/violations.md, "Prediction". */
#define RESOLVE_STEPS 1024
#define RESOLVE_LINKS 40
#define PROC_SUPER_MAGIC_ 0x9fa0
#ifndef RESOLVE_NO_MAGICLINKS
#define RESOLVE_NO_MAGICLINKS 0x02
#endif
#ifndef RESOLVE_NO_SYMLINKS
#define RESOLVE_NO_SYMLINKS 0x04
#endif
#ifndef RESOLVE_IN_ROOT
#define RESOLVE_IN_ROOT 0x10
#endif

struct open_how_ {
	__u64 flags, mode, resolve;
};

/* The fast path of resolve(): PATH (normalised, absolute) opened with one
 * openat2 from ROOT, RESOLVE_IN_ROOT (nothing outside the root) and
 * RESOLVE_NO_SYMLINKS (no link anywhere, the last one only when not
 * FOLLOW: the object found is at PATH itself, so PATH is its resolved
 * name); a missing PATH whose parent opens so is NT_ABSENT.  Returns
 * NT_EXISTS, NT_ABSENT, or NT_UNKNOWN when the walk must decide: a link on
 * the way (ELOOP), a missing parent, a kernel without openat2. */
static int resolve_plain(int root, const char *path, int follow)
{
	static char parent[NT_PATH_MAX];
	struct open_how_ how = { .flags = O_PATH | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW),
				 .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
	int fd;

	if (path[1] == '\0')
		return NT_EXISTS;
	fd = (int)syscall(__NR_openat2, root, path + 1, &how, sizeof(how));
	if (fd >= 0) {
		close(fd);
		return NT_EXISTS;
	}
	if (errno != ENOENT || nt_parent(path, parent, sizeof(parent)) < 0)
		return NT_UNKNOWN;
	if (parent[1] == '\0')
		return NT_ABSENT;
	how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
	fd = (int)syscall(__NR_openat2, root, parent + 1, &how, sizeof(how));
	if (fd < 0)
		return NT_UNKNOWN;
	close(fd);
	return NT_ABSENT;
}

/* Replace *DIR (a descriptor of ours, or ROOT, which is never closed here)
 * with FD.  Never fails. */
static void step_to(int *dir, int root, int fd)
{
	if (*dir != root)
		close(*dir);
	*dir = fd;
}

/* Resolve the normalised absolute PATH as task TID sees it: symlinks
 * followed (the last one only when FOLLOW), absolute targets from its root,
 * ".." from the resolved directory.  OUT (capacity CAP) gets the result;
 * returns NT_EXISTS, NT_ABSENT, NT_NO_PARENT, or NT_UNKNOWN when the walk
 * cannot be done (OUT then holds PATH).
 *
 * The walk never leaves the task's root (issue 22, item 11).  It starts at
 * a descriptor of /proc/TID/root and opens one component at a time,
 * O_PATH|O_NOFOLLOW, from the previous component's descriptor: the kernel
 * never resolves more than one name here, so it never follows a link.  A
 * link's target is read from the descriptor of the link itself and walked
 * by this loop, an absolute one from the root descriptor; ".." at the root
 * stays there; a link on procfs (a magic link: /proc/N/cwd, fd/N) is never
 * followed (NT_UNKNOWN).  The sandbox can still swap a directory for a link
 * between two steps, which makes the explanation wrong (a name it holds
 * reads as another), never the sandbox weaker, and never names anything
 * outside its root (docs/violations.md, "Prediction"). */
static int resolve(pid_t tid, const char *path, int follow, char *out, size_t cap)
{
	static char cur[NT_PATH_MAX], rest[NT_PATH_MAX], target[NT_PATH_MAX], joined[NT_PATH_MAX];
	char link[64];
	cleanup_fd int root = -1;
	const char *p;
	size_t len = 1; /* strlen(cur): names are appended, never re-joined (linear in the depth) */
	int dir, links = 0, steps = 0, ret = NT_UNKNOWN;

	if (snprintf(out, cap, "%s", path) >= (int)cap || snprintf(rest, sizeof(rest), "%s", path) >= (int)sizeof(rest))
		return NT_UNKNOWN;
	snprintf(link, sizeof(link), "/proc/%d/root", (int)tid);
	root = open(link, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return NT_UNKNOWN;
	ret = resolve_plain(root, path, follow);
	if (ret != NT_UNKNOWN)
		return ret; /* OUT holds PATH, its resolved name */
	dir = root;
	strcpy(cur, "/");
	p = rest;
	for (;;) {
		char comp[256]; /* NAME_MAX + 1 */
		struct stat st;
		struct statfs sfs;
		size_t clen;
		ssize_t n;
		int fd, last;

		while (*p == '/')
			p++;
		if (*p == '\0')
			break;
		clen = strcspn(p, "/");
		if (clen >= sizeof(comp))
			goto done; /* ENAMETOOLONG */
		memcpy(comp, p, clen);
		comp[clen] = '\0';
		p += clen;
		while (*p == '/')
			p++;
		last = *p == '\0';
		if (strcmp(comp, ".") == 0)
			continue;
		if (++steps > RESOLVE_STEPS)
			goto done;
		if (strcmp(comp, "..") == 0) {
			if (len == 1)
				continue; /* ".." at the root is the root */
			while (len > 1 && cur[len - 1] != '/')
				len--;
			if (len > 1)
				len--; /* the slash before the name */
			cur[len] = '\0';
			if (len == 1) {
				step_to(&dir, root, root);
			} else {
				fd = openat(dir, "..", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				if (fd < 0)
					goto done;
				step_to(&dir, root, fd);
			}
			continue;
		}
		if (len + (len > 1) + clen >= sizeof(cur))
			goto done;
		if (len > 1)
			cur[len++] = '/';
		memcpy(cur + len, comp, clen + 1);
		len += clen;
		/* A directory on the way: one openat (O_DIRECTORY refuses a
		 * link with ENOTDIR, and the second openat looks at it). */
		fd = last ? -1 : openat(dir, comp, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
		if (fd >= 0) {
			step_to(&dir, root, fd);
			continue;
		}
		fd = openat(dir, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			if (errno == ENOENT && last) {
				snprintf(out, cap, "%s", cur);
				ret = NT_ABSENT;
			} else if (errno == ENOENT || errno == ENOTDIR) {
				/* Shown as written; the call fails whatever the sandbox says. */
				if (nt_join(cur, p, out, cap) < 0)
					snprintf(out, cap, "%s", cur);
				ret = NT_NO_PARENT;
			}
			goto done;
		}
		if (fstat(fd, &st) < 0) {
			close(fd);
			goto done;
		}
		if (!S_ISLNK(st.st_mode)) {
			step_to(&dir, root, fd);
			if (!last && !S_ISDIR(st.st_mode)) {
				if (nt_join(cur, p, out, cap) < 0)
					snprintf(out, cap, "%s", cur);
				ret = NT_NO_PARENT; /* ENOTDIR */
				goto done;
			}
			continue;
		}
		if (last && !follow) {
			close(fd);
			snprintf(out, cap, "%s", cur);
			ret = NT_EXISTS;
			goto done;
		}
		if (fstatfs(fd, &sfs) < 0 || sfs.f_type == PROC_SUPER_MAGIC_) {
			close(fd);
			goto done; /* a magic link: never followed */
		}
		n = readlinkat(fd, "", target, sizeof(target) - 1);
		close(fd);
		if (n < 0)
			goto done;
		target[n] = '\0';
		if (++links > RESOLVE_LINKS || n == 0) {
			ret = NT_NO_PARENT; /* ELOOP / ENOENT: the call fails whatever the sandbox says */
			goto done;
		}
		/* The link's name leaves cur; its target is walked from its
		 * directory (dir, unchanged), or from the root. */
		len -= clen;
		if (len > 1)
			len--;
		cur[len] = '\0';
		if (snprintf(joined, sizeof(joined), "%s/%s", target, p) >= (int)sizeof(joined))
			goto done;
		if (target[0] == '/') {
			step_to(&dir, root, root);
			len = 1;
			cur[1] = '\0';
		}
		memcpy(rest, joined, strlen(joined) + 1);
		p = rest;
	}
	if (snprintf(out, cap, "%s", cur) < (int)cap)
		ret = NT_EXISTS;
done:
	step_to(&dir, root, root);
	if (ret == NT_UNKNOWN)
		snprintf(out, cap, "%s", path);
	return ret;
}

/* Read "NStgid:" (the process id inside the sandbox's pid namespace) and
 * the comm of task TID.  Never fails: unknowns are 0 and "". */
static void task_facts(pid_t tid, long *pid, char *comm, size_t cap)
{
	char path[64], buf[4096];
	cleanup_fd int fd = -1;
	ssize_t n;
	char *line;

	*pid = 0;
	comm[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, comm, cap - 1);
		comm[n > 0 ? n : 0] = '\0';
		if (n > 0 && comm[n - 1] == '\n')
			comm[n - 1] = '\0';
		close(fd);
	}
	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read_all(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return;
	buf[n] = '\0';
	line = strstr(buf, "\nNStgid:");
	if (line != NULL) {
		char *end = strchr(line + 1, '\n');
		char *last;

		if (end != NULL)
			*end = '\0';
		last = strrchr(line, '\t');
		if (last != NULL)
			*pid = strtol(last + 1, NULL, 10);
	}
}

/* Append one record (docs/violations.md, "Records") to the events file.
 * Past MAX_RECORDS only counts.  Never fails: a write error loses the
 * record, not the run. */
static void emit(struct sup *s, const struct seccomp_notif *req, char kind, const char *name, char why,
		 const struct nt_entry *e, int err, const char *p1, const char *p2)
{
	char line[RECORD_MAX], comm[64];
	struct timespec ts;
	size_t len;
	long pid;
	int n;

	if (s->records >= MAX_RECORDS) {
		s->dropped++;
		return;
	}
	task_facts((pid_t)req->pid, &pid, comm, sizeof(comm));
	clock_gettime(CLOCK_REALTIME, &ts);
	n = snprintf(line, sizeof(line), "ev %c %s %d %c %ld %d %ld %lld.%06ld %llx,%llx,%llx,%llx,%llx,%llx ",
		     kind, name ? name : "-", req->data.nr, why ? why : '-', e ? (long)e->idx : -1L, err,
		     pid, (long long)ts.tv_sec, ts.tv_nsec / 1000,
		     (unsigned long long)req->data.args[0], (unsigned long long)req->data.args[1],
		     (unsigned long long)req->data.args[2], (unsigned long long)req->data.args[3],
		     (unsigned long long)req->data.args[4], (unsigned long long)req->data.args[5]);
	if (n < 0 || (size_t)n >= sizeof(line))
		return;
	len = (size_t)n;
	if (nt_hex(line, sizeof(line), &len, comm) < 0 || len + 2 > sizeof(line))
		return;
	line[len++] = ' ';
	if (nt_hex(line, sizeof(line), &len, p1) < 0 || len + 2 > sizeof(line))
		return;
	line[len++] = ' ';
	if (nt_hex(line, sizeof(line), &len, p2) < 0 || len + 2 > sizeof(line))
		return;
	line[len++] = '\n';
	if (write_all(s->events, line, len) == 0)
		s->records++;
}

/* Answer notification ID: errno ERR (the call fails), or CONTINUE when ERR
 * is 0.  ENOENT (the task died or was interrupted meanwhile) is not an
 * error.  Never fails. */
static void respond(int listener, unsigned long long id, int err)
{
	struct seccomp_notif_resp resp;

	memset(&resp, 0, sizeof(resp));
	resp.id = id;
	if (err != 0)
		resp.error = -err;
	else
		resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
	(void)ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);
}

/* Answer notification ID with a result, not CONTINUE: ERR 0 means the
 * call returns 0 (a captured connect whose socket was replaced), else it
 * fails with ERR.  Never fails. */
static void respond_result(int listener, unsigned long long id, int err)
{
	struct seccomp_notif_resp resp;

	memset(&resp, 0, sizeof(resp));
	resp.id = id;
	resp.error = -err;
	(void)ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);
}

/* The file status flags of task TID's descriptor FD (the "flags:" line of
 * /proc/TID/fdinfo/FD, octal), or -1. */
static int task_fd_flags(pid_t tid, int fd)
{
	char path[64], buf[512], *f;
	cleanup_fd int d = -1;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/fdinfo/%d", (int)tid, fd);
	d = (int)RETRY_EINTR(open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
	if (d < 0)
		return -1;
	n = read_all(d, buf, sizeof(buf) - 1);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	f = strstr(buf, "flags:");
	if (f == NULL)
		return -1;
	return (int)strtol(f + 6, NULL, 8);
}

/* Read "ASK ANSWER\n" (two keys of CAPTURE_KEY hex characters) from FD,
 * then close it.  Dies on anything else. */
static void read_capture_keys(int fd, struct sup *s)
{
	char buf[2 * CAPTURE_KEY + 3];
	ssize_t n = read_all(fd, buf, sizeof(buf));
	size_t i;

	close(fd);
	if (n != 2 * CAPTURE_KEY + 2 || buf[CAPTURE_KEY] != ' ' || buf[2 * CAPTURE_KEY + 1] != '\n')
		die("--capture-key-fd: expected two keys of %d hex characters", CAPTURE_KEY);
	for (i = 0; i < 2 * CAPTURE_KEY + 1; i++)
		if (i != CAPTURE_KEY && !((buf[i] >= '0' && buf[i] <= '9') || (buf[i] >= 'a' && buf[i] <= 'f')))
			die("--capture-key-fd: expected two keys of %d hex characters", CAPTURE_KEY);
	memcpy(s->key_ask, buf, CAPTURE_KEY);
	s->key_ask[CAPTURE_KEY] = '\0';
	memcpy(s->key_answer, buf + CAPTURE_KEY + 1, CAPTURE_KEY);
	s->key_answer[CAPTURE_KEY] = '\0';
}

/* Capture (docs/network.md, "Capture"): a TCP connect() to any address
 * but the proxy's own ports is not run.  This process connects to
 * safebox's capture listener on the host, says where the command wanted
 * to go ("capture ADDR:PORT KEY\n", KEY: the key safebox gave both), and
 * waits for the answer: 'y' and the proxy's own key (the filter allows the
 * destination: that connection is now the command's socket,
 * put in place of its descriptor with SECCOMP_IOCTL_NOTIF_ADDFD, and
 * connect() returns 0), anything else, end of file or silence for
 * CAPTURE_WAIT_MS (refused: EACCES, the errno of Landlock's refusal; the
 * proxy has already explained it).  Returns the errno to answer, or 0
 * once the descriptor is replaced.  Nothing is continued: the kernel never
 * runs a captured connect, so no address reaches the network around the
 * filter, and with this process gone the kernel answers ENOSYS. */
#define CAPTURE_WAIT_MS 10000
static int capture(const struct sup *s, const struct seccomp_notif *req, const struct nt_addr *addr)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)s->capture_port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct seccomp_notif_addfd af;
	struct pollfd p;
	char head[NT_PATH_MAX + 16 + CAPTURE_KEY], answer[1 + CAPTURE_KEY];
	int fd = (int)(unsigned)req->data.args[0], flags, n;
	cleanup_fd int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (c < 0 || RETRY_EINTR(connect(c, (struct sockaddr *)&to, sizeof(to))) < 0)
		return EACCES;
	n = snprintf(head, sizeof(head), "capture %s %s\n", addr->text, s->key_ask);
	if (n < 0 || (size_t)n >= sizeof(head) || write_all(c, head, (size_t)n) != 0)
		return EACCES;
	/* 'y' and the answer key: only safebox's proxy knows it, so a process
	 * that took the port (the proxy gone) cannot have a connection
	 * accepted. */
	for (n = 0; n < 1 + CAPTURE_KEY;) {
		ssize_t got;

		p.fd = c;
		p.events = POLLIN;
		if (RETRY_EINTR(poll(&p, 1, CAPTURE_WAIT_MS)) != 1)
			return EACCES;
		got = RETRY_EINTR(read(c, answer + n, (size_t)(1 + CAPTURE_KEY - n)));
		if (got <= 0 || answer[0] != 'y')
			return EACCES;
		n += (int)got;
	}
	if (memcmp(answer + 1, s->key_answer, CAPTURE_KEY) != 0)
		return EACCES;
	flags = task_fd_flags((pid_t)req->pid, fd);
	if (flags < 0)
		return EBADF;
	if ((flags & O_NONBLOCK) && fcntl(c, F_SETFL, O_NONBLOCK) < 0)
		return EACCES;
	memset(&af, 0, sizeof(af));
	af.id = req->id;
	af.flags = SECCOMP_ADDFD_FLAG_SETFD;
	af.srcfd = (unsigned)c;
	af.newfd = (unsigned)fd;
	af.newfd_flags = (unsigned)(flags & O_CLOEXEC);
	if (ioctl(s->listener, SECCOMP_IOCTL_NOTIF_ADDFD, &af) < 0)
		return EACCES;
	return 0;
}

/* UDP to the sandbox's DNS (198.18.0.53:53, docs/network.md "UDP"): a
 * connect() of a UDP socket there is not run either; a UDP socket of this
 * process, connected to the proxy's DNS on the host's 127.0.0.1 (the
 * capture port's number), takes the descriptor's place.  Returns the errno
 * to answer, or 0. */
static int capture_dns_udp(const struct sup *s, const struct seccomp_notif *req)
{
	struct sockaddr_in to = { .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)s->capture_port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct seccomp_notif_addfd af;
	int fd = (int)(unsigned)req->data.args[0], flags;
	cleanup_fd int c = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (c < 0 || connect(c, (struct sockaddr *)&to, sizeof(to)) < 0)
		return EACCES;
	flags = task_fd_flags((pid_t)req->pid, fd);
	if (flags < 0)
		return EBADF;
	if ((flags & O_NONBLOCK) && fcntl(c, F_SETFL, O_NONBLOCK) < 0)
		return EACCES;
	memset(&af, 0, sizeof(af));
	af.id = req->id;
	af.flags = SECCOMP_ADDFD_FLAG_SETFD;
	af.srcfd = (unsigned)c;
	af.newfd = (unsigned)fd;
	af.newfd_flags = (unsigned)(flags & O_CLOEXEC);
	if (ioctl(s->listener, SECCOMP_IOCTL_NOTIF_ADDFD, &af) < 0)
		return EACCES;
	return 0;
}

/* A path argument of task TID joined with its base: PATH at ADDR, relative
 * to DIRFD (NO_ARG: the cwd).  Returns 0 with OUT filled, or -1. */
static int path_arg(pid_t tid, unsigned long long addr, int dirfd, char *out, size_t cap)
{
	char raw[NT_PATH_MAX], base[NT_PATH_MAX];

	if (read_string(tid, addr, raw, sizeof(raw)) <= 0)
		return -1;
	if (raw[0] != '/' && base_dir(tid, dirfd, base, sizeof(base)) < 0)
		return -1;
	return nt_join(raw[0] == '/' ? NULL : base, raw, out, cap) < 0 ? -1 : 0;
}

/* The protocol of task TID's socket FD as the kernel names it ("TCP",
 * "UDP", "UDPv6", ...: the socket inode's system.sockprotoname attribute,
 * reached through /proc/TID/fd/FD as base_dir's readlink is), or "" when it
 * cannot be read.  Only letters, digits and '-' are kept: it goes into a
 * record. */
static void sock_proto(pid_t tid, int fd, char *out, size_t cap)
{
	char link[64];
	ssize_t n, i, j = 0;

	out[0] = '\0';
	if (fd < 0 || cap < 2)
		return;
	snprintf(link, sizeof(link), "/proc/%d/fd/%d", (int)tid, fd);
	n = getxattr(link, "system.sockprotoname", out, cap - 1);
	if (n <= 0) {
		out[0] = '\0';
		return;
	}
	for (i = 0; i < n && out[i] != '\0'; i++) {
		char ch = out[i];

		if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-')
			out[j++] = ch;
	}
	out[j] = '\0';
}

/* Fill *C for watch W from the notification: paths read and joined, flags.
 * Returns 0, or -1 when an argument cannot be read (no event then).  For
 * connect, *ADDR gets the address and C->op is NT_OP_UNIX only for a path
 * socket. */
static int gather(const struct seccomp_notif *req, const struct watch *w, struct nt_call *c, char *p1,
		  char *p2, struct nt_addr *addr)
{
	pid_t tid = (pid_t)req->pid;
	const __u64 *a = req->data.args;
	int dirfd = w->dirfd == NO_ARG ? AT_FDCWD_ARG : (int)(unsigned)a[w->dirfd];
	int dirfd2 = w->dirfd2 == NO_ARG ? AT_FDCWD_ARG : (int)(unsigned)a[w->dirfd2];

	memset(c, 0, sizeof(*c));
	c->exists1 = c->exists2 = NT_UNKNOWN;
	c->p1 = p1;
	switch (w->op) {
	case W_OPEN:
		c->op = NT_OP_OPEN;
		c->oflags = (unsigned long)a[w->flags];
		break;
	case W_OPENAT2: {
		__u64 how_flags;

		if (read_bytes(tid, a[w->flags], &how_flags, sizeof(how_flags)) < 0)
			return -1;
		c->op = NT_OP_OPEN;
		c->oflags = (unsigned long)how_flags;
		break;
	}
	case W_CREAT:
		c->op = NT_OP_OPEN;
		c->oflags = 0100 | 01 | 01000; /* O_CREAT|O_WRONLY|O_TRUNC */
		break;
	case W_MODIFY:
		c->op = NT_OP_MODIFY;
		break;
	case W_CREATE:
		c->op = NT_OP_CREATE;
		break;
	case W_REMOVE:
		c->op = NT_OP_REMOVE;
		break;
	case W_RENAME:
		c->op = NT_OP_RENAME;
		c->p2 = p2;
		break;
	case W_NEWNAME:
		c->op = NT_OP_CREATE; /* the new name only; P1 is read from path2 below */
		break;
	case W_EXEC:
		c->op = NT_OP_EXEC;
		if (w->flags != NO_ARG && (a[w->flags] & AT_EMPTY_PATH_FLAG))
			return -1; /* fexecve: no path to explain */
		break;
	case W_CHDIR:
		return -1;
	case W_CONNECT: {
		unsigned char sa[128];
		size_t len = a[2] > sizeof(sa) ? sizeof(sa) : (size_t)a[2];

		if (len < 2 || read_bytes(tid, a[1], sa, len) < 0 || nt_decode_sockaddr(sa, len, addr) < 0)
			return -1;
		if (addr->kind != NT_ADDR_UNIX_PATH)
			return 0;
		c->op = NT_OP_UNIX;
		if (addr->text[0] != '/' && base_dir(tid, AT_FDCWD_ARG, p2, NT_PATH_MAX) < 0)
			return -1;
		return nt_join(addr->text[0] == '/' ? NULL : p2, addr->text, p1, NT_PATH_MAX) < 0 ? -1 : 0;
	}
	}
	if (w->op == W_NEWNAME)
		return path_arg(tid, a[w->path2], dirfd2, p1, NT_PATH_MAX);
	if (path_arg(tid, a[w->path], dirfd, p1, NT_PATH_MAX) < 0)
		return -1;
	if (w->op == W_RENAME && path_arg(tid, a[w->path2], dirfd2, p2, NT_PATH_MAX) < 0)
		return -1;
	return 0;
}

/* Whether the last component of the call's path is followed. */
static int follows(const struct watch *w, const struct nt_call *c, const __u64 *a)
{
	switch (w->op) {
	case W_OPEN:
	case W_OPENAT2:
	case W_CREAT:
		/* O_CREAT|O_EXCL never follows; O_NOFOLLOW fails on a link (ELOOP). */
		return !(c->oflags & O_NOFOLLOW_FLAG) && !((c->oflags & 0100) && (c->oflags & 0200));
	case W_MODIFY:
		if (w->nofollow)
			return 0;
		return w->flags == NO_ARG || !(a[w->flags] & AT_SYMLINK_NOFOLLOW_FLAG);
	case W_EXEC:
	case W_CONNECT:
		return 1;
	case W_CREATE:
	case W_REMOVE:
	case W_RENAME:
	case W_NEWNAME:
	case W_CHDIR:
		return 0;
	}
	return 0;
}

/* One watched call: predict, answer CONTINUE, record a refusal.  The
 * answer is always sent, whatever fails on the way. */
static void handle_watch(struct sup *s, const struct seccomp_notif *req, const struct watch *w)
{
	static char p1[NT_PATH_MAX], p2[NT_PATH_MAX], r1[NT_PATH_MAX], r2[NT_PATH_MAX];
	struct nt_addr addr = { 0 };
	struct nt_call c;
	struct nt_verdict v = { 0 };
	char proto[32] = "";
	int refuse = 0, inet = 0;

	if (s->chdir_pending == (pid_t)req->pid)
		s->chdir_pending = 0; /* its chdir is done: caching is safe again */
	if (w->op == W_CHDIR || ++s->since_flush > CWD_CACHE_LIFE) {
		cwd_flush(s);
		if (w->op == W_CHDIR) {
			s->chdir_pending = (pid_t)req->pid;
			respond(s->listener, req->id, 0);
			return;
		}
	}
	if (gather(req, w, &c, p1, p2, &addr) == 0) {
		if (w->op == W_CONNECT && addr.kind != NT_ADDR_UNIX_PATH) {
			inet = addr.kind == NT_ADDR_INET && !(addr.loopback && nt_port_free(s->t, addr.port));
			/* TCP or not: Landlock refuses TCP only, and a UDP
			 * connect to loopback succeeds (safebox explains it). */
			if (inet)
				sock_proto((pid_t)req->pid, (int)(unsigned)req->data.args[0], proto, sizeof(proto));
			if (inet && s->capture_port != 0 && (strcmp(proto, "TCP") == 0 || strcmp(proto, "TCPv6") == 0)) {
				respond_result(s->listener, req->id, capture(s, req, &addr));
				return;
			}
			if (inet && s->capture_port != 0 && strcmp(proto, "UDP") == 0 &&
			    strcmp(addr.text, "198.18.0.53:53") == 0) {
				respond_result(s->listener, req->id, capture_dns_udp(s, req));
				return;
			}
		} else if (nt_decide(s->t, &c, &v)) {
			/* Maybe: look at the objects as the task sees them. */
			c.exists1 = resolve((pid_t)req->pid, p1, follows(w, &c, req->data.args), r1, sizeof(r1));
			c.p1 = r1;
			if (c.op == NT_OP_RENAME) {
				c.exists2 = resolve((pid_t)req->pid, p2, 0, r2, sizeof(r2));
				c.p2 = r2;
			}
			if (c.exists1 == NT_UNKNOWN)
				c.p1 = p1;
			refuse = nt_decide(s->t, &c, &v);
		}
	}
	/* Before a record: the notification must still be the one read (a
	 * task that died, and a new one with its pid, would otherwise be
	 * explained by our reads).  Not needed to answer CONTINUE: the answer
	 * to a stale notification fails with ENOENT and changes nothing. */
	if ((refuse || inet) && ioctl(s->listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &req->id) < 0) {
		respond(s->listener, req->id, 0);
		return;
	}
	if (refuse)
		emit(s, req, v.kind, w->name, v.why, v.e, 0, v.which == 2 ? c.p2 : c.p1,
		     c.op == NT_OP_RENAME ? (v.which == 2 ? c.p1 : c.p2) : NULL);
	else if (inet)
		emit(s, req, 'n', w->name, '-', NULL, 0, addr.text, proto[0] ? proto : NULL);
	respond(s->listener, req->id, 0);
}

/* Task TID's (a host thread id) /proc/TID/status KEY value where it lives
 * (nt_status_last), or -1. */
static long status_id(pid_t tid, const char *key)
{
	char path[64], buf[4096];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -1;
	n = RETRY_EINTR(read(fd, buf, sizeof(buf)));
	close(fd);
	return n > 0 ? nt_status_last(buf, (size_t)n, key) : -1;
}

/* Whether task TID lives in our pid namespace (its ids there are ours):
 * both /proc/PID/ns/pid links name one namespace.  0 when unsure (the link
 * needs ptrace read access: a non-dumpable task's is not ours to read). */
static int our_pid_ns(pid_t tid)
{
	char path[64];
	struct stat ours, its;

	snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)tid);
	return stat("/proc/self/ns/pid", &ours) == 0 && stat(path, &its) == 0 && ours.st_dev == its.st_dev &&
	       ours.st_ino == its.st_ino;
}

/* The host thread id of the thread the caller (host thread CALLER, of host
 * process HOST_TGID) calls TID where it lives (nt_comm_path: 0 itself, -1
 * its main thread), or -1 when its process has no such thread.  Whatever
 * it returns, the open of /proc/HOST_TGID/task/ID/comm finds only a thread
 * of HOST_TGID's group (the kernel's proc_task_lookup): an id of another
 * process there, or one that exited and was reused meanwhile, fails. */
static pid_t host_thread(pid_t caller, pid_t host_tgid, long tid)
{
	char path[64];
	struct dirent *d;
	pid_t found = -1;
	DIR *dir;

	if (tid == 0)
		return caller;
	if (tid == -1)
		return host_tgid;
	/* Without bubblewrap the command shares our pid namespace: TID is the
	 * host id, and no walk of the task list (two reads of a status per
	 * thread: a process of N threads naming each would cost N*N). */
	if (our_pid_ns(caller))
		return (pid_t)tid;
	if (tid == status_id(caller, "NSpid"))
		return caller;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)host_tgid);
	dir = opendir(path);
	if (dir == NULL)
		return -1;
	while (found < 0 && (d = readdir(dir)) != NULL) {
		const char *p = d->d_name;
		long t = 0;

		while (*p >= '0' && *p <= '9' && t <= NT_MAX_PID)
			t = t * 10 + (*p++ - '0');
		/* Only NSpid: the directory lists HOST_TGID's threads, and the
		 * open checks the group again (above). */
		if (*p == '\0' && t > 0 && t <= NT_MAX_PID && status_id((pid_t)t, "NSpid") == tid)
			found = (pid_t)t;
	}
	closedir(dir);
	return found;
}

/* Thread names: the one call the supervisor answers itself.  Naming another
 * thread of one's own process is pthread_setname_np(3), which glibc does by
 * writing /proc/self/task/TID/comm; Landlock cannot allow that file (its
 * rules are inodes fixed before the command runs, and every process and
 * thread gets new /proc inodes), so the write fails with EACCES, and NVIDIA's
 * driver then fails cuInit with CUDA_ERROR_OPERATING_SYSTEM (docs/gpu.md).
 * For an open of one of the exact spellings nt_comm_path takes, naming a
 * thread of the caller's own process, with write intent and no other flag,
 * the supervisor opens that thread's comm on the host and installs the
 * descriptor as the call's result (SECCOMP_ADDFD_FLAG_SEND, Linux 5.14).
 * Nothing else is ever opened: the path is built here from ids checked in
 * /proc, not resolved in the task's view; and the kernel checks again at
 * write(2) that the writer and the named thread share a thread group
 * (comm_write, fs/proc/base.c).  Returns 1 when answered, 0 to go on as
 * for any watched call (which then fails as before, and is reported). */
static int grant_thread_name(struct sup *s, const struct seccomp_notif *req, const struct watch *w)
{
	const unsigned long allowed = 03 | 0100 | 01000 | 02000000 | 0400 | 0100000;
	/* O_ACCMODE, O_CREAT, O_TRUNC, O_CLOEXEC, O_NOCTTY, O_LARGEFILE (x86-64 numbers, as the kernel sees them) */
	unsigned long fl;
	struct seccomp_notif_addfd add;
	char raw[48], path[96];
	long pid, tid, own;
	pid_t caller = (pid_t)req->pid, tgid, host;
	int fd, rc;

	if (w->op != W_OPEN)
		return 0;
	fl = (unsigned long)req->data.args[w->flags];
	if (((fl & 03) != O_WRONLY && (fl & 03) != O_RDWR) || (fl & ~allowed) != 0)
		return 0;
	if (read_string(caller, req->data.args[w->path], raw, sizeof(raw)) <= 0 || nt_comm_path(raw, &pid, &tid) < 0)
		return 0;
	tgid = (pid_t)status_id(caller, "Tgid");
	own = status_id(caller, "NStgid");
	if (tgid <= 0 || own <= 0 || (pid != 0 && pid != own))
		return 0; /* another process's thread: Landlock decides, as for any file */
	host = host_thread(caller, tgid, tid);
	if (host <= 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", (int)tgid, (int)host);
	fd = open(path, (int)(fl & 03) | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
	if (fd < 0)
		return 0;
	rc = -1;
	/* Still the notification read: the ids above were the caller's. */
	if (ioctl(s->listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &req->id) == 0) {
		memset(&add, 0, sizeof(add));
		add.id = req->id;
		add.flags = SECCOMP_ADDFD_FLAG_SEND;
		add.srcfd = (__u32)fd;
		add.newfd_flags = (__u32)(fl & O_CLOEXEC);
		rc = ioctl(s->listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add);
	}
	close(fd);
	return rc >= 0;
}

/* One notification.  A watched call goes on (handle_watch); any other is
 * on the denylist (the observing program notifies only for those two) and
 * gets EPERM, the errno of every rule the program turns into a
 * notification (builder/seccomp.py, notified()).  So a program and a
 * supervisor that do not match fail closed: a call is never continued
 * unless it is on the watch list, which holds no denied call. */
static void handle(struct sup *s, const struct seccomp_notif *req)
{
	const struct watch *w;

	if (SB_AUDIT_ARCH_NATIVE != 0 && req->data.arch != SB_AUDIT_ARCH_NATIVE) {
		respond(s->listener, req->id, EPERM);
		return;
	}
	w = find_watch(req->data.nr);
	if (w == NULL) {
		/* socket() is named: safebox tells glibc's quiet name-service probe
		 * (socket(AF_UNIX), refused) from the record alone, without
		 * loading a syscall table (docs/violations.md, "Records"). */
		emit(s, req, 's', req->data.nr == __NR_socket ? "socket" : NULL, '-', NULL, EPERM, NULL, NULL);
		respond(s->listener, req->id, EPERM);
		return;
	}
	if (!grant_thread_name(s, req, w))
		handle_watch(s, req, w);
}

/* Receive the listener descriptor safebox forwards on SOCK (one message,
 * one descriptor).  Returns it, or -1 when safebox closed the socket
 * without one (the helper could not observe). */
static int receive_listener(int sock)
{
	char tag;
	struct iovec iov = { .iov_base = &tag, .iov_len = 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *c;
	int fd;

	if (RETRY_EINTR(recvmsg(sock, &msg, MSG_CMSG_CLOEXEC)) != 1 || tag != 'N')
		return -1;
	c = CMSG_FIRSTHDR(&msg);
	if (c == NULL || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
	    c->cmsg_len != CMSG_LEN(sizeof(int)) || (msg.msg_flags & MSG_CTRUNC))
		return -1;
	memcpy(&fd, CMSG_DATA(c), sizeof(fd));
	return fd;
}

/* Read and check the table at PATH (regular, ours, 0600, bounded).  Dies
 * on any failure. */
static void load_table(const char *path, struct nt_table *t)
{
	cleanup_fd int fd = (int)RETRY_EINTR(open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
	cleanup_free char *buf = NULL;
	char err[256];
	struct stat st;
	ssize_t n;

	if (fd < 0)
		die_errno("cannot open observe table %s", path);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid() ||
	    (st.st_mode & 07777) != 0600 || st.st_size > NT_TABLE_MAX)
		die("observe table %s: not a regular 0600 file of ours, at most %d bytes", path, NT_TABLE_MAX);
	buf = xcalloc((size_t)st.st_size + 1, 1);
	n = read_all(fd, buf, (size_t)st.st_size + 1);
	if (n != st.st_size)
		die("observe table %s changed size while being read", path);
	if (nt_table_parse(buf, (size_t)n, t, err, sizeof(err)) < 0)
		die("%s: %s", path, err);
}

/* Allocate a notification buffer as large as the kernel's struct
 * (SECCOMP_GET_NOTIF_SIZES: it may grow), zeroed before every RECV. */
static size_t notif_size(void)
{
	struct seccomp_notif_sizes sizes;

	if (syscall(__NR_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) == 0 &&
	    sizes.seccomp_notif > sizeof(struct seccomp_notif))
		return sizes.seccomp_notif;
	return sizeof(struct seccomp_notif);
}

static volatile sig_atomic_t stopping;

/* SIGTERM from safebox: the command is gone; finish.  Async-signal-safe. */
static void on_term(int sig)
{
	(void)sig;
	stopping = 1;
}

/* The loop: answer notifications until safebox says the command is gone
 * (SIGTERM, sent until this process exits) or no task uses the filter any
 * more.  A blocking RECV, not poll() then RECV: one system call less per
 * notification, and with SYNC_WAKE_UP the notifying task and this process
 * hand the CPU to each other directly.  Returns 0, or -1 when the listener
 * failed. */
static int serve(struct sup *s)
{
	size_t size = notif_size();
	cleanup_free struct seccomp_notif *req = xcalloc(1, size);
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_term; /* no SA_RESTART: RECV returns EINTR */
	sigaction(SIGTERM, &sa, NULL);
	/* Linux 6.6: wake the notifying task on this CPU when answering, which
	 * takes the round trip from tens of microseconds to a few. */
	(void)ioctl(s->listener, SECCOMP_IOCTL_NOTIF_SET_FLAGS, SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP, 0);
	for (;;) {
		memset(req, 0, size);
		if (ioctl(s->listener, SECCOMP_IOCTL_NOTIF_RECV, req) == 0) {
			handle(s, req);
			continue;
		}
		if (errno == EINTR || errno == ENOENT) {
			/* ENOENT: the notifying task was interrupted, or (Linux
			 * 6.6's recv_wait_event) no task uses the filter any more.
			 * Whatever is still queued is answered first. */
			struct pollfd p = { .fd = s->listener, .events = POLLIN };
			int r = poll(&p, 1, 0);

			if (r == 1 && (p.revents & POLLIN))
				continue;
			if (stopping || (r == 1 && (p.revents & (POLLHUP | POLLERR))))
				return 0;
			continue;
		}
		/* The listener is unusable: the kernel answers ENOSYS from now
		 * on.  A failure, which safebox reports and ends the run for. */
		fprintf(stderr, "safebox-helper: --supervise: the seccomp listener failed: %s\n", strerror(errno));
		return -1;
	}
}

/* safebox starts this process with every signal blocked, in its own
 * process group.  A signal sent to safebox's group (the user's Ctrl-C, a
 * CI runner's SIGTERM) before the child left that group is pending now:
 * ignoring a signal discards its pending instance (signal(7)), so these are
 * dropped before anything is unblocked.  SIGTERM is the stop signal safebox
 * sends at the end (serve() installs its handler); it is discarded here too,
 * so only one sent from now on counts.  Never fails. */
static void ignore_group_signals(void)
{
	static const int sigs[] = { SIGINT, SIGQUIT, SIGHUP, SIGTERM, SIGPIPE, SIGUSR1, SIGUSR2,
				    SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU, SIGWINCH, SIGVTALRM, SIGPROF };
	sigset_t none;
	size_t i;

	for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], SIG_IGN);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/* Parse "--supervise --table PATH --events-fd N --listener-sock N" (dies
 * on anything else), receive the listener, serve.  See supervise.h. */
int supervise_main(int argc, char **argv)
{
	const char *table_path = NULL;
	int events = -1, sock = -1, i, rc = 0;
	unsigned long n;
	unsigned capture_port = 0;
	int key_fd = -1;
	struct nt_table t;
	static struct sup s; /* 256 KiB of cwd cache: not on the stack */
	pid_t parent = getppid();

	for (i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--table") == 0 && i + 1 < argc && table_path == NULL)
			table_path = argv[++i];
		else if (strcmp(argv[i], "--events-fd") == 0 && i + 1 < argc && events < 0 &&
			 policy_parse_uint(argv[i + 1], strlen(argv[i + 1]), 3, 1048576, &n) == 0)
			events = (int)n, i++;
		else if (strcmp(argv[i], "--capture-port") == 0 && i + 1 < argc && capture_port == 0 &&
			 policy_parse_uint(argv[i + 1], strlen(argv[i + 1]), 1, 65535, &n) == 0)
			capture_port = (unsigned)n, i++;
		else if (strcmp(argv[i], "--capture-key-fd") == 0 && i + 1 < argc && key_fd < 0 &&
			 policy_parse_uint(argv[i + 1], strlen(argv[i + 1]), 3, 1048576, &n) == 0)
			key_fd = (int)n, i++;
		else if (strcmp(argv[i], "--listener-sock") == 0 && i + 1 < argc && sock < 0 &&
			 policy_parse_uint(argv[i + 1], strlen(argv[i + 1]), 3, 1048576, &n) == 0)
			sock = (int)n, i++;
		else
			die("--supervise: unexpected argument '%s'", argv[i]);
	}
	if (table_path == NULL || events < 0 || sock < 0 || events == sock)
		die("--supervise needs --table, --events-fd and --listener-sock");
	/* Gone with safebox, even when it is SIGKILLed: nothing would read
	 * the records, and the sandbox is gone with it too. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != parent)
		die("--supervise: safebox exited before the supervisor started");
	ignore_group_signals();
	load_table(table_path, &t);
	memset(&s, 0, sizeof(s));
	the_sup = &s;
	s.t = &t;
	s.events = events;
	s.capture_port = capture_port;
	if ((capture_port != 0) != (key_fd >= 0))
		die("--supervise: --capture-port and --capture-key-fd go together");
	if (key_fd >= 0)
		read_capture_keys(key_fd, &s);
	s.listener = receive_listener(sock);
	close(sock);
	if (s.listener >= 0) {
		rc = serve(&s) < 0 ? 1 : 0;
		close(s.listener);
	}
	if (s.dropped > 0)
		dprintf(events, "dropped %lu\n", s.dropped);
	nt_table_free(&t);
	return rc;
}

/* 1 if the kernel has SECCOMP_RET_USER_NOTIF (supervise.h). */
int supervise_available(void)
{
	unsigned int action = SECCOMP_RET_USER_NOTIF;

	return syscall(__NR_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) == 0;
}
