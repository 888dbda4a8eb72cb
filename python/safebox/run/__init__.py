"""The run path, split by concern (docs/layers.md, "The run path").

* :mod:`.rundir` -- the private run dir and the sweep of dead runs' dirs;
* :mod:`.host` -- facts read from the host before planning (tools, mount
  table, the work-dir checks);
* :mod:`.plan` -- pure: resolved facts to bwrap argv and helper policy;
* :mod:`.protect` -- protected names: the watch list, quarantine, restored links;
* :mod:`.supervise` -- one command: spawn, signal relay, wait, exit mapping;
* :mod:`.session` -- the sequence: a sandbox (policy, layers, proxy) and
  each command run in it. ``safebox exec`` and :class:`safebox.Sandbox`
  both go through it.
"""
