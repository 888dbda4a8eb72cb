/* probe.c - syscall probe for the security tests.
 *
 *   probe NAME [ARGS...]
 *
 * Performs one system call with harmless or deliberately invalid arguments
 * and exits with its errno (0 on success), printing "NAME: errno N (ENAME)".
 * Tests assert exact values: EPERM/ENOSYS for seccomp denials, EACCES for
 * Landlock, and the "harmless" errno (EBADF, EFAULT, EINVAL, ...) when the
 * call is allowed.  Modelled on bubblewrap's tests/try-syscall.c.
 * Exit 200 means a usage error, 201 that the call unexpectedly succeeded in a
 * way the probe cannot report (never expected).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_io_uring_setup
#define SYS_io_uring_setup 425
#endif

#define NOWHERE "/nonexistent/safebox-probe"

/* Each probe returns 0 or -1 with errno set. */
typedef long (*probe_fn)(char **args);

/* The probes read as a table, one line each where they fit. */
/* clang-format off */
static long p_getpid(char **a) { (void)a; return getpid() > 0 ? 0 : -1; }
/* ESRCH when allowed: no such pid. */
static long p_ptrace(char **a) { (void)a; return syscall(SYS_ptrace, 12 /* PTRACE_GETREGS */, 0x7ffffff0, 0, 0); }
static long p_process_vm_readv(char **a)
{
	char buf[1];
	struct iovec l = { buf, 1 }, r = { buf, 1 };

	(void)a;
	return syscall(SYS_process_vm_readv, 0x7ffffff0, &l, 1, &r, 1, 0);
}
static long p_bpf(char **a) { (void)a; return syscall(SYS_bpf, -1, NULL, 0); }
static long p_perf_event_open(char **a) { (void)a; return syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0); }
static long p_keyctl(char **a) { (void)a; return syscall(SYS_keyctl, -1, 0, 0, 0, 0); }
static long p_add_key(char **a) { (void)a; return syscall(SYS_add_key, NULL, NULL, NULL, 0, 0); }
static long p_request_key(char **a) { (void)a; return syscall(SYS_request_key, NULL, NULL, NULL, 0); }
static long p_userfaultfd(char **a) { (void)a; return syscall(SYS_userfaultfd, ~0U); }
static long p_io_uring_setup(char **a) { (void)a; return syscall(SYS_io_uring_setup, 0, NULL); }
static long p_mount(char **a) { (void)a; return mount("none", NOWHERE, "tmpfs", 0, NULL); }
static long p_umount2(char **a) { (void)a; return umount2(NOWHERE, 0); }
static long p_pivot_root(char **a) { (void)a; return syscall(SYS_pivot_root, NOWHERE, NOWHERE); }
static long p_kexec_load(char **a) { (void)a; return syscall(SYS_kexec_load, 0, 0, NULL, ~0UL); }
static long p_init_module(char **a) { (void)a; return syscall(SYS_init_module, NULL, 0, ""); }
static long p_finit_module(char **a) { (void)a; return syscall(SYS_finit_module, -1, "", 0); }
static long p_open_by_handle_at(char **a) { (void)a; return syscall(SYS_open_by_handle_at, -1, NULL, 0); }
static long p_unshare_user(char **a) { (void)a; return unshare(CLONE_NEWUSER); }

/* Raw clone (no glibc wrapper, so the flags reach the kernel as given). */
static long p_clone_newns(char **a)
{
	long pid = syscall(SYS_clone, CLONE_NEWNS | SIGCHLD, NULL, NULL, NULL, 0);

	(void)a;
	if (pid == 0)
		_exit(0);
	if (pid > 0)
		waitpid((pid_t)pid, NULL, 0);
	return pid < 0 ? -1 : 0;
}
/* size 0 is invalid: EINVAL when allowed (filters usually answer ENOSYS so
 * glibc falls back to clone, whose flags they can inspect). */
