"""The public API: :class:`Sandbox`, :class:`Policy`, :func:`check_host`
(docs/api.md; semantic versioning from 0.1.0 on).

A :class:`Sandbox` is one session of the run path (safebox/run/session.py)
that ``safebox exec`` uses too: one merged policy, one run dir, one proxy,
for every command run in it. Unlike ``safebox exec``, it touches nothing
process-wide: no signal handler, no close-on-exec marking of the caller's
descriptors, no change of working directory or environment, no child
subreaper. So it is safe from any thread, with any number of sandboxes at
once.

Every name is imported from here (``safebox.api.Sandbox``, or lazily
``safebox.Sandbox``); the modules behind it hold one concern each:

* :mod:`~safebox.api.sandbox`: :class:`Sandbox`: the session, its events,
  its runtime decisions, its lifetime;
* :mod:`~safebox.api.popen`: :class:`Popen` and :class:`AsyncPopen`: one
  command's descriptors, output and end;
* :mod:`~safebox.api.common`: subprocess's vocabulary (``PIPE``,
  :class:`TimeoutExpired`, ...), how a command becomes an argv, and
  :class:`Event` and :class:`CompletedRun`;
* :mod:`~safebox.api.policy`: :class:`Policy`;
* :mod:`~safebox.api.host`: :func:`check_host`.
"""

from __future__ import annotations

from safebox.api.common import (
    DEVNULL,
    PIPE,
    STDOUT,
    CalledProcessError,
    CompletedRun,
    Event,
    TimeoutExpired,
)
from safebox.api.host import HostCheck, check_host
from safebox.api.policy import Policy
from safebox.api.popen import AsyncPopen, Popen
from safebox.api.sandbox import Sandbox
from safebox.runtime.decisions import Decision

__all__ = ["DEVNULL", "PIPE", "STDOUT", "AsyncPopen", "CalledProcessError", "CompletedRun", "Decision", "Event",
           "HostCheck", "Policy", "Popen", "Sandbox", "TimeoutExpired", "check_host"]
