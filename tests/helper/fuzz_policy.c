/* fuzz_policy.c - libFuzzer harness for helper/policy.c.
 *   clang -fsanitize=fuzzer,address,undefined -I helper helper/policy.c tests/helper/fuzz_policy.c
 * Invariants checked beyond "no crash": a successful parse yields absolute,
 * NUL-free paths within the limits, and counts within their maxima. */
#include "policy.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct policy p;
	char err[512];
	size_t i;

	if (policy_parse((const char *)data, size, &p, err, sizeof(err)) != 0) {
		if (strncmp(err, "policy line ", 12) != 0)
			abort();
		return 0;
	}
	if (p.n_fs > SB_MAX_FS || p.n_ports > SB_MAX_PORTS || p.n_bridges > SB_MAX_BRIDGES)
		abort();
	if (p.net == NET_UNSET)
		abort();
	for (i = 0; i < p.n_fs; i++)
		if (p.fs[i].path[0] != '/' || strlen(p.fs[i].path) > SB_PATH_MAX)
			abort();
	for (i = 0; i < p.n_bridges; i++) {
		if (p.bridges[i].kind == BRIDGE_PUBLISH &&
		    (p.socat_path == NULL || p.bridges[i].sock_path == NULL))
			abort();
		if (p.bridges[i].kind == BRIDGE_LISTEN && (p.net != NET_PROXY || p.bridges[i].sock_path))
			abort();
	}
	policy_free(&p);
	return 0;
}
