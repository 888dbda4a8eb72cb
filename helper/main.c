/* main.c - safebox-helper: check the policy, apply the layers, exec.
 *
 * The contract is docs/helper-protocol.md; docs/layers.md explains main()
 * step by step.  Everything that can fail for reasons outside our control
 * (files, paths, the BPF blob, the proxy ports, bridges) is prepared before the first
 * restriction, then the layers are applied in one fixed order.
 */
#include "caps.h"
#include "compat.h"
#include "dirkeys.h"
#include "handoff.h"
#include "landlock.h"
#include "mounter.h"
#include "policy.h"
#include "publish.h"
#include "review.h"
#include "seccomp.h"
#include "status.h"
#include "supervise.h"
#include "util.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SAFEBOX_VERSION
#define SAFEBOX_VERSION "unknown"
#endif
#ifndef SAFEBOX_BUILD_ID
#define SAFEBOX_BUILD_ID "unknown"
#endif

#define USAGE "usage: safebox-helper --policy-file PATH [--status-fd N] [--handoff-fd N] "                        \
	      "[--sync-fd N [--enter-cwd DIR]] -- COMMAND [ARGS]... "                                             \
	      "| --supervise --table PATH --events-fd N --listener-sock N [--capture-port N --capture-key-fd N] " \
	      "| --mount --namespace-fd N --plan-fd N [--hold-fd N] "                                             \
	      "| --review --namespace-fd N --plan-fd N | --dir-keys | --probe | --version"

struct args {
	const char *policy_path;
	int status_fd;  /* -1: none */
	int handoff_fd; /* -1: none */
	int sync_fd;    /* -1: none */
	const char *enter_cwd;
	char **command;
};

/* A descriptor number given on the command line.  Dies unless it is a
 * plain decimal >= 3: 0..2 belong to the command, and a helper descriptor
 * there would be closed under it. */
static int parse_fd(const char *opt, const char *s)
{
	unsigned long n;

	if (policy_parse_uint(s, strlen(s), 3, 1048576, &n) < 0)
		die("%s: expected a descriptor number >= 3, got '%s'", opt, s);
	return (int)n;
}

/* Parse argv; dies with a usage error (125) on anything unexpected. */
static void parse_args(int argc, char **argv, struct args *a)
{
	int i;

	a->policy_path = NULL;
	a->status_fd = -1;
	a->handoff_fd = -1;
	a->sync_fd = -1;
	a->enter_cwd = NULL;
	a->command = NULL;
	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0) {
			a->command = &argv[i + 1];
			break;
		} else if (strcmp(argv[i], "--policy-file") == 0 && i + 1 < argc && !a->policy_path) {
			a->policy_path = argv[++i];
		} else if (strcmp(argv[i], "--status-fd") == 0 && i + 1 < argc && a->status_fd < 0) {
			a->status_fd = parse_fd("--status-fd", argv[++i]);
		} else if (strcmp(argv[i], "--handoff-fd") == 0 && i + 1 < argc && a->handoff_fd < 0) {
			a->handoff_fd = parse_fd("--handoff-fd", argv[++i]);
		} else if (strcmp(argv[i], "--sync-fd") == 0 && i + 1 < argc && a->sync_fd < 0) {
			a->sync_fd = parse_fd("--sync-fd", argv[++i]);
		} else if (strcmp(argv[i], "--enter-cwd") == 0 && i + 1 < argc && !a->enter_cwd) {
			a->enter_cwd = argv[++i];
		} else {
			die_hint(0, USAGE, "unexpected argument '%s'", argv[i]);
		}
	}
	if (a->policy_path == NULL || a->command == NULL || a->command[0] == NULL)
		die_hint(0, USAGE, "--policy-file, '--' and a command are required");
	if (a->status_fd >= 0 && a->status_fd == a->handoff_fd)
		die("--status-fd and --handoff-fd must differ");
	if (a->sync_fd >= 0 && (a->sync_fd == a->status_fd || a->sync_fd == a->handoff_fd))
		die("--sync-fd must differ from --status-fd and --handoff-fd");
	if (a->enter_cwd != NULL && a->sync_fd < 0)
		die_hint(0, USAGE, "--enter-cwd comes with --sync-fd");
}

/* The handshake of a big policy's mounter and of --review (docs/layers.md,
 * "Big policies"), before anything else: "R" out on FD, the line "G" back
 * once safebox has made its mounts, or exit 125 at once, silently (end of
 * file: safebox failed, and says why itself).  Then FD is closed and, with
 * ENTER_CWD, the working directory entered again: bubblewrap's chdir holds
 * the directory that was mounted there before, and an overlay made on it
 * since is seen only through a new look-up of its path.  (What a `sh -c`
 * stanza in front of the helper did, without the shell's exec.) */
