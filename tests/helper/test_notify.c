/* test_notify.c - table-driven tests of helper/notify.c (the supervisor's
 * pure parts), TAP output; built and run under ASan+UBSan by run.py. */
#include "notify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define H "safebox-observe 1\n"
#define E "end\n"
/* entries: / (read-only), /w (write root), /w/.bashrc (protected, a bind),
 * /w/sealed (no new entries), /dev (write files only), /h/.ssh (masked) */
#define T H "reads 1\n"                      \
	    "entry b 2f\n"                   \
	    "entry wcb 2f77\n"               \
	    "entry b 2f772f2e626173687263\n" \
	    "entry wb 2f772f7365616c6564\n"  \
	    "entry w 2f646576\n"             \
	    "entry mb 2f682f2e737368\n"      \
	    "port 3128\n" E

static int failures, test_no;

static void ok(int cond, const char *name)
{
	test_no++;
	printf("%s %d - %s\n", cond ? "ok" : "not ok", test_no, name);
	failures += !cond;
}

static const struct {
	const char *name, *body, *err; /* err NULL: must parse */
} rows[] = {
	{ "valid table", T, NULL },
	{ "minimal", H E, NULL },
	{ "bad header", "safebox-observe 2\n" E, "bad header" },
	{ "missing end", H "reads 0\n", "missing 'end'" },
	{ "data after end", H E "reads 0\n", "data after 'end'" },
	{ "unterminated", H "end", "not terminated" },
	{ "unknown key", H "color red\n" E, "unknown key" },
	{ "dup reads", H "reads 0\nreads 1\n" E, "duplicate" },
	{ "reads 2", H "reads 2\n" E, "0 or 1" },
	{ "bad flag", H "entry x 2f\n" E, "bad flags" },
	{ "dup flag", H "entry ww 2f\n" E, "bad flags" },
	{ "relative path", H "entry w 61\n" E, "bad path" },
	{ "upper hex", H "entry w 2F\n" E, "bad path" },
	{ "NUL in path", H "entry w 2f00\n" E, "bad path" },
	{ "odd hex", H "entry w 2f6\n" E, "bad path" },
	{ "not normalised", H "entry w 2f612f\n" E, "not normalised" },
	{ "dot-dot", H "entry w 2f612f2e2e\n" E, "not normalised" },
	{ "duplicate path", H "entry w 2f61\nentry c 2f61\n" E, "duplicate entry" },
	{ "port 0", H "port 0\n" E, "port N" },
	{ "extra space", H "entry  w 2f\n" E, "extra space" },
	{ "tab", H "entry\tw 2f\n" E, "tab" },
	{ "CR", H "reads 0\r\n" E, "CR" },
};

static void check_table(void)
{
	size_t i;

	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct nt_table t;
		char err[256] = "";
		int rc = nt_table_parse(rows[i].body, strlen(rows[i].body), &t, err, sizeof(err));
		int good = rows[i].err == NULL ? rc == 0 : (rc < 0 && strstr(err, rows[i].err) != NULL);

		ok(good, rows[i].name);
		if (!good)
			printf("#   rc=%d err='%s'\n", rc, err);
		if (rc == 0)
			nt_table_free(&t);
	}
}

static void check_join(void)
{
	static const struct {
		const char *base, *path, *want; /* want NULL: -1 */
	} j[] = {
		{ "/a/b", "c", "/a/b/c" },
		{ "/a/b", "../c", "/a/c" },
		{ "/a/b", "../../../..", "/" },
		{ "/a/b", "/x//y/./z/", "/x/y/z" },
		{ "/", ".", "/" },
		{ "/a", "./b/../c", "/a/c" },
		{ NULL, "rel", NULL },
		{ "rel", "x", NULL },
		{ "/a", "", NULL },
		{ NULL, "/..", "/" },
	};
	char out[64];
	size_t i;

	for (i = 0; i < sizeof(j) / sizeof(j[0]); i++) {
		int n = nt_join(j[i].base, j[i].path, out, sizeof(out));
		char name[128];

		snprintf(name, sizeof(name), "join '%s' + '%s'", j[i].base ? j[i].base : "(none)", j[i].path);
		ok(j[i].want == NULL ? n < 0 : (n >= 0 && strcmp(out, j[i].want) == 0 && (size_t)n == strlen(out)),
		   name);
	}
	/* does not fit: 64 bytes */
	ok(nt_join("/", "/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", out, sizeof(out)) < 0,
	   "join that does not fit");
	ok(nt_parent("/a/b", out, sizeof(out)) == 2 && strcmp(out, "/a") == 0, "parent of /a/b");
	ok(nt_parent("/a", out, sizeof(out)) == 1 && strcmp(out, "/") == 0, "parent of /a");
	ok(nt_parent("/", out, sizeof(out)) == 1 && strcmp(out, "/") == 0, "parent of /");
	ok(nt_cstring("ab\0cd", 5) == 2 && nt_cstring("abcd", 4) == -1 && nt_cstring("", 0) == -1, "cstring");
}

