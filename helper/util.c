/* util.c - see util.h. */
#include "util.h"
#include "status.h"

#include <stdio.h>
#include <string.h>

static int status_fd = -1;
static void (*die_hook)(void);

/* Set the fd die() also reports to (-1: none).  Never fails. */
void util_set_status_fd(int fd)
{
	status_fd = fd;
}

/* Set the hook die() runs once before exiting.  Never fails. */
void util_set_die_hook(void (*hook)(void))
{
	die_hook = hook;
}

/* Format, print, report and exit 125.  ERRNUM 0 means no strerror suffix.
 * Never returns; if the status fd write fails, prints to stderr instead. */
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

/* Print and report MSG, then exit 125.  Never returns. */
void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdie(0, NULL, fmt, ap);
}

/* As die(), with ": strerror(errno)" appended.  Never returns. */
void die_errno(const char *fmt, ...)
{
	int errnum = errno;
	va_list ap;

	va_start(ap, fmt);
	vdie(errnum, NULL, fmt, ap);
}

/* As die(), with ERRNUM's strerror (0: none) and a "hint:" line when HINT
 * is not NULL.  Never returns. */
void die_hint(int errnum, const char *hint, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdie(errnum, hint, fmt, ap);
}

/* Write all LEN bytes, retrying on EINTR and short writes.  Returns 0, or
 * -1 with errno set (part of BUF may have been written). */
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

/* Read until LEN bytes or EOF, retrying on EINTR.  Returns the count (short
 * only at EOF), or -1 with errno set. */
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

/* calloc that never returns NULL (a zero count or size counts as 1).
 * Dies when out of memory. */
void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (p == NULL)
		die("out of memory");
	return p;
}

/* cleanup_fd: close *FDP if open, preserving errno.  Never fails (close
 * errors are ignored). */
void cleanup_fdp(int *fdp)
{
	if (*fdp >= 0) {
		int saved = errno;

		close(*fdp);
		errno = saved;
	}
}

/* cleanup_free: free *PP (NULL is fine).  Never fails. */
void cleanup_freep(void *pp)
{
	free(*(void **)pp);
}