static long p_clone3(char **a) { (void)a; return syscall(SYS_clone3, NULL, 0); }
static long p_tiocsti(char **a) { char c = ' '; (void)a; return ioctl(0, TIOCSTI, &c); }
/* Junk in the upper 32 bits: the kernel truncates cmd to 32 bits, so a
 * filter comparing all 64 bits would miss it (CVE-2019-10063 class). */
static long p_tiocsti_hi(char **a) { char c = ' '; (void)a; return syscall(SYS_ioctl, 0, (1UL << 32) | TIOCSTI, &c); }
static long p_tioclinux(char **a) { char c = 0; (void)a; return ioctl(0, TIOCLINUX, &c); }

static long sock(int family, int type)
{
	int fd = socket(family, type, 0);

	if (fd < 0)
		return -1;
	close(fd);
	return 0;
}
static long p_socket_unix(char **a) { (void)a; return sock(AF_UNIX, SOCK_STREAM); }
static long p_socket_vsock(char **a) { (void)a; return sock(AF_VSOCK, SOCK_STREAM); }
static long p_socket_inet(char **a) { (void)a; return sock(AF_INET, SOCK_STREAM); }
static long p_socket_inet6(char **a) { (void)a; return sock(AF_INET6, SOCK_STREAM); }
static long p_socket_udp(char **a) { (void)a; return sock(AF_INET, SOCK_DGRAM); }
static long p_socketpair_unix(char **a)
{
	int sv[2];

	(void)a;
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return -1;
	close(sv[0]);
	close(sv[1]);
	return 0;
}

/* i386 system call through int $0x80 from this 64-bit process: a filter that
 * does not check the architecture sees 32-bit numbers as 64-bit ones. */
static long int80(long nr, long b, long c)
{
#if defined(__x86_64__)
	long ret;

	__asm__ volatile("int $0x80" : "=a"(ret) : "a"(nr), "b"(b), "c"(c), "d"(0L), "S"(0L), "D"(0L)
			 : "memory");
	if (ret < 0 && ret > -4096) {
		errno = (int)-ret;
		return -1;
	}
	return 0;
#else
	(void)nr, (void)b, (void)c;
	errno = ENOSYS;
	return -1;
#endif
}
static long p_int80_mount(char **a) { (void)a; return int80(21 /* i386 mount */, 0, 0); }
static long p_int80_unshare(char **a) { (void)a; return int80(310 /* i386 unshare */, CLONE_NEWUSER, 0); }

static long p_write_file(char **a)
{
	int fd = open(a[0], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

	if (fd < 0)
		return -1;
	if (write(fd, "safebox-probe\n", 14) != 14) {
		close(fd);
		return -1;
	}
	return close(fd);
}
static long p_read_file(char **a)
{
	char c;
	int fd = open(a[0], O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	if (read(fd, &c, 1) < 0) {
		close(fd);
		return -1;
	}
	return close(fd);
}
static long p_connect_tcp(char **a)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV };
	struct addrinfo *ai;
	int fd, rc;

	if (getaddrinfo(a[0], a[1], &hints, &ai) != 0) {
		errno = EINVAL;
		return -1;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	rc = fd < 0 ? -1 : connect(fd, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	return rc;
}
static long p_bind_tcp(char **a)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(a[0])),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	return fd < 0 ? -1 : bind(fd, (struct sockaddr *)&sa, sizeof(sa));
}
/* Connect to an abstract unix socket (Landlock scope abstract_unix). */
static long p_connect_abstract(char **a)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t n = strlen(a[0]);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (n > sizeof(sa.sun_path) - 1)
		n = sizeof(sa.sun_path) - 1;
	memcpy(sa.sun_path + 1, a[0], n);
	return fd < 0 ? -1 : connect(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n));
}
/* Signal 0 by default: permission check only (Landlock scope signal). */
static long p_kill(char **a) { return kill(atoi(a[0]), a[1] ? atoi(a[1]) : 0); }
static long p_setuid0(char **a) { (void)a; return setuid(0); }
/* clang-format on */
static long p_status(char **a)
{
	static const char *const keys[] = { "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:",
					    "NoNewPrivs:", "Seccomp:", "Seccomp_filters:" };
	char line[256];
	size_t i;
	FILE *f = fopen("/proc/self/status", "re");

	(void)a;
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f))
		for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
			if (strncmp(line, keys[i], strlen(keys[i])) == 0)
				fputs(line, stdout);
	fclose(f);
	return 0;
}

