/* notify.c - the violations feed's supervisor: pure parts (see notify.h).
 *
 * The table is written by python/safebox/violations/table.py, so anything
 * not in docs/violations.md is rejected, as helper/policy.c does for the
 * policy.  The decoders take bytes the sandboxed command controls: they
 * never read past the length they are given and are fuzzed
 * (tests/helper/fuzz_notify.c).
 */
#include "notify.h"
#include "policy.h" /* policy_parse_uint */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER "safebox-observe 1"
#define LINE_MAX_BYTES (2 * NT_PATH_MAX + 64)

/* Record a message for line LINENO in ERR.  Always returns -1. */
__attribute__((format(printf, 4, 5))) static int tfail(char *err, size_t errlen, size_t lineno,
						       const char *fmt, ...)
{
	char reason[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	snprintf(err, errlen, "observe table line %zu: %s", lineno, reason);
	return -1;
}

/* Whether the LEN bytes at S are exactly LIT.  Never fails. */
static int teq(const char *s, size_t len, const char *lit)
{
	return strlen(lit) == len && memcmp(s, lit, len) == 0;
}

/* The value of a lower-case hex digit, or -1.  Never fails. */
static int hexdigit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Decode LEN hex bytes at S into a new absolute path without NUL bytes.
 * Returns it, or NULL (bad hex, empty, relative, too long, no memory). */
static char *hex_path(const char *s, size_t len)
{
	char *out;
	size_t i;

	if (len == 0 || len % 2 != 0 || len / 2 >= NT_PATH_MAX)
		return NULL;
	out = malloc(len / 2 + 1);
	if (out == NULL)
		return NULL;
	for (i = 0; i < len; i += 2) {
		int hi = hexdigit(s[i]), lo = hexdigit(s[i + 1]);

		if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
			free(out);
			return NULL;
		}
		out[i / 2] = (char)(hi << 4 | lo);
	}
	out[len / 2] = '\0';
	if (out[0] != '/') {
		free(out);
		return NULL;
	}
	return out;
}

/* Order entries by path bytes (strcmp), for the binary search.  Never fails. */
static int entry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct nt_entry *)a)->path, ((const struct nt_entry *)b)->path);
}

/* "entry FLAGS HEXPATH".  Returns 0, or -1 (message set). */
static int key_entry(struct nt_table *t, size_t *cap, const char *v, size_t vlen, size_t lineno,
		     char *err, size_t errlen)
{
	const char *sp = memchr(v, ' ', vlen);
	unsigned flags = 0;
	size_t i;
	char *path;
	char norm[NT_PATH_MAX];

	if (sp == NULL)
		return tfail(err, errlen, lineno, "expected 'entry FLAGS HEXPATH'");
	if (teq(v, (size_t)(sp - v), "-")) {
		flags = 0;
	} else {
		for (i = 0; i < (size_t)(sp - v); i++) {
			unsigned bit = v[i] == 'w' ? NT_W : v[i] == 'c' ? NT_C
						    : v[i] == 'm'       ? NT_M
						    : v[i] == 'b'       ? NT_B
									: 0;

			if (bit == 0 || (flags & bit))
				return tfail(err, errlen, lineno, "bad flags (letters w, c, m, b, once each, or '-')");
			flags |= bit;
		}
	}
	if (t->n >= NT_MAX_ENTRIES)
		return tfail(err, errlen, lineno, "more than %d entries", NT_MAX_ENTRIES);
	path = hex_path(sp + 1, vlen - (size_t)(sp - v) - 1);
	if (path == NULL)
		return tfail(err, errlen, lineno, "bad path (lower-case hex of an absolute path)");
	/* One spelling per path: the lookup compares bytes. */
	if (nt_join("/", path, norm, sizeof(norm)) < 0 || strcmp(norm, path) != 0) {
		free(path);
		return tfail(err, errlen, lineno, "path is not normalised");
	}
	if (t->n == *cap) {
		size_t ncap = *cap ? *cap * 2 : 64;
		struct nt_entry *n = realloc(t->e, ncap * sizeof(*n));

		if (n == NULL) {
			free(path);
			return tfail(err, errlen, lineno, "out of memory");
		}
		t->e = n;
		*cap = ncap;
	}
	t->e[t->n].path = path;
	t->e[t->n].len = strlen(path);
	t->e[t->n].flags = flags;
	t->e[t->n].idx = (uint32_t)t->n;
	t->n++;
	return 0;
}

