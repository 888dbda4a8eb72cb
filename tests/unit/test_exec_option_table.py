"""One table, exec_options.EXEC_OPTIONS, says where each ``safebox exec``
option's value goes (issue 24 item 3): the policy's last layer (``Flags``),
how the session runs (``Options``) or the request itself (``ExecRequest``).
The click options, the fast parser and the request are derived from it, so
an option added there is complete once its field exists where its row says,
and no record repeats another's fields."""

from __future__ import annotations

import pytest

from safebox.cli import fast_parse_exec
from safebox.exec_options import EXEC_OPTIONS
from safebox.policy.load import Flags
from safebox.run.main import ExecRequest, request
from safebox.run.plan import Without
from safebox.run.session import Options

RECORDS = {"flags": Flags, "options": Options, "request": ExecRequest}
#: Options fields no exec option sets: the API's, and what run() adds.
NOT_OPTIONS = {"proxy_stderr", "learn_base", "enforce_argv", "cli", "allow_import_roots", "runtime"}


def test_every_option_names_records_that_hold_its_dest() -> None:
    for o in EXEC_OPTIONS:
        for record in o.into:
            assert o.dest in RECORDS[record].__fields__, (o.long, record)


def test_every_field_of_the_records_is_filled_by_exactly_one_option() -> None:
    filled: dict[str, list[str]] = {name: [] for name in RECORDS}
    for o in EXEC_OPTIONS:
        for record in o.into:
            filled[record].append(o.dest)
    assert sorted(filled["flags"]) == sorted(Flags.__fields__)
    assert sorted(filled["options"]) == sorted(set(Options.__fields__) - NOT_OPTIONS)
    assert sorted(filled["request"]) == sorted(set(ExecRequest.__fields__) - {"command", "flags", "options"})
    for dests in filled.values():
        assert len(set(dests)) == len(dests)


def test_the_request_of_a_command_line_with_every_option_holds_each_value_where_its_row_says() -> None:
    args = ["-p", "a.toml", "-p", "b.toml", "-C", "/srv", "--allow-write", "out", "--deny-read", "~/.env",
            "--allow-read", "~/.env/ok", "--deny-write", "x", "--allow-domain", "a.com", "--deny-domain", "b.com",
            "--preset", "npm", "--publish", "8080", "--limit-processes", "64", "--limit-memory", "1GiB",
            "--limit-tmp", "2GiB", "--timeout", "90s", "--allow-gpu=0,2", "--strict", "--without", "bwrap",
            "--dry-run", "--audit-log", "a.jsonl", "--summary", "s.md", "--learn", "L.json", "--ask",
            "--ask-timeout", "5", "--control-fd", "7", "--observe", "all", "--review", "-v", "-q", "--", "make"]
    parsed = fast_parse_exec(args)
    assert parsed is not None
    req = request(parsed)
    assert req == ExecRequest(
        command=("make",),
        flags=Flags(allow_write=("out",), deny_read=("~/.env",), allow_read=("~/.env/ok",), deny_write=("x",),
                    allow_domains=("a.com",), deny_domains=("b.com",), strict=True, presets=("npm",),
                    limit_processes="64", limit_memory="1GiB", limit_tmp_size="2GiB", timeout="90s",
                    allow_gpu="0,2"),
        options=Options(strict=True, without=Without.BWRAP, dry_run=True, audit_log="a.jsonl", verbose=True,
                        publish=("8080",), quiet=True, learn="L.json", summary="s.md", observe="all",
                        policy_files=("a.toml", "b.toml"), review=True),
        ask=True, ask_timeout="5", control_fd="7")
    assert req.options.without is Without.BWRAP


@pytest.mark.parametrize("args", [["--", "true"], ["true"]])
def test_no_option_given_is_the_empty_request(args: list[str]) -> None:
    parsed = fast_parse_exec(args)
    assert parsed is not None
    assert request(parsed) == ExecRequest(command=("true",))
