"""Ten agents at once, each in a sandbox of its own (docs/api.md, "A harness").

Each agent gets a work dir of its own and a policy of its own: its work
dir is writable (the sandbox's work dir), every other agent's dir is
unreadable (``filesystem.denyRead``). All ten run at once under asyncio.
The harness checks, from inside each sandbox, that the agent

* reads and writes its own dir,
* can neither read another agent's secret nor write into its dir,
* sees none of the other agents' processes (its own pid namespace),

and it kills one agent's whole tree mid-run (the agent started two
background sleeps) and checks that nothing of it is left on the host.

Usage: python examples/agent_harness.py [BASE_DIR]   (exit 0: every check held)
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import tempfile
import time

import safebox

AGENTS = 10


def agent_script(me: int, dirs: list[str]) -> str:
    """What agent ``me`` runs: report each check as one line, ``ok NAME`` or ``FAIL NAME``."""
    other = dirs[(me + 1) % len(dirs)]
    return "\n".join([
        'check() { if eval "$2" >/dev/null 2>&1; then echo "ok $1"; else echo "FAIL $1"; fi; }',
        'check read-own "grep -q secret- secret.txt"',
        f'check write-own "echo from-{me} > out.txt"',
        f'check no-read-other "! cat {other}/secret.txt"',
        f'check no-write-other "! sh -c \'echo x > {other}/planted.txt\'"',
        # Own pid namespace: every process visible is this agent's sh or its children.
        "check no-other-processes \"[ $(ls /proc | grep -c '^[0-9]') -lt 10 ]\"",
    ])


async def run_agent(me: int, dirs: list[str], env: dict[str, str]) -> list[str]:
    """Agent ``me`` in its own Sandbox; returns its failed checks."""
    others = [d for i, d in enumerate(dirs) if i != me]
    policy = safebox.Policy.from_dict({"filesystem": {"denyRead": others}})
    with safebox.Sandbox(policy, cwd=dirs[me], env=env) as sb:
        done = await sb.run_async(["sh", "-c", agent_script(me, dirs)], capture_output=True, timeout=120)
    lines = done.stdout.decode().splitlines() if done.stdout else []
    failed = [line for line in lines if not line.startswith("ok ")]
    if done.returncode != 0 or len(lines) != 5:
        failed.append(f"agent {me}: exit {done.returncode}, output {lines!r}, stderr {done.stderr!r}")
    return failed


def sandbox_pids(marker: str) -> list[int]:
    """Host pids of processes whose command line holds ``marker``."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if marker.encode() in f.read().split(b"\0"):
                        out.append(int(name))
            except OSError:
                pass
    return out


async def kill_one_mid_run(work: str, env: dict[str, str]) -> list[str]:
    """Start an agent that leaves two background sleeps, kill its sandbox,
    and check that none of its processes is left."""
    marker = f"600.{secrets.randbelow(10**8):08d}1"  # a unique `sleep` argument
    with safebox.Sandbox(cwd=work, env=env) as sb:
        p = await sb.popen_async(["sh", "-c", f"sleep {marker} & sleep {marker} & echo started; wait"],
                                 stdout=safebox.PIPE)
        assert p.popen.stdout is not None
        first = await asyncio.to_thread(p.popen.stdout.readline)
        deadline = time.monotonic() + 10
        while len(sandbox_pids(marker)) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)  # `echo` may run before the second sleep has exec'd
        running = sandbox_pids(marker)
        p.kill()
        rc = await p.wait()
    failed = []
    if first != b"started\n" or len(running) != 2:
        failed.append(f"kill: the agent did not start as expected ({first!r}, {len(running)} sleeps)")
    if rc != 137:
        failed.append(f"kill: exit status {rc}, not 137 (SIGKILL)")
    deadline = time.monotonic() + 5
    while sandbox_pids(marker) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if sandbox_pids(marker):
        failed.append(f"kill: processes left behind: {sandbox_pids(marker)}")
    return failed


async def main(base: str) -> int:
    """Run every agent and the kill at once; print what failed."""
    env = dict(os.environ)
    dirs = []
    for i in range(AGENTS):
        d = os.path.join(base, f"agent-{i}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "secret.txt"), "w") as f:
            f.write(f"secret-{i}-{secrets.token_hex(8)}\n")
        dirs.append(d)
    kill_dir = os.path.join(base, "agent-killed")
    os.makedirs(kill_dir, exist_ok=True)
    t0 = time.monotonic()
    results = await asyncio.gather(*(run_agent(i, dirs, env) for i in range(AGENTS)),
                                   kill_one_mid_run(kill_dir, env))
    failed = [f for r in results for f in r]
    planted = [d for d in dirs if os.path.exists(os.path.join(d, "planted.txt"))]
    failed += [f"an agent planted a file in {d}" for d in planted]
    for line in failed:
        print(f"FAIL {line}")
    print(f"{AGENTS} agents and one killed mid-run in {time.monotonic() - t0:.2f} s: "
          f"{'all checks held' if not failed else f'{len(failed)} failed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    base = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="agents-", dir="/var/tmp")
    sys.exit(asyncio.run(main(base)))