/* Dispatch one record.  Returns 0, or -1 (message set). */
static int table_record(struct nt_table *t, size_t *cap, int *seen_reads, const char *line, size_t len,
			size_t lineno, char *err, size_t errlen)
{
	const char *sp = memchr(line, ' ', len);
	const char *v;
	size_t klen, vlen;
	unsigned long a;

	if (sp == NULL || sp == line || (size_t)(sp - line) == len - 1)
		return tfail(err, errlen, lineno, "expected 'KEY VALUE'");
	klen = (size_t)(sp - line);
	v = sp + 1;
	vlen = len - klen - 1;
	if (v[0] == ' ' || v[vlen - 1] == ' ' || memmem(v, vlen, "  ", 2) != NULL)
		return tfail(err, errlen, lineno, "extra space");
	if (teq(line, klen, "reads")) {
		if (*seen_reads)
			return tfail(err, errlen, lineno, "duplicate 'reads'");
		*seen_reads = 1;
		if (policy_parse_uint(v, vlen, 0, 1, &a) < 0)
			return tfail(err, errlen, lineno, "'reads' takes 0 or 1");
		t->reads = (int)a;
	} else if (teq(line, klen, "entry")) {
		return key_entry(t, cap, v, vlen, lineno, err, errlen);
	} else if (teq(line, klen, "port")) {
		if (policy_parse_uint(v, vlen, 1, 65535, &a) < 0)
			return tfail(err, errlen, lineno, "expected 'port N' (1..65535)");
		if (t->n_ports >= NT_MAX_PORTS)
			return tfail(err, errlen, lineno, "more than %d ports", NT_MAX_PORTS);
		t->ports[t->n_ports++] = (uint16_t)a;
	} else {
		return tfail(err, errlen, lineno, "unknown key");
	}
	return 0;
}

/* Parse the table (notify.h).  Returns 0, or -1 with ERR set and *T freed. */
int nt_table_parse(const char *buf, size_t len, struct nt_table *t, char *err, size_t errlen)
{
	size_t pos = 0, lineno = 0, cap = 0, i;
	int ended = 0, seen_reads = 0;

	memset(t, 0, sizeof(*t));
	if (len > NT_TABLE_MAX) {
		tfail(err, errlen, 0, "file larger than %d bytes", NT_TABLE_MAX);
		return -1;
	}
	while (pos < len) {
		const char *line = buf + pos;
		const char *nl = memchr(line, '\n', len - pos);
		size_t llen;

		lineno++;
		if (ended) {
			tfail(err, errlen, lineno, "data after 'end'");
			goto bad;
		}
		if (nl == NULL) {
			tfail(err, errlen, lineno, "last line not terminated by a newline");
			goto bad;
		}
		llen = (size_t)(nl - line);
		pos += llen + 1;
		if (llen > LINE_MAX_BYTES || memchr(line, '\0', llen) != NULL ||
		    memchr(line, '\r', llen) != NULL || memchr(line, '\t', llen) != NULL) {
			tfail(err, errlen, lineno, "over-long line, or a NUL, CR or tab byte");
			goto bad;
		}
		if (lineno == 1) {
			if (!teq(line, llen, HEADER)) {
				tfail(err, errlen, lineno, "bad header (expected '" HEADER "')");
				goto bad;
			}
			continue;
		}
		if (teq(line, llen, "end")) {
			ended = 1;
			continue;
		}
		if (table_record(t, &cap, &seen_reads, line, llen, lineno, err, errlen) < 0)
			goto bad;
	}
	if (!ended) {
		tfail(err, errlen, lineno, "missing 'end' (truncated file?)");
		goto bad;
	}
	if (t->n > 0)
		qsort(t->e, t->n, sizeof(*t->e), entry_cmp);
	for (i = 1; i < t->n; i++)
		if (strcmp(t->e[i - 1].path, t->e[i].path) == 0) {
			tfail(err, errlen, 0, "duplicate entry for one path");
			goto bad;
		}
	return 0;
bad:
	nt_table_free(t);
	return -1;
}

