/* landlock.h - ABI probe, per-ABI rights cascade, ruleset build and restrict. */
#ifndef SAFEBOX_LANDLOCK_H
#define SAFEBOX_LANDLOCK_H

#include "policy.h"
#include "status.h"

#include <stdint.h>

struct ll_rule {
	int fd;            /* O_PATH descriptor, opened before any restriction */
	uint64_t access;   /* already intersected with the handled rights */
};

struct ll_plan {
	int enabled;       /* 0: no ruleset at all (landlock off, or ABI 0) */
	int kernel_abi;    /* 0 when unsupported */
	int kernel_errno;  /* why kernel_abi is 0 */
	int abi;           /* the ABI actually used */
	uint64_t handled_fs, handled_net, scoped;
	uint32_t restrict_flags;
	struct ll_rule *rules;
	size_t n_rules;
	const uint16_t *ports; /* connect rules (net proxy) */
	size_t n_ports;
	unsigned long skipped; /* ENOENT paths */
	enum tri fs, net, scope;
};

/* The kernel's Landlock ABI, or 0 with *ERRNUM set (ENOSYS: not built,
 * EOPNOTSUPP: disabled at boot).  Never fails. */
int landlock_kernel_abi(int *errnum);

/* Decide the ABI and rights, and open every rule path with O_PATH.
 * A missing path (ENOENT) is skipped and counted; any other error dies. */
void landlock_prepare(const struct policy *pol, struct ll_plan *plan);

/* Build the ruleset and restrict this process.  Needs no_new_privs (or
 * CAP_SYS_ADMIN).  Dies on any failure; closes the rule descriptors. */
void landlock_apply(struct ll_plan *plan);

#endif