static const struct {
	const char *name;
	probe_fn fn;
	int nargs;    /* required arguments */
	int opt_args; /* optional arguments after them */
} probes[] = {
	{ "getpid", p_getpid, 0, 0 },
	{ "ptrace", p_ptrace, 0, 0 },
	{ "process_vm_readv", p_process_vm_readv, 0, 0 },
	{ "bpf", p_bpf, 0, 0 },
	{ "perf_event_open", p_perf_event_open, 0, 0 },
	{ "keyctl", p_keyctl, 0, 0 },
	{ "add_key", p_add_key, 0, 0 },
	{ "request_key", p_request_key, 0, 0 },
	{ "userfaultfd", p_userfaultfd, 0, 0 },
	{ "io_uring_setup", p_io_uring_setup, 0, 0 },
	{ "mount", p_mount, 0, 0 },
	{ "umount2", p_umount2, 0, 0 },
	{ "pivot_root", p_pivot_root, 0, 0 },
	{ "kexec_load", p_kexec_load, 0, 0 },
	{ "init_module", p_init_module, 0, 0 },
	{ "finit_module", p_finit_module, 0, 0 },
	{ "open_by_handle_at", p_open_by_handle_at, 0, 0 },
	{ "unshare_user", p_unshare_user, 0, 0 },
	{ "clone_newns", p_clone_newns, 0, 0 },
	{ "clone3", p_clone3, 0, 0 },
	{ "tiocsti", p_tiocsti, 0, 0 },
	{ "tiocsti_hi", p_tiocsti_hi, 0, 0 },
	{ "tioclinux", p_tioclinux, 0, 0 },
	{ "socket_unix", p_socket_unix, 0, 0 },
	{ "socket_vsock", p_socket_vsock, 0, 0 },
	{ "socketpair_unix", p_socketpair_unix, 0, 0 },
	{ "socket_inet", p_socket_inet, 0, 0 },
	{ "socket_inet6", p_socket_inet6, 0, 0 },
	{ "socket_udp", p_socket_udp, 0, 0 },
	{ "int80_mount", p_int80_mount, 0, 0 },
	{ "int80_unshare", p_int80_unshare, 0, 0 },
	{ "write_file", p_write_file, 1, 0 },
	{ "read_file", p_read_file, 1, 0 },
	{ "connect_tcp", p_connect_tcp, 2, 0 },
	{ "bind_tcp", p_bind_tcp, 1, 0 },
	{ "connect_abstract", p_connect_abstract, 1, 0 },
	{ "kill", p_kill, 1, 1 },
	{ "setuid0", p_setuid0, 0, 0 },
	{ "status", p_status, 0, 0 },
};

int main(int argc, char **argv)
{
	size_t i;

	if (argc >= 2 && strcmp(argv[1], "--list") == 0) {
		for (i = 0; i < sizeof(probes) / sizeof(probes[0]); i++)
			puts(probes[i].name);
		return 0;
	}
	for (i = 0; argc >= 2 && i < sizeof(probes) / sizeof(probes[0]); i++) {
		int given = argc - 2;
		long rc;
		int e;

		if (strcmp(argv[1], probes[i].name) != 0)
			continue;
		if (given < probes[i].nargs || given > probes[i].nargs + probes[i].opt_args)
			break;
		errno = 0;
		rc = probes[i].fn(&argv[2]);
		e = rc < 0 ? errno : 0;
		if (rc < 0 && e == 0)
			e = 201;
		printf("%s: errno %d (%s)\n", argv[1], e, e ? (strerrorname_np(e) ? strerrorname_np(e) : "?") : "OK");
		return e > 255 ? 201 : e;
	}
	fprintf(stderr, "usage: probe NAME [ARGS]  (probe --list)\n");
	return 200;
}
