/* test_policy.c - table-driven TAP tests for helper/policy.c.
 *
 * Built by tests/helper/run.py under ASan+UBSan with -fno-sanitize-recover,
 * linked with helper/policy.c only (the parser is pure).  Each row is a file
 * body and either the expected parse or the substring the error must hold.
 */
#include "policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define H "safebox-policy 3\n"
#define E "end\n"
#define NET "net off\n"

struct row {
	const char *name;
	const char *body;
	size_t len;        /* 0: strlen(body) */
	const char *error; /* NULL: must parse */
};

static const struct row rows[] = {
	/* valid files */
	{ "minimal", H NET E, 0, NULL },
	{ "full", H "strict 1\nabi_max 7\nlandlock on\nfs read 2f\nfs readdir 2f686f6d65\n"
		    "fs dev 2f646576\nfs write 2f746d70\nnet proxy\nconnect_port 3128\n"
		    "connect_port 1080\nbind any\nscope abstract_unix\nscope signal\n"
		    "seccomp 2f782e627066\nsocat 2f7573722f62696e2f736f636174\n"
		    "listen 3128\nlisten 1080\npublish 8080 2f72756e2f682e736f636b\n" E,
	  0, NULL },
	{ "abi_max 0", H "abi_max 0\n" NET E, 0, NULL },
	{ "abi_max 255", H "abi_max 255\n" NET E, 0, NULL },
	{ "path with newline and space", H "fs read 2f610a2062\n" NET E, 0, NULL },
	{ "landlock off", H "landlock off\n" NET E, 0, NULL },
	/* header and framing */
	{ "empty file", "", 0, "empty file" },
	{ "bad header", "safebox-policy 4\n" NET E, 0, "bad header" },
	{ "format v2 header", "safebox-policy 2\n" NET E, 0, "bad header" },
	{ "format v1 header", "safebox-policy 1\n" NET E, 0, "bad header" },
	{ "header only", H, 0, "missing 'end'" },
	{ "missing end", H NET, 0, "missing 'end'" },
	{ "end without newline", H NET "end", 0, "not terminated" },
	{ "data after end", H NET E "strict 1\n", 0, "data after 'end'" },
	{ "blank after end", H NET E "\n", 0, "data after 'end'" },
	{ "missing net", H "strict 1\n" E, 0, "missing required key 'net'" },
	{ "blank line", H "\n" NET E, 0, "expected 'KEY VALUE'" },
	{ "CRLF", H "net off\r\n" E, 0, "carriage return" },
	{ "CRLF header", "safebox-policy 1\r\n" NET E, 0, "bad header" },
	{ "tab", H "net\toff\n" E, 0, "tab" },
	{ "two spaces", H "net  off\n" E, 0, "extra space" },
	{ "trailing space", H "net off \n" E, 0, "extra space" },
	{ "NUL in line", H "net o\0f\n" E, sizeof(H "net o\0f\n" E) - 1, "NUL byte" },
	/* keys */
	{ "unknown key", H NET "color blue\n" E, 0, "key 'color': unknown key" },
	{ "dup strict", H "strict 0\nstrict 1\n" NET E, 0, "line 3: key 'strict': duplicate" },
	{ "dup net", H NET NET E, 0, "key 'net': duplicate" },
	{ "dup abi_max", H "abi_max 1\nabi_max 1\n" NET E, 0, "duplicate" },
	{ "dup landlock", H "landlock on\nlandlock on\n" NET E, 0, "duplicate" },
	{ "dup bind", H "bind any\nbind none\n" NET E, 0, "duplicate" },
	{ "dup seccomp", H "seccomp 2f61\nseccomp 2f61\n" NET E, 0, "duplicate" },
	{ "observe with seccomp", H "seccomp 2f61\nseccomp_observe 2f62\n" NET E, 0, NULL },
	{ "dup seccomp_observe", H "seccomp 2f61\nseccomp_observe 2f62\nseccomp_observe 2f62\n" NET E, 0,
	  "duplicate" },
	{ "observe without seccomp", H "seccomp_observe 2f62\n" NET E, 0, "'seccomp_observe' needs 'seccomp'" },
	{ "observe relative path", H "seccomp 2f61\nseccomp_observe 62\n" NET E, 0, "not absolute" },
	{ "dup scope", H "scope signal\nscope signal\n" NET E, 0, "duplicate scope" },
	{ "bad net", H "net maybe\n" E, 0, "key 'net'" },
	{ "bad landlock", H "landlock yes\n" NET E, 0, "key 'landlock'" },
	{ "bad bind", H "bind some\n" NET E, 0, "key 'bind'" },
	{ "bad scope", H "scope ptrace\n" NET E, 0, "key 'scope'" },
	{ "bad class", H "fs exec 2f\n" NET E, 0, "unknown access class" },
	{ "fs no path", H "fs read\n" NET E, 0, "expected 'CLASS HEXPATH'" },
	/* numbers */
	{ "strict 2", H "strict 2\n" NET E, 0, "key 'strict': not a number" },
	{ "abi_max 256", H "abi_max 256\n" NET E, 0, "not a number in 0..255" },
	{ "abi_max -1", H "abi_max -1\n" NET E, 0, "not a number" },
	{ "abi_max +1", H "abi_max +1\n" NET E, 0, "not a number" },
	{ "abi_max 07", H "abi_max 07\n" NET E, 0, "not a number" },
	{ "abi_max huge", H "abi_max 99999999999999999999999\n" NET E, 0, "not a number" },
	{ "port 0", H "net proxy\nconnect_port 0\n" E, 0, "not a number in 1..65535" },
	{ "port 65536", H "net proxy\nconnect_port 65536\n" E, 0, "not a number" },
	{ "port without proxy", H "net off\nconnect_port 80\n" E, 0, "needs 'net proxy'" },
	{ "listen port 0", H "net proxy\nlisten 0\n" E, 0, "not a number in 1..65535" },
	{ "listen port 65536", H "net proxy\nlisten 65536\n" E, 0, "not a number" },
	{ "listen with a path", H "net proxy\nlisten 80 2f73\n" E, 0, "unexpected space" },
	{ "listen without proxy", H "listen 80\n" NET E, 0, "'listen' needs 'net proxy'" },
	{ "listen needs no socat", H "net proxy\nlisten 3128\n" E, 0, NULL },
	{ "listen dup port", H "net proxy\nlisten 80\nlisten 80\n" E, 0, "duplicate port" },
	{ "old bridge key", H "socat 2f73\nbridge 80 2f73\n" NET E, 0, "unknown key" },
	{ "publish without socat", H "publish 8080 2f73\n" NET E, 0, "'publish' needs 'socat'" },
	{ "publish port 0", H "socat 2f73\npublish 0 2f73\n" NET E, 0, "port not a number" },
	{ "publish without path", H "socat 2f73\npublish 8080\n" NET E, 0, "expected 'PORT HEXSOCKPATH'" },
	{ "publish and listen on one port", H "socat 2f73\nnet proxy\nlisten 80\npublish 80 2f74\n" E, 0,
	  "duplicate port" },
	{ "publish accepted", H "socat 2f73\npublish 8080 2f73\n" NET E, 0, NULL },
	{ "publish dup port", H "socat 2f73\npublish 80 2f73\npublish 80 2f74\n" NET E, 0,
	  "duplicate port" },
	/* resource limits */
	{ "rlimit nproc and data", H "rlimit nproc 64\nrlimit data 16777216\n" NET E, 0, NULL },
	{ "rlimit nproc at PID_MAX_LIMIT", H "rlimit nproc 4194304\n" NET E, 0, NULL },
	{ "rlimit nproc over PID_MAX_LIMIT", H "rlimit nproc 4194305\n" NET E, 0, "not a number in 1..4194304" },
	{ "rlimit nproc 0", H "rlimit nproc 0\n" NET E, 0, "not a number in 1..4194304" },
	{ "rlimit data over 2^62", H "rlimit data 4611686018427387905\n" NET E, 0, "not a number" },
	{ "rlimit duplicate", H "rlimit nproc 64\nrlimit nproc 65\n" NET E, 0, "duplicate key" },
	{ "rlimit unknown name", H "rlimit as 64\n" NET E, 0, "expected 'nproc' or 'data'" },
	{ "rlimit without value", H "rlimit nproc\n" NET E, 0, "expected 'NAME N'" },
	{ "rlimit negative", H "rlimit data -1\n" NET E, 0, "not a number" },
	/* hex paths */
	{ "uppercase hex", H "fs read 2F\n" NET E, 0, "bad hex" },
	{ "odd hex", H "fs read 2f6\n" NET E, 0, "odd hex length" },
	{ "non-hex", H "fs read 2g\n" NET E, 0, "bad hex" },
	{ "0x prefix", H "fs read 0x2f\n" NET E, 0, "bad hex" },
	{ "relative path", H "fs read 746d70\n" NET E, 0, "not absolute" },
	{ "NUL in path", H "fs read 2f0061\n" NET E, 0, "NUL byte in path" },
	{ "space in path value", H "fs read 2f 61\n" NET E, 0, "unexpected space" },
	{ "relative seccomp", H "seccomp 61\n" NET E, 0, "key 'seccomp': path is not absolute" },
};

