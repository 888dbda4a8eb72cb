/* landlock.c - the Landlock layer.
 *
 * Best effort as an explicit cascade, like the kernel's
 * samples/landlock/sandboxer.c: start from every right this file knows (ABI
 * 7), then strip, one ABI step per case, what older kernels do not handle.
 * What a step strips is reported as not enforced in the status line; the
 * caller decides (strict) whether that is fatal.
 * Reference: Documentation/userspace-api/landlock.rst.
 */
#include "landlock.h"
#include "compat.h"
#include "util.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* landlock_create_ruleset(2).  Returns a ruleset fd (the ABI version with
 * ..._CREATE_RULESET_VERSION), or -1 with errno set. */
static long ll_create_ruleset(const struct safebox_ruleset_attr *attr, size_t size, uint32_t flags)
{
	return syscall(__NR_landlock_create_ruleset, attr, size, flags);
}

/* landlock_add_rule(2): add one rule of TYPE to ruleset FD.  Returns 0, or
 * -1 with errno set. */
static long ll_add_rule(int fd, int type, const void *attr)
{
	return syscall(__NR_landlock_add_rule, fd, type, attr, 0);
}

/* landlock_restrict_self(2) with ruleset FD.  Returns 0, or -1 with errno
 * set. */
static long ll_restrict_self(int fd, uint32_t flags)
{
	return syscall(__NR_landlock_restrict_self, fd, flags);
}

/* The kernel's Landlock ABI.  Never fails: returns 0 with *ERRNUM set
 * (ENOSYS, EOPNOTSUPP) when Landlock is unavailable. */
int landlock_kernel_abi(int *errnum)
{
	long abi = ll_create_ruleset(NULL, 0, SB_LANDLOCK_CREATE_RULESET_VERSION);

	*errnum = 0;
	if (abi < 0) {
		*errnum = errno;
		return 0;
	}
	return (int)abi;
}

/* Rights, scopes and restrict flags for ABI; never fails.  Each case strips
 * what that ABI lacks and falls through to the older ones. */
static void handled_for_abi(int abi, struct ll_plan *plan)
{
	plan->handled_fs = SB_FS_ALL_ABI1 | SB_FS_REFER | SB_FS_TRUNCATE | SB_FS_IOCTL_DEV;
	plan->handled_net = SB_NET_BIND_TCP | SB_NET_CONNECT_TCP;
	plan->scoped = SB_SCOPE_ABSTRACT_UNIX_SOCKET | SB_SCOPE_SIGNAL;
	plan->restrict_flags = SB_RESTRICT_SELF_LOG_NEW_EXEC_ON;
	switch (abi) {
	case 1:
		/* ABI 2 (Linux 5.19) added REFER: cross-directory rename and link.
		 * At ABI 1 they are always denied, which is safe. */
		plan->handled_fs &= ~SB_FS_REFER;
		__attribute__((fallthrough));
	case 2:
		/* ABI 3 (6.2) added TRUNCATE: truncate(2) and O_TRUNC. */
		plan->handled_fs &= ~SB_FS_TRUNCATE;
		__attribute__((fallthrough));
	case 3:
		/* ABI 4 (6.7) added TCP bind and connect control. */
		plan->handled_net = 0;
		__attribute__((fallthrough));
	case 4:
		/* ABI 5 (6.10) added IOCTL_DEV: ioctl(2) on device files. */
		plan->handled_fs &= ~SB_FS_IOCTL_DEV;
		__attribute__((fallthrough));
	case 5:
		/* ABI 6 (6.12) added scopes: abstract unix sockets and signals
		 * to processes outside the domain. */
		plan->scoped = 0;
		__attribute__((fallthrough));
	case 6:
		/* ABI 7 (6.15) added audit logging flags; LOG_NEW_EXEC_ON makes
		 * denials of the executed command (not only of the helper) logged. */
		plan->restrict_flags = 0;
		break;
	default:
		/* ABI 7 and newer: everything above is known and used. */
		break;
	}
}

