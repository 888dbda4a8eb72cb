/* caps.c - the capability layer.
 *
 * Same ground as bubblewrap's drop_all_caps()/drop_cap_bounding_set(), in the
 * order capabilities(7) requires: the bounding set and securebits need
 * CAP_SETPCAP in the effective set, so they go first, and capset() to zero
 * comes last.
 */
#include "caps.h"
#include "util.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* capget(2) with the v3 header, both 32-bit halves into DATA.
 * Returns 0, or -1 with errno set. */
static int capget_v3(struct __user_cap_data_struct data[2])
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };

	return (int)syscall(SYS_capget, &hdr, data);
}

/* capset(2) with the v3 header, this thread's sets from DATA.
 * Returns 0, or -1 with errno set. */
static int capset_v3(struct __user_cap_data_struct data[2])
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };

	return (int)syscall(SYS_capset, &hdr, data);
}

/* The highest capability number the kernel knows.  Reads
 * /proc/sys/kernel/cap_last_cap; without /proc, probes PR_CAPBSET_READ until
 * EINVAL (kernel 2.6.25+).  Never fails. */
static int cap_last_cap(void)
{
	char buf[16];
	cleanup_fd int fd = (int)RETRY_EINTR(open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC));
	int last;

	if (fd >= 0) {
		ssize_t n = read_all(fd, buf, sizeof(buf) - 1);

		if (n > 0) {
			buf[n] = '\0';
			if (sscanf(buf, "%d", &last) == 1 && last >= 0 && last < 64)
				return last;
		}
	}
	for (last = 0; last < 63; last++)
		if (prctl(PR_CAPBSET_READ, last + 1, 0, 0, 0) < 0)
			break;
	return last;
}

/* Whether CAP is in this thread's effective set.  Dies if capget fails. */
static int has_effective(int cap)
{
	struct __user_cap_data_struct d[2];

	if (capget_v3(d) < 0)
		die_errno("capget");
	return (d[cap / 32].effective >> (cap % 32)) & 1;
}

/* Drop every capability from the bounding set, so no later execve can
 * regain one (capabilities(7), "Capability bounding set").  Ignores EINVAL
 * (a capability this kernel lacks); dies on any other error. */
static void drop_bounding_set(int last)
{
	int cap;

	for (cap = 0; cap <= last; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			die_errno("prctl(PR_CAPBSET_DROP, %d)", cap);
}

/* Lock root out of capability semantics: after this, uid 0 gains nothing
 * at execve and setuid transitions keep the (empty) sets.  Same bits as
 * bubblewrap sets for privileged sandboxes.  Dies on failure (it needs
 * CAP_SETPCAP, prctl(2) PR_SET_SECUREBITS). */
static void lock_securebits(void)
{
	unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
			     SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
			     SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;

	if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) < 0)
		die_errno("prctl(PR_SET_SECUREBITS)");
}

/* Check that nothing survived.  Dies if capget fails, or naming the first
 * leftover. */
static void verify_dropped(int last, int bounding_dropped)
{
	struct __user_cap_data_struct d[2];
	int cap;

	if (capget_v3(d) < 0)
		die_errno("capget");
	if (d[0].effective | d[1].effective | d[0].permitted | d[1].permitted |
	    d[0].inheritable | d[1].inheritable)
		die("capabilities remain after capset (eff %08x%08x prm %08x%08x)",
		    d[1].effective, d[0].effective, d[1].permitted, d[0].permitted);
	for (cap = 0; cap <= last; cap++) {
		if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0) > 0)
			die("capability %d remains in the ambient set", cap);
		if (bounding_dropped && prctl(PR_CAPBSET_READ, cap, 0, 0, 0) > 0)
			die("capability %d remains in the bounding set", cap);
	}
}

/* Drop every capability in the order capabilities(7) needs (caps.h).
 * Dies on any failure or if a capability survives. */
void caps_drop_all(void)
{
	struct __user_cap_data_struct zero[2];
	int last = cap_last_cap();
	int setpcap = has_effective(CAP_SETPCAP);

	/* Without CAP_SETPCAP (an unprivileged caller) the bounding set cannot
	 * be changed, and need not be: with no_new_privs set and permitted
	 * empty, execve cannot add a capability (file capabilities are ignored
	 * under no_new_privs, Documentation/userspace-api/no_new_privs.rst). */
	if (setpcap) {
		drop_bounding_set(last);
		lock_securebits();
	}
	/* EINVAL: kernel older than 4.3 has no ambient set, nothing to clear. */
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		die_errno("prctl(PR_CAP_AMBIENT_CLEAR_ALL)");
	memset(zero, 0, sizeof(zero));
	if (capset_v3(zero) < 0)
		die_errno("capset");
	verify_dropped(last, setpcap);
}
