"""A process names its own threads inside the sandbox, and nothing more
(helper/supervise.c, ``grant_thread_name``; docs/gpu.md, "Thread names").

pthread_setname_np(3) on another thread writes /proc/self/task/TID/comm.
Landlock cannot allow that file ahead of time (every thread gets new /proc
inodes), so it failed with EACCES, and NVIDIA's driver turned that into
CUDA_ERROR_OPERATING_SYSTEM: no CUDA program ran under ``--allow-gpu`` on a
real H200 (docs/benchmarks.md, "GPUs"). The supervisor now opens exactly
that file for the caller; another process's comm, and every other file of
one's own /proc directory, stay Landlock's to refuse.
"""

from __future__ import annotations

import pytest

from sbx import BOTH, BWRAP_ONLY, HELPER_ONLY, FakeHome, host

pytestmark = pytest.mark.needs_bwrap

PROBE = r"""
import ctypes, errno, os, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
ev = threading.Event()
t = threading.Thread(target=ev.wait)
t.start()
rc = libc.pthread_setname_np(ctypes.c_ulong(t.ident), b"sbx-named")
print("setname", rc, open(f"/proc/self/task/{t.native_id}/comm").read().strip())
def try_open(key, path, data=None):
    try:
        with open(path, "w") as f:
            if data is not None:
                f.write(data)
        print(key, "OK")
    except OSError as e:
        print(key, errno.errorcode[e.errno])
try_open("thread-self", "/proc/thread-self/comm", "sbx-self")
try_open("self-comm", "/proc/self/comm", "sbx-main")
with open("/proc/self/oom_score_adj") as f:
    adj = f.read().strip()
try_open("own-oom", f"/proc/self/task/{os.getpid()}/oom_score_adj", adj)
child = subprocess.Popen(["sleep", "30"])
try_open("other-comm", f"/proc/{child.pid}/task/{child.pid}/comm")
try_open("other-comm-main", f"/proc/{child.pid}/comm")
child.kill(); child.wait()
ev.set(); t.join()
"""


def probe(result: str) -> dict[str, str]:
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in result.splitlines()}


def test_control_on_the_host_a_thread_is_named_and_another_processs_comm_opens() -> None:
    got = probe(host(["python3", "-c", PROBE]).stdout)
    assert got == {"setname": "0 sbx-named", "thread-self": "OK", "self-comm": "OK", "own-oom": "OK",
                   "other-comm": "OK", "other-comm-main": "OK"}, got


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_in_the_sandbox_a_process_names_its_own_threads_and_nothing_is_reported_refused(
        shared_home: FakeHome, mode: str) -> None:
    r = shared_home.run(["python3", "-c", PROBE], mode=mode)
    assert r.returncode == 0, r.stderr
    got = probe(r.stdout)
    # Before the fix: "setname 13 python3" (EACCES from Landlock, the name unchanged).
    assert got["setname"] == "0 sbx-named", got
    assert got["thread-self"] == "OK" and got["self-comm"] == "OK", got
    # A granted open is not a refusal: the three refused are the probe's
    # other writes (the next test), never a name of its own.
    assert "safebox: refused 3 operations: 3 writes (" in r.stderr, r.stderr
    refused = r.stderr.split("3 writes (", 1)[1].split(")", 1)[0].split(", ")
    assert [p.endswith("oom_score_adj") for p in refused] == [True, False, False], refused


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_another_processs_comm_and_the_rest_of_ones_own_proc_dir_stay_refused_by_landlock(
        shared_home: FakeHome, mode: str) -> None:
    r = shared_home.run(["python3", "-c", PROBE], mode=mode)
    got = probe(r.stdout)
    assert got["other-comm"] == "EACCES" and got["other-comm-main"] == "EACCES", got
    assert got["own-oom"] == "EACCES", got


def test_control_with_bubblewrap_alone_there_is_no_landlock_and_all_of_it_opens(shared_home: FakeHome) -> None:
    got = probe(shared_home.run(["python3", "-c", PROBE], mode=BWRAP_ONLY).stdout)
    assert got["setname"] == "0 sbx-named" and got["other-comm"] == "OK" and got["own-oom"] == "OK", got


MANY = r"""
import errno, os, subprocess, threading
ev = threading.Event()
ts = [threading.Thread(target=ev.wait) for _ in range(40)]
for t in ts:
    t.start()
pick = ts[27]
with open(f"/proc/self/task/{pick.native_id}/comm", "w") as f:
    f.write("sbx-picked")
names = {t.native_id: open(f"/proc/self/task/{t.native_id}/comm").read().strip() for t in ts}
print("picked", names.pop(pick.native_id), "others", sorted(set(names.values())))
child = subprocess.Popen(["sleep", "30"])
for key, path in (("other-as-task", f"/proc/self/task/{child.pid}/comm"),
                  ("other-pid-own-task", f"/proc/{child.pid}/task/{pick.native_id}/comm")):
    try:
        open(path, "w").close()
        print(key, "OK")
    except OSError as e:
        print(key, errno.errorcode[e.errno])
child.kill(); child.wait()
ev.set()
"""


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_among_many_threads_exactly_the_named_one_is_named_and_another_processs_id_is_no_thread(
        shared_home: FakeHome, mode: str) -> None:
    # Without bubblewrap the supervisor takes the id as the host's (one pid
    # namespace) instead of reading every thread's status; with it, it looks
    # the id up. Either way the kernel opens only a thread of the caller's
    # group: another process's id spelled as a task of one's own is ENOENT,
    # as on the host.
    r = shared_home.run(["python3", "-c", MANY], mode=mode)
    assert r.returncode == 0, r.stderr
    got = probe(r.stdout)
    assert got == {"picked": "sbx-picked others ['python3']", "other-as-task": "ENOENT",
                   "other-pid-own-task": "ENOENT"}, got
    assert probe(host(["python3", "-c", MANY]).stdout) == got
