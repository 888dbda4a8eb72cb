"""Policy keys as files spell them, and the ``EffectivePolicy`` fields they
fill: what policy/merge.py reads and policy/document.py writes back."""

from __future__ import annotations

from safebox.exec_options import EXEC_OPTIONS

# Policy keys (as files spell them) → EffectivePolicy fields; lists also say
# whether their entries are paths (expanded against the working directory).
LIST_KEYS: dict[tuple[str, ...], tuple[str, bool]] = {
    ("network", "allowedDomains"): ("allowed_domains", False),
    ("network", "allowedAddresses"): ("allowed_addresses", False),
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

#: Each command-line flag that feeds the policy, once: (the flag, its
#: ``Flags`` field, which is the ``exec`` option's dest, the policy key it
#: adds to), read off exec_options.EXEC_OPTIONS' "flags" rows, in their
#: order. The flags' layer is built from it (sources.flags_layer), and an
#: error in a flag's value names the flag as the user typed it
#: (validate.FLAG_FOR_KEY).
POLICY_FLAGS: tuple[tuple[str, str, tuple[str, ...]], ...] = tuple(
    (o.long, o.dest, o.key) for o in EXEC_OPTIONS if "flags" in o.into)
