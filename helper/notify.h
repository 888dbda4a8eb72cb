/* notify.h - the violations feed's supervisor: pure parts.
 *
 * The supervisor (supervise.c, `safebox-helper --supervise`) runs on the
 * host, outside the sandbox, and answers the seccomp user notifications of
 * the observing filter the helper installed (docs/violations.md).  Everything
 * here is pure: the table parser, path joining, the table lookup and the
 * decoders of what is read from the sandboxed process's memory.  No system
 * calls other than memory allocation, so it runs unchanged under the unit
 * tests and libFuzzer (tests/helper/test_notify.c, fuzz_notify.c).
 */
#ifndef SAFEBOX_NOTIFY_H
#define SAFEBOX_NOTIFY_H

#include <stddef.h>
#include <stdint.h>

#define NT_TABLE_MAX (8 * 1024 * 1024) /* largest table file */
#define NT_MAX_ENTRIES 131072
#define NT_MAX_PORTS 64
#define NT_PATH_MAX 4096 /* PATH_MAX, with its NUL */

/* Entry flags: what the sandbox allows beneath the entry's path (the deepest
 * entry that is the path or one of its ancestors decides). */
#define NT_W 1U /* files may be modified (open for writing, truncate, chmod, ...) */
#define NT_C 2U /* entries may be created and removed (mkdir, O_CREAT, unlink, ...) */
#define NT_M 4U /* masked: reads are refused (deny-read) */
#define NT_B 8U /* the path itself is a mount point: unlink/rename of it fail */

struct nt_entry {
	char *path; /* decoded, absolute, normalised, NUL-terminated */
	size_t len; /* strlen(path) */
	unsigned flags;
	uint32_t idx; /* line order in the file, reported in records */
};

struct nt_table {
	int reads;          /* 1: reads (opens without write intent) are observed too */
	struct nt_entry *e; /* sorted by path bytes after parsing */
	size_t n;
	uint16_t ports[NT_MAX_PORTS]; /* loopback connects to these ports need no event */
	size_t n_ports;
};

/* Parse LEN bytes of BUF (docs/violations.md, "Supervisor table") into *T.
 * Returns 0, or -1 with a message ("line N: ...") in ERR; on failure *T holds
 * nothing that needs freeing.  On success free with nt_table_free(). */
int nt_table_parse(const char *buf, size_t len, struct nt_table *t, char *err, size_t errlen);

/* Free what nt_table_parse() allocated.  Safe on a zeroed struct. */
void nt_table_free(struct nt_table *t);

/* The deepest entry that is PATH (absolute, normalised) or one of its
 * ancestors, or NULL when none is.  Never fails. */
const struct nt_entry *nt_lookup(const struct nt_table *t, const char *path);

/* The entry exactly at PATH, or NULL.  Never fails. */
const struct nt_entry *nt_exact(const struct nt_table *t, const char *path);

/* Whether a loopback connect to PORT needs no event.  Never fails. */
int nt_port_free(const struct nt_table *t, unsigned port);

/* Join BASE (absolute; ignored when PATH is absolute) and PATH, and
 * normalise lexically into OUT (capacity CAP): one '/' between components,
 * "." dropped, ".." removes the previous component (never above "/"), no
 * trailing '/'.  Returns the length, or -1 when BASE is needed but not
 * absolute, PATH is empty, or the result does not fit. */
int nt_join(const char *base, const char *path, char *out, size_t cap);

/* Write the parent of the normalised absolute PATH into OUT ("/" for "/"
 * and for "/x").  Returns the length, or -1 when it does not fit. */
int nt_parent(const char *path, char *out, size_t cap);

/* A NUL-terminated string read from another process: the first LEN bytes
 * of BUF.  Returns the string length when a NUL lies within them, -1 when
 * none does (the string is longer than what was read, or not a string). */
long nt_cstring(const char *buf, size_t len);

/* What a connect(2) address names. */
enum nt_addr_kind {
	NT_ADDR_OTHER,
	NT_ADDR_UNIX_PATH,
	NT_ADDR_UNIX_ABSTRACT,
	NT_ADDR_INET
};

