/* landlock.h - ABI probe, per-ABI rights cascade, ruleset build and restrict. */
#ifndef SAFEBOX_LANDLOCK_H
#define SAFEBOX_LANDLOCK_H

#include "policy.h"
#include "status.h"

#include <stdint.h>

struct ll_plan {
	int enabled;      /* 0: no ruleset at all (landlock off, or ABI 0) */
	int kernel_abi;   /* 0 when unsupported */
	int kernel_errno; /* why kernel_abi is 0 */
	int abi;          /* the ABI actually used */
	uint64_t handled_fs, handled_net, scoped;
	uint32_t restrict_flags;
	int ruleset; /* built by landlock_prepare, -1 when not enabled */
	size_t n_rules;
	const uint16_t *ports; /* connect rules (net proxy) */
	size_t n_ports;
	unsigned long skipped; /* ENOENT paths */
	enum tri fs, net, scope;
};

/* The kernel's Landlock ABI, or 0 with *ERRNUM set (ENOSYS: not built,
 * EOPNOTSUPP: disabled at boot).  Never fails. */
int landlock_kernel_abi(int *errnum);

/* Decide the ABI and rights, create the ruleset and add every path rule,
 * each path opened with O_PATH and closed once added (one descriptor at a
 * time: 65536 rules never meet RLIMIT_NOFILE).  A missing path (ENOENT) is
 * skipped and counted; any other error dies.  Nothing is restricted yet. */
void landlock_prepare(const struct policy *pol, struct ll_plan *plan);

/* Add the port rules and restrict this process.  Needs no_new_privs (or
 * CAP_SYS_ADMIN).  Dies on any failure; closes the ruleset. */
void landlock_apply(struct ll_plan *plan);

#endif
