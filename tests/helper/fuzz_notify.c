/* fuzz_notify.c - libFuzzer harness for helper/notify.c: the table parser,
 * path joining and the sockaddr decoder, which take bytes the sandboxed
 * command controls (a path or address it passed to the kernel).
 * Invariants beyond "no crash": joined paths are absolute and normalised,
 * decoded text is NUL-terminated within its buffer, a parsed table is sorted
 * and every entry's path is normalised. */
#include "notify.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct nt_table t;
	struct nt_addr a;
	char err[256], buf[NT_PATH_MAX], out[NT_PATH_MAX], again[NT_PATH_MAX];
	size_t i, n = size < sizeof(buf) - 1 ? size : sizeof(buf) - 1;
	int len;

	if (nt_table_parse((const char *)data, size, &t, err, sizeof(err)) == 0) {
		for (i = 1; i < t.n; i++)
			if (strcmp(t.e[i - 1].path, t.e[i].path) >= 0)
				abort();
		for (i = 0; i < t.n; i++)
			if (nt_lookup(&t, t.e[i].path) != &t.e[i])
				abort();
		nt_table_free(&t);
	}
	if (nt_decode_sockaddr(data, size, &a) == 0 && memchr(a.text, '\0', sizeof(a.text)) == NULL)
		abort();
	/* The input as a path (up to its first NUL), joined to a base. */
	memcpy(buf, data, n);
	buf[n] = '\0';
	if (nt_cstring(buf, n + 1) < 0)
		abort();
	{
		long pid = 0, tid = 0;

		if (nt_comm_path(buf, &pid, &tid) == 0 &&
		    (pid < 0 || pid > NT_MAX_PID || tid < -1 || tid > NT_MAX_PID || strncmp(buf, "/proc/", 6) != 0 ||
		     strstr(buf, "comm") == NULL || strstr(buf, "..") || strstr(buf, "//")))
			abort();
		if (nt_status_last((const char *)data, size, "NSpid") > NT_MAX_PID)
			abort();
	}
	len = nt_join("/base/dir", buf, out, sizeof(out));
	if (len >= 0) {
		if (out[0] != '/' || (size_t)len != strlen(out) || strstr(out, "//") || strstr(out, "/./") ||
		    strstr(out, "/../") || (len > 1 && out[len - 1] == '/'))
			abort();
		/* normalised is a fixed point */
		if (nt_join(NULL, out, again, sizeof(again)) != len || strcmp(out, again) != 0)
			abort();
	}
	return 0;
}
