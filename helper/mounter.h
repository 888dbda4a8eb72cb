/* mounter.h - safebox-helper --mount (mounter.c). */
#ifndef SAFEBOX_MOUNTER_H
#define SAFEBOX_MOUNTER_H

/* Run "--mount --namespace-fd N --plan-fd N [--hold-fd N]": make the plan's
 * mounts in the sandbox's mount namespace.  Returns 0; dies (125) naming
 * the entry or step that failed. */
int mounter_main(int argc, char **argv);

#endif
