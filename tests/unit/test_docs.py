"""The documentation names everything the code has: options, policy keys and
the built-in lists (so a new entry cannot go undocumented)."""

from __future__ import annotations

from pathlib import Path

import pytest

from safebox.cli import EXEC_OPTIONS
from safebox.policy import defaults
from safebox.policy.model import EnvSettings, FilesystemSettings, LimitsSettings, NetworkSettings, PolicyFile

DOCS = Path(__file__).resolve().parents[2] / "docs"
GUIDE = (DOCS / "index.md").read_text()
REFERENCE = (DOCS / "policy-reference.md").read_text()


@pytest.mark.parametrize("opt", [o.long for o in EXEC_OPTIONS])
def test_every_exec_option_is_in_the_user_guide(opt: str) -> None:
    assert opt in GUIDE


def _keys() -> list[str]:
    from safebox.policy.model import CredentialsSettings, ParentProxySettings, TlsTerminateSettings

    out = [k for k in PolicyFile.model_fields if k not in ("network", "filesystem", "env", "limits")]
    out += [f"network.{k}" for k in NetworkSettings.model_fields]
    out += [f"filesystem.{k}" for k in FilesystemSettings.model_fields]
    out += [f"env.{k}" for k in EnvSettings.model_fields]
    out += [f"network.tlsTerminate.{k}" for k in TlsTerminateSettings.model_fields]
    out += [f"network.parentProxy.{k}" for k in ParentProxySettings.model_fields]
    out += [f"credentials.{k}" for k in CredentialsSettings.model_fields]
    out += [f"limits.{k}" for k in LimitsSettings.model_fields]
    return out


def test_the_credential_entry_keys_are_in_the_reference() -> None:
    from safebox.policy.model import CredentialEnvVar, CredentialFile

    for model in (CredentialEnvVar, CredentialFile):
        for key in model.model_fields:
            assert f"{key}" in REFERENCE.split("## Credentials")[0].split("`credentials.envVars`", 1)[1], key


def test_every_trust_variable_is_in_the_network_guide() -> None:
    from safebox.proxy.tls import TRUST_VARIABLES

    network = (DOCS / "network.md").read_text()
    for var in TRUST_VARIABLES:
        assert f"`{var}`" in network, var


def test_the_reference_names_the_srt_version_the_compatibility_claim_covers() -> None:
    assert "sandbox-runtime **v0.0.74**" in REFERENCE


@pytest.mark.parametrize("key", _keys())
def test_every_policy_key_is_in_the_reference(key: str) -> None:
    assert f"`{key}`" in REFERENCE


@pytest.mark.parametrize("entry", [*defaults.PROTECTED_FILES, *defaults.PROTECTED_DIRS,
                                   *defaults.ENV_DENY_PATTERNS, *sorted(defaults.ENV_LOOKALIKES),
                                   *defaults.PROTECTED_IN_GIT_DIR])
def test_every_built_in_list_entry_is_in_the_reference(entry: str) -> None:
    assert f"`{entry}`" in REFERENCE


@pytest.mark.parametrize("path", defaults.CREDENTIAL_PATHS)
def test_every_credential_path_is_in_the_reference(path: str) -> None:
    # The three ssh host keys are written as one pattern.
    shown = "/etc/ssh/ssh_host_*_key" if path.startswith("/etc/ssh/ssh_host_") else path
    assert f"`{shown}`" in REFERENCE