/* The rights a class grants, before intersecting with the ABI.  Never
 * fails (0 for an unknown class). */
static uint64_t class_rights(enum fs_class cls)
{
	const uint64_t read = SB_FS_EXECUTE | SB_FS_READ_FILE | SB_FS_READ_DIR;

	switch (cls) {
	case FS_READ:
		return read;
	case FS_READDIR:
		return SB_FS_READ_DIR;
	case FS_DEV:
		return read | SB_FS_WRITE_FILE | SB_FS_IOCTL_DEV;
	case FS_WRITE:
		/* MAKE_CHAR and MAKE_BLOCK are never granted: no device nodes. */
		return read | SB_FS_WRITE_FILE | SB_FS_REMOVE_DIR | SB_FS_REMOVE_FILE |
		       SB_FS_MAKE_DIR | SB_FS_MAKE_REG | SB_FS_MAKE_SOCK | SB_FS_MAKE_FIFO |
		       SB_FS_MAKE_SYM | SB_FS_REFER | SB_FS_TRUNCATE | SB_FS_IOCTL_DEV;
	}
	return 0;
}

/* Which TCP rights the policy wants handled (denied unless a rule allows).
 * Never fails. */
static uint64_t wanted_net(const struct policy *pol)
{
	uint64_t net = 0;

	if (pol->net == NET_OFF || pol->net == NET_PROXY)
		net |= SB_NET_CONNECT_TCP;
	if (!pol->bind_any)
		net |= SB_NET_BIND_TCP;
	return net;
}

/* Which Landlock scopes the policy asks for.  Never fails. */
static uint64_t wanted_scopes(const struct policy *pol)
{
	uint64_t s = 0;

	if (pol->scopes & SB_SCOPE_BIT_ABSTRACT_UNIX)
		s |= SB_SCOPE_ABSTRACT_UNIX_SOCKET;
	if (pol->scopes & SB_SCOPE_BIT_SIGNAL)
		s |= SB_SCOPE_SIGNAL;
	return s;
}

/* Open one rule path.  Returns the fd, or -1 for ENOENT (skipped); dies on
 * anything else, since a rule we cannot add means a different sandbox. */
static int open_rule_path(const char *path)
{
	int fd = (int)RETRY_EINTR(open(path, O_PATH | O_CLOEXEC));

	if (fd < 0 && errno == ENOENT)
		return -1;
	if (fd < 0)
		die_errno("landlock: cannot open rule path %s", path);
	return fd;
}

/* A hint for ERRNUM from a Landlock syscall (landlock_create_ruleset(2),
 * ERRORS), or NULL when there is none.  Never fails. */
static const char *ll_hint(int errnum)
{
	switch (errnum) {
	case ENOSYS:
		return "Landlock is not built into this kernel (CONFIG_SECURITY_LANDLOCK)";
	case EOPNOTSUPP:
		return "Landlock is disabled: add landlock to the lsm= boot parameter";
	case E2BIG:
	case EINVAL:
		return "the kernel rejected a flag: run `safebox-helper --probe` and report it";
	default:
		return NULL;
	}
}

/* Decide the ABI and rights, create the ruleset and add every path rule.
 * Each rule path is opened with O_PATH and closed as soon as its rule is in
 * the ruleset: holding them all open until the restriction ran into
 * RLIMIT_NOFILE (EMFILE) past about a thousand rules.  Skips and counts
 * ENOENT paths; dies on any other error. */
