/* fuzz_dirkeys.c - libFuzzer harness for helper/dirkeys.c's request
 * parser.  The request comes from safebox itself, not from the sandbox;
 * beyond "no crash": a parsed request has its count of paths, each
 * non-empty and inside the input, and its keys inside the input. */
#include "dirkeys.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* The helper reads its request into malloc'ed memory: aligned for the keys. */
	unsigned char *buf = malloc(size ? size : 1);
	struct dk_req req;
	const char *why = NULL;
	uint32_t i;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	if (dk_parse(buf, size, &req, &why) != 0) {
		if (!why || req.paths)
			abort();
		free(buf);
		return 0;
	}
	if (req.n == 0 || req.n > DK_N_MAX || (req.op == DK_SAME) != (req.keys != NULL))
		abort();
	if (req.keys && (const unsigned char *)(req.keys + req.n) > buf + size)
		abort();
	for (i = 0; i < req.n; i++) {
		const unsigned char *p = (const unsigned char *)req.paths[i];
		if (p < buf || p >= buf + size || !*p || !memchr(p, '\0', (size_t)(buf + size - p)))
			abort();
	}
	dk_free(&req);
	free(buf);
	return 0;
}