def test_the_state_dir_bounds_in_the_guide_are_the_codes() -> None:
    from safebox.builder import resolve
    from safebox.policy.load import POLICY_CACHE_MAX_BYTES, POLICY_CACHE_MAX_ENTRIES
    from safebox.run.protect import QUARANTINE_MAX_ENTRIES

    assert f"| {POLICY_CACHE_MAX_ENTRIES} entries and {POLICY_CACHE_MAX_BYTES >> 20} MiB |" in GUIDE
    assert f"| the newest {QUARANTINE_MAX_ENTRIES} entries |" in GUIDE
    assert f"the quarantine keeps the newest {QUARANTINE_MAX_ENTRIES} entries" in GUIDE
    assert f"| {resolve._KNOWN_MAX} entries and {resolve._KNOWN_MAX_BYTES >> 20} MiB |" in GUIDE
    assert f"The quarantine keeps the newest {QUARANTINE_MAX_ENTRIES} entries" in REFERENCE
    assert f"at most {resolve._KNOWN_MAX} entries ({resolve._KNOWN_MAX_BYTES >> 20} MiB)" in REFERENCE


@pytest.mark.parametrize(("var", "sub"), defaults.CREDENTIAL_ENV)
def test_every_credential_store_variable_is_in_the_reference(var: str, sub: str) -> None:
    assert f"`${var}{'/' + sub if sub else ''}`" in REFERENCE or (var in defaults.LIST_VARIABLES
                                                                 and f"`${var}`" in REFERENCE)


# Files a user keeps in their own repository, named by docs/ci.md as examples.
_USER_FILES = {"ci/safebox.json"}
# Build outputs (gitignored): cited as what `build.py` makes.
_BUILT = ("helper/out/",)


def test_every_file_the_docs_cite_exists() -> None:
    # A doc citing python/safebox/runner.py after a split, or a test renamed
    # since, sends the reader to nothing. Paths of this repository under its
    # top-level folders, and modules written as `builder/resolve.py` (under
    # python/safebox), must exist; glob-shaped ones are skipped.
    import re

    root = DOCS.parent
    path = re.compile(r"(?<![\w./-])((?:python/safebox|helper|tests|benchmarks|docs|examples|ci|\.ci)/"
                      r"[A-Za-z0-9_./-]*[A-Za-z0-9_])")
    module = re.compile(r"(?<![\w./-])((?:safebox|builder|proxy|policy|violations|run)/[a-z_]+\.py)\b")
    missing = []
    for doc in [*sorted(DOCS.glob("*.md")), root / "README.md"]:
        text = doc.read_text()
        for m in path.finditer(text):
            p = m.group(1)
            if "*" not in p and p not in _USER_FILES and not p.startswith(_BUILT) and not (root / p).exists():
                missing.append(f"{doc.name}: {p}")
        for m in module.finditer(text):
            p = m.group(1)
            if not ((root / "python" / p).exists() or (root / "python" / "safebox" / p).exists()):
                missing.append(f"{doc.name}: {p}")
    assert not missing, "docs cite files that do not exist:\n" + "\n".join(sorted(set(missing)))


# ------------------------------------------------------------------ anchors

_ROOT = DOCS.parent


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_`
    dropped, each space a `-`."""
    import re

    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(md: Path) -> tuple[set[str], set[str]]:
    """(anchors, heading texts) of a Markdown file; lines in code fences are not headings."""
    import re

    anchors: set[str] = set()
    titles: set[str] = set()
    seen: dict[str, int] = {}
    fence = False
    for line in md.read_text().splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
            continue
        if fence:
            continue
        lead = re.match(r"\*\*([^*]+?)\.?\*\*", line)
        if lead:  # a paragraph's bold lead is cited as a section too ("**Mandatory protection** keeps ...")
            titles.add(lead[1].replace("`", ""))
        if not line.startswith("#"):
            continue
        text = line.lstrip("#").strip()
        titles.add(text.replace("`", ""))
        slug = _slug(text)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors, titles


def _citing_files() -> list[Path]:
    """Where sections are cited: the docs, README, the examples, the CI files and workflows, the code."""
    files = [*DOCS.glob("*.md"), _ROOT / "README.md", _ROOT / "action.yml"]
    for d in (DOCS / "examples", _ROOT / "examples", _ROOT / "ci", _ROOT / ".github", _ROOT / "python" / "safebox"):
        files += [p for p in d.rglob("*") if p.is_file() and p.suffix in (".md", ".yml", ".yaml", ".sh", ".py", "")]
    return sorted(set(files))


