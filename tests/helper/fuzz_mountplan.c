/* fuzz_mountplan.c - libFuzzer harness for helper/mountplan.c.  The plan
 * comes from safebox itself, not from the sandbox, but its paths are
 * joined and walked by the mounter: beyond "no crash", every parsed path
 * must be absolute, normalised, inside the input and shorter than
 * MP_PATH_MAX, and every operation one of the six letters. */
#include "mountplan.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_path(const char *path, const uint8_t *data, size_t size)
{
	size_t len = strlen(path);

	if ((const uint8_t *)path < data || (const uint8_t *)path + len >= data + size)
		abort();
	if (len == 0 || len >= MP_PATH_MAX || path[0] != '/' || strstr(path, "//") || strstr(path, "/./") ||
	    strstr(path, "/../"))
		abort();
	if (len > 1 && path[len - 1] == '/')
		abort();
	if ((len >= 2 && strcmp(path + len - 2, "/.") == 0) || (len >= 3 && strcmp(path + len - 3, "/..") == 0))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mount_plan p;
	char err[256];
	size_t i;

	if (mount_plan_parse((const char *)data, size, &p, err, sizeof(err)) < 0) {
		if (p.ops != NULL || p.n != 0 || memchr(err, '\0', sizeof(err)) == NULL)
			abort();
		return 0;
	}
	check_path(p.scratch, data, size);
	for (i = 0; i < p.n; i++) {
		if (strchr("WPRDFU", p.ops[i].op) == NULL || p.ops[i].op == '\0')
			abort();
		check_path(p.ops[i].path, data, size);
		/* Nothing at or beneath the scratch dir, and no file or socket
		 * mask without safebox's empty file. */
		if (strcmp(p.scratch, "/") == 0 || (strncmp(p.ops[i].path, p.scratch, strlen(p.scratch)) == 0 &&
						    (p.ops[i].path[strlen(p.scratch)] == '\0' ||
						     p.ops[i].path[strlen(p.scratch)] == '/')))
			abort();
		if ((p.ops[i].op == 'F' || p.ops[i].op == 'U') && p.empty == NULL)
			abort();
	}
	if (p.empty != NULL)
		check_path(p.empty, data, size);
	mount_plan_free(&p);
	return 0;
}