static void check_decide(void)
{
	struct nt_table t;
	char err[256];
	struct nt_verdict v;
	struct nt_call c;
	const struct nt_entry *e;

	if (nt_table_parse(T, strlen(T), &t, err, sizeof(err)) != 0) {
		ok(0, err);
		return;
	}
	e = nt_lookup(&t, "/w/x/y");
	ok(e != NULL && strcmp(e->path, "/w") == 0 && e->idx == 1, "lookup finds the deepest ancestor");
	ok(nt_lookup(&t, "/wx") != NULL && strcmp(nt_lookup(&t, "/wx")->path, "/") == 0,
	   "lookup compares whole components (/wx is not under /w)");
	ok(nt_exact(&t, "/w/.bashrc") != NULL && nt_exact(&t, "/w/.bash") == NULL, "exact");
	ok(nt_port_free(&t, 3128) && !nt_port_free(&t, 80), "ports");

#define CALL(op_, flags_, p1_, p2_, x1_, x2_)                                                     \
	(memset(&c, 0, sizeof(c)), c.op = (op_), c.oflags = (flags_), c.p1 = (p1_), c.p2 = (p2_), \
	 c.exists1 = (x1_), c.exists2 = (x2_), nt_decide(&t, &c, &v))
	/* open */
	ok(CALL(NT_OP_OPEN, 01 | 0100, "/w/new", NULL, NT_ABSENT, 0) == 0, "create in a write root: allowed");
	ok(CALL(NT_OP_OPEN, 01 | 0100, "/etc/x", NULL, NT_ABSENT, 0) == 1 && v.kind == 'w' && v.why == 'P' &&
		   v.e->idx == 0,
	   "create outside: refused by the directory");
	ok(CALL(NT_OP_OPEN, 01 | 0100, "/etc/x", NULL, NT_NO_PARENT, 0) == 0, "missing parent: ENOENT, no event");
	ok(CALL(NT_OP_OPEN, 01 | 0100 | 0200, "/etc/hostname", NULL, NT_EXISTS, 0) == 0,
	   "O_EXCL on an existing file: EEXIST, no event");
	ok(CALL(NT_OP_OPEN, 02000 | 01, "/w/.bashrc", NULL, NT_EXISTS, 0) == 1 && v.why == 'T' && v.e->idx == 2,
	   "append to a protected file: refused by its bind");
	ok(CALL(NT_OP_OPEN, 01 | 0100 | 01000, "/dev/null", NULL, NT_EXISTS, 0) == 0,
	   "> /dev/null: an existing file, writable");
	ok(CALL(NT_OP_OPEN, 01 | 0100 | 01000, "/dev/null", NULL, NT_UNKNOWN, 0) == 1,
	   "> /dev/null before looking: maybe (the directory takes no entries)");
	ok(CALL(NT_OP_OPEN, 01 | 0100, "/dev/newfile", NULL, NT_ABSENT, 0) == 1 && v.why == 'P',
	   "a new file in /dev: refused");
	ok(CALL(NT_OP_OPEN, 0, "/h/.ssh/id_rsa", NULL, NT_ABSENT, 0) == 1 && v.kind == 'r' && v.why == 'M',
	   "read of a masked path");
	ok(CALL(NT_OP_OPEN, 0, "/etc/passwd", NULL, NT_EXISTS, 0) == 0, "read elsewhere");
	ok(CALL(NT_OP_OPEN, 0100, "/w/sealed/kept", NULL, NT_EXISTS, 0) == 0,
	   "O_RDONLY|O_CREAT on an existing file in a sealed directory");
	ok(CALL(NT_OP_OPEN, 01, "/w/sealed/kept", NULL, NT_EXISTS, 0) == 0, "write an existing file in it");
	ok(CALL(NT_OP_OPEN, 01 | 0100, "/w/sealed/hooks", NULL, NT_ABSENT, 0) == 1 && v.why == 'P' && v.e->idx == 3,
	   "create in a sealed directory");
	/* modify, create, remove, rename */
	ok(CALL(NT_OP_MODIFY, 0, "/etc/passwd", NULL, NT_EXISTS, 0) == 1 && v.why == 'T', "chmod outside");
	ok(CALL(NT_OP_MODIFY, 0, "/etc/none", NULL, NT_ABSENT, 0) == 0, "chmod of nothing: ENOENT");
	ok(CALL(NT_OP_CREATE, 0, "/w/d", NULL, NT_ABSENT, 0) == 0, "mkdir in a write root");
	ok(CALL(NT_OP_CREATE, 0, "/w/d", NULL, NT_EXISTS, 0) == 0, "mkdir of an existing name: EEXIST");
	ok(CALL(NT_OP_CREATE, 0, "/d", NULL, NT_ABSENT, 0) == 1, "mkdir at /");
	ok(CALL(NT_OP_REMOVE, 0, "/w/.bashrc", NULL, NT_EXISTS, 0) == 1 && v.why == 'B', "unlink a bind: EBUSY");
	ok(CALL(NT_OP_REMOVE, 0, "/w/f", NULL, NT_EXISTS, 0) == 0, "unlink in a write root");
	ok(CALL(NT_OP_REMOVE, 0, "/w/f", NULL, NT_ABSENT, 0) == 0, "unlink of nothing");
	ok(CALL(NT_OP_RENAME, 0, "/w/a", "/w/b", NT_EXISTS, NT_ABSENT) == 0, "rename within a write root");
	ok(CALL(NT_OP_RENAME, 0, "/w/a", "/etc/b", NT_EXISTS, NT_ABSENT) == 1 && v.which == 2,
	   "rename out of the write root: the target refuses");
	ok(CALL(NT_OP_RENAME, 0, "/w/.bashrc", "/w/x", NT_EXISTS, NT_ABSENT) == 1 && v.which == 1 && v.why == 'B',
	   "rename of a bind");
	ok(CALL(NT_OP_RENAME, 0, "/w/x", "/w/.bashrc", NT_EXISTS, NT_EXISTS) == 1 && v.which == 2 && v.why == 'B',
	   "rename onto a bind");
	ok(CALL(NT_OP_EXEC, 0, "/h/.ssh/tool", NULL, NT_UNKNOWN, 0) == 1 && v.kind == 'x', "exec of a masked path");
	ok(CALL(NT_OP_UNIX, 0, "/h/.ssh/agent", NULL, NT_UNKNOWN, 0) == 1 && v.kind == 'u', "connect to a masked socket");
	ok(CALL(NT_OP_UNIX, 0, "/run/x.sock", NULL, NT_UNKNOWN, 0) == 0, "connect elsewhere");
	t.reads = 0;
	ok(CALL(NT_OP_OPEN, 0, "/h/.ssh/id_rsa", NULL, NT_ABSENT, 0) == 0, "reads not observed: no event");
	nt_table_free(&t);
}