def _cited_sections(path: Path) -> list[tuple[Path, str, str]]:
    """(target file, anchor or title, how it was written) for every ``file.md#anchor``, Markdown link
    ``[..](file.md#anchor)`` / ``[..](#anchor)``, and ``file.md, "Title"`` citation in ``path``."""
    import re

    text = path.read_text(errors="replace")
    out: list[tuple[Path, str, str]] = []

    def target(name: str) -> Path:
        # Relative to the citing file (a Markdown link), else to the repository root (docs/ci.md#x in a comment).
        if not name:
            return path
        near = path.parent / name
        return near if near.exists() or not (_ROOT / name).exists() else _ROOT / name

    for m in re.finditer(r"\]\(([A-Za-z0-9_./-]*\.md|)#([^)\s]+)\)", text):
        out.append((target(m[1]), "#" + m[2], m[0]))
    for m in re.finditer(r"(?<![\w(/.-])([A-Za-z0-9_./-]+\.md)#([A-Za-z0-9_-]+)", text):
        out.append((target(m[1]), "#" + m[2], m[0]))
    for m in re.finditer(r"([A-Za-z0-9_./-]+\.md), \"([^\"]+)\"", text):
        # A title wrapped over lines (a comment, a paragraph) is one line; "# " of a Python comment goes.
        out.append((target(m[1]), " ".join(re.sub(r"\n\s*#", " ", m[2]).split()), m[0]))
    return out


def _titled(title: str, titles: set[str]) -> bool:
    """``title`` names a heading: all of it, or its part before ": ", ", " or " (" ("Big policies"
    names "Big policies: who makes the outer layer's mounts")."""
    return any(t == title or t.startswith((f"{title}: ", f"{title}, ", f"{title} (")) for t in titles)


def test_every_section_the_docs_examples_and_workflows_cite_exists() -> None:
    # A citation of a section that was renamed (or never written) sends the
    # reader to the top of a long page: `docs/ci.md#x` and `[..](ci.md#x)`
    # must name an anchor GitHub makes, `docs/ci.md, "Title"` a heading.
    bad = []
    cache: dict[Path, tuple[set[str], set[str]]] = {}
    for path in _citing_files():
        for md, ref, written in _cited_sections(path):
            where = f"{path.relative_to(_ROOT)}: {written}"
            if not md.is_file():
                bad.append(f"{where}: no file {md.relative_to(_ROOT) if md.is_relative_to(_ROOT) else md}")
                continue
            anchors, titles = cache.setdefault(md, _headings(md))
            if ref.startswith("#") and ref[1:] not in anchors:
                bad.append(f"{where}: no heading with that anchor")
            elif not ref.startswith("#") and not _titled(ref, titles):
                bad.append(f"{where}: no heading with that title")
    assert not bad, "cited sections that do not exist:\n" + "\n".join(sorted(set(bad)))


def test_the_anchor_check_catches_a_missing_section_and_accepts_a_real_one(tmp_path: Path) -> None:
    # Control for the test above: the same functions, on a file that cites one of each.
    doc = tmp_path / "a.md"
    doc.write_text("# Runner files: `$GITHUB_ENV`, and more\n\n```sh\n# not a heading\n```\n## Twice\n## Twice\n"
                   "[ok](#runner-files-github_env-and-more) [ok](#twice-1) [bad](#not-a-heading) "
                   '(a.md, "Runner files: $GITHUB_ENV, and more") (a.md, "Nope")\n')
    anchors, titles = _headings(doc)
    cited = _cited_sections(doc)
    assert [ref[1:] in anchors if ref.startswith("#") else _titled(ref, titles) for _, ref, _ in cited] == \
        [True, True, False, True, False]