/* Bodies built at run time: over-long line, too many entries, long path. */
static char *repeat_body(const char *head, const char *line, size_t count, const char *tail,
			 size_t *len)
{
	size_t hl = strlen(head), ll = strlen(line), tl = strlen(tail), i;
	char *b = malloc(hl + ll * count + tl + 1), *p = b;

	memcpy(p, head, hl);
	p += hl;
	for (i = 0; i < count; i++, p += ll)
		memcpy(p, line, ll);
	memcpy(p, tail, tl + 1);
	*len = hl + ll * count + tl;
	return b;
}

static int failures, test_no;

static void check(const char *name, const char *body, size_t len, const char *want_err)
{
	struct policy p;
	char err[512] = "";
	int rc = policy_parse(body, len, &p, err, sizeof(err));
	int ok = want_err == NULL ? rc == 0 : (rc < 0 && strstr(err, want_err) != NULL);

	test_no++;
	printf("%s %d - %s\n", ok ? "ok" : "not ok", test_no, name);
	if (!ok) {
		failures++;
		printf("#   rc=%d err='%s' want='%s'\n", rc, err, want_err ? want_err : "(success)");
	}
	if (rc == 0)
		policy_free(&p);
}

/* Field-level checks of one valid parse. */
static void check_fields(void)
{
	const char *b = H "strict 1\nabi_max 3\nfs write 2f610a2062\nnet proxy\nconnect_port 8080\n"
			  "bind any\nscope signal\n" E;
	struct policy p;
	char err[256];
	int ok = policy_parse(b, strlen(b), &p, err, sizeof(err)) == 0 && p.strict == 1 &&
		 p.abi_max == 3 && p.landlock_on == 1 && p.n_fs == 1 && p.fs[0].cls == FS_WRITE &&
		 strcmp(p.fs[0].path, "/a\n b") == 0 && p.net == NET_PROXY && p.n_ports == 1 &&
		 p.ports[0] == 8080 && p.bind_any == 1 && p.scopes == SB_SCOPE_BIT_SIGNAL &&
		 p.seccomp_path == NULL && p.rlimit_nproc == 0 && p.rlimit_data == 0;

	test_no++;
	printf("%s %d - fields of a valid parse\n", ok ? "ok" : "not ok", test_no);
	failures += !ok;
	policy_free(&p);
	b = H "rlimit data 16777216\nrlimit nproc 64\n" NET E;
	ok = policy_parse(b, strlen(b), &p, err, sizeof(err)) == 0 && p.rlimit_nproc == 64 &&
	     p.rlimit_data == 16777216;
	test_no++;
	printf("%s %d - rlimit fields\n", ok ? "ok" : "not ok", test_no);
	failures += !ok;
	policy_free(&p);
	/* defaults */
	b = H NET E;
	ok = policy_parse(b, strlen(b), &p, err, sizeof(err)) == 0 && p.strict == 0 &&
	     p.abi_max == -1 && p.landlock_on == 1 && p.bind_any == 0 && p.scopes == 0;
	test_no++;
	printf("%s %d - defaults\n", ok ? "ok" : "not ok", test_no);
	failures += !ok;
	policy_free(&p);
}

