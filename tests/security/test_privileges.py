"""After the helper: no capabilities in any set, no_new_privs, seccomp filter mode."""

from __future__ import annotations

import os

from conftest import Sandbox, probe_argv, run_helper, run_plain


def _fields(status_text: str) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in status_text.splitlines() if ":\t" in line)


def test_command_has_no_capabilities_no_new_privs_and_a_seccomp_filter(sandbox: Sandbox) -> None:
    rc, out, status = run_helper(sandbox.policy(), probe_argv("status"))
    assert rc == 0
    assert status["ok"] is True and status["nnp"] is True and status["caps"] is True and status["seccomp"] is True
    f = _fields(out)
    for key in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(f[key].strip(), 16) == 0, (key, f[key])
    if os.geteuid() == 0:
        assert int(f["CapBnd"].strip(), 16) == 0
    else:
        # PR_CAPBSET_DROP needs CAP_SETPCAP, which an unprivileged caller lacks, so
        # the bounding set stays as inherited. It only limits what execve of a
        # file-capability binary can grant, and no_new_privs already grants nothing.
        assert f["CapBnd"] == _fields(run_plain(probe_argv("status"))[1])["CapBnd"]
    assert f["NoNewPrivs"].strip() == "1"
    assert f["Seccomp"].strip() == "2"


def test_control_without_the_helper_root_keeps_its_capabilities() -> None:
    rc, out = run_plain(probe_argv("status"))
    assert rc == 0
    f = _fields(out)
    assert f["NoNewPrivs"].strip() == "0"
    if os.geteuid() == 0:
        assert int(f["CapEff"].strip(), 16) != 0
        assert int(f["CapBnd"].strip(), 16) != 0
    else:
        assert int(f["CapEff"].strip(), 16) == 0