static void sync_handshake(int fd, const char *enter_cwd)
{
	char got[2];
	size_t have = 0;
	ssize_t n;

	do
		n = write(fd, "R", 1);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		_exit(SB_EXIT_FAILURE);
	while (have < sizeof(got)) {
		n = read(fd, got + have, sizeof(got) - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			_exit(SB_EXIT_FAILURE);
		have += (size_t)n;
	}
	if (got[0] != 'G' || got[1] != '\n')
		_exit(SB_EXIT_FAILURE);
	close(fd);
	if (enter_cwd != NULL && chdir(enter_cwd) < 0)
		die_errno("cannot enter the working directory %s again after the mounts", enter_cwd);
}

/* The name of an errno that landlock_create_ruleset(2) or installing the
 * observing seccomp filter with a listener can return, "?" for any other.
 * Not strerrorname_np(): that is GLIBC_2.32, and the wheel's
 * manylinux tag is the newest glibc symbol the helper needs (build.py
 * manylinux_platform); the helper's own calls stay at GLIBC_2.17 or older. */
static const char *errno_name(int errnum)
{
	switch (errnum) {
	case EBUSY: return "EBUSY";
	case ENOSYS: return "ENOSYS";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EPERM: return "EPERM";
	case EINVAL: return "EINVAL";
	case EFAULT: return "EFAULT";
	case E2BIG: return "E2BIG";
	case ENOMEM: return "ENOMEM";
	case EMFILE: return "EMFILE";
	case ENFILE: return "ENFILE";
	case EACCES: return "EACCES";
	default: return "?";
	}
}

/* --probe: one JSON line on stdout.  Changes nothing.  Returns 0, or
 * SB_EXIT_FAILURE if stdout cannot be flushed; never dies. */
static int probe(void)
{
	int errnum;
	int abi = landlock_kernel_abi(&errnum);
	int nnp = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) >= 0;

	printf("{\"v\":1,\"version\":\"%s\",\"build_id\":\"%s\",\"landlock_abi\":%d", SAFEBOX_VERSION,
	       SAFEBOX_BUILD_ID, abi);
	if (abi == 0)
		printf(",\"landlock_errno\":\"%s\"", errno_name(errnum));
	printf(",\"seccomp\":%s,\"seccomp_notify\":%s,\"nnp\":%s}\n", seccomp_available() ? "true" : "false",
	       supervise_available() ? "true" : "false", nnp ? "true" : "false");
	return fflush(stdout) == 0 ? 0 : SB_EXIT_FAILURE;
}

/* A setuid/setgid helper would turn the caller's policy file into root's
 * sandbox; the helper is never installed so, and refuses if it is.  Dies if
 * real and effective ids differ. */
static void refuse_setuid(void)
{
	if (getuid() != geteuid() || getgid() != getegid())
		die("refusing to run setuid or setgid (real and effective ids differ)");
}

/* Validate the status fd and mark it close-on-exec, so that only the
 * helper ever writes to it.  Nothing for FD < 0; dies if it is not open
 * or F_SETFD fails. */
static void setup_status_fd(int fd)
{
	int flags;

	if (fd < 0)
		return;
	flags = fcntl(fd, F_GETFD);
	if (flags < 0)
		die_errno("--status-fd %d", fd);
	if (fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0)
		die_errno("--status-fd %d: F_SETFD", fd);
	util_set_status_fd(fd);
}

/* Open, check and parse the policy file into *POL.  Dies unless it is a
 * regular file (not a symlink) owned by our real uid, mode exactly 0600,
 * at most SB_POLICY_MAX bytes, and valid.  O_NONBLOCK: opening a FIFO
 * planted at the path would otherwise wait for a writer forever, before
 * fstat could refuse it (no effect on a regular file's reads). */