struct nt_addr {
	enum nt_addr_kind kind;
	char text[NT_PATH_MAX]; /* unix: the path (abstract: without the NUL); inet: "ADDR:PORT" */
	unsigned port;          /* inet only */
	int loopback;           /* inet only: 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104 */
};

/* Decode the LEN bytes of a struct sockaddr read from another process into
 * *OUT.  Returns 0, or -1 when the bytes are not a valid address of a family
 * the feed reports (too short, bad unix path); never reads past LEN. */
int nt_decode_sockaddr(const unsigned char *buf, size_t len, struct nt_addr *out);

/* What a watched call does, for nt_decide(). */
enum nt_op {
	NT_OP_OPEN,   /* open/openat/openat2/creat: FLAGS decide write intent */
	NT_OP_MODIFY, /* truncate, chmod, chown, utimes: an existing file */
	NT_OP_CREATE, /* mkdir, mknod, symlink, link: a new entry P1 */
	NT_OP_REMOVE, /* unlink, rmdir: the entry P1 */
	NT_OP_RENAME, /* rename: P1 to P2 */
	NT_OP_EXEC,   /* execve: P1 */
	NT_OP_UNIX,   /* connect to the unix socket P1 */
};

/* Existence as far as the supervisor knows. */
#define NT_EXISTS 1
#define NT_ABSENT 0     /* the path does not exist, its parent does */
#define NT_NO_PARENT -1 /* an ancestor is missing: the call fails with ENOENT whatever the sandbox says */
#define NT_UNKNOWN -2   /* not looked at (the lexical fast path) */

struct nt_call {
	enum nt_op op;
	unsigned long oflags; /* NT_OP_OPEN: the open flags */
	const char *p1;       /* absolute, normalised */
	const char *p2;       /* NT_OP_RENAME only */
	int exists1, exists2; /* NT_EXISTS .. NT_UNKNOWN */
};

struct nt_verdict {
	char kind;                /* 'w' write, 'r' read, 'x' exec, 'u' unix socket */
	char why;                 /* 'T' file not writable, 'P' directory refuses entries, 'B' mount point, 'M' masked */
	const struct nt_entry *e; /* the entry that decided (NULL: none) */
	int which;                /* 1: P1, 2: P2 */
};

/* Whether the sandbox refuses call C under table T.  With NT_UNKNOWN
 * existence the answer is "maybe" (1 when any existence could be refused):
 * the supervisor then looks at the paths and asks again.  Returns 1 and
 * fills *V when refused, 0 when not.  Never fails. */
int nt_decide(const struct nt_table *t, const struct nt_call *c, struct nt_verdict *v);

/* Append S as lower-case hex to OUT (capacity CAP, currently *LEN), or "-"
 * when S is NULL or empty.  Returns 0, or -1 when it does not fit (OUT is
 * then unchanged). */
int nt_hex(char *out, size_t cap, size_t *len, const char *s);

/* Thread names (supervise.c, grant_thread_name).  PATH names the comm file of
 * one thread of the caller's own process in one of exactly these spellings:
 *   /proc/self/task/TID/comm   /proc/PID/task/TID/comm   (that thread)
 *   /proc/thread-self/comm                               (the caller)
 *   /proc/self/comm            /proc/PID/comm            (the main thread)
 * with PID and TID decimal, 1..NT_MAX_PID, no sign or leading zero.  Returns
 * 0 with *PID (0 for "self"/"thread-self") and *TID (0: the caller, -1: the
 * main thread) set, or -1 for any other string.  Whose process PID is, is
 * the caller's to check. */
#define NT_MAX_PID 4194304L /* PID_MAX_LIMIT on 64-bit (include/linux/threads.h) */
int nt_comm_path(const char *path, long *pid, long *tid);

/* The last number on the line "KEY:\t..." of a /proc/PID/status text BUF
 * of LEN bytes (NSpid and NStgid list a task's ids from the outermost pid
 * namespace to its own, so the last is its id where it lives).  Returns it
 * (1..NT_MAX_PID), or -1 when the line is missing or malformed. */
long nt_status_last(const char *buf, size_t len, const char *key);

#endif
