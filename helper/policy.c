/* policy.c - parser for the helper policy file, format v3.
 *
 * Everything not explicitly allowed by docs/helper-protocol.md is rejected:
 * the writer is our own Python code, so any deviation means a bug or a
 * tampered file, and guessing would turn either into a weaker sandbox.
 */
#include "policy.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER "safebox-policy 3"

struct parser {
	struct policy *p;
	size_t lineno;
	const char *key; /* current key, for messages */
	size_t key_len;
	char *err;
	size_t errlen;
	/* keys that may appear at most once */
	int seen_strict, seen_abi_max, seen_landlock, seen_net, seen_bind;
	int seen_seccomp, seen_socat, seen_nproc, seen_data, seen_observe;
	size_t cap_fs;
};

/* Record an error for the current line and key in ps->err.  Always returns
 * -1, for `return fail(...)`; never fails itself. */
__attribute__((format(printf, 2, 3))) static int fail(struct parser *ps, const char *fmt, ...)
{
	char reason[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	if (ps->key != NULL)
		snprintf(ps->err, ps->errlen, "policy line %zu: key '%.*s': %s", ps->lineno,
			 (int)(ps->key_len > 64 ? 64 : ps->key_len), ps->key, reason);
	else
		snprintf(ps->err, ps->errlen, "policy line %zu: %s", ps->lineno, reason);
	return -1;
}

/* Parse a decimal MIN..MAX, without sign or leading zeros, into *OUT.
 * Returns 0, or -1 on any syntax or range error (*OUT untouched). */
int policy_parse_uint(const char *s, size_t len, unsigned long min, unsigned long max,
		      unsigned long *out)
{
	unsigned long v = 0;
	size_t i;

	if (len == 0 || len > 20)
		return -1;
	if (s[0] == '0' && len > 1) /* no leading zeros: one spelling per number */
		return -1;
	for (i = 0; i < len; i++) {
		unsigned long d;

		if (s[i] < '0' || s[i] > '9')
			return -1;
		d = (unsigned long)(s[i] - '0');
		/* v*10+d > max, written so that it never overflows */
		if (d > max || v > (max - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	if (v < min)
		return -1;
	*out = v;
	return 0;
}

/* The class name, for messages.  Never fails ("?" for an unknown class). */
const char *policy_fs_class_name(enum fs_class c)
{
	switch (c) {
	case FS_READ:
		return "read";
	case FS_READDIR:
		return "readdir";
	case FS_DEV:
		return "dev";
	case FS_WRITE:
		return "write";
	}
	return "?";
}

/* Whether the LEN bytes at S are exactly LIT.  Never fails. */
static int eq(const char *s, size_t len, const char *lit)
{
	return strlen(lit) == len && memcmp(s, lit, len) == 0;
}

/* The value of a lower-case hex digit.  Returns -1 for any other byte. */
static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f') /* lower case only: one spelling per path */
		return c - 'a' + 10;
	return -1;
}

/* Decode a hex path into a new string.  Fails (returns NULL, message set) on
 * empty, odd length, non-lower-hex, NUL byte, relative or over-long path. */
static char *decode_path(struct parser *ps, const char *s, size_t len)
{
	char *out;
	size_t i;

	if (len == 0) {
		fail(ps, "empty path");
		return NULL;
	}
	if (len % 2 != 0) {
		fail(ps, "odd hex length");
		return NULL;
	}
	if (len / 2 > SB_PATH_MAX) {
		fail(ps, "path longer than %d bytes", SB_PATH_MAX);
		return NULL;
	}
	out = malloc(len / 2 + 1);
	if (out == NULL) {
		fail(ps, "out of memory");
		return NULL;
	}
	for (i = 0; i < len; i += 2) {
		int hi = hexval(s[i]), lo = hexval(s[i + 1]);

		if (hi < 0 || lo < 0) {
			free(out);
			fail(ps, "bad hex (lower-case 0-9a-f only)");
			return NULL;
		}
		out[i / 2] = (char)(hi << 4 | lo);
		if (out[i / 2] == '\0') {
			free(out);
			fail(ps, "NUL byte in path");
			return NULL;
		}
	}
	out[len / 2] = '\0';
	if (out[0] != '/') {
		free(out);
		fail(ps, "path is not absolute");
		return NULL;
	}
	return out;
}

/* A value that is a single token: no space inside.  Returns 0, or -1
 * (message set) if it holds a space. */
static int single_token(struct parser *ps, const char *v, size_t len)
{
	if (memchr(v, ' ', len) != NULL)
		return fail(ps, "unexpected space in value");
	return 0;
}

/* Mark a key allowed once as seen.  Returns 0, or -1 (message set) if it
 * already was. */
static int once(struct parser *ps, int *seen)
{
	if (*seen)
		return fail(ps, "duplicate key (allowed once)");
	*seen = 1;
	return 0;
}

/* A single-token number MIN..MAX into *OUT.  Returns 0, or -1 (message set)
 * if it is not one. */
static int parse_number(struct parser *ps, const char *v, size_t len, unsigned long min,
			unsigned long max, unsigned long *out)
{
	if (single_token(ps, v, len) < 0)
		return -1;
	if (policy_parse_uint(v, len, min, max, out) < 0)
		return fail(ps, "not a number in %lu..%lu", min, max);
	return 0;
}

/* "fs CLASS HEXPATH": append a filesystem rule.  Returns 0, or -1 (message
 * set) on a bad class or path, too many entries, or out of memory. */
static int key_fs(struct parser *ps, const char *v, size_t len)
{
	struct policy *p = ps->p;
	const char *sp = memchr(v, ' ', len);
	enum fs_class cls;
	char *path;

	if (sp == NULL)
		return fail(ps, "expected 'CLASS HEXPATH'");
	if (eq(v, (size_t)(sp - v), "read"))
		cls = FS_READ;
	else if (eq(v, (size_t)(sp - v), "readdir"))
		cls = FS_READDIR;
	else if (eq(v, (size_t)(sp - v), "dev"))
		cls = FS_DEV;
	else if (eq(v, (size_t)(sp - v), "write"))
		cls = FS_WRITE;
	else
		return fail(ps, "unknown access class");
	if (single_token(ps, sp + 1, len - (size_t)(sp - v) - 1) < 0)
		return -1;
	if (p->n_fs >= SB_MAX_FS)
		return fail(ps, "more than %d entries", SB_MAX_FS);
	path = decode_path(ps, sp + 1, len - (size_t)(sp - v) - 1);
	if (path == NULL)
		return -1;
	if (p->n_fs == ps->cap_fs) {
		size_t ncap = ps->cap_fs ? ps->cap_fs * 2 : 16;
		struct fs_rule *n = realloc(p->fs, ncap * sizeof(*n));

		if (n == NULL) {
			free(path);
			return fail(ps, "out of memory");
		}
		p->fs = n;
		ps->cap_fs = ncap;
	}
	p->fs[p->n_fs].cls = cls;
	p->fs[p->n_fs].path = path;
	p->n_fs++;
	return 0;
}

/* Append a bridge entry: "listen" (SOCK NULL) and "publish" share one table
 * and one port space: a port is either handed to the proxy or published,
 * not both.  Takes ownership of SOCK, also on failure.  Returns 0, or -1
 * (message set) on a duplicate port or too many entries. */
static int add_bridge(struct parser *ps, unsigned long port, char *sock, enum bridge_kind kind)
{
	struct policy *p = ps->p;
	size_t i;

	for (i = 0; i < p->n_bridges; i++)
		if (p->bridges[i].port == port) {
			free(sock);
			return fail(ps, "duplicate port %lu", port);
		}
	if (p->n_bridges >= SB_MAX_BRIDGES) {
		free(sock);
		return fail(ps, "more than %d entries", SB_MAX_BRIDGES);
	}
	p->bridges[p->n_bridges].port = (uint16_t)port;
	p->bridges[p->n_bridges].sock_path = sock;
	p->bridges[p->n_bridges].kind = kind;
	p->n_bridges++;
	return 0;
}

/* "listen PORT".  Returns 0, or -1 (message set) on a bad or duplicate
 * port. */
static int key_listen(struct parser *ps, const char *v, size_t len)
{
	unsigned long port;

	if (parse_number(ps, v, len, 1, 65535, &port) < 0)
		return -1;
	return add_bridge(ps, port, NULL, BRIDGE_LISTEN);
}

/* "publish PORT HEXSOCKPATH".  Returns 0, or -1 (message set) on a bad
 * port or path, or a duplicate port. */
static int key_publish(struct parser *ps, const char *v, size_t len)
{
	const char *sp = memchr(v, ' ', len);
	unsigned long port;
	char *path;

	if (sp == NULL)
		return fail(ps, "expected 'PORT HEXSOCKPATH'");
	if (policy_parse_uint(v, (size_t)(sp - v), 1, 65535, &port) < 0)
		return fail(ps, "port not a number in 1..65535");
	if (single_token(ps, sp + 1, len - (size_t)(sp - v) - 1) < 0)
		return -1;
	path = decode_path(ps, sp + 1, len - (size_t)(sp - v) - 1);
	if (path == NULL)
		return -1;
	return add_bridge(ps, port, path, BRIDGE_PUBLISH);
}

/* "rlimit NAME N": a resource limit the helper sets before exec (nproc:
 * processes and threads; data: bytes of data segment), each at most once.
 * Returns 0, or -1 (message set) on an unknown name, a bad number or a
 * duplicate. */
static int key_rlimit(struct parser *ps, const char *v, size_t len)
{
	const char *sp = memchr(v, ' ', len);
	size_t nlen;

	if (sp == NULL)
		return fail(ps, "expected 'NAME N'");
	nlen = (size_t)(sp - v);
	if (eq(v, nlen, "nproc")) {
		if (once(ps, &ps->seen_nproc) < 0)
			return -1;
		return parse_number(ps, sp + 1, len - nlen - 1, 1, SB_RLIMIT_NPROC_MAX, &ps->p->rlimit_nproc);
	}
	if (eq(v, nlen, "data")) {
		if (once(ps, &ps->seen_data) < 0)
			return -1;
		return parse_number(ps, sp + 1, len - nlen - 1, 1, SB_RLIMIT_BYTES_MAX, &ps->p->rlimit_data);
	}
	return fail(ps, "expected 'nproc' or 'data'");
}

/* A path key allowed once, decoded into *DST.  Returns 0, or -1 (message
 * set) on a duplicate key or a bad path. */
static int key_path_once(struct parser *ps, int *seen, char **dst, const char *v, size_t len)
{
	if (once(ps, seen) < 0 || single_token(ps, v, len) < 0)
		return -1;
	*dst = decode_path(ps, v, len);
	return *dst == NULL ? -1 : 0;
}

/* Dispatch one "KEY VALUE" record.  Returns 0, or -1 (message set) on an
 * unknown key or a bad value. */
static int parse_record(struct parser *ps, const char *k, size_t klen, const char *v, size_t vlen)
{
	struct policy *p = ps->p;
	unsigned long n;

	ps->key = k;
	ps->key_len = klen;
	if (eq(k, klen, "strict")) {
		if (once(ps, &ps->seen_strict) < 0 || parse_number(ps, v, vlen, 0, 1, &n) < 0)
			return -1;
		p->strict = (int)n;
	} else if (eq(k, klen, "abi_max")) {
		if (once(ps, &ps->seen_abi_max) < 0 || parse_number(ps, v, vlen, 0, 255, &n) < 0)
			return -1;
		p->abi_max = (int)n;
	} else if (eq(k, klen, "landlock")) {
		if (once(ps, &ps->seen_landlock) < 0)
			return -1;
		if (eq(v, vlen, "on"))
			p->landlock_on = 1;
		else if (eq(v, vlen, "off"))
			p->landlock_on = 0;
		else
			return fail(ps, "expected 'on' or 'off'");
	} else if (eq(k, klen, "fs")) {
		return key_fs(ps, v, vlen);
	} else if (eq(k, klen, "net")) {
		if (once(ps, &ps->seen_net) < 0)
			return -1;
		if (eq(v, vlen, "off"))
			p->net = NET_OFF;
		else if (eq(v, vlen, "proxy"))
			p->net = NET_PROXY;
		else if (eq(v, vlen, "host"))
			p->net = NET_HOST;
		else
			return fail(ps, "expected 'off', 'proxy' or 'host'");
	} else if (eq(k, klen, "connect_port")) {
		if (parse_number(ps, v, vlen, 1, 65535, &n) < 0)
			return -1;
		if (p->n_ports >= SB_MAX_PORTS)
			return fail(ps, "more than %d entries", SB_MAX_PORTS);
		p->ports[p->n_ports++] = (uint16_t)n;
	} else if (eq(k, klen, "bind")) {
		if (once(ps, &ps->seen_bind) < 0)
			return -1;
		if (eq(v, vlen, "none"))
			p->bind_any = 0;
		else if (eq(v, vlen, "any"))
			p->bind_any = 1;
		else
			return fail(ps, "expected 'none' or 'any'");
	} else if (eq(k, klen, "scope")) {
		unsigned bit;

		if (eq(v, vlen, "abstract_unix"))
			bit = SB_SCOPE_BIT_ABSTRACT_UNIX;
		else if (eq(v, vlen, "signal"))
			bit = SB_SCOPE_BIT_SIGNAL;
		else
			return fail(ps, "expected 'abstract_unix' or 'signal'");
		if (p->scopes & bit)
			return fail(ps, "duplicate scope");
		p->scopes |= bit;
	} else if (eq(k, klen, "seccomp")) {
		return key_path_once(ps, &ps->seen_seccomp, &p->seccomp_path, v, vlen);
	} else if (eq(k, klen, "seccomp_observe")) {
		return key_path_once(ps, &ps->seen_observe, &p->observe_path, v, vlen);
	} else if (eq(k, klen, "socat")) {
		return key_path_once(ps, &ps->seen_socat, &p->socat_path, v, vlen);
	} else if (eq(k, klen, "listen")) {
		return key_listen(ps, v, vlen);
	} else if (eq(k, klen, "publish")) {
		return key_publish(ps, v, vlen);
	} else if (eq(k, klen, "rlimit")) {
		return key_rlimit(ps, v, vlen);
	} else {
		return fail(ps, "unknown key");
	}
	return 0;
}

/* Checks that need the whole file.  Returns 0, or -1 (message set) on a
 * missing required key or keys that contradict each other. */
static int check_complete(struct parser *ps)
{
	struct policy *p = ps->p;
	size_t i;

	if (!ps->seen_net)
		return fail(ps, "missing required key 'net'");
	/* The observing program replaces the plain one only where the kernel
	 * can observe; the plain one is the fallback, so it must be there. */
	if (p->observe_path != NULL && p->seccomp_path == NULL)
		return fail(ps, "'seccomp_observe' needs 'seccomp'");
	if (p->n_ports > 0 && p->net != NET_PROXY)
		return fail(ps, "'connect_port' needs 'net proxy'");
	for (i = 0; i < p->n_bridges; i++) {
		if (p->bridges[i].kind == BRIDGE_PUBLISH && p->socat_path == NULL)
			return fail(ps, "'publish' needs 'socat'");
		/* The handed-over listeners are the proxy's front door: without
		 * a proxy they would lead nowhere, so the writer never asks. */
		if (p->bridges[i].kind == BRIDGE_LISTEN && p->net != NET_PROXY)
			return fail(ps, "'listen' needs 'net proxy'");
	}
	return 0;
}

/* Free what policy_parse() allocated and zero *P.  Never fails. */
void policy_free(struct policy *p)
{
	size_t i;

	for (i = 0; i < p->n_fs; i++)
		free(p->fs[i].path);
	free(p->fs);
	for (i = 0; i < p->n_bridges; i++)
		free(p->bridges[i].sock_path);
	free(p->seccomp_path);
	free(p->observe_path);
	free(p->socat_path);
	memset(p, 0, sizeof(*p));
}

/* Validate one line's bytes (no '\n'): length, CR, tab, NUL, layout.
 * Returns 0 and sets the key and value spans, or -1 (message set). */
static int split_line(struct parser *ps, const char *line, size_t len, const char **v,
		      size_t *klen, size_t *vlen)
{
	const char *sp;

	if (len > SB_POLICY_LINE_MAX)
		return fail(ps, "line longer than %d bytes", SB_POLICY_LINE_MAX);
	if (memchr(line, '\r', len) != NULL)
		return fail(ps, "carriage return (CRLF line ending?)");
	if (memchr(line, '\t', len) != NULL)
		return fail(ps, "tab character");
	if (memchr(line, '\0', len) != NULL)
		return fail(ps, "NUL byte");
	sp = memchr(line, ' ', len);
	if (sp == NULL || sp == line || (size_t)(sp - line) == len - 1)
		return fail(ps, "expected 'KEY VALUE'");
	*klen = (size_t)(sp - line);
	*v = sp + 1;
	*vlen = len - *klen - 1;
	/* exactly one space between tokens, none leading or trailing */
	if ((*v)[0] == ' ' || (*v)[*vlen - 1] == ' ' || memmem(*v, *vlen, "  ", 2) != NULL) {
		ps->key = line;
		ps->key_len = *klen;
		return fail(ps, "extra space");
	}
	return 0;
}

/* Parse LEN bytes of BUF into *OUT.  Returns 0, or -1 with the message in
 * ERR and *OUT freed; never dies (this file is pure, see policy.h). */
int policy_parse(const char *buf, size_t len, struct policy *out, char *err, size_t errlen)
{
	struct parser ps;
	size_t pos = 0;
	int ended = 0;

	memset(out, 0, sizeof(*out));
	out->abi_max = -1;
	out->landlock_on = 1;
	memset(&ps, 0, sizeof(ps));
	ps.p = out;
	ps.err = err;
	ps.errlen = errlen;
	if (len > SB_POLICY_MAX) {
		fail(&ps, "file larger than %d bytes", SB_POLICY_MAX);
		return -1;
	}
	while (pos < len) {
		const char *line = buf + pos;
		const char *nl = memchr(line, '\n', len - pos);
		size_t llen, klen = 0, vlen = 0;
		const char *v = NULL;

		ps.lineno++;
		ps.key = NULL;
		if (ended) {
			fail(&ps, "data after 'end'");
			goto bad;
		}
		if (nl == NULL) {
			fail(&ps, "last line not terminated by a newline (truncated file?)");
			goto bad;
		}
		llen = (size_t)(nl - line);
		pos += llen + 1;
		if (ps.lineno == 1) {
			if (llen > SB_POLICY_LINE_MAX || !eq(line, llen, HEADER)) {
				fail(&ps, "bad header (expected '" HEADER "')");
				goto bad;
			}
			continue;
		}
		if (eq(line, llen, "end")) {
			ended = 1;
			continue;
		}
		if (split_line(&ps, line, llen, &v, &klen, &vlen) < 0)
			goto bad;
		if (parse_record(&ps, line, klen, v, vlen) < 0)
			goto bad;
	}
	ps.key = NULL;
	if (ps.lineno == 0) {
		fail(&ps, "empty file");
		goto bad;
	}
	if (!ended) {
		fail(&ps, "missing 'end' (truncated file?)");
		goto bad;
	}
	if (check_complete(&ps) < 0)
		goto bad;
	return 0;
bad:
	policy_free(out);
	return -1;
}