/* Free the entries and zero *T.  Never fails. */
void nt_table_free(struct nt_table *t)
{
	size_t i;

	for (i = 0; i < t->n; i++)
		free(t->e[i].path);
	free(t->e);
	memset(t, 0, sizeof(*t));
}

/* Binary search for the entry whose path is the first LEN bytes of PATH.
 * Returns it, or NULL.  Never fails. */
static const struct nt_entry *find_prefix(const struct nt_table *t, const char *path, size_t len)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct nt_entry *e = &t->e[mid];
		int c = strncmp(e->path, path, len);

		if (c == 0 && e->len > len)
			c = 1; /* e->path is longer: it sorts after the prefix */
		if (c == 0)
			return e;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* The deepest entry at PATH or an ancestor (notify.h).  Never fails. */
const struct nt_entry *nt_lookup(const struct nt_table *t, const char *path)
{
	size_t len = strlen(path);

	if (path[0] != '/')
		return NULL;
	for (;;) {
		const struct nt_entry *e = find_prefix(t, path, len == 0 ? 1 : len);

		if (e != NULL)
			return e;
		if (len <= 1)
			return NULL;
		/* up to the previous '/', which is the root when it is the first byte */
		while (len > 0 && path[len - 1] != '/')
			len--;
		if (len > 1)
			len--; /* drop the '/' itself, except for the root */
	}
}

/* The entry exactly at PATH (notify.h).  Never fails. */
const struct nt_entry *nt_exact(const struct nt_table *t, const char *path)
{
	return find_prefix(t, path, strlen(path));
}

/* Whether PORT is a free loopback port (notify.h).  Never fails. */
int nt_port_free(const struct nt_table *t, unsigned port)
{
	size_t i;

	for (i = 0; i < t->n_ports; i++)
		if (t->ports[i] == port)
			return 1;
	return 0;
}

/* Append the LEN bytes at S as a component to OUT (normalising "." and
 * ".."), currently *OLEN long.  Returns 0, or -1 when it does not fit. */
static int push_component(char *out, size_t cap, size_t *olen, const char *s, size_t len)
{
	if (len == 0 || (len == 1 && s[0] == '.'))
		return 0;
	if (len == 2 && s[0] == '.' && s[1] == '.') {
		while (*olen > 0 && out[*olen - 1] != '/')
			(*olen)--;
		if (*olen > 1)
			(*olen)--; /* the '/' before the removed component, except the root's */
		out[*olen] = '\0';
		return 0;
	}
	if (*olen + (*olen > 1) + len + 1 > cap)
		return -1;
	if (*olen > 1)
		out[(*olen)++] = '/';
	memcpy(out + *olen, s, len);
	*olen += len;
	out[*olen] = '\0';
	return 0;
}

/* Push every component of S onto OUT.  Returns 0, or -1 when it does not fit. */
static int push_all(char *out, size_t cap, size_t *olen, const char *s)
{
	while (*s != '\0') {
		const char *slash = strchr(s, '/');
		size_t len = slash ? (size_t)(slash - s) : strlen(s);

		if (push_component(out, cap, olen, s, len) < 0)
			return -1;
		s += len;
		while (*s == '/')
			s++;
	}
	return 0;
}

/* Join and normalise (notify.h).  Returns the length, or -1. */
int nt_join(const char *base, const char *path, char *out, size_t cap)
{
	size_t olen = 1;

	if (cap < 2 || path[0] == '\0')
		return -1;
	out[0] = '/';
	out[1] = '\0';
	if (path[0] != '/') {
		if (base == NULL || base[0] != '/')
			return -1;
		if (push_all(out, cap, &olen, base) < 0)
			return -1;
	}
	if (push_all(out, cap, &olen, path) < 0)
		return -1;
	return (int)olen;
}

/* The parent of a normalised absolute path (notify.h). */
int nt_parent(const char *path, char *out, size_t cap)
{
	const char *slash = strrchr(path, '/');
	size_t len;

	if (slash == NULL)
		return -1;
	len = slash == path ? 1 : (size_t)(slash - path);
	if (len + 1 > cap)
		return -1;
	memcpy(out, path, len);
	out[len] = '\0';
	return (int)len;
}

