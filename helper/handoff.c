/* handoff.c - the proxy's ports inside the sandbox, accepted on the host.
 *
 * The sandbox's network namespace holds nothing but loopback.  A socket
 * belongs to the namespace it was created in (network_namespaces(7)), but
 * whoever holds its descriptor can accept() on it from any namespace, and
 * SCM_RIGHTS passes the descriptor itself (unix(7)).  So the helper, inside
 * and before any restriction, listens on 127.0.0.1:PORT (and [::1]:PORT) and
 * sends the listeners to safebox over the --handoff-fd socket; safebox's
 * proxy, on the host, accepts each connection and splices it to the
 * upstream.
 *
 * Why not a bridge process inside (socat, as before format v2): it ran in the
 * sandbox outside Landlock and seccomp, forked per connection, and copied
 * every byte through user space; the handoff removes all three
 * (docs/network.md, "Bridging"; figures in docs/benchmarks.md).
 */
#include "handoff.h"
#include "util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* safebox answers within this time or the helper gives up. */
#define HANDOFF_WAIT_MS 30000
/* One byte of payload: SCM_RIGHTS needs at least one, and it names the
 * message so that nothing else can be mistaken for a handoff. */
#define HANDOFF_TAG 'L'
#define HANDOFF_ACK 'k'
#define MAX_LISTENERS (2 * SB_MAX_BRIDGES) /* also bounds one message's descriptors */

/* Whether ::1 can be bound here (a kernel booted with ipv6.disable=1, or a
 * namespace whose lo has no ::1, cannot).  Never fails. */
static int ipv6_loopback_exists(void)
{
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	cleanup_fd int s = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);

	return s >= 0 && bind(s, (struct sockaddr *)&a, sizeof(a)) == 0;
}

/* A listening TCP socket on the loopback address of FAMILY, port PORT.
 * No SO_REUSEADDR/SO_REUSEPORT: nothing else may ever share the port, and a
 * fresh namespace has no TIME_WAIT sockets to step over.  Dies on failure
 * (the port in use inside is the likely cause, named in the message). */
static int listen_loopback(int family, uint16_t port)
{
	struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons(port), .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	const char *where = family == AF_INET ? "127.0.0.1" : "[::1]";
	int one = 1;
	int s = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (s < 0)
		die_errno("proxy port: socket for %s", where);
	if (family == AF_INET6 && setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0)
		die_errno("proxy port: IPV6_V6ONLY on %s", where);
	if ((family == AF_INET ? bind(s, (struct sockaddr *)&a4, sizeof(a4))
			       : bind(s, (struct sockaddr *)&a6, sizeof(a6))) < 0)
		die_errno("proxy port: cannot bind %s port %u", where, port);
	if (listen(s, SOMAXCONN) < 0)
		die_errno("proxy port: listen on %s port %u", where, port);
	return s;
}

/* Send the N listeners in FDS over SOCK in one message.  Dies on failure:
 * a refused or short send means safebox is gone or the fd is not its
 * socket, and the command must not start without its proxy. */
void handoff_send(int sock, char tag, const int *fds, size_t n)
{
	struct iovec iov = { .iov_base = &tag, .iov_len = 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int) * MAX_LISTENERS)];
		struct cmsghdr align;
	} ctl;
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = CMSG_SPACE(sizeof(int) * n) };
	struct cmsghdr *c;

	memset(&ctl, 0, sizeof(ctl));
	c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * n);
	memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
	if (RETRY_EINTR(sendmsg(sock, &msg, MSG_NOSIGNAL)) != 1)
		die_errno("cannot hand descriptors to safebox (tag '%c')", tag);
}

/* Wait until safebox says it accepts on the listeners.  Dies on timeout, on
 * end of file (safebox refused them, or died) or on any other byte: the
 * command starts only once its proxy is there. */
void handoff_wait_ack(int sock)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };
	char c;
	int r = (int)RETRY_EINTR(poll(&p, 1, HANDOFF_WAIT_MS));

	if (r < 0)
		die_errno("handoff: poll");
	if (r == 0)
		die("handoff: safebox did not take the descriptors within %d ms", HANDOFF_WAIT_MS);
	if (RETRY_EINTR(read(sock, &c, 1)) != 1 || c != HANDOFF_ACK)
		die("handoff: safebox refused the descriptors");
}

/* Listen on every "listen" port and hand the listeners to safebox over FD
 * (handoff.h).  Returns the number of ports; dies on any failure. */
unsigned long handoff_listeners(const struct policy *pol, int fd)
{
	int fds[MAX_LISTENERS];
	size_t n = 0, i;
	unsigned long ports = 0;
	struct stat st;
	int v6;

	for (i = 0; i < pol->n_bridges; i++)
		ports += pol->bridges[i].kind == BRIDGE_LISTEN;
	if (ports == 0)
		return 0;
	if (fd < 0)
		die("the policy asks for proxy ports ('listen') but no --handoff-fd was given");
	if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		die("--handoff-fd %d is not a socket", fd);
	v6 = ipv6_loopback_exists();
	for (i = 0; i < pol->n_bridges; i++) {
		if (pol->bridges[i].kind != BRIDGE_LISTEN)
			continue;
		fds[n++] = listen_loopback(AF_INET, pol->bridges[i].port);
		if (v6)
			fds[n++] = listen_loopback(AF_INET6, pol->bridges[i].port);
	}
	handoff_send(fd, HANDOFF_TAG, fds, n);
	/* safebox holds its own references now; ours must not reach the
	 * command, which could otherwise accept its own proxy connections. */
	for (i = 0; i < n; i++)
		close(fds[i]);
	handoff_wait_ack(fd);
	return ports;
}
