/* caps.h - drop every capability, then verify. */
#ifndef SAFEBOX_CAPS_H
#define SAFEBOX_CAPS_H

/* Drop the bounding set (when CAP_SETPCAP allows it), lock the securebits,
 * clear the ambient set, zero effective/permitted/inheritable, and verify
 * with capget.  Dies on any failure or if a capability survives. */
void caps_drop_all(void);

#endif
