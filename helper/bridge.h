/* bridge.h - socat bridges from 127.0.0.1:PORT to the host proxy's sockets. */
#ifndef SAFEBOX_BRIDGE_H
#define SAFEBOX_BRIDGE_H

#include "policy.h"

/* Start one socat per bridge (and one on [::1] when IPv6 loopback exists),
 * double-forked and each in its own process group, then wait until every
 * port accepts a connection (2 s limit).  Dies on failure, after killing the
 * bridges already started.  Returns the number of bridges. */
unsigned long bridges_start(const struct policy *pol);

#endif
