/* supervise.h - `safebox-helper --supervise`: the violations feed's supervisor. */
#ifndef SAFEBOX_SUPERVISE_H
#define SAFEBOX_SUPERVISE_H

/* Run the supervisor (docs/violations.md): argv is
 * "--supervise --table PATH --events-fd N --listener-sock N".  Returns the
 * exit status: 0 when the sandbox is gone (or observation never started), 125
 * on bad arguments or table; it never execs anything. */
int supervise_main(int argc, char **argv);

/* 1 if the kernel offers seccomp user notifications (Linux 5.0), else 0.
 * Changes nothing; never fails. */
int supervise_available(void);

#endif