static void load_policy(const char *path, struct policy *pol)
{
	cleanup_fd int fd = (int)RETRY_EINTR(open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
	cleanup_free char *buf = NULL;
	char err[512];
	struct stat st;
	ssize_t n;

	if (fd < 0)
		die_hint(errno, errno == ELOOP ? "the policy file must not be a symlink" : NULL,
			 "cannot open policy file %s", path);
	if (fstat(fd, &st) < 0)
		die_errno("fstat policy file %s", path);
	if (!S_ISREG(st.st_mode))
		die("policy file %s is not a regular file", path);
	if (st.st_uid != getuid())
		die("policy file %s is owned by uid %u, not by the caller (uid %u)", path,
		    (unsigned)st.st_uid, (unsigned)getuid());
	if ((st.st_mode & 07777) != 0600)
		die("policy file %s has mode %04o, expected 0600", path, (unsigned)(st.st_mode & 07777));
	if (st.st_size > SB_POLICY_MAX)
		die("policy file %s is larger than %d bytes", path, SB_POLICY_MAX);
	/* Read one byte more than allowed, to notice a file that grew. */
	buf = xcalloc(SB_POLICY_MAX + 1, 1);
	n = read_all(fd, buf, SB_POLICY_MAX + 1);
	if (n < 0)
		die_errno("read policy file %s", path);
	if (n > SB_POLICY_MAX)
		die("policy file %s is larger than %d bytes", path, SB_POLICY_MAX);
	if (policy_parse(buf, (size_t)n, pol, err, sizeof(err)) < 0)
		die("%s: %s", path, err);
}

/* strict: refuse before changing anything if a requested layer cannot be
 * fully enforced (helper-protocol.md, key "strict").  Dies naming the first
 * shortfall; nothing when not strict. */
static void enforce_strict(const struct policy *pol, const struct ll_plan *ll,
			   const struct bpf_blob *bpf)
{
	if (!pol->strict)
		return;
	if (ll->fs != TRI_TRUE)
		die("strict: Landlock filesystem rules cannot be enforced (ABI %d, kernel ABI %d)",
		    ll->abi, ll->kernel_abi);
	if (ll->net == TRI_FALSE)
		die("strict: Landlock TCP rules need ABI 4, have %d", ll->abi);
	if (ll->scope == TRI_FALSE)
		die("strict: Landlock scopes need ABI 6, have %d", ll->abi);
	if (bpf->insns == NULL)
		die("strict: no seccomp program given");
}

/* The observing program needs a way to hand its listener to safebox.  Dies
 * when it is asked for without --handoff-fd, or the fd is not a socket. */
static void check_observe(const struct bpf_blob *observe, int fd)
{
	struct stat st;

	if (observe->insns == NULL)
		return;
	if (fd < 0)
		die("the policy asks for observation ('seccomp_observe') but no --handoff-fd was given");
	if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		die("--handoff-fd %d is not a socket", fd);
}

/* no_new_privs: execve can no longer grant privileges (setuid bits, file
 * capabilities), and it is what lets an unprivileged process use Landlock
 * and seccomp (Documentation/userspace-api/no_new_privs.rst).  Dies on
 * failure. */
static void set_no_new_privs(void)
{
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		die_errno("prctl(PR_SET_NO_NEW_PRIVS)");
}

/* Tie the command's life to the helper's parent (safebox itself on a
 * helper-only host, bwrap's reaper inside bwrap): when it dies, even by
 * SIGKILL, the kernel sends the command SIGKILL.  The setting survives
 * execve (prctl(2), PR_SET_PDEATHSIG; cleared only for set-user-ID or
 * file-capability binaries, which no_new_privs already neutralises).
 * PARENT is getppid() read at start: if it already differs, the parent
 * died before the prctl and the command must not start.  Dies on failure. */
static void die_with_parent(pid_t parent)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		die_errno("prctl(PR_SET_PDEATHSIG)");
	if (getppid() != parent)
		die("the calling process exited before the command could start");
}

/* Close every descriptor above 2 except KEEP1 and KEEP2 (-1: none):
 * nothing the helper or its caller opened may leak into the command.  Dies
 * on failure. */
static void close_fds_except(int keep1, int keep2)
{
	int keep[2] = { keep1 < keep2 ? keep1 : keep2, keep1 < keep2 ? keep2 : keep1 };
	unsigned int lo = 3;
	int i;

	for (i = 0; i < 2; i++) {
		if (keep[i] < (int)lo)
			continue;
		if (keep[i] > (int)lo && syscall(__NR_close_range, lo, (unsigned)keep[i] - 1, 0U) < 0)
			die_errno("close_range");
		lo = (unsigned)keep[i] + 1;
	}
	if (syscall(__NR_close_range, lo, ~0U, 0U) < 0)
		die_errno("close_range (needs Linux 5.9)");
}

/* Set the resource limits of the policy (soft = hard: the command, without
 * CAP_SYS_RESOURCE, can lower them but never raise them).  Inside bwrap's
 * user namespace RLIMIT_NPROC counts the sandbox's processes only (the
 * kernel counts per user namespace since 5.14, "ucounts"); on a helper-only
 * host every process of the user.  Nothing when the policy sets none; dies
 * on failure. */
static void set_rlimits(const struct policy *pol)
{
	struct rlimit rl;

	if (pol->rlimit_nproc) {
		rl.rlim_cur = rl.rlim_max = (rlim_t)pol->rlimit_nproc;
		if (setrlimit(RLIMIT_NPROC, &rl) < 0)
			die_errno("setrlimit(RLIMIT_NPROC, %lu)", pol->rlimit_nproc);
	}
	if (pol->rlimit_data) {
		rl.rlim_cur = rl.rlim_max = (rlim_t)pol->rlimit_data;
		if (setrlimit(RLIMIT_DATA, &rl) < 0)
			die_errno("setrlimit(RLIMIT_DATA, %lu)", pol->rlimit_data);
	}
}

