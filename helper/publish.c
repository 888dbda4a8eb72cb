/* publish.c - start the socat bridges of --publish before any restriction.
 *
 * A published port is the reverse of the proxy ports (handoff.c): the host
 * connects in, to a server the command runs.  safebox on the host cannot
 * create sockets in the sandbox's namespace, so socat listens on a unix
 * socket in the run dir and connects to 127.0.0.1:PORT inside.  The bridges
 * must run outside Landlock and seccomp (the command may neither create
 * unix sockets there nor keep them), so they are started first.  Double-forking
 * makes them grandchildren re-parented to the namespace's init: the command
 * never sees them as children (no stray SIGCHLD, wait() unaffected), and a
 * process group per bridge lets the helper kill them all if it fails later.
 */
#include "publish.h"
#include "handoff.h"
#include "util.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BRIDGE_WAIT_MS 2000
#define MAX_GROUPS SB_MAX_BRIDGES

static pid_t groups[MAX_GROUPS];
static size_t n_groups;

/* die() hook: stop every bridge started so far.  Never fails. */
static void kill_bridges(void)
{
	size_t i;

	for (i = 0; i < n_groups; i++)
		kill(-groups[i], SIGKILL);
}

/* socat parses its address arguments (',' ':' '!' and quoting are special),
 * so the socket path is limited to bytes that are never special.  Python
 * places the sockets in its own run dir, whose name fits.  Dies on any
 * other byte. */
static void check_sock_path(const char *path)
{
	const char *p;

	for (p = path; *p != '\0'; p++) {
		char c = *p;

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '/' || c == '.' || c == '_' || c == '-' || c == '+'))
			die("bridge socket path has a character socat would parse: 0x%02x",
			    (unsigned char)c);
	}
}

/* Grandchild: stdio to /dev/null, no inherited descriptors, exec socat.
 * Never returns; exits 127 if exec fails (the wait below then times out).
 * "-b 262144": socat copies through a buffer of this size (default 8192, so
 * 32 read/write pairs per 256 KiB); measured in docs/benchmarks.md. */
SB_NORETURN static void exec_socat(const char *socat, char *listen, char *connect)
{
	char *argv[] = { (char *)"socat", (char *)"-b", (char *)"262144", listen, connect, NULL };
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (null >= 0) {
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
	}
	syscall(__NR_close_range, 3U, ~0U, 0U);
	execv(socat, argv);
	_exit(127);
}

/* Double fork: the intermediate child makes a new process group, forks the
 * socat, and exits; we reap it.  Dies if either fork or the waitpid fails. */
static void spawn_socat(const char *socat, char *listen, char *connect)
{
	int status;
	pid_t mid = fork();

	if (mid < 0)
		die_errno("fork (bridge)");
	if (mid == 0) {
		pid_t gc;

		setpgid(0, 0);
		gc = fork();
		if (gc == 0)
			exec_socat(socat, listen, connect);
		_exit(gc < 0 ? 1 : 0);
	}
	/* Also set it from the parent, so kill(-mid) works without a race. */
	setpgid(mid, mid);
	groups[n_groups++] = mid;
	if (RETRY_EINTR(waitpid(mid, &status, 0)) < 0)
		die_errno("waitpid (bridge)");
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		die("bridge: fork of socat failed");
}

/* Poll every 10 ms until the unix socket PATH exists; dies after 2 s. */
static void wait_socket(const char *path)
{
	struct timespec tick = { 0, 10 * 1000 * 1000 };
	struct stat st;
	int waited;

	for (waited = 0; waited < BRIDGE_WAIT_MS; waited += 10) {
		if (stat(path, &st) == 0 && S_ISSOCK(st.st_mode))
			return;
		nanosleep(&tick, NULL);
	}
	die("published port's socket %s did not appear within %d ms", path, BRIDGE_WAIT_MS);
}

/* Start one socat per "publish" entry: a unix socket in the run dir's pub/
 * directory forwards to 127.0.0.1:PORT inside, where the command listens;
 * safebox exposes that socket on the host's 127.0.0.1:PORT.  Waits until
 * every socket exists.  Dies on failure, after killing the bridges started. */
/* Hand safebox an O_PATH descriptor of every publish socket (tag 'P', in
 * policy order) and wait for its answer.  safebox connects through these
 * descriptors only, never by name: the run dir's pub/ is writable inside,
 * and a command that replaced a socket with a symlink to a host socket
 * (ssh-agent, docker.sock) would otherwise get the host relay to connect
 * there (found in review).  Done before any restriction and before the
 * command exists, so what is pinned is what socat created.  Dies on
 * failure, including HANDOFF_FD < 0. */
static void pin_sockets(const struct policy *pol, int handoff_fd, unsigned long n)
{
	int fds[SB_MAX_BRIDGES];
	size_t i, k = 0;

	if (handoff_fd < 0)
		die("the policy publishes ports but no --handoff-fd was given");
	for (i = 0; i < pol->n_bridges; i++) {
		struct stat st;
		int fd;

		if (pol->bridges[i].kind != BRIDGE_PUBLISH)
			continue;
		fd = open(pol->bridges[i].sock_path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			die_errno("published port: open %s", pol->bridges[i].sock_path);
		if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
			die("published port: %s is not a socket", pol->bridges[i].sock_path);
		fds[k++] = fd;
	}
	if (k != n)
		die("published port: %zu sockets for %lu ports", k, n);
	handoff_send(handoff_fd, 'P', fds, k);
	for (i = 0; i < k; i++)
		close(fds[i]);
	handoff_wait_ack(handoff_fd);
}

unsigned long publish_start(const struct policy *pol, int handoff_fd)
{
	unsigned long n = 0;
	size_t i;

	for (i = 0; i < pol->n_bridges; i++) {
		const struct bridge_spec *b = &pol->bridges[i];
		char unixaddr[SB_PATH_MAX + 64], tcp[64];

		if (b->kind != BRIDGE_PUBLISH)
			continue;
		if (n++ == 0)
			util_set_die_hook(kill_bridges);
		check_sock_path(b->sock_path);
		snprintf(unixaddr, sizeof(unixaddr), "UNIX-LISTEN:%s,fork,unlink-early,mode=600",
			 b->sock_path);
		snprintf(tcp, sizeof(tcp), "TCP4:127.0.0.1:%u,nodelay", b->port);
		spawn_socat(pol->socat_path, unixaddr, tcp);
	}
	for (i = 0; i < pol->n_bridges; i++)
		if (pol->bridges[i].kind == BRIDGE_PUBLISH)
			wait_socket(pol->bridges[i].sock_path);
	if (n > 0)
		pin_sockets(pol, handoff_fd, n);
	return n;
}
