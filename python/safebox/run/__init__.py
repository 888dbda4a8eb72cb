"""The run path, split by concern (docs/layers.md, "The run path").

* :mod:`.main` -- ``safebox exec``: its request (from the option table)
  and ``run()``, one session with one command;
* :mod:`.rundir` -- the private run dir and the sweep of dead runs' dirs;
* :mod:`.host` -- facts read from the host before planning (tools, mount
  table, the work-dir checks);
* :mod:`.plan` -- pure: resolved facts to bwrap argv and helper policy;
* :mod:`.protect` -- protected names: the watch list, quarantine, restored links;
* :mod:`.decision` -- pure: a command's decision, the value its launch takes;
* :mod:`.supervise` -- one command: spawn, wait, exit mapping;
* :mod:`.spawn` -- child processes: started, signals relayed to the
  command's group, the subreaper;
* :mod:`.session` -- a sandbox's sequence (policy, layers, proxy), and
  :mod:`.command` each command's, run in it. ``safebox exec`` and :class:`safebox.Sandbox`
  both go through it.
"""
