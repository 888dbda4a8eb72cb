"""The CI runner's own secrets, and its file commands, around one sandboxed run
of a CI job.

Imported by the runner only when the environment says the run is a CI job
(``GITHUB_ACTIONS=true`` or ``GITLAB_CI=true``; ``SAFEBOX_CI=off`` turns all of
this off). docs/ci.md, "What safebox hides from a step" and "Runner files",
is the user-facing description; this docstring is the reasoning.

Secrets of the runner, hidden inside:

* The token ``actions/checkout`` persists in ``.git/config``
  (``http.<url>.extraheader = AUTHORIZATION: basic ...``; GitLab's
  ``https://gitlab-ci-token:TOKEN@`` remote URLs, and any ``include.path``
  file such a config names, e.g. checkout's credentials file in
  ``$RUNNER_TEMP``). With bubblewrap the file is covered by a scrubbed copy,
  read-only: git inside works on the repository, fetches public remotes when
  the policy allows the host, and cannot authenticate as the job. The host's
  file is never modified, so a killed safebox leaves nothing to restore.
  Without bubblewrap nothing can be mounted: the files are added to
  ``denyRead`` instead (what the helper alone can enforce of that).
* A self-hosted runner's ``.credentials``, ``.credentials_rsaparams``,
  ``.runner`` (and the ``_migrated`` copies, and its ``.env``), in the
  runner's root: found from the runner process among safebox's ancestors
  (``<root>/bin/Runner.Worker``) and from ``RUNNER_WORKSPACE`` /
  ``RUNNER_TEMP`` (``<root>/_work/...``).
* ``google-github-actions/auth``'s ``gha-creds-*.json`` in the workspace
  (the file ``GOOGLE_GHA_CREDS_PATH`` names is denied in every run already:
  policy/defaults.py).
* GitLab: the runner's ``config.toml`` (its registration token), and the
  ``$CI_PROJECT_DIR.tmp`` directory where file-type CI/CD variables (often
  secrets: kubeconfigs, keys) are written.

File commands (``$GITHUB_ENV``, ``$GITHUB_PATH``, ``$GITHUB_OUTPUT``,
``$GITHUB_STATE``, ``$GITHUB_STEP_SUMMARY``): inside they name files of this
run (a write root of its own); the runner's own files are read-only inside.
After the run, :meth:`CiRun.finish` parses what the command wrote exactly as
the runner would (lines end at ``\\n``, ``\\r\\n`` or a lone ``\\r``, as .NET's
``ReadLine``; ``NAME=value`` and ``NAME<<DELIMITER``), refuses what could run
code in a later, unsandboxed step (:data:`ENV_DENY`, :data:`ENV_DENY_PREFIXES`,
a PATH entry that is not a plain existing directory outside every write
root), refuses anything malformed or ambiguous, and appends the rest, in a
canonical form, to the runner's files.

The modules, one concern each:

* :mod:`~safebox.ci_job.secrets`: the runner's secrets found and hidden
  (git configs scrubbed, the runner's own files, the action's directory);
* :mod:`~safebox.ci_job.file_commands`: a file command file read as the
  runner reads it, and what of it may pass on (:class:`Passing`);
* :mod:`~safebox.ci_job.env_deny`: the variables known to run code
  (:data:`ENV_DENY`), which no wildcard in ``ci.passEnv`` passes;
* :mod:`~safebox.ci_job.run`: :func:`detect`, :func:`prepare` and
  :class:`CiRun`, the job's run from before the command to after it.

Named ``ci_job``, not ``ci``: the repository's ``ci/`` holds the GitHub
action and the GitLab template users run safebox with, and ``.ci/`` the
project's own CI; not ``ci_runner`` either, beside ``safebox.runner`` (the
run path). This package is what one run does inside a CI job.
"""

from __future__ import annotations

from safebox.ci_job.env_deny import ENV_DENY, ENV_DENY_PREFIXES, code_running, env_refusal
from safebox.ci_job.file_commands import Passing, Refusal, parse_file_command, path_entry_refusal, render_entries
from safebox.ci_job.run import CiRun, detect, prepare
from safebox.ci_job.secrets import scrub_git_config

__all__ = ["ENV_DENY", "ENV_DENY_PREFIXES", "CiRun", "Passing", "Refusal", "code_running", "detect", "env_refusal",
           "parse_file_command", "path_entry_refusal", "prepare", "render_entries", "scrub_git_config"]
