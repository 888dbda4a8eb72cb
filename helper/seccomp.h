/* seccomp.h - read, check and install the classic-BPF program. */
#ifndef SAFEBOX_SECCOMP_H
#define SAFEBOX_SECCOMP_H

#include <linux/filter.h>
#include <stddef.h>

#define SB_BPF_MAX_INSNS 4096 /* BPF_MAXINSNS: the kernel's own limit */

struct bpf_blob {
	struct sock_filter *insns; /* NULL: no program requested */
	size_t n_insns;
};

/* Read the program at PATH (NULL: none).  Dies unless it is a regular file
 * (not a symlink) whose size is a non-zero multiple of 8, at most 4096
 * instructions. */
void seccomp_prepare(const char *path, struct bpf_blob *blob);

/* Install the program.  Needs no_new_privs.  Returns 1 if installed, 0 if
 * there was none; dies on failure. */
int seccomp_install(const struct bpf_blob *blob);

/* Install OBSERVE (the observing program: SECCOMP_RET_USER_NOTIF where BLOB
 * says errno, plus the watched calls) with a new listener, when OBSERVE is
 * given and the kernel lets this process have a listener; otherwise install
 * BLOB, exactly as seccomp_install().  *LISTENER gets the listener (-1: none)
 * and *WHY the errno that prevented it (0 when OBSERVE was not given).
 * Returns 1 if a program was installed, 0 if there was none; dies if BLOB
 * cannot be installed. */
int seccomp_install_observed(const struct bpf_blob *blob, const struct bpf_blob *observe, int *listener,
			     int *why);

/* 1 if the kernel has seccomp filter mode. */
int seccomp_available(void);

#endif