void landlock_prepare(const struct policy *pol, struct ll_plan *plan)
{
	uint64_t want_net = wanted_net(pol), want_scope = wanted_scopes(pol);
	struct safebox_ruleset_attr attr;
	size_t i;

	memset(plan, 0, sizeof(*plan));
	plan->ruleset = -1;
	plan->kernel_abi = landlock_kernel_abi(&plan->kernel_errno);
	plan->abi = plan->kernel_abi;
	if (plan->abi > SB_LANDLOCK_ABI_KNOWN)
		plan->abi = SB_LANDLOCK_ABI_KNOWN;
	if (pol->abi_max >= 0 && plan->abi > pol->abi_max)
		plan->abi = pol->abi_max;
	if (!pol->landlock_on)
		plan->abi = 0;
	plan->enabled = plan->abi >= 1;
	/* The filesystem part is always requested; net and scope when asked. */
	plan->fs = plan->enabled ? TRI_TRUE : TRI_FALSE;
	plan->net = want_net == 0 ? TRI_NULL : TRI_FALSE;
	plan->scope = want_scope == 0 ? TRI_NULL : TRI_FALSE;
	if (!plan->enabled)
		return;
	handled_for_abi(plan->abi, plan);
	if (want_net != 0 && (plan->handled_net & want_net) == want_net)
		plan->net = TRI_TRUE;
	plan->handled_net &= want_net;
	if (want_scope != 0 && (plan->scoped & want_scope) == want_scope)
		plan->scope = TRI_TRUE;
	plan->scoped &= want_scope;
	if (pol->net == NET_PROXY && (plan->handled_net & SB_NET_CONNECT_TCP)) {
		plan->ports = pol->ports;
		plan->n_ports = pol->n_ports;
	}
	memset(&attr, 0, sizeof(attr));
	attr.handled_access_fs = plan->handled_fs;
	attr.handled_access_net = plan->handled_net;
	attr.scoped = plan->scoped;
	/* The descriptor is close-on-exec (landlock_create_ruleset(2)). */
	plan->ruleset = (int)ll_create_ruleset(&attr, sizeof(attr), 0);
	if (plan->ruleset < 0)
		die_hint(errno, ll_hint(errno), "landlock_create_ruleset (ABI %d)", plan->abi);
	for (i = 0; i < pol->n_fs; i++) {
		cleanup_fd int fd = open_rule_path(pol->fs[i].path);
		uint64_t access = class_rights(pol->fs[i].cls) & plan->handled_fs;
		struct safebox_path_beneath_attr pb;
		struct stat st;

		if (fd < 0) {
			plan->skipped++;
			continue;
		}
		if (fstat(fd, &st) < 0)
			die_errno("landlock: cannot stat rule path %s", pol->fs[i].path);
		if (!S_ISDIR(st.st_mode))
			access &= SB_FS_FILE_RIGHTS;
		if (access == 0)
			continue; /* e.g. readdir on a file: nothing to grant (ENOMSG). */
		memset(&pb, 0, sizeof(pb));
		pb.allowed_access = access;
		pb.parent_fd = fd;
		if (ll_add_rule(plan->ruleset, SB_LANDLOCK_RULE_PATH_BENEATH, &pb) < 0)
			die_errno("landlock_add_rule (path rule %zu: %s)", i + 1, pol->fs[i].path);
		plan->n_rules++;
	}
}

/* Add the port rules and restrict this process (nothing when disabled);
 * closes the ruleset.  Dies on any failure. */
void landlock_apply(struct ll_plan *plan)
{
	cleanup_fd int ruleset = plan->ruleset;
	size_t i;

	plan->ruleset = -1;
	if (!plan->enabled)
		return;
	for (i = 0; i < plan->n_ports; i++) {
		struct safebox_net_port_attr np = {
			.allowed_access = SB_NET_CONNECT_TCP,
			.port = plan->ports[i],
		};

		if (ll_add_rule(ruleset, SB_LANDLOCK_RULE_NET_PORT, &np) < 0)
			die_errno("landlock_add_rule (connect port %u)", plan->ports[i]);
	}
	/* no_new_privs is already set (main.c), as landlock_restrict_self()
	 * requires unless the caller has CAP_SYS_ADMIN. */
	if (ll_restrict_self(ruleset, plan->restrict_flags) < 0)
		die_hint(errno, ll_hint(errno), "landlock_restrict_self (ABI %d)", plan->abi);
}
