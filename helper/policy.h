/* policy.h - the helper policy file, format v3 (docs/helper-protocol.md).
 *
 * policy_parse() is pure: it takes bytes and returns a struct or an error
 * naming the line number and the key.  It makes no system calls other than
 * memory allocation, so it runs unchanged under the unit tests and libFuzzer.
 */
#ifndef SAFEBOX_POLICY_H
#define SAFEBOX_POLICY_H

#include <stddef.h>
#include <stdint.h>

/* SAFEBOX_POLICY_MAX: largest file.  Room for SB_MAX_FS rules of paths
 * averaging 120 bytes (hex-encoded: twice that); 1 MiB held 4,000. */
#define SB_POLICY_MAX (16 * 1024 * 1024)
#define SB_POLICY_LINE_MAX 16384 /* longest line, without its '\n' */
#define SB_PATH_MAX 4096         /* longest decoded path (PATH_MAX) */
#define SB_MAX_FS 65536
#define SB_MAX_PORTS 64
#define SB_MAX_BRIDGES 8
#define SB_RLIMIT_NPROC_MAX 4194304UL /* PID_MAX_LIMIT */
#define SB_RLIMIT_BYTES_MAX (1UL << 62)

enum fs_class {
	FS_READ,
	FS_READDIR,
	FS_DEV,
	FS_WRITE
};
enum net_mode {
	NET_UNSET,
	NET_OFF,
	NET_PROXY,
	NET_HOST
};

#define SB_SCOPE_BIT_ABSTRACT_UNIX 1U
#define SB_SCOPE_BIT_SIGNAL 2U

struct fs_rule {
	enum fs_class cls;
	char *path; /* decoded, NUL-terminated, absolute */
};

enum bridge_kind {
	BRIDGE_LISTEN,  /* "listen": a loopback listener handed to safebox's proxy */
	BRIDGE_PUBLISH, /* "publish": socat from a unix socket to the port inside */
};

struct bridge_spec {
	uint16_t port;
	char *sock_path; /* BRIDGE_PUBLISH only; NULL otherwise */
	enum bridge_kind kind;
};

struct policy {
	int strict;      /* 0 or 1 */
	int abi_max;     /* -1: not given */
	int landlock_on; /* default 1 */
	struct fs_rule *fs;
	size_t n_fs;
	enum net_mode net;
	uint16_t ports[SB_MAX_PORTS];
	size_t n_ports;
	int bind_any;    /* default 0 */
	unsigned scopes; /* SB_SCOPE_BIT_* */
	char *seccomp_path;
	char *observe_path; /* the observing program (seccomp_observe); NULL: none */
	char *socat_path;
	struct bridge_spec bridges[SB_MAX_BRIDGES];
	size_t n_bridges;
	unsigned long rlimit_nproc; /* 0: not set */
	unsigned long rlimit_data;  /* 0: not set */
};

/* Parse LEN bytes of BUF into *OUT.  Returns 0, or -1 with a message
 * ("line N: key 'K': reason") in ERR; on failure *OUT holds nothing that
 * needs freeing.  On success free with policy_free(). */
int policy_parse(const char *buf, size_t len, struct policy *out, char *err, size_t errlen);

/* Free what policy_parse() allocated.  Safe on a zeroed struct. */
void policy_free(struct policy *p);

/* Parse a decimal number without sign or leading zeros, MIN..MAX.
 * Returns 0, or -1 on any syntax or range error. */
int policy_parse_uint(const char *s, size_t len, unsigned long min, unsigned long max,
		      unsigned long *out);

/* The class name, for messages. */
const char *policy_fs_class_name(enum fs_class c);

#endif
