/* seccomp.c - the seccomp layer.
 *
 * Python compiles the filter (libseccomp via pyseccomp); the helper only
 * checks that the blob is plausibly a sock_filter array, as bubblewrap's
 * seccomp_program_new() does, and loads it last, so that the Landlock and
 * capability calls before it need not be allowed by the filter.
 */
#include "seccomp.h"
#include "util.h"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Read the BPF program at PATH (NULL: none) into BLOB.  Dies unless it is a
 * regular file (not a symlink) of whole instructions, at most
 * SB_BPF_MAX_INSNS, whose size did not change while read. */
void seccomp_prepare(const char *path, struct bpf_blob *blob)
{
	cleanup_fd int fd = -1;
	struct stat st;
	size_t size;
	ssize_t n;
	char extra;

	blob->insns = NULL;
	blob->n_insns = 0;
	if (path == NULL)
		return;
	fd = (int)RETRY_EINTR(open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
	if (fd < 0)
		die_hint(errno, errno == ELOOP ? "the seccomp path must not be a symlink" : NULL,
			 "cannot open seccomp program %s", path);
	if (fstat(fd, &st) < 0)
		die_errno("fstat seccomp program %s", path);
	if (!S_ISREG(st.st_mode))
		die("seccomp program %s is not a regular file", path);
	if (st.st_size <= 0 || st.st_size % (off_t)sizeof(struct sock_filter) != 0 ||
	    st.st_size > (off_t)(SB_BPF_MAX_INSNS * sizeof(struct sock_filter)))
		die("seccomp program %s: size %lld is not a non-zero multiple of %zu up to %d instructions",
		    path, (long long)st.st_size, sizeof(struct sock_filter), SB_BPF_MAX_INSNS);
	size = (size_t)st.st_size;
	blob->insns = xcalloc(size / sizeof(struct sock_filter), sizeof(struct sock_filter));
	n = read_all(fd, blob->insns, size);
	if (n < 0)
		die_errno("read seccomp program %s", path);
	/* The size must not change under us: a short or long read is fatal. */
	if ((size_t)n != size || read_all(fd, &extra, 1) != 0)
		die("seccomp program %s changed size while being read", path);
	blob->n_insns = size / sizeof(struct sock_filter);
}

/* Install BLOB (seccomp(2), SECCOMP_SET_MODE_FILTER; needs no_new_privs).
 * Returns 1 if installed, 0 if there is none; dies on failure. */
int seccomp_install(const struct bpf_blob *blob)
{
	struct sock_fprog prog;

	if (blob->insns == NULL)
		return 0;
	prog.len = (unsigned short)blob->n_insns;
	prog.filter = blob->insns;
	if (syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0)
		return 1;
	/* seccomp(2) is Linux 3.17+; prctl is the older spelling of the same. */
	if (errno == ENOSYS && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0)
		return 1;
	die_hint(errno,
		 errno == EINVAL ? "the kernel rejected the BPF program (bad instruction, or "
				   "CONFIG_SECCOMP_FILTER missing)"
				 : NULL,
		 "cannot install the seccomp program");
}

/* The observing program with a listener, else the plain one (seccomp.h).
 * Any failure to get a listener falls back to BLOB, which enforces the same
 * denylist with SECCOMP_RET_ERRNO: observation is lost, never enforcement.
 * The usual reasons: EBUSY, a filter of an enclosing sandbox already has a
 * listener (one per filter chain, kernel/seccomp.c has_duplicate_listener);
 * EINVAL, a kernel older than 5.0 (no SECCOMP_FILTER_FLAG_NEW_LISTENER).
 * Returns 1 if a program was installed, 0 if none; dies on failure. */
int seccomp_install_observed(const struct bpf_blob *blob, const struct bpf_blob *observe, int *listener,
			     int *why)
{
	struct sock_fprog prog;
	long fd;

	*listener = -1;
	*why = 0;
	if (observe->insns == NULL || blob->insns == NULL)
		return seccomp_install(blob);
	prog.len = (unsigned short)observe->n_insns;
	prog.filter = observe->insns;
	fd = syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
	if (fd >= 0) {
		*listener = (int)fd;
		return 1;
	}
	*why = errno;
	return seccomp_install(blob);
}

/* 1 if the kernel has seccomp, else 0.  Changes nothing; never fails. */
int seccomp_available(void)
{
	unsigned int action = SECCOMP_RET_ALLOW;

	/* SECCOMP_GET_ACTION_AVAIL (4.14) answers without changing anything. */
	if (syscall(__NR_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) == 0)
		return 1;
	/* Older kernels: PR_GET_SECCOMP works whenever seccomp is built in. */
	return prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0;
}