static void check_generated(void)
{
	char line[SB_POLICY_LINE_MAX + 16], *b, *path;
	size_t len, i;

	/* A line of exactly SB_POLICY_LINE_MAX bytes passes the length check
	 * (then fails as an unknown key); one more byte is over-long. */
	memset(line, 'a', sizeof(line));
	memcpy(line, "x ", 2);
	line[SB_POLICY_LINE_MAX] = '\n';
	line[SB_POLICY_LINE_MAX + 1] = '\0';
	b = repeat_body(H, line, 1, NET E, &len);
	check("line of exactly 16384 bytes", b, len, "unknown key");
	free(b);
	line[SB_POLICY_LINE_MAX] = 'a';
	line[SB_POLICY_LINE_MAX + 1] = '\n';
	line[SB_POLICY_LINE_MAX + 2] = '\0';
	b = repeat_body(H, line, 1, NET E, &len);
	check("over-long line", b, len, "line longer than 16384");
	free(b);

	b = repeat_body(H NET, "fs read 2f\n", SB_MAX_FS, E, &len);
	check("65536 fs entries", b, len, NULL);
	free(b);
	b = repeat_body(H NET, "fs read 2f\n", SB_MAX_FS + 1, E, &len);
	check("65537 fs entries", b, len, "more than 65536");
	free(b);
	b = repeat_body(H "net proxy\n", "connect_port 80\n", SB_MAX_PORTS, E, &len);
	check("64 ports", b, len, NULL);
	free(b);
	b = repeat_body(H "net proxy\n", "connect_port 80\n", SB_MAX_PORTS + 1, E, &len);
	check("65 ports", b, len, "more than 64");
	free(b);
	{
		static const char *const br[] = { "listen 1\n", "listen 2\n", "publish 3 2f61\n",
						  "listen 4\n", "publish 5 2f61\n", "listen 6\n",
						  "listen 7\n", "listen 8\n", "listen 9\n" };
		char buf[1024];

		strcpy(buf, H "net proxy\nsocat 2f61\n");
		for (i = 0; i < 9; i++)
			strcat(buf, br[i]);
		strcat(buf, E);
		check("9 bridges", buf, strlen(buf), "more than 8");
	}

	/* Path of 4096 bytes is fine, 4097 is not. */
	path = malloc(2 * (SB_PATH_MAX + 1) + 64);
	for (len = 0; len < 2 * SB_PATH_MAX; len += 2)
		memcpy(path + len, "2f", 2);
	path[len] = '\0';
	b = repeat_body(H NET "fs read ", path, 1, "\n" E, &len);
	check("4096-byte path", b, len, NULL);
	free(b);
	strcat(path, "2f");
	b = repeat_body(H NET "fs read ", path, 1, "\n" E, &len);
	check("4097-byte path", b, len, "path longer than 4096");
	free(b);
	free(path);

	b = malloc(SB_POLICY_MAX + 2);
	memset(b, 'a', SB_POLICY_MAX + 1);
	check("file over 16 MiB", b, SB_POLICY_MAX + 1, "larger than");
	free(b);
}

int main(void)
{
	size_t i;

	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		check(rows[i].name, rows[i].body, rows[i].len ? rows[i].len : strlen(rows[i].body),
		      rows[i].error);
	check_fields();
	check_generated();
	printf("1..%d\n", test_no);
	if (failures)
		printf("# %d of %d failed\n", failures, test_no);
	return failures != 0;
}