/* A NUL-terminated string within LEN bytes (notify.h). */
long nt_cstring(const char *buf, size_t len)
{
	const char *nul = memchr(buf, '\0', len);

	return nul == NULL ? -1 : (long)(nul - buf);
}

/* Format the IPv4 address A (network order bytes) and PORT.  Never fails. */
static void inet4_text(const unsigned char *a, unsigned port, char *out, size_t cap)
{
	snprintf(out, cap, "%u.%u.%u.%u:%u", a[0], a[1], a[2], a[3], port);
}

/* Decode a sockaddr (notify.h).  Returns 0, or -1. */
int nt_decode_sockaddr(const unsigned char *buf, size_t len, struct nt_addr *out)
{
	unsigned family;

	memset(out, 0, sizeof(*out));
	if (len < 2)
		return -1;
	family = (unsigned)buf[0] | (unsigned)buf[1] << 8; /* sa_family_t, little-endian hosts */
	if (family == 1) {                                 /* AF_UNIX: sun_path follows, up to 108 bytes */
		size_t plen = len - 2 > 108 ? 108 : len - 2;
		const unsigned char *p = buf + 2;
		size_t n;

		if (plen == 0)
			return -1; /* unnamed: nothing to report */
		if (p[0] == '\0') {
			/* Abstract: every byte counts, NULs included; shown with
			 * NULs as '@', as ss(8) does. */
			if (plen < 2)
				return -1;
			for (n = 1; n < plen; n++)
				out->text[n - 1] = p[n] == '\0' ? '@' : (char)p[n];
			out->text[plen - 1] = '\0';
			out->kind = NT_ADDR_UNIX_ABSTRACT;
			return 0;
		}
		for (n = 0; n < plen && p[n] != '\0'; n++)
			out->text[n] = (char)p[n];
		out->text[n] = '\0';
		out->kind = NT_ADDR_UNIX_PATH;
		return 0;
	}
	if (family == 2 && len >= 8) { /* AF_INET: port (be16), addr */
		out->port = (unsigned)buf[2] << 8 | buf[3];
		inet4_text(buf + 4, out->port, out->text, sizeof(out->text));
		out->loopback = buf[4] == 127;
		out->kind = NT_ADDR_INET;
		return 0;
	}
	if (family == 10 && len >= 24) { /* AF_INET6: port, flowinfo, addr[16] */
		static const unsigned char v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
		static const unsigned char loop6[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 };
		const unsigned char *a = buf + 8;
		size_t pos = 0;
		int i;

		out->port = (unsigned)buf[2] << 8 | buf[3];
		if (memcmp(a, v4mapped, 12) == 0) {
			char v4[64];

			inet4_text(a + 12, out->port, v4, sizeof(v4));
			snprintf(out->text, sizeof(out->text), "[::ffff:%s", v4);
			/* "[::ffff:1.2.3.4:443" -> "[::ffff:1.2.3.4]:443" */
			{
				char *colon = strrchr(out->text, ':');
				size_t tail = strlen(colon);

				memmove(colon + 1, colon, tail + 1);
				*colon = ']';
			}
			out->loopback = a[12] == 127;
		} else {
			out->text[pos++] = '[';
			for (i = 0; i < 16; i += 2)
				pos += (size_t)snprintf(out->text + pos, sizeof(out->text) - pos, "%s%x",
							i ? ":" : "", (unsigned)a[i] << 8 | a[i + 1]);
			snprintf(out->text + pos, sizeof(out->text) - pos, "]:%u", out->port);
			out->loopback = memcmp(a, loop6, 16) == 0;
		}
		out->kind = NT_ADDR_INET;
		return 0;
	}
	out->kind = NT_ADDR_OTHER;
	return -1;
}

