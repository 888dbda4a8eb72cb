/* notify_floor.c - the floor of a seccomp user-notification round trip.
 *
 *     cc -O2 -o /tmp/notify_floor benchmarks/notify_floor.c
 *     /tmp/notify_floor N SYNC READ NOTIFY
 *
 * A child makes N openat(O_WRONLY|O_CREAT) calls on one file and prints the
 * time per call.  With NOTIFY=1 it runs under a one-rule filter that sends
 * every openat to this process, which answers CONTINUE at once: no table,
 * no record, only (READ=1) the path read with process_vm_readv, as the
 * violations supervisor does.  SYNC=1 sets SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
 * (Linux 6.6) on the listener.  NOTIFY=0 is the control: no filter.
 *
 * What it shows (docs/benchmarks.md, "Violations feed"): the round trip
 * itself, two context switches, costs more than the +5 % budget of a
 * file-heavy job allows per call, whatever the supervisor does.  A
 * benchmark, not a test.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#endif
#ifndef SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP 1UL
#endif

static void send_fd(int sock, int fd)
{
	char tag = 'x', buf[CMSG_SPACE(sizeof(int))];
	struct iovec io = { &tag, 1 };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = buf, .msg_controllen = sizeof(buf) };
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);

	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(h), &fd, sizeof(fd));
	if (sendmsg(sock, &m, 0) < 0)
		exit(1);
}

static int recv_fd(int sock)
{
	char tag, buf[CMSG_SPACE(sizeof(int))];
	struct iovec io = { &tag, 1 };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = buf, .msg_controllen = sizeof(buf) };
	int fd;

	if (recvmsg(sock, &m, 0) < 0 || CMSG_FIRSTHDR(&m) == NULL)
		exit(1);
	memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof(fd));
	return fd;
}

static void child(int sock, int n, int notify)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_openat, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { 4, f };
	struct timespec a, b;
	char go;

	if (notify) {
		int listener;

		prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
		listener = (int)syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
		if (listener < 0) {
			perror("seccomp");
			exit(1);
		}
		send_fd(sock, listener);
		close(listener);
	}
	if (read(sock, &go, 1) != 1)
		exit(1);
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < n; i++)
		close(openat(AT_FDCWD, "notify_floor.tmp", O_WRONLY | O_CREAT, 0644));
	clock_gettime(CLOCK_MONOTONIC, &b);
	unlink("notify_floor.tmp");
	printf("%.2f us/call\n", ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 1e3 / n);
	exit(0);
}

int main(int argc, char **argv)
{
	int sv[2], n, sync, readp, notify, listener;
	pid_t pid;

	if (argc != 5) {
		fprintf(stderr, "usage: %s N SYNC READ NOTIFY\n", argv[0]);
		return 2;
	}
	n = atoi(argv[1]), sync = atoi(argv[2]), readp = atoi(argv[3]), notify = atoi(argv[4]);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return 1;
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		child(sv[1], n, notify);
	}
	close(sv[1]);
	if (!notify) {
		(void)!write(sv[0], "g", 1);
		waitpid(pid, NULL, 0);
		return 0;
	}
	listener = recv_fd(sv[0]);
	if (sync && ioctl(listener, SECCOMP_IOCTL_NOTIF_SET_FLAGS, SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP, 0) < 0)
		perror("SECCOMP_IOCTL_NOTIF_SET_FLAGS");
	(void)!write(sv[0], "g", 1);
	for (;;) {
		struct seccomp_notif req;
		struct seccomp_notif_resp resp;
		char path[256];

		memset(&req, 0, sizeof(req));
		if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req) < 0)
			break; /* the child exited: no task uses the filter */
		if (readp) {
			struct iovec local = { path, sizeof(path) };
			struct iovec remote = { (void *)(uintptr_t)req.data.args[1], sizeof(path) };

			(void)process_vm_readv(req.pid, &local, 1, &remote, 1, 0);
		}
		memset(&resp, 0, sizeof(resp));
		resp.id = req.id;
		resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
		(void)ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);
	}
	waitpid(pid, NULL, 0);
	return 0;
}
