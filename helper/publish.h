/* publish.h - socat bridges for --publish: run dir unix socket -> 127.0.0.1:PORT inside. */
#ifndef SAFEBOX_PUBLISH_H
#define SAFEBOX_PUBLISH_H

#include "policy.h"

/* Start one socat per "publish" entry, double-forked and each in its own
 * process group, wait until every socket exists (2 s limit), then hand an
 * O_PATH descriptor of each to safebox over HANDOFF_FD and wait for its
 * answer.  Dies on failure, after killing the bridges already started.
 * Returns the number of published ports. */
unsigned long publish_start(const struct policy *pol, int handoff_fd);

#endif
