"""Capture's part of a run (docs/network.md, "Capture" and "DNS"): whether
it is on, and the sandbox's ``/etc/resolv.conf``.

Capture needs the seccomp supervisor (it is what sees a ``connect()``), so
it is on exactly when a networked run has both layers and observation: with
``--observe off``, ``--without bwrap`` or ``--without helper`` a connect that
ignores the proxy is refused as before (Landlock, the empty namespace), never
let through.
"""

from __future__ import annotations

import os

#: The sandbox's resolver configuration: the DNS of proxy/dns.py (UDP and TCP
#: both captured, docs/network.md "UDP"), no search domains (a name is looked
#: up as given, as the proxy does).
RESOLV_CONF = b"# safebox: the sandbox's DNS answers only names the policy allows (docs/network.md, DNS)\n" \
              b"nameserver 198.18.0.53\noptions attempts:2 timeout:2\n"


def wants_capture(*, both_layers: bool, observe: str, dry_run: bool) -> bool:
    """Whether a networked run captures connects."""
    return both_layers and observe != "off" and not dry_run


def resolv_conf(run_dir: str) -> tuple[str, str]:
    """Write the sandbox's resolv.conf into ``run_dir`` (once) and return
    ``("/etc/resolv.conf", copy)`` for ``ResolvedPolicy.masked_files``."""
    path = os.path.join(run_dir, "resolv.conf")
    if not os.path.lexists(path):  # one per run dir: every command of a Sandbox binds the same file
        from safebox.hostio import write_exclusive  # the run dir is safebox's own: O_EXCL, no link followed

        write_exclusive(path, RESOLV_CONF, mode=0o444)
    return "/etc/resolv.conf", path
