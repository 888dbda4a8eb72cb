/* util.h - error exits, cleanup attributes and small I/O helpers.
 *
 * The helper never returns an error to a caller: every failure ends in die()
 * or die_errno(), which print one "safebox-helper: " line (plus at most one
 * "hint:" line), report the error on the status fd, and exit 125.  The
 * pattern follows bubblewrap's utils.h (die_with_error, cleanup_fd).
 */
#ifndef SAFEBOX_UTIL_H
#define SAFEBOX_UTIL_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#define SB_EXIT_FAILURE 125 /* the helper itself failed (as env(1), docker run) */
#define SB_EXIT_NOEXEC 126  /* the command exists but could not be executed */
#define SB_EXIT_NOENT 127   /* the command was not found */

#define SB_NORETURN __attribute__((noreturn))
#define SB_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))

/* Print "safebox-helper: MSG" and exit 125.  Never returns. */
SB_NORETURN SB_PRINTF(1, 2) void die(const char *fmt, ...);

/* As die(), appending ": strerror(errno)".  Never returns. */
SB_NORETURN SB_PRINTF(1, 2) void die_errno(const char *fmt, ...);

/* As die_errno() (errnum given explicitly), then one "hint: HINT" line.
 * HINT may be NULL.  Never returns. */
SB_NORETURN SB_PRINTF(3, 4) void die_hint(int errnum, const char *hint, const char *fmt, ...);

/* Called by die() before exiting, e.g. to stop bridges already started.
 * Must be async-signal-safe-ish: it runs once, on the failure path only. */
void util_set_die_hook(void (*hook)(void));

/* Where die() also reports the error as JSON ({"ok":false}); -1 for none. */
void util_set_status_fd(int fd);

/* Write all of BUF to FD, retrying on EINTR and short writes.
 * Returns 0, or -1 with errno set. */
int write_all(int fd, const void *buf, size_t len);

/* Read up to LEN bytes from FD until EOF, retrying on EINTR.
 * Returns the number of bytes read, or -1 with errno set. */
ssize_t read_all(int fd, void *buf, size_t len);

/* malloc/calloc that die on failure. */
void *xcalloc(size_t n, size_t size);

/* Retry EXPR while it fails with EINTR (glibc's TEMP_FAILURE_RETRY). */
#define RETRY_EINTR(expr)                             \
	({                                            \
		long _rc;                             \
		do                                    \
			_rc = (long)(expr);           \
		while (_rc == -1L && errno == EINTR); \
		_rc;                                  \
	})

/* Cleanup attributes, as bubblewrap's cleanup_fd/cleanup_free. */
void cleanup_fdp(int *fdp);
void cleanup_freep(void *pp);
#define cleanup_fd __attribute__((cleanup(cleanup_fdp)))
#define cleanup_free __attribute__((cleanup(cleanup_freep)))

#endif
