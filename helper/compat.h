/* compat.h - Landlock UAPI up to ABI 7 and syscall numbers.
 *
 * Debian 12's linux-libc-dev ships the ABI 2 header, so the helper carries its
 * own copy of the constants it needs, with safebox_ prefixed struct names so
 * that they never clash with an installed <linux/landlock.h>.  Values are
 * those of include/uapi/linux/landlock.h in Linux 6.15 (ABI 7).
 */
#ifndef SAFEBOX_COMPAT_H
#define SAFEBOX_COMPAT_H

#include <linux/types.h>
#include <sys/syscall.h>

#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#endif
#ifndef __NR_landlock_add_rule
#define __NR_landlock_add_rule 445
#endif
#ifndef __NR_landlock_restrict_self
#define __NR_landlock_restrict_self 446
#endif
#ifndef __NR_close_range
#define __NR_close_range 436
#endif
#ifndef __NR_seccomp
#define __NR_seccomp 317
#endif
/* Linux 6.6; the same number on every architecture (the unified table). */
#ifndef __NR_fchmodat2
#define __NR_fchmodat2 452
#endif

/* The audit architecture of the native syscall ABI: the only one the
 * seccomp program lets through (others are killed), so the only one a
 * notification can carry. */
#include <linux/audit.h>
#if defined(__x86_64__)
#define SB_AUDIT_ARCH_NATIVE AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SB_AUDIT_ARCH_NATIVE AUDIT_ARCH_AARCH64
#elif defined(__riscv) && __riscv_xlen == 64
#define SB_AUDIT_ARCH_NATIVE AUDIT_ARCH_RISCV64
#else
/* Unknown here: the supervisor then skips its own check (the program's
 * ACT_BADARCH already kills any other ABI). */
#define SB_AUDIT_ARCH_NATIVE 0
#endif

/* The highest ABI whose flags this file knows.  A newer kernel is used at
 * this ABI: the helper never claims rights it cannot name. */
#define SB_LANDLOCK_ABI_KNOWN 7

/* struct landlock_ruleset_attr, ABI 6 layout (the kernel accepts the larger
 * struct from older ABIs' point of view as long as unknown fields are 0:
 * copy_min_struct_from_user() in security/landlock/syscalls.c). */
struct safebox_ruleset_attr {
	__u64 handled_access_fs;
	__u64 handled_access_net; /* ABI 4 */
	__u64 scoped;             /* ABI 6 */
};

struct safebox_path_beneath_attr {
	__u64 allowed_access;
	__s32 parent_fd;
} __attribute__((packed));

struct safebox_net_port_attr {
	__u64 allowed_access;
	__u64 port;
};

#define SB_LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#define SB_LANDLOCK_RULE_PATH_BENEATH 1
#define SB_LANDLOCK_RULE_NET_PORT 2

/* ABI 1 */
#define SB_FS_EXECUTE (1ULL << 0)
#define SB_FS_WRITE_FILE (1ULL << 1)
#define SB_FS_READ_FILE (1ULL << 2)
#define SB_FS_READ_DIR (1ULL << 3)
#define SB_FS_REMOVE_DIR (1ULL << 4)
#define SB_FS_REMOVE_FILE (1ULL << 5)
#define SB_FS_MAKE_CHAR (1ULL << 6)
#define SB_FS_MAKE_DIR (1ULL << 7)
#define SB_FS_MAKE_REG (1ULL << 8)
#define SB_FS_MAKE_SOCK (1ULL << 9)
#define SB_FS_MAKE_FIFO (1ULL << 10)
#define SB_FS_MAKE_BLOCK (1ULL << 11)
#define SB_FS_MAKE_SYM (1ULL << 12)
/* ABI 2 */
#define SB_FS_REFER (1ULL << 13)
/* ABI 3 */
#define SB_FS_TRUNCATE (1ULL << 14)
/* ABI 5 */
#define SB_FS_IOCTL_DEV (1ULL << 15)
/* ABI 4 */
#define SB_NET_BIND_TCP (1ULL << 0)
#define SB_NET_CONNECT_TCP (1ULL << 1)
/* ABI 6 */
#define SB_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define SB_SCOPE_SIGNAL (1ULL << 1)
/* ABI 7: audit logging flags for landlock_restrict_self() */
#define SB_RESTRICT_SELF_LOG_SAME_EXEC_OFF (1U << 0)
#define SB_RESTRICT_SELF_LOG_NEW_EXEC_ON (1U << 1)
#define SB_RESTRICT_SELF_LOG_SUBDOMAINS_OFF (1U << 2)

#define SB_FS_ALL_ABI1                                                         \
	(SB_FS_EXECUTE | SB_FS_WRITE_FILE | SB_FS_READ_FILE | SB_FS_READ_DIR | \
	 SB_FS_REMOVE_DIR | SB_FS_REMOVE_FILE | SB_FS_MAKE_CHAR |              \
	 SB_FS_MAKE_DIR | SB_FS_MAKE_REG | SB_FS_MAKE_SOCK | SB_FS_MAKE_FIFO | \
	 SB_FS_MAKE_BLOCK | SB_FS_MAKE_SYM)

/* Rights that make sense on a file (not a directory): the kernel rejects the
 * others with EINVAL on a non-directory (samples/landlock/sandboxer.c). */
#define SB_FS_FILE_RIGHTS                                                      \
	(SB_FS_EXECUTE | SB_FS_WRITE_FILE | SB_FS_READ_FILE | SB_FS_TRUNCATE | \
	 SB_FS_IOCTL_DEV)

#endif
