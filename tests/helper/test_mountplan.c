/* test_mountplan.c - table-driven tests of helper/mountplan.c (the
 * mounter's plan parser), TAP output; built and run under ASan+UBSan by
 * run.py.  Plans hold NULs, so each row gives its length. */
#include "mountplan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures, test_no;

static void ok(int cond, const char *name)
{
	test_no++;
	printf("%s %d - %s\n", cond ? "ok" : "not ok", test_no, name);
	failures += !cond;
}

#define ROW(name, lit, err)                     \
	{                                       \
		name, lit, sizeof(lit) - 1, err \
	}
#define S "S\0/run/x\0"

static const struct {
	const char *name, *body;
	size_t len;
	const char *err; /* NULL: must parse */
} rows[] = {
	ROW("scratch alone", S, NULL),
	ROW("every operation", S "E\0/run/x/empty\0W\0/w\0P\0/w/p\0R\0/w/p/r\0D\0/h/.ssh\0F\0/h/.netrc\0", NULL),
	ROW("a file mask without the empty file", S "F\0/h/.netrc\0", "without the empty file"),
	ROW("a host socket's mask", S "E\0/run/x/empty\0F\0/h/.netrc\0U\0/var/run/docker.sock\0", NULL),
	ROW("a host socket's mask without the empty file", S "U\0/var/run/docker.sock\0", "without the empty file"),
	ROW("a host socket's mask beneath the scratch dir", S "E\0/e\0U\0/run/x/proxy.sock\0",
	    "at or beneath the scratch dir"),
	ROW("the empty file twice", S "E\0/e\0E\0/e\0", "not the second record"),
	ROW("the empty file after an operation", S "R\0/a\0E\0/e\0", "not the second record"),
	ROW("the empty file before the scratch dir", "E\0/e\0S\0/s\0", "does not begin with its scratch dir"),
	ROW("an operation at the scratch dir", S "R\0/run/x\0", "at or beneath the scratch dir"),
	ROW("an operation beneath the scratch dir", S "D\0/run/x/y\0", "at or beneath the scratch dir"),
	ROW("a write root above the scratch dir is no operation beneath it", S "W\0/run\0", NULL),
	ROW("a sibling sharing the scratch dir's prefix", S "R\0/run/xy\0", NULL),
	ROW("scratch at /: every operation lies beneath it", "S\0/\0R\0/a\0", "at or beneath the scratch dir"),
	ROW("root as a path", S "R\0/\0", NULL),
	ROW("empty plan", "", "does not begin with its scratch dir"),
	ROW("no scratch", "R\0/a\0", "does not begin with its scratch dir"),
	ROW("scratch twice", S S, "not the first record"),
	ROW("scratch after an operation", "S\0/s\0R\0/a\0S\0/t\0", "not the first record"),
	ROW("unknown letter", S "X\0/a\0", "unknown operation"),
	ROW("two letters", S "RW\0/a\0", "unknown operation"),
	ROW("empty letter", S "\0/a\0", "unknown operation"),
	ROW("relative path", S "R\0a\0", "not a normalised absolute path"),
	ROW("empty path", S "R\0\0", "not a normalised absolute path"),
	ROW("trailing slash", S "R\0/a/\0", "not a normalised absolute path"),
	ROW("double slash", S "R\0/a//b\0", "not a normalised absolute path"),
	ROW("dot", S "R\0/a/./b\0", "not a normalised absolute path"),
	ROW("dot-dot", S "R\0/a/..\0", "not a normalised absolute path"),
	ROW("dots in a name are a name", S "R\0/a/..b/.c\0", NULL),
	ROW("relative scratch", "S\0run\0", "not a normalised absolute path"),
	ROW("unterminated letter", S "R", "no NUL after the operation"),
	ROW("unterminated path", S "R\0/a", "no NUL after the path"),
};

static void check_rows(void)
{
	char err[256], name[128];
	struct mount_plan p;
	size_t i;

	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		int rc;

		err[0] = '\0';
		rc = mount_plan_parse(rows[i].body, rows[i].len, &p, err, sizeof(err));
		snprintf(name, sizeof(name), "%s: %s", rows[i].name, rows[i].err ? "refused" : "parsed");
		if (rows[i].err == NULL)
			ok(rc == 0, name);
		else
			ok(rc < 0 && strstr(err, rows[i].err) != NULL && p.ops == NULL && p.n == 0, name);
		mount_plan_free(&p);
	}
}

static void check_contents(void)
{
	static const char plan[] = S "W\0/w\0R\0/w/r\0D\0/h/.ssh\0";
	char err[256];
	struct mount_plan p;

	ok(mount_plan_parse(plan, sizeof(plan) - 1, &p, err, sizeof(err)) == 0, "a plan parses");
	ok(strcmp(p.scratch, "/run/x") == 0, "its scratch dir");
	ok(p.n == 3 && p.ops[0].op == 'W' && strcmp(p.ops[0].path, "/w") == 0 && p.ops[1].op == 'R' &&
		   strcmp(p.ops[1].path, "/w/r") == 0 && p.ops[2].op == 'D' && strcmp(p.ops[2].path, "/h/.ssh") == 0,
	   "its operations, in order");
	mount_plan_free(&p);
}

static void check_limits(void)
{
	/* A path of MP_PATH_MAX bytes is one too long (its NUL must fit too). */
	size_t n = 2 + 3 + 2 + MP_PATH_MAX + 1, at;
	char *buf = calloc(n, 1), err[256];
	struct mount_plan p;

	memcpy(buf, "S\0/s", 4);
	at = 4;
	buf[at++] = '\0';
	buf[at++] = 'R';
	buf[at++] = '\0';
	buf[at] = '/';
	memset(buf + at + 1, 'a', MP_PATH_MAX - 1);
	ok(mount_plan_parse(buf, n, &p, err, sizeof(err)) < 0 && strstr(err, "normalised absolute path"),
	   "a path of PATH_MAX bytes is refused");
	buf[at + MP_PATH_MAX - 1] = '\0';
	ok(mount_plan_parse(buf, at + MP_PATH_MAX, &p, err, sizeof(err)) == 0, "one byte shorter is taken");
	mount_plan_free(&p);
	free(buf);
}

int main(void)
{
	check_rows();
	check_contents();
	check_limits();
	printf("1..%d\n", test_no);
	return failures != 0;
}
