"""A CI job's run: :func:`detect` the job, :func:`prepare` what the run
hides and where its file commands go, and :class:`CiRun`, which passes the
safe entries on after the command (safebox/ci_job/__init__.py)."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from safebox.ci_job.file_commands import FILE_COMMANDS, MAX_FILE, Passing, Refusal, filter_entries
from safebox.ci_job.secrets import action_home, git_credentials, runner_secret_files

if TYPE_CHECKING:
    from safebox.hostio import PinnedDir

#: What of a step's own summary is passed on: GitHub uploads none of a step
#: summary over 1 MiB, and safebox's report comes first.
MAX_STEP_SUMMARY = 512 << 10


def detect(environ: Mapping[str, str]) -> str | None:
    """``github`` or ``gitlab`` when the environment is such a CI job, else None."""
    if environ.get("SAFEBOX_CI", "").lower() in ("off", "0", "false", "no"):
        return None
    if environ.get("GITHUB_ACTIONS") == "true":
        return "github"
    if environ.get("GITLAB_CI") == "true":
        return "gitlab"
    return None


@dataclass
class CiRun:
    """What a CI job's run adds to the sandbox, and what it passes on afterwards."""

    kind: str
    deny_read: tuple[str, ...] = ()
    deny_write: tuple[str, ...] = ()
    allow_write: tuple[str, ...] = ()
    #: (path, its scrubbed text): covered read-only inside (:meth:`materialize`).
    scrubbed: tuple[tuple[str, str], ...] = ()
    #: Variables pointing at this run's own file-command files.
    env: dict[str, str] = field(default_factory=dict)
    #: variable -> (this run's file, the runner's file)
    files: dict[str, tuple[str, str]] = field(default_factory=dict)
    commands_dir: str | None = None
    notes: list[str] = field(default_factory=list)
    #: commands_dir, pinned when it was made: this run's files are read
    #: beneath it, never through a name the command replaced.
    pinned: PinnedDir | None = None
    #: variable -> (the runner file's directory pinned before the run, the
    #: file's (st_dev, st_ino) then, or None when it did not exist yet)
    runner_files: dict[str, tuple[PinnedDir, tuple[int, int] | None]] = field(default_factory=dict)
    #: The step's own $GITHUB_STEP_SUMMARY text, passed on after safebox's report.
    step_summary: str = ""

    def materialize(self, run_dir: str, *, dry_run: bool = False) -> tuple[tuple[str, str], ...]:
        """Write the scrubbed copies into the run dir (private, read-only
        inside); returns the ``(copy, path)`` overlays for bwrap."""
        out = []
        for n, (path, text) in enumerate(self.scrubbed):
            copy = os.path.join(run_dir, f"git-config-{n}")
            if not dry_run:
                fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                try:
                    os.write(fd, text.encode("utf-8", "surrogateescape"))
                finally:
                    os.close(fd)
            out.append((copy, path))
        return tuple(out)

    def append_step_summary(self) -> list[Refusal]:
        """Pass the step's own summary text on, after safebox's report and
        under a heading of its own, at most :data:`MAX_STEP_SUMMARY` bytes
        (GitHub drops a step summary over 1 MiB whole, safebox's report with
        it). Call after the report is written; returns what was refused."""
        text, self.step_summary = self.step_summary, ""
        pair = self.files.get("GITHUB_STEP_SUMMARY")
        if not text or pair is None:
            return []
        data = text.encode("utf-8", "replace")
        note = ""
        if len(data) > MAX_STEP_SUMMARY:
            data = data[:MAX_STEP_SUMMARY].decode("utf-8", "ignore").encode()
            note = f"\n\n*(safebox: the step's summary was cut at {MAX_STEP_SUMMARY} bytes)*\n"
        head = b"\n#### The step's own summary\n\n"
        from safebox.hostio import HostFileError

        try:
            self._append_theirs("GITHUB_STEP_SUMMARY", pair[1], head + data + note.encode())
        except HostFileError as e:
            return [Refusal("GITHUB_STEP_SUMMARY", "*", f"not passed on: the runner's file {e.why}")]
        return []

    def attach(self, var: str, ours: str, theirs: str) -> None:
        """Give ``var`` this run's file ``ours`` (created empty, 0600; every
        file in one directory, pinned at the first) and the runner's
        ``theirs`` (its directory and identity pinned now, before the run)."""
        from safebox.hostio import pin

        if self.pinned is None:
            self.pinned = pin(os.path.dirname(ours))
        elif os.path.dirname(ours) != self.pinned.path:
            raise ValueError(f"{ours}: this run's files share one directory ({self.pinned.path})")
        self.pinned.write_exclusive(os.path.basename(ours), b"")
        _pin_runner_file(self, var, theirs)
        self.files[var] = (ours, theirs)

    def cleanup(self) -> None:
        """Remove this run's file-command directory and release the pinned
        directories (idempotent)."""
        for d, _ in self.runner_files.values():
            d.close()
        self.runner_files = {}
        if self.pinned is not None:
            self.pinned.close()
            self.pinned = None
        if self.commands_dir:
            from safebox._record import rmtree

            rmtree(self.commands_dir)
            self.commands_dir = None

    def summary_file(self) -> str | None:
        """The runner's step summary file (where the report goes), if any."""
        pair = self.files.get("GITHUB_STEP_SUMMARY")
        return pair[1] if pair else None

    def finish(self, passing: Passing) -> list[Refusal]:
        """Pass the safe entries of each file command on to the runner's file;
        returns what was refused. Call once, after the command ended."""
        refused: list[Refusal] = []
        for var, kind in FILE_COMMANDS:
            pair = self.files.get(var)
            if pair is None or self.pinned is None:
                continue
            ours, theirs = pair
            from safebox.hostio import HostFileError

            # This run's file lies in a directory the command could write:
            # read beneath the directory pinned when it was made, without
            # following a link (a step's `ln -sf ~/.ssh/id_x
            # $GITHUB_STEP_SUMMARY` must not publish the key), and only a
            # regular file of this user with one link (a hard link to
            # /etc/shadow is refused whole), at most MAX_FILE bytes.
            try:
                raw = self.pinned.read(os.path.basename(ours), max_size=MAX_FILE)
            except HostFileError as e:
                refused.append(Refusal(var, "*", f"refused whole: {e.why}"))
                continue
            if not raw:
                continue
            out = filter_entries(var, kind, raw.decode("utf-8", "replace"), passing, refused)
            if out and kind == "summary":
                # Held until safebox's own report is in (append_step_summary):
                # written first, the step's text could hide or forge it (an
                # unclosed `<!--`, a fake "safebox: all clear": review).
                self.step_summary = out
                continue
            if out:
                try:
                    self._append_theirs(var, theirs, out.encode())
                except HostFileError as e:
                    refused.append(Refusal(var, "*", f"not passed on: the runner's file {e.why}"))
        return refused

    def _append_theirs(self, var: str, theirs: str, data: bytes) -> None:
        """Append to the runner's own file beneath its directory pinned
        before the run: the very file that was there then (same device and
        inode), or, when there was none, a new regular file of this user."""
        from safebox.hostio import HostFileError, check_regular

        pinned = self.runner_files.get(var)
        if pinned is None:
            raise HostFileError(theirs, "has a directory safebox could not pin before the run")
        d, ident = pinned
        name = os.path.basename(theirs)
        flags = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | (os.O_CREAT if ident is None else 0)
        try:
            fd = d.open(name, flags, 0o644)
        except OSError as e:
            raise HostFileError(theirs, e.strerror or str(e)) from None
        try:
            st = os.fstat(fd)
            if ident is None:
                check_regular(theirs, st, max_size=None)
            elif (st.st_dev, st.st_ino) != ident or not stat.S_ISREG(st.st_mode):
                raise HostFileError(theirs, "is not the file the runner gave (replaced during the run)")
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)



