"""Policy keys as files spell them, and the ``EffectivePolicy`` fields they
fill: what policy/merge.py reads and policy/document.py writes back."""

from __future__ import annotations

# Policy keys (as files spell them) → EffectivePolicy fields; lists also say
# whether their entries are paths (expanded against the working directory).
LIST_KEYS: dict[tuple[str, ...], tuple[str, bool]] = {
    ("network", "allowedDomains"): ("allowed_domains", False),
    ("network", "deniedDomains"): ("denied_domains", False),
    ("network", "allowUnixSockets"): ("allow_unix_sockets", True),
    ("filesystem", "denyRead"): ("deny_read", True),
    ("filesystem", "allowRead"): ("allow_read", True),
    ("filesystem", "allowWrite"): ("allow_write", True),
    ("filesystem", "denyWrite"): ("deny_write", True),
    ("env", "deny"): ("env_deny", False),
    ("env", "allow"): ("env_allow", False),
    ("ci", "passEnv"): ("ci_pass_env", False),
    ("ci", "passPath"): ("ci_pass_path", True),
    ("presets",): ("presets", False),
}
SCALAR_KEYS: dict[tuple[str, ...], str] = {
    ("network", "allowAllUnixSockets"): "allow_all_unix_sockets",
    ("network", "allowLocalBinding"): "allow_local_binding",
    ("network", "allowLocalDestinations"): "allow_local_destinations",
    ("filesystem", "allowWritePathDirs"): "allow_write_path_dirs",
    ("filesystem", "allowGitConfig"): "allow_git_config",
    ("devices", "gpu"): "devices_gpu",
    ("strict",): "strict",
    ("mandatoryDenySearchDepth",): "search_depth",
}

#: Path lists whose entries may be glob patterns (builder/globs.py): a
#: pattern goes to its own field, expanded against the host at every run.
GLOB_FIELDS = {"deny_read": "deny_read_globs", "allow_read": "allow_read_globs", "deny_write": "deny_write_globs"}
GLOB_CHARS = frozenset("*?[]")
