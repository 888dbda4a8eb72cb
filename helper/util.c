/* util.c - see util.h. */
#include "util.h"
#include "status.h"

#include <stdio.h>
#include <string.h>

static int status_fd = -1;
static void (*die_hook)(void);

void util_set_status_fd(int fd)
{
	status_fd = fd;
}

void util_set_die_hook(void (*hook)(void))
{
	die_hook = hook;
}

/* Format, print, report and exit.  ERRNUM 0 means no strerror suffix. */
SB_NORETURN SB_PRINTF(3, 0) static void vdie(int errnum, const char *hint, const char *fmt, va_list ap)
{
	char msg[1024];
	int n;

	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	if (n < 0)
		snprintf(msg, sizeof(msg), "(unformattable error)");
	if (errnum != 0) {
		size_t used = strlen(msg);
		snprintf(msg + used, sizeof(msg) - used, ": %s", strerror(errnum));
	}
	/* With a status fd, safebox reads the reason from it and prints the
	 * one `safebox:` line itself; printing here too would make two. */
	if (status_fd < 0 || status_write_error(status_fd, msg) < 0)
		dprintf(STDERR_FILENO, "safebox-helper: %s\n", msg);
	if (hint != NULL)
		dprintf(STDERR_FILENO, "hint: %s\n", hint);
	if (status_fd >= 0) {
		close(status_fd);
		status_fd = -1;
	}
	if (die_hook != NULL) {
		void (*hook)(void) = die_hook;

		die_hook = NULL; /* run once, even if the hook dies */
		hook();
	}
	_exit(SB_EXIT_FAILURE);
}

void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdie(0, NULL, fmt, ap);
}

void die_errno(const char *fmt, ...)
{
	int errnum = errno;
	va_list ap;

	va_start(ap, fmt);
	vdie(errnum, NULL, fmt, ap);
}

void die_hint(int errnum, const char *hint, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdie(errnum, hint, fmt, ap);
}

int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

ssize_t read_all(int fd, void *buf, size_t len)
{
	char *p = buf;
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, p + got, len - got);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (p == NULL)
		die("out of memory");
	return p;
}

void cleanup_fdp(int *fdp)
{
	if (*fdp >= 0) {
		int saved = errno;

		close(*fdp);
		errno = saved;
	}
}

void cleanup_freep(void *pp)
{
	free(*(void **)pp);
}
