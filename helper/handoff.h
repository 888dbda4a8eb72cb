/* handoff.h - listeners on the proxy ports, handed to safebox's proxy. */
#ifndef SAFEBOX_HANDOFF_H
#define SAFEBOX_HANDOFF_H

#include "policy.h"

/* For every "listen" entry, listen on 127.0.0.1:PORT (and [::1]:PORT when
 * IPv6 loopback exists), send the listeners over FD (SCM_RIGHTS, one
 * message tagged 'L'), close the helper's copies and wait for safebox's
 * one-byte answer.  FD stays open (the publish sockets may follow; it is
 * closed with every other descriptor before exec).  Returns the number of
 * ports (0 when the policy has none).  Dies on any failure, including
 * FD < 0 when ports are asked for. */
unsigned long handoff_listeners(const struct policy *pol, int fd);

/* Send the N descriptors FDS (at most 16) over SOCK in one message whose one
 * byte of payload is TAG.  Dies on failure. */
void handoff_send(int sock, char tag, const int *fds, size_t n);

/* Wait (30 s at most) for safebox's answer 'k' on SOCK.  Dies on timeout, end
 * of file or any other byte: the command must not start. */
void handoff_wait_ack(int sock);

#endif