/* Hand the observing filter's listener to safebox over FD: one message
 * tagged 'N' carrying it, or, when the kernel gave none, the message
 * "n ERRNONAME" (docs/helper-protocol.md, "Observation").  Closes the
 * listener and FD: the command holds neither.  Nothing when the policy asks
 * for no observation; dies when safebox cannot be told (the first observed
 * call would otherwise wait for an answer that never comes). */
static void observe_handoff(const struct bpf_blob *observe, int fd, int listener, int why)
{
	char msg[64];
	int n;

	if (observe->insns == NULL)
		return;
	if (listener >= 0) {
		handoff_send(fd, 'N', &listener, 1);
		close(listener);
	} else {
		n = snprintf(msg, sizeof(msg), "n %s", errno_name(why));
		if (RETRY_EINTR(send(fd, msg, (size_t)n, MSG_NOSIGNAL)) != n)
			die_errno("cannot tell safebox that observation is off");
	}
	close(fd);
}

/* Replace the helper with the command.  Never returns: exits 127 when the
 * command is not found, 126 when it cannot be executed (as env(1)). */
SB_NORETURN static void exec_command(char **command)
{
	int errnum;

	execvp(command[0], command);
	errnum = errno;
	dprintf(STDERR_FILENO, "safebox: cannot execute '%s': %s\n", command[0],
		strerror(errnum));
	_exit(errnum == ENOENT ? SB_EXIT_NOENT : SB_EXIT_NOEXEC);
}

/* Prepare, restrict, exec (docs/layers.md).  Returns only for --version and
 * --probe; otherwise execs the command or exits 126/127, and dies (125) on
 * any failure before that. */
int main(int argc, char **argv)
{
	struct args a;
	struct policy pol;
	struct ll_plan ll;
	struct bpf_blob bpf, observe;
	struct status st = { 0 };
	int listener, why;
	pid_t parent = getppid();

	if (argc == 2 && strcmp(argv[1], "--version") == 0)
		return printf("safebox-helper %s\n", SAFEBOX_VERSION) < 0 ? SB_EXIT_FAILURE : 0;
	if (argc == 2 && strcmp(argv[1], "--probe") == 0)
		return probe();
	if (argc >= 2 && strcmp(argv[1], "--supervise") == 0)
		return supervise_main(argc, argv);
	if (argc >= 2 && strcmp(argv[1], "--mount") == 0)
		return mounter_main(argc, argv);
	if (argc >= 2 && strcmp(argv[1], "--review") == 0)
		return review_main(argc, argv);
	if (argc >= 2 && strcmp(argv[1], "--dir-keys") == 0)
		return dirkeys_main(argc, argv);
	parse_args(argc, argv, &a);
	setup_status_fd(a.status_fd);
	if (a.sync_fd >= 0)
		sync_handshake(a.sync_fd, a.enter_cwd);

	/* The numbered sequence docs/layers.md quotes, its numbers in one column. */
	/* clang-format off */
	refuse_setuid();                                 /* 1 */
	die_with_parent(parent);
	load_policy(a.policy_path, &pol);                /* 2: parse, */
	landlock_prepare(&pol, &ll);                     /*    open every rule path, */
	seccomp_prepare(pol.seccomp_path, &bpf);         /*    read the BPF program, */
	seccomp_prepare(pol.observe_path, &observe);     /*    and the observing one, */
	enforce_strict(&pol, &ll, &bpf);
	check_observe(&observe, a.handoff_fd);
	st.bridges = handoff_listeners(&pol, a.handoff_fd); /* hand the proxy ports over, */
	st.bridges += publish_start(&pol, a.handoff_fd); /*    start and pin the publish bridges */
	set_no_new_privs();                              /* 3 */
	landlock_apply(&ll);                             /* 4 */
	close_fds_except(a.status_fd, observe.insns ? a.handoff_fd : -1); /* 5 */
	set_rlimits(&pol);                               /*    resource limits */
	caps_drop_all();                                 /* 6 */
	st.seccomp = seccomp_install_observed(&bpf, &observe, &listener, &why); /* 7 */
	observe_handoff(&observe, a.handoff_fd, listener, why);

	st.nnp = 1;
	st.caps = 1;
	st.abi = ll.abi;
	st.kernel_abi = ll.kernel_abi;
	st.fs = ll.fs;
	st.net = ll.net;
	st.scope = ll.scope;
	st.rules = ll.n_rules + ll.n_ports;
	st.skipped = ll.skipped;
	if (a.status_fd >= 0) {                          /* 8 */
		status_write_ok(a.status_fd, &st);
		util_set_status_fd(-1);
		close(a.status_fd);
	}
	exec_command(a.command);                         /* 9 */
	/* clang-format on */
}