/* Append hex of S (notify.h).  Returns 0, or -1 when it does not fit. */
int nt_hex(char *out, size_t cap, size_t *len, const char *s)
{
	static const char digits[] = "0123456789abcdef";
	size_t n = s == NULL ? 0 : strlen(s), i;

	if (n == 0) {
		if (*len + 2 > cap)
			return -1;
		out[(*len)++] = '-';
		out[*len] = '\0';
		return 0;
	}
	if (*len + 2 * n + 1 > cap)
		return -1;
	for (i = 0; i < n; i++) {
		out[(*len)++] = digits[(unsigned char)s[i] >> 4];
		out[(*len)++] = digits[(unsigned char)s[i] & 15];
	}
	out[*len] = '\0';
	return 0;
}

/* Fill *V and return 1 (for `return refused(...)`).  Never fails. */
static int refused(struct nt_verdict *v, char kind, char why, const struct nt_entry *e, int which)
{
	v->kind = kind;
	v->why = why;
	v->e = e;
	v->which = which;
	return 1;
}

/* The entry deciding writes to an existing file at P when it refuses them,
 * else NULL.  No entry at all: no opinion (the writer always lists "/"). */
static const struct nt_entry *not_modifiable(const struct nt_table *t, const char *p)
{
	const struct nt_entry *e = nt_lookup(t, p);

	return e != NULL && !(e->flags & NT_W) ? e : NULL;
}

/* The entry refusing new or removed entries in P's directory, else NULL. */
static const struct nt_entry *not_creatable(const struct nt_table *t, const char *p)
{
	char dir[NT_PATH_MAX];
	const struct nt_entry *e;

	if (nt_parent(p, dir, sizeof(dir)) < 0)
		return NULL;
	e = nt_lookup(t, dir);
	return e != NULL && !(e->flags & NT_C) ? e : NULL;
}

/* The mask entry covering P, else NULL. */
static const struct nt_entry *masked(const struct nt_table *t, const char *p)
{
	const struct nt_entry *e = nt_lookup(t, p);

	return e != NULL && (e->flags & NT_M) ? e : NULL;
}

/* The mount-point entry exactly at P, else NULL. */
static const struct nt_entry *mount_point(const struct nt_table *t, const char *p)
{
	const struct nt_entry *e = nt_exact(t, p);

	return e != NULL && (e->flags & NT_B) ? e : NULL;
}

/* May exist (known to, or not looked at). */
static int may_exist(int x)
{
	return x == NT_EXISTS || x == NT_UNKNOWN;
}

/* May be absent with its parent present. */
static int may_be_absent(int x)
{
	return x == NT_ABSENT || x == NT_UNKNOWN;
}

/* open(2) and friends: see nt_decide().  Never fails. */
static int decide_open(const struct nt_table *t, const struct nt_call *c, struct nt_verdict *v)
{
	unsigned long acc = c->oflags & 3UL;        /* O_ACCMODE */
	int wr = acc != 0 || (c->oflags & 01000UL); /* O_WRONLY/O_RDWR, O_TRUNC */
	int creat = (c->oflags & 0100UL) != 0;      /* O_CREAT */
	int excl = creat && (c->oflags & 0200UL);   /* O_EXCL */
	const struct nt_entry *e;

	if (c->exists1 == NT_NO_PARENT)
		return 0;
	if (!wr && !creat)
		return t->reads && (e = masked(t, c->p1)) != NULL ? refused(v, 'r', 'M', e, 1) : 0;
	/* An existing file: opened for writing (O_CREAT without O_EXCL adds
	 * nothing); O_EXCL fails with EEXIST before the sandbox matters. */
	if (may_exist(c->exists1) && !(excl && c->exists1 == NT_EXISTS) && wr &&
	    (e = not_modifiable(t, c->p1)) != NULL)
		return refused(v, 'w', 'T', e, 1);
	/* A new file: its directory must take new entries. */
	if (creat && may_be_absent(c->exists1) && (e = not_creatable(t, c->p1)) != NULL)
		return refused(v, 'w', 'P', e, 1);
	if (!wr && t->reads && (e = masked(t, c->p1)) != NULL)
		return refused(v, 'r', 'M', e, 1);
	return 0;
}

