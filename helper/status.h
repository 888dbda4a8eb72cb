/* status.h - the one JSON line written on --status-fd (helper-protocol.md). */
#ifndef SAFEBOX_STATUS_H
#define SAFEBOX_STATUS_H

#include <stddef.h>

/* Tri-state for "fs"/"net"/"scope": null when not requested. */
enum tri {
	TRI_NULL = -1,
	TRI_FALSE = 0,
	TRI_TRUE = 1
};

struct status {
	int abi;
	int kernel_abi;
	enum tri fs, net, scope;
	unsigned long rules, skipped;
	int nnp, caps, seccomp;
	unsigned long bridges;
};

/* Write the success line to FD.  Dies if the write fails: Python must not
 * run a command whose status it could not read. */
void status_write_ok(int fd, const struct status *st);

/* Best effort: write {"v":1,"ok":false,"error":MSG} to FD.  Used by die(),
 * so it never dies itself: returns -1 (errno set) when the write failed, so
 * the caller can fall back to stderr. */
int status_write_error(int fd, const char *msg);

/* Append S to OUT (capacity CAP, currently *LEN) as a JSON string body:
 * '"', '\\' and bytes < 0x20 or >= 0x7f escaped as \u00XX, so the line is
 * valid ASCII JSON whatever bytes a path holds.  Truncates silently. */
void json_escape(char *out, size_t cap, size_t *len, const char *s);

#endif
