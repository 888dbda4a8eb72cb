/* handoff.h - listeners on the proxy ports, handed to safebox's proxy. */
#ifndef SAFEBOX_HANDOFF_H
#define SAFEBOX_HANDOFF_H

#include "policy.h"

/* For every "listen" entry, listen on 127.0.0.1:PORT (and [::1]:PORT when
 * IPv6 loopback exists), send the listeners over FD (SCM_RIGHTS, one
 * message), close the helper's copies, wait for safebox's one-byte answer,
 * and close FD.  Returns the number of ports (0 when the policy has none,
 * and FD is then left alone).  Dies on any failure, including FD < 0 when
 * ports are asked for. */
unsigned long handoff_listeners(const struct policy *pol, int fd);

#endif
