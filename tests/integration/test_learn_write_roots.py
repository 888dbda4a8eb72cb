"""``--learn`` never suggests a write root the summary would never name
(issue 22 item 6): the review's ``touch /etc/cron.d/x /usr/local/bin/git ~/x``
learned ``allowWrite: ["/etc", "/usr/local/bin", "~"]``, and enforcing that
wrote a root cron file. Against the real kernel, bwrap, helper and
supervisor, as root and as an unprivileged user."""

from __future__ import annotations

import json
import os

from sbx import FakeHome, token

TAIL = "; safebox never suggests it (write under $TMPDIR or the work dir instead)"


def test_learn_leaves_out_system_directories_and_the_home_and_says_why(fresh_home: FakeHome) -> None:
    t = token()
    cron, git, dot = f"/etc/cron.d/sbx-{t}", f"/usr/local/bin/sbx-{t}", fresh_home.root / f"sbx-{t}"
    # Control: a directory beside them, outside the write roots too, is learned.
    cache = fresh_home.root / f"cache-{t}"
    cache.mkdir()
    out = fresh_home.root / "learned.json"
    try:
        r = fresh_home.run(["sh", "-c", f"touch {cron} {git} {dot} {cache}/f; true"], opts=["--learn", str(out)])
        assert r.returncode == 0, r.stderr
        assert json.loads(out.read_text()) == {"network": {"allowedDomains": []},
                                               "filesystem": {"allowWrite": [f"~/{cache.name}"]}}
        lines = r.stderr.splitlines()
        assert f"safebox: not suggested: {cron}: /etc/cron.d is a system directory{TAIL}" in lines, r.stderr
        assert f"safebox: not suggested: {git}: /usr/local/bin is a system directory{TAIL}" in lines, r.stderr
        assert f"safebox: not suggested: ~/{dot.name}: ~ is the home itself, with its dotfiles{TAIL}" in lines, r.stderr
        assert not any(os.path.lexists(p) for p in (cron, git, dot, cache / "f"))

        # Enforcing the learned policy lets the control through and still
        # refuses the rest: no cron file, no planted git, no dotfile.
        e = fresh_home.run(["sh", "-c", f"touch {cache}/f; touch {cron} {git} {dot}; echo $?"], opts=["-p", str(out)])
        assert e.stdout == "1\n", e.stderr
        assert (cache / "f").exists()
        assert not any(os.path.lexists(p) for p in (cron, git, dot))
    finally:
        for p in (cron, git):
            if os.path.lexists(p):  # only if the test failed; never leave a cron file behind
                os.unlink(p)
