/* status.c - see status.h. */
#include "status.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

/* The JSON spelling of T.  Never fails. */
static const char *tri_str(enum tri t)
{
	return t == TRI_TRUE ? "true" : t == TRI_FALSE ? "false"
						       : "null";
}

/* The JSON spelling of B.  Never fails. */
static const char *bool_str(int b)
{
	return b ? "true" : "false";
}

/* Write the success line to FD.  Dies if it does not fit or the write fails:
 * Python must not run a command whose status it could not read. */
void status_write_ok(int fd, const struct status *st)
{
	char line[512];
	int n;

	n = snprintf(line, sizeof(line),
		     "{\"v\":1,\"ok\":true,\"landlock\":{\"abi\":%d,\"kernel_abi\":%d,"
		     "\"fs\":%s,\"net\":%s,\"scope\":%s,\"rules\":%lu,\"skipped\":%lu},"
		     "\"nnp\":%s,\"caps\":%s,\"seccomp\":%s,\"bridges\":%lu}\n",
		     st->abi, st->kernel_abi, tri_str(st->fs), tri_str(st->net), tri_str(st->scope),
		     st->rules, st->skipped, bool_str(st->nnp), bool_str(st->caps),
		     bool_str(st->seccomp), st->bridges);
	if (n < 0 || (size_t)n >= sizeof(line))
		die("status line does not fit");
	if (write_all(fd, line, (size_t)n) < 0)
		die_errno("cannot write the status line to fd %d", fd);
}

/* Append S to OUT as a JSON string body (status.h).  Never fails: stops
 * silently before the first character that would not fit in CAP. */
void json_escape(char *out, size_t cap, size_t *len, const char *s)
{
	static const char hex[] = "0123456789abcdef";

	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;
		char tmp[7];
		size_t tl;

		if (c == '"' || c == '\\') {
			tmp[0] = '\\';
			tmp[1] = (char)c;
			tl = 2;
		} else if (c < 0x20 || c >= 0x7f) {
			memcpy(tmp, "\\u00", 4);
			tmp[4] = hex[c >> 4];
			tmp[5] = hex[c & 15];
			tl = 6;
		} else {
			tmp[0] = (char)c;
			tl = 1;
		}
		if (*len + tl + 1 > cap)
			break;
		memcpy(out + *len, tmp, tl);
		*len += tl;
	}
	out[*len] = '\0';
}

/* Best-effort error line, used by die(), so it never dies: MSG is truncated
 * to fit.  Returns 0, or -1 with errno set when the write fails. */
int status_write_error(int fd, const char *msg)
{
	char line[8192];
	size_t len = 0;
	const char *head = "{\"v\":1,\"ok\":false,\"error\":\"";

	memcpy(line, head, strlen(head));
	len = strlen(head);
	json_escape(line, sizeof(line) - 4, &len, msg);
	memcpy(line + len, "\"}\n", 3);
	len += 3;
	return write_all(fd, line, len);
}
