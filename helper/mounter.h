/* mounter.h - safebox-helper --mount (mounter.c). */
#ifndef SAFEBOX_MOUNTER_H
#define SAFEBOX_MOUNTER_H

#include <stddef.h>

/* Run "--mount --namespace-fd N --plan-fd N [--hold-fd N]": make the plan's
 * mounts in the sandbox's mount namespace.  Returns 0; dies (125) naming
 * the entry or step that failed. */
int mounter_main(int argc, char **argv);

/* Shared with review.c.  A descriptor number given for OPT: decimal, >= 3;
 * dies otherwise. */
int mounter_fd_arg(const char *opt, const char *s);
/* The whole plan read from FD (NUL-terminated, length in *LEN); dies on a
 * read error or a plan over 64 MiB. */
char *mounter_read_plan(int fd, size_t *len);
/* Enter the mount namespace NS and the user namespace owning it; dies on
 * failure. */
void mounter_enter(int ns);

#endif
