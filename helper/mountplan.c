/* mountplan.c - parse the mounter's plan (format in mountplan.h).  Pure. */
#include "mountplan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Format a message into ERR.  Always returns -1, for "return fail(...)". */
static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* Whether PATH (NUL-terminated, LEN bytes) is absolute and normalised: no
 * empty, "." or ".." component, no trailing slash except for "/" itself.
 * The mounter joins paths to its scratch dir and walks them relative to
 * their parent, so an unnormalised one could name another place. */
static int normalised(const char *path, size_t len)
{
	const char *c = path + 1, *end = path + len;

	if (len == 0 || path[0] != '/')
		return 0;
	if (len == 1)
		return 1;
	while (c <= end) {
		const char *slash = memchr(c, '/', (size_t)(end - c));
		size_t n = (size_t)((slash ? slash : end) - c);

		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return 0;
		if (!slash)
			return 1;
		c = slash + 1;
	}
	return 0;
}

/* Whether PATH (LEN bytes, normalised) is DIR (normalised) or lies
 * beneath it. */
static int under(const char *path, size_t len, const char *dir)
{
	size_t n = strlen(dir);

	if (n == 1) /* "/" holds everything */
		return 1;
	return len >= n && memcmp(path, dir, n) == 0 && (len == n || path[n] == '/');
}

/* The next NUL-terminated field at *AT in BUF[0..LEN).  Returns its length,
 * or -1 if it runs off the end; advances *AT past its NUL. */
static long field(const char *buf, size_t len, size_t *at, const char **out)
{
	const char *nul = memchr(buf + *at, '\0', len - *at);
	long n;

	if (nul == NULL)
		return -1;
	*out = buf + *at;
	n = nul - *out;
	*at += (size_t)n + 1;
	return n;
}

int mount_plan_parse(const char *buf, size_t len, struct mount_plan *p, char *err, size_t errlen)
{
	size_t at = 0, cap = 0;

	memset(p, 0, sizeof(*p));
	while (at < len) {
		const char *letter, *path;
		long nl = field(buf, len, &at, &letter), np;

		if (nl < 0)
			return mount_plan_free(p), fail(err, errlen, "record %zu: no NUL after the operation", p->n + 1);
		np = field(buf, len, &at, &path);
		if (np < 0)
			return mount_plan_free(p), fail(err, errlen, "record %zu: no NUL after the path", p->n + 1);
		if (nl != 1 || strchr("SEWPRDFU", letter[0]) == NULL)
			return mount_plan_free(p), fail(err, errlen, "record %zu: unknown operation", p->n + 1);
		if (np >= MP_PATH_MAX || !normalised(path, (size_t)np))
			return mount_plan_free(p),
			       fail(err, errlen, "record %zu: not a normalised absolute path", p->n + 1);
		if (letter[0] == 'S') {
			if (p->scratch != NULL || p->n > 0)
				return mount_plan_free(p), fail(err, errlen, "the scratch dir is not the first record");
			p->scratch = path;
			continue;
		}
		if (p->scratch == NULL)
			return mount_plan_free(p), fail(err, errlen, "the plan does not begin with its scratch dir");
		if (letter[0] == 'E') {
			if (p->empty != NULL || p->n > 0)
				return mount_plan_free(p), fail(err, errlen, "the empty file is not the second record");
			p->empty = path;
			continue;
		}
		if ((letter[0] == 'F' || letter[0] == 'U') && p->empty == NULL)
			return mount_plan_free(p),
			       fail(err, errlen, "record %zu: a file mask without the empty file (E)", p->n + 1);
		if (under(path, (size_t)np, p->scratch))
			return mount_plan_free(p),
			       fail(err, errlen, "record %zu: at or beneath the scratch dir", p->n + 1);
		if (p->n == MP_OPS_MAX)
			return mount_plan_free(p), fail(err, errlen, "more than %d operations", MP_OPS_MAX);
		if (p->n == cap) {
			struct mp_op *more;

			cap = cap ? cap * 2 : 64;
			more = realloc(p->ops, cap * sizeof(*more));
			if (more == NULL)
				return mount_plan_free(p), fail(err, errlen, "out of memory");
			p->ops = more;
		}
		p->ops[p->n].op = letter[0];
		p->ops[p->n].path = path;
		p->n++;
	}
	if (p->scratch == NULL)
		return mount_plan_free(p), fail(err, errlen, "the plan does not begin with its scratch dir");
	return 0;
}

void mount_plan_free(struct mount_plan *p)
{
	free(p->ops);
	p->ops = NULL;
	p->n = 0;
	p->scratch = NULL;
	p->empty = NULL;
}
