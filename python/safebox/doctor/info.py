"""doctor's informational checks that ask safebox's own code what ``safebox
exec`` would decide on this host: the limits and what enforces each, and the
GPU nodes ``--allow-gpu`` would bind. Never required."""

from __future__ import annotations

from safebox.doctor import host
from safebox.doctor.common import Check, Status


def check_limits() -> Check:
    """Informational: what enforces each per-sandbox limit here, as ``safebox
    exec`` decides it (``safebox/run/limits.py``, the same code). Warns when a
    default limit cannot be enforced (processes as root without a cgroup;
    /tmp without bubblewrap's ``--size``)."""
    from safebox.policy import limit_values
    from safebox.run import limits

    bwrap = host.which("bwrap")
    # memory: an example value, to show what a limits.memory would use.
    values = {"processes": (float(limit_values.DEFAULT_PROCESSES), False), "memory": (float(limit_values.GiB), False),
              "tmpSize": (float(limit_values.default("tmpSize")), False), "wallTime": (0.0, False)}
    here = limits.probe(values, bwrap=bwrap, cache_dir=None)
    plan = limits.plan(values, here, bwrap=bwrap is not None, helper=True, strict=False)
    why = {c: w for c, site, w in here.cgroups if site is None}
    parts, short = [], []
    for lim, label in ((plan.get("processes"), "processes"), (plan.get("memory"), "memory"),
                       (plan.get("tmpSize"), "/tmp size")):
        if lim.scope:
            parts.append(f"{label}: {lim.how}")
        else:
            parts.append(f"{label}: not enforced ({lim.how})")
            short.append(label)
    if plan.get("memory").scope == "process":
        parts[1] += f" (no cgroup: {why.get('memory', '')})"
    parts.append("wall time: safebox")
    found = "; ".join(parts)
    if short:
        fix = ("processes as root need a cgroup: run safebox where it can create one, or as an unprivileged user "
               "(docs/layers.md, \"Resource limits\")" if "processes" in short else
               "install a bubblewrap with --size (0.8.0 or newer)")
        return Check("limits", Status.WARN, found, fix, False)
    return Check("limits", Status.OK, found, None, False)


def check_gpu() -> Check:
    """Informational: what ``--allow-gpu`` would bind here (builder/devices.py)."""
    from safebox.builder.devices import find_gpu_nodes
    from safebox.errors import BuildError

    try:
        nodes = find_gpu_nodes(None)
    except BuildError as e:
        return Check("gpu", Status.OK, f"no GPU device node: --allow-gpu would be refused ({e.message})", None, False)
    return Check("gpu", Status.OK, "--allow-gpu would bind " + ", ".join(n.inside for n in nodes), None, False)