static void check_sockaddr(void)
{
	struct nt_addr a;
	unsigned char un[] = { 1, 0, '/', 'r', 'u', 'n', '/', 's' };
	unsigned char abs[] = { 1, 0, 0, 'x', 0, 'y' };
	unsigned char in4[16] = { 2, 0, 0x01, 0xbb, 192, 0, 2, 1 };
	unsigned char in6[28] = { 10, 0, 0x0c, 0x38, 0, 0, 0, 0 };
	unsigned char mapped[28] = { 10, 0, 0, 80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1 };

	ok(nt_decode_sockaddr(un, sizeof(un), &a) == 0 && a.kind == NT_ADDR_UNIX_PATH && strcmp(a.text, "/run/s") == 0,
	   "unix path without NUL");
	ok(nt_decode_sockaddr(abs, sizeof(abs), &a) == 0 && a.kind == NT_ADDR_UNIX_ABSTRACT &&
		   strcmp(a.text, "x@y") == 0,
	   "abstract unix, NULs shown as @");
	ok(nt_decode_sockaddr(in4, sizeof(in4), &a) == 0 && a.kind == NT_ADDR_INET && a.port == 443 &&
		   strcmp(a.text, "192.0.2.1:443") == 0 && !a.loopback,
	   "inet");
	ok(nt_decode_sockaddr(in4, 7, &a) < 0, "inet too short");
	in6[23] = 1;
	ok(nt_decode_sockaddr(in6, sizeof(in6), &a) == 0 && a.port == 3128 && a.loopback &&
		   strcmp(a.text, "[0:0:0:0:0:0:0:1]:3128") == 0,
	   "inet6 loopback");
	ok(nt_decode_sockaddr(mapped, sizeof(mapped), &a) == 0 && a.loopback &&
		   strcmp(a.text, "[::ffff:127.0.0.1]:80") == 0,
	   "v4-mapped loopback");
	ok(nt_decode_sockaddr(un, 2, &a) < 0 && nt_decode_sockaddr(un, 1, &a) < 0, "unnamed and truncated");
}

