"""The error tree. Every module raises its own subclass; only the CLI (``cli/__init__.py``) turns
an error into a message and an exit status (as click's ``ClickException.exit_code``).
"""

from __future__ import annotations

# Exit statuses of `safebox exec`, as `env`, `timeout` and `docker run` use them.
EXIT_TIMEOUT = 124  # limits.wallTime reached (as timeout(1))
EXIT_SAFEBOX_FAILED = 125
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127


class SafeboxError(Exception):
    """Base of every error safebox reports; the command never runs after one."""

    exit_code = EXIT_SAFEBOX_FAILED

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class PolicyError(SafeboxError):
    """A policy file or flag is invalid; the message names the file and key path."""

    def __init__(self, message: str, *, hint: str | None = None, key_path: str | None = None) -> None:
        super().__init__(message, hint=hint)
        #: The offending key, dotted (``network.allowedDomains[0]``), when
        #: the error is about one key of a policy document; else None.
        self.key_path = key_path


class BuildError(SafeboxError):
    """The sandbox cannot be built as the policy asks (e.g. a deny path that cannot be masked)."""


class HelperError(SafeboxError):
    """The helper is missing, refused the policy, or did not enforce what was required."""


class ProxyError(SafeboxError):
    """The filtering proxy could not start or failed."""


class RunError(SafeboxError):
    """Spawning or supervising the sandbox failed (bwrap missing, run dir unusable)."""


class DoctorError(SafeboxError):
    """A doctor check could not be carried out at all."""
