"""safebox report (safebox/report.py): runs assembled from audit-log events,
and rendered for people. The events here are synthetic, including ``denied``
events in the shape of the violations feed (issue 13), which the report must
show once runs write them; real runs are in tests/integration/test_ci_exec.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from safebox.report import ReportError, read_events, render, runs_from_events


def start(run: str | None, cmd: list[str], **kw: object) -> dict[str, object]:
    ev = {"event": "start", "schema": 2, "command": cmd, "layers": "both", "cwd": "/w", "mode": "enforce", **kw}
    return ev | ({"run": run} if run else {})


def stop(run: str | None, rc: int, **kw: object) -> dict[str, object]:
    ev = {"event": "stop", "exit": rc, "duration": 1.25, "quarantined": [], "restored_links": [], **kw}
    return ev | ({"run": run} if run else {})


HOSTS = [
    {"host": "registry.npmjs.org", "port": 443, "verdict": "allow", "count": 3, "bytes_out": 2048,
     "bytes_in": 5 * 1024 * 1024, "rule": "network.allowedDomains", "reason": "matches"},
    {"host": "evil.example.com", "port": 443, "verdict": "deny", "count": 2, "bytes_out": 0, "bytes_in": 0,
     "rule": "network.allowedDomains", "reason": "evil.example.com is not in network.allowedDomains"},
]
DENIED = [
    {"event": "denied", "v": 1, "kind": "write", "path": "/home/u/.bashrc", "errno": "EROFS",
     "rule": "protected file", "pid": 42, "comm": "node"},
    {"event": "denied", "v": 1, "kind": "read", "path": "/home/u/.npmrc", "errno": None,
     "rule": "filesystem.denyRead (built-in credential list)", "pid": 42, "comm": "node"},
    {"event": "denied", "v": 1, "kind": "syscall", "syscall": "ptrace", "errno": "EPERM",
     "rule": "seccomp: debugging other processes", "pid": 43, "comm": "sh"},
    # The feed's copy of a proxy refusal: the hosts table has it already.
    {"event": "denied", "v": 1, "kind": "network", "host": "evil.example.com", "port": 443, "protocol": "connect",
     "errno": None, "rule": "network.allowedDomains", "pid": None, "comm": None},
]


def test_interleaved_runs_in_one_log_are_kept_apart_by_their_run_id() -> None:
    events = [start("a", ["npm", "ci"]), start("b", ["make"]),
              {"event": "network", "run": "b", "host": "x.org", "port": 80, "verdict": "deny", "rule": "r"},
              stop("a", 0, hosts=HOSTS), stop("b", 2)]
    a, b = runs_from_events(events)
    assert (a.command, a.exit, len(a.hosts)) == (["npm", "ci"], 0, 2)
    assert (b.command, b.exit, [h["host"] for h in b.hosts]) == (["make"], 2, ["x.org"])


def test_a_log_without_run_ids_pairs_network_events_with_the_run_around_them() -> None:
    events = [start(None, ["a"]),
              {"event": "network", "host": "A.org", "port": 443, "verdict": "allow", "rule": "r"},
              {"event": "network", "host": "a.org", "port": 443, "verdict": "allow", "rule": "r"},
              stop(None, 0), start(None, ["b"]), stop(None, 1)]
    a, b = runs_from_events(events)
    assert a.hosts == [{"host": "a.org", "port": 443, "verdict": "allow", "count": 2, "bytes_out": None,
                        "bytes_in": None, "rule": "r", "reason": None}]
    assert (b.command, b.hosts) == (["b"], [])


def test_markdown_names_refused_hosts_bytes_violations_and_quarantined_files() -> None:
    events = [start("r", ["npm", "install"], policy=".github/safebox.json", presets=["npm"]), *[
        e | {"run": "r"} for e in DENIED],
        stop("r", 0, hosts=HOSTS, quarantined=["/w/.bashrc"], enforced={
            "landlock": {"abi": 6, "fs": True, "net": True, "scope": True}, "seccomp": True, "caps": True,
            "nnp": True},
            refused_entries=[{"file": "GITHUB_ENV", "name": "NODE_OPTIONS", "reason": "options for every node"}])]
    md = render(runs_from_events(events), "markdown")
    assert "### safebox: `npm install` — exit 0 in 1.2 s" in md
    assert "Landlock ABI 6 (fs, net, scope), seccomp" in md
    assert "**Refused hosts**: evil.example.com:443" in md
    assert "| registry.npmjs.org | 443 | allowed | 3 | 2.0 KiB | 5.0 MiB | network.allowedDomains |" in md
    assert "| evil.example.com | 443 | **refused** | 2 | – | – |" in md
    assert "fix: --allow-domain evil.example.com" in md
    assert "| write | /home/u/.bashrc | EROFS | protected file | node\\[42\\] |" in md
    assert "| read | /home/u/.npmrc |  | filesystem.denyRead (built-in credential list) | node\\[42\\] |" in md
    assert "| syscall | ptrace | EPERM |" in md
    assert md.count("evil.example.com:443") == 1  # the feed's network copy is not listed again
    assert "quarantined protected file the command created: /w/.bashrc" in md
    assert "refused GITHUB\\_ENV entry NODE\\_OPTIONS: options for every node" in md


def test_text_and_json_carry_the_same_run() -> None:
    events = [start("r", ["make"]), *[e | {"run": "r"} for e in DENIED[:1]], stop("r", 3, hosts=HOSTS)]
    runs = runs_from_events(events)
    text = render(runs, "text")
    assert "run r: make\n  exit 3 in 1.2 s; mode enforce" in text
    assert "refused evil.example.com:443 x2 (evil.example.com is not in network.allowedDomains)" in text
    assert "allowed registry.npmjs.org:443 x3, sent 2.0 KiB, received 5.0 MiB" in text
    assert "denied write /home/u/.bashrc by node[42]: EROFS (protected file)" in text
    doc = json.loads(render(runs, "json"))
    assert doc["schema"] == 2
    (run,) = doc["runs"]
    assert (run["exit"], run["hosts"], run["denied"][0]["path"]) == (3, HOSTS, "/home/u/.bashrc")


@pytest.mark.parametrize("hostile", ["a|b", "[x](https://evil.example)", "<img src=x onerror=alert(1)>",
                                     "`code`", "**bold**", "$x$", "line\nbreak"])
def test_what_the_command_chose_cannot_change_the_markdown(hostile: str) -> None:
    events = [start("r", [hostile]), stop("r", 0, hosts=[{
        "host": hostile, "port": 1, "verdict": "deny", "count": 1, "rule": hostile, "reason": hostile}],
        quarantined=[hostile])]
    md = render(runs_from_events(events), "markdown")
    heading, rest = md.split("\n", 1)
    # The command is one code span: two backticks, nothing after it but ours.
    assert heading.count("`") == 2 and heading.endswith("` — exit 0 in 1.2 s")
    table = [line for line in rest.splitlines() if line.startswith("| ") and "refused" in line]
    assert len(table) == 1 and table[0].count(" | ") == 6  # still seven cells
    for bad in ("<img", "**bold**", "`code`", "$x$", "\n| break"):
        assert bad not in rest
    assert not re.search(r"(?<!\\)\]\(", rest)  # no link: every ] is escaped


def test_torn_lines_are_skipped_and_a_missing_log_is_an_error(tmp_path: Path) -> None:
    log = tmp_path / "a.jsonl"
    log.write_text(json.dumps(start("r", ["x"])) + "\n{\"event\": \"sto\n" + json.dumps(stop("r", 0)) + "\n")
    (run,) = runs_from_events(read_events([str(log)]))
    assert run.exit == 0
    with pytest.raises(ReportError, match="nope.jsonl: cannot read the audit log"):
        list(read_events([str(tmp_path / "nope.jsonl")]))


def test_the_report_command_exits_125_naming_an_unreadable_log(tmp_path: Path) -> None:
    from safebox.cli import _click_app

    r = CliRunner().invoke(_click_app(), ["report", str(tmp_path / "missing.jsonl")])
    assert r.exit_code == 125
    assert f"safebox: {tmp_path}/missing.jsonl: cannot read the audit log: No such file or directory" in r.output


@pytest.mark.parametrize("content", [b"garbage\n\x00\xff{\"a\": 1}\n[1, 2]\n", b""])
def test_report_refuses_a_file_that_holds_no_run_with_125_and_one_line_as_policy_suggest_does(
        tmp_path: Path, content: bytes) -> None:
    from safebox.cli import _click_app

    log = tmp_path / "garbage.jsonl"
    log.write_bytes(content)
    line = f"safebox: no run found in {log} (was it written by safebox exec --audit-log?)\n"
    for argv in (["report", str(log)], ["report", "--format", "json", str(log)], ["policy", "suggest", str(log)]):
        r = CliRunner().invoke(_click_app(), argv)
        assert (r.exit_code, r.output) == (125, line), argv