static void check_hex(void)
{
	char out[8];
	size_t len = 0;

	ok(nt_hex(out, sizeof(out), &len, "ab") == 0 && strcmp(out, "6162") == 0, "hex");
	len = 0;
	ok(nt_hex(out, sizeof(out), &len, NULL) == 0 && strcmp(out, "-") == 0, "hex of nothing");
	len = 0;
	ok(nt_hex(out, sizeof(out), &len, "abcd") < 0 && len == 0, "hex that does not fit");
}

static void check_comm_path(void)
{
	static const struct {
		const char *path;
		int rc;
		long pid, tid;
	} rows[] = {
		{ "/proc/self/task/3/comm", 0, 0, 3 },
		{ "/proc/42/task/43/comm", 0, 42, 43 },
		{ "/proc/thread-self/comm", 0, 0, 0 },
		{ "/proc/self/comm", 0, 0, -1 },
		{ "/proc/7/comm", 0, 7, -1 },
		{ "/proc/4194304/task/4194304/comm", 0, 4194304, 4194304 },
		{ "/proc/4194305/comm", -1, 0, 0 },
		{ "/proc/self/task/03/comm", -1, 0, 0 },
		{ "/proc/self/task/0/comm", -1, 0, 0 },
		{ "/proc/self/task/-1/comm", -1, 0, 0 },
		{ "/proc/self/task/3/comm/", -1, 0, 0 },
		{ "/proc/self/task/3//comm", -1, 0, 0 },
		{ "/proc/self/task/3/../3/comm", -1, 0, 0 },
		{ "/proc/self/task/3/attr/current", -1, 0, 0 },
		{ "/proc/self/task/3/mem", -1, 0, 0 },
		{ "/proc/self/task/comm", -1, 0, 0 },
		{ "/proc//self/comm", -1, 0, 0 },
		{ "/proc/sys/kernel/comm", -1, 0, 0 },
		{ "proc/self/comm", -1, 0, 0 },
		{ "/proc/self/task/3/commx", -1, 0, 0 },
		{ "/proc/thread-self/task/3/comm", -1, 0, 0 },
		{ "", -1, 0, 0 },
	};
	size_t i;

	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		long pid = 99, tid = 99;
		int rc = nt_comm_path(rows[i].path, &pid, &tid);
		char name[96];

		snprintf(name, sizeof(name), "comm path '%s'", rows[i].path);
		ok(rc == rows[i].rc && (rc != 0 || (pid == rows[i].pid && tid == rows[i].tid)), name);
	}
}

static void check_status_last(void)
{
	static const char st[] = "Name:\tpython3\nTgid:\t5102\nNgid:\t0\nPid:\t5104\n"
				 "NStgid:\t5102\t2\nNSpid:\t5104\t3\nBad:\t1x\n";

	ok(nt_status_last(st, sizeof(st) - 1, "NSpid") == 3, "status: the innermost NSpid");
	ok(nt_status_last(st, sizeof(st) - 1, "NStgid") == 2, "status: the innermost NStgid");
	ok(nt_status_last(st, sizeof(st) - 1, "Tgid") == 5102, "status: a one-value line");
	ok(nt_status_last(st, sizeof(st) - 1, "Ngid") == -1, "status: zero is no id");
	ok(nt_status_last(st, sizeof(st) - 1, "Bad") == -1, "status: a malformed value");
	ok(nt_status_last(st, sizeof(st) - 1, "NS") == -1, "status: a key's prefix is not the key");
	ok(nt_status_last(st, 20, "Pid") == -1, "status: nothing past LEN is read");
}

int main(void)
{
	check_comm_path();
	check_status_last();
	check_table();
	check_join();
	check_decide();
	check_sockaddr();
	check_hex();
	printf("1..%d\n", test_no);
	return failures ? 1 : 0;
}