/* Whether call C is refused (notify.h).  Never fails. */
int nt_decide(const struct nt_table *t, const struct nt_call *c, struct nt_verdict *v)
{
	const struct nt_entry *e;

	memset(v, 0, sizeof(*v));
	switch (c->op) {
	case NT_OP_OPEN:
		return decide_open(t, c, v);
	case NT_OP_MODIFY:
		if (may_exist(c->exists1) && (e = not_modifiable(t, c->p1)) != NULL)
			return refused(v, 'w', 'T', e, 1);
		return 0;
	case NT_OP_CREATE:
		if (may_be_absent(c->exists1) && (e = not_creatable(t, c->p1)) != NULL)
			return refused(v, 'w', 'P', e, 1);
		return 0;
	case NT_OP_REMOVE:
		if (!may_exist(c->exists1))
			return 0;
		if ((e = not_creatable(t, c->p1)) != NULL)
			return refused(v, 'w', 'P', e, 1);
		if ((e = mount_point(t, c->p1)) != NULL)
			return refused(v, 'w', 'B', e, 1);
		return 0;
	case NT_OP_RENAME:
		if (!may_exist(c->exists1) || c->p2 == NULL || c->exists2 == NT_NO_PARENT)
			return 0;
		if ((e = not_creatable(t, c->p1)) != NULL)
			return refused(v, 'w', 'P', e, 1);
		if ((e = mount_point(t, c->p1)) != NULL)
			return refused(v, 'w', 'B', e, 1);
		if ((e = not_creatable(t, c->p2)) != NULL)
			return refused(v, 'w', 'P', e, 2);
		if (may_exist(c->exists2) && (e = mount_point(t, c->p2)) != NULL)
			return refused(v, 'w', 'B', e, 2);
		return 0;
	case NT_OP_EXEC:
		return (e = masked(t, c->p1)) != NULL ? refused(v, 'x', 'M', e, 1) : 0;
	case NT_OP_UNIX:
		return (e = masked(t, c->p1)) != NULL ? refused(v, 'u', 'M', e, 1) : 0;
	}
	return 0;
}

/* A decimal id at *S: 1..NT_MAX_PID, no sign, no leading zero.  Advances
 * *S past it.  Returns it, or -1. */
static long parse_id(const char **s)
{
	const char *p = *s;
	long v = 0;

	if (*p < '1' || *p > '9')
		return -1;
	while (*p >= '0' && *p <= '9') {
		v = v * 10 + (*p - '0');
		if (v > NT_MAX_PID)
			return -1;
		p++;
	}
	*s = p;
	return v;
}

int nt_comm_path(const char *path, long *pid, long *tid)
{
	const char *p;

	if (strncmp(path, "/proc/", 6) != 0)
		return -1;
	p = path + 6;
	if (strcmp(p, "thread-self/comm") == 0) {
		*pid = 0;
		*tid = 0;
		return 0;
	}
	if (strncmp(p, "self/", 5) == 0) {
		*pid = 0;
		p += 5;
	} else {
		*pid = parse_id(&p);
		if (*pid < 0 || *p++ != '/')
			return -1;
	}
	if (strcmp(p, "comm") == 0) {
		*tid = -1;
		return 0;
	}
	if (strncmp(p, "task/", 5) != 0)
		return -1;
	p += 5;
	*tid = parse_id(&p);
	return *tid > 0 && strcmp(p, "/comm") == 0 ? 0 : -1;
}

long nt_status_last(const char *buf, size_t len, const char *key)
{
	size_t klen = strlen(key), i = 0;

	while (i < len) {
		const char *line = buf + i;
		const char *nl = memchr(line, '\n', len - i);
		size_t llen = nl ? (size_t)(nl - line) : len - i;

		if (llen > klen + 1 && memcmp(line, key, klen) == 0 && line[klen] == ':') {
			const char *p = line + klen + 1, *end = line + llen;
			long last = -1;

			while (p < end) {
				if (*p == ' ' || *p == '\t') {
					p++;
					continue;
				}
				if (*p < '1' || *p > '9')
					return -1;
				last = 0;
				while (p < end && *p >= '0' && *p <= '9') {
					last = last * 10 + (*p - '0');
					if (last > NT_MAX_PID)
						return -1;
					p++;
				}
			}
			return last;
		}
		i += llen + 1;
	}
	return -1;
}