def _file_commands(ci: CiRun, environ: Mapping[str, str], *, dry_run: bool) -> list[str]:
    """This run's own files for $GITHUB_ENV and the other file commands
    (their directory created unless ``dry_run``); returns the runner's
    files, which the sandbox may not write."""
    deny_write: list[str] = []
    present = [(var, environ[var]) for var, _ in FILE_COMMANDS if environ.get(var, "").startswith("/")]
    if present and not dry_run:
        import tempfile

        base = environ.get("RUNNER_TEMP", "")
        try:
            ci.commands_dir = tempfile.mkdtemp(prefix="safebox-files-", dir=base if base.startswith("/") else None)
        except OSError:
            # RUNNER_TEMP not writable: a safebox nested in a sandboxed step.
            # Its private /tmp will do; a failure there is an error.
            try:
                ci.commands_dir = tempfile.mkdtemp(prefix="safebox-files-")
            except OSError as e:
                from safebox.errors import RunError

                raise RunError(f"cannot create this run's directory for $GITHUB_ENV and the other runner files: "
                               f"{e.strerror or e}") from None
    for var, theirs in present:
        ours = os.path.join(ci.commands_dir or "/nonexistent", var.lower())
        if ci.commands_dir:
            ci.attach(var, ours, theirs)
        else:
            ci.files[var] = (ours, theirs)
        ci.env[var] = ours
        if os.path.lexists(theirs):
            deny_write.append(theirs)
    if ci.commands_dir:
        ci.allow_write = (ci.commands_dir,)
    return deny_write


def _pin_runner_file(ci: CiRun, var: str, theirs: str) -> None:
    """Pin the directory of the runner's file, and the file's identity,
    before the command runs (see :meth:`CiRun._append_theirs`). A directory
    that cannot be pinned leaves the variable without one: its entries are
    then refused after the run, said."""
    from safebox.hostio import HostFileError, pin

    try:
        d = pin(os.path.dirname(os.path.abspath(theirs)))
    except HostFileError:
        return
    st = d.lstat(os.path.basename(theirs)) if os.path.basename(theirs) else None
    ident = (st.st_dev, st.st_ino) if st is not None and stat.S_ISREG(st.st_mode) else None
    if st is not None and ident is None:
        d.close()  # a link, a directory, a fifo: nothing is ever appended to it
        return
    ci.runner_files[var] = (d, ident)


def prepare(environ: Mapping[str, str], *, kind: str, cwd: str, home: str, bwrap: bool,
            dry_run: bool = False) -> CiRun:
    """Decide what this CI job's run hides and where its file commands go;
    creates the run's file-command directory (unless ``dry_run``)."""
    ci = CiRun(kind=kind)
    scrubbed: list[tuple[str, str]] = []
    deny = git_credentials(ci.notes, environ, cwd=cwd, home=home, bwrap=bwrap, scrubbed=scrubbed)
    deny += runner_secret_files(ci.notes, environ, kind=kind, home=home)
    deny_write = _file_commands(ci, environ, dry_run=dry_run)
    deny_write += action_home(ci.notes, environ, kind=kind)
    ci.deny_read = tuple(dict.fromkeys(deny))
    ci.deny_write = tuple(dict.fromkeys(deny_write))
    ci.scrubbed = tuple(scrubbed)
    return ci
