/* sbprobe.c - tiny probe for the black-box tests in tests/security.
 *
 *   sbprobe unix_connect PATH      socket(AF_UNIX) + connect to a path socket
 *   sbprobe udp_send ADDR PORT     one UDP datagram "safebox-udp" to ADDR:PORT
 *   sbprobe raw_socket             socket(AF_INET, SOCK_RAW, IPPROTO_ICMP)
 *   sbprobe ids                    print "euid=N capeff=HEX" (setuid checks)
 *   sbprobe mount_tmpfs DIR        mount a tmpfs on an existing DIR
 *
 * Exit status: the errno of the failing call, 0 on success; 200 usage.
 * Complements tests/helper/probe.c (owned elsewhere) without editing it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int done(const char *what, int rc)
{
	int e = rc < 0 ? errno : 0;

	printf("%s: errno %d (%s)\n", what, e, e ? strerror(e) : "OK");
	return e;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "unix_connect") == 0) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);

		if (fd < 0)
			return done("socket", -1);
		strncpy(sa.sun_path, argv[2], sizeof(sa.sun_path) - 1);
		return done("connect", connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
	}
	if (argc == 4 && strcmp(argv[1], "udp_send") == 0) {
		struct addrinfo hints = { .ai_socktype = SOCK_DGRAM, .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV };
		struct addrinfo *ai;
		int fd;

		if (getaddrinfo(argv[2], argv[3], &hints, &ai) != 0)
			return 200;
		fd = socket(ai->ai_family, SOCK_DGRAM, 0);
		if (fd < 0)
			return done("socket", -1);
		return done("sendto", (int)sendto(fd, "safebox-udp", 11, 0, ai->ai_addr, ai->ai_addrlen));
	}
	if (argc == 3 && strcmp(argv[1], "mount_tmpfs") == 0)
		return done("mount", mount("none", argv[2], "tmpfs", 0, NULL));
	if (argc == 2 && strcmp(argv[1], "raw_socket") == 0)
		return done("socket", socket(AF_INET, SOCK_RAW, IPPROTO_ICMP));
	if (argc == 2 && strcmp(argv[1], "ids") == 0) {
		char line[256];
		FILE *f = fopen("/proc/self/status", "r");

		printf("euid=%d\n", (int)geteuid());
		while (f && fgets(line, sizeof(line), f))
			if (strncmp(line, "CapEff:", 7) == 0)
				printf("capeff=%s", line + 8);
		return 0;
	}
	fprintf(stderr, "usage: sbprobe unix_connect PATH | udp_send ADDR PORT | raw_socket | ids | mount_tmpfs DIR\n");
	return 200;
}
