"""Built-in defaults: credential paths, credential environment variables and the
files whose modification leads to code execution outside the sandbox.

Standard library only (on the exec hot path). Every list is documented in
``docs/policy-reference.md``; a test checks the two agree.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

# Read-denied by default. `~` is the invoking user's home. Missing paths are
# skipped; symlinked ones have their resolved target masked (builder/resolve.py).
CREDENTIAL_PATHS: tuple[str, ...] = (
    "~/.ssh",
    "~/.aws",
    "~/.gnupg",
    "~/.config/gcloud",
    "~/.azure",
    "~/.kube",
    "~/.docker",
    "~/.netrc",
    "~/.git-credentials",
    "~/.npmrc",
    "~/.pypirc",
    "~/.config/gh",
    "~/.cargo/credentials.toml",
    "~/.cargo/credentials",
    "~/.config/hub",
    "~/.terraform.d/credentials.tfrc.json",
    "~/.vault-token",
    "~/.password-store",
    "~/.local/share/keyrings",
    "~/.mozilla",
    "~/.config/google-chrome",
    "~/.config/chromium",
    "~/.config/safebox",
    # Found in review (issue 11): stores users have that the list missed.
    # Coding agents' own logins:
    "~/.claude/.credentials.json",
    "~/.codex/auth.json",
    # git, databases, build tools, registries, clouds, secret managers:
    "~/.config/git/credentials",
    "~/.pgpass",
    "~/.my.cnf",
    "~/.m2/settings.xml",
    "~/.gradle/gradle.properties",
    "~/.config/containers/auth.json",
    "~/.boto",
    "~/.s3cfg",
    "~/.terraformrc",
    "~/.kaggle",
    "~/.databrickscfg",
    "~/.oci",
    "~/.pulumi/credentials.json",
    "~/.gem/credentials",
    "~/.composer/auth.json",
    "~/.config/composer/auth.json",
    "~/.config/op",
    "~/.config/github-copilot",
    "~/.fly",
    "~/.snowsql",
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_ecdsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
    "/var/run/secrets",
    "/run/secrets",
)

# Credential stores that environment variables move elsewhere, read from the
# caller's environment when the policy is loaded (policy/load.py): (variable,
# path inside it; "" = the value itself). A variable in LIST_VARIABLES holds
# several paths separated by ':'. Each resulting path is read-denied like
# the list above; the policy cache is keyed on these variables' values.
CREDENTIAL_ENV: tuple[tuple[str, str], ...] = (
    ("CARGO_HOME", "credentials.toml"),
    ("CARGO_HOME", "credentials"),
    ("GNUPGHOME", ""),
    ("DOCKER_CONFIG", ""),
    ("REGISTRY_AUTH_FILE", ""),  # podman, buildah, skopeo
    ("XDG_RUNTIME_DIR", "containers/auth.json"),  # podman's default login store
    ("AWS_SHARED_CREDENTIALS_FILE", ""),
    ("AWS_CONFIG_FILE", ""),
    ("AWS_WEB_IDENTITY_TOKEN_FILE", ""),
    ("KUBECONFIG", ""),
    ("NETRC", ""),
    ("AZURE_CONFIG_DIR", ""),
    ("GH_CONFIG_DIR", ""),
    ("CLOUDSDK_CONFIG", ""),
    ("GOOGLE_APPLICATION_CREDENTIALS", ""),
    ("GOOGLE_GHA_CREDS_PATH", ""),  # google-github-actions/auth writes it into the workspace
)
LIST_VARIABLES: frozenset[str] = frozenset({"KUBECONFIG"})
CREDENTIAL_ENV_VARIABLES: tuple[str, ...] = tuple(dict.fromkeys(v for v, _ in CREDENTIAL_ENV))


def credential_env(environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The caller's non-empty values of the variables in CREDENTIAL_ENV."""
    return tuple((v, environ[v]) for v in CREDENTIAL_ENV_VARIABLES if environ.get(v))


def credential_env_paths(values: tuple[tuple[str, str], ...]) -> list[tuple[str, tuple[str, ...]]]:
    """(variable, the store paths it names) for the values ``credential_env`` took.
    Paths are as the variable spells them (relative ones are relative to the
    working directory, as for the tools that read them)."""
    subs: dict[str, list[str]] = {}
    for var, sub in CREDENTIAL_ENV:
        subs.setdefault(var, []).append(sub)
    out = []
    for var, value in values:
        bases = value.split(":") if var in LIST_VARIABLES else [value]
        paths = tuple(dict.fromkeys(b.rstrip("/") + "/" + s if s else b for b in bases if b for s in subs[var]))
        if paths:
            out.append((var, paths))
    return out


# Environment variables removed from the command's environment. fnmatch-style,
# matched case-insensitively against the variable name (builder/env.py, which
# sorts them by shape: a start costs a few C-level string calls per variable).
# By word, not by a list of known names (issue 22 item 7: PASSWORD, TOKEN,
# SECRET, GPG_PASSPHRASE, DOCKER_PASS, DB_PASS, DEPLOY_KEY, SIGNING_KEY,
# OPENAI_KEY and STRIPE_SK all reached the command). Look-alikes that are not
# secrets stay: ENV_LOOKALIKES below, and every name that matches none of
# these (KEY_LENGTH_BITS, SSH_TTY, XDG_*, DATABASE_HOST, GITHUB_SHA).
ENV_DENY_PATTERNS: tuple[str, ...] = (
    # A secret's word anywhere in the name.
    "*PASSWORD*",
    "*PASSWD*",
    "*PASSPHRASE*",
    "*TOKEN*",
    "*SECRET*",
    "*CREDENTIAL*",
    "*WEBHOOK*",
    "*PRIVATE_KEY*",
    "*_JWT*",
    # A secret's word at the end (anywhere, these would catch KEY_LENGTH_BITS
    # or PATCH_LEVEL).
    "*_PASS",
    "*_KEY",
    "*_SK",
    "*_AUTH",
    "*_APIKEY",
    "*_ACCESS_KEY_ID",
    "*_KEY_FILE",
    "*_KEYFILE",
    "*_PAT",
    "*_DSN",
    "*_CONNECTION_STRING",
    "*_DATABASE_URL",
    "NPM_CONFIG__AUTH*",
    # Secrets by name that no word above covers. Connection URLs carry
    # passwords; CI_REPOSITORY_URL embeds GitLab's job token.
    "MYSQL_PWD",
    "SSHPASS",
    "DATABASE_URL",
    "DOCKER_AUTH_CONFIG",
    "CI_REPOSITORY_URL",
    "BW_SESSION",
    "OP_SESSION_*",
    # Pointers to secrets: files, agents and programs that hand them out
    # (the file itself is only as safe as denyRead makes it).
    "*ASKPASS*",
    "*PASSFILE",
    "SSH_AUTH_SOCK",
    "GPG_AGENT_INFO",
    "GNOME_KEYRING_CONTROL",
    "KRB5CCNAME",
    "VSCODE_GIT_IPC_HANDLE",
    "KUBECONFIG",
    "GOOGLE_GHA_CREDS_PATH",
)

# Names that match a pattern above but hold no secret, kept unless env.deny
# lists the name itself (builder/env.py). Exact names only: a pattern here
# (TOKENIZER*) would keep TOKENIZER_SECRET too.
ENV_LOOKALIKES: frozenset[str] = frozenset({
    "TOKENIZERS_PARALLELISM",  # Hugging Face tokenizers
    "TIKTOKEN_CACHE_DIR",  # OpenAI's tiktoken
    "CLAUDE_CODE_MAX_OUTPUT_TOKENS",  # counts of tokens, not tokens
    "MAX_THINKING_TOKENS",
    "MAX_MCP_OUTPUT_TOKENS",
})

# Mandatory protection: read-only even beneath a write root. Names match a
# path component anywhere under a write root (found with ripgrep); entries
# ending in "/" are directories protected with everything beneath them.
PROTECTED_FILES: tuple[str, ...] = (
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".kshrc",
    ".cshrc",
    ".tcshrc",
    ".inputrc",
    ".gitconfig",
    ".gitmodules",
    ".gitattributes",
    ".npmrc",
    ".pypirc",
    ".netrc",
    ".envrc",
    ".mcp.json",
    # Claude Code's user file: its `mcpServers` (and each project's) are
    # commands the client starts on the host (docs/agents.md, "MCP servers").
    ".claude.json",
    # ripgrep reads the file RIPGREP_CONFIG_PATH names (conventionally this
    # one) at every search; `--pre=COMMAND` there runs COMMAND on every file
    # the user's next `rg` searches. sandbox-runtime protects it too.
    ".ripgreprc",
    ".safebox.toml",
    ".safebox.json",
    # pre-commit's hook (installed in .git/hooks) runs what this file lists,
    # `repo: local` entries being any command, at the user's next commit.
    ".pre-commit-config.yaml",
)
PROTECTED_DIRS: tuple[str, ...] = (
    ".vscode",
    ".idea",
    ".claude",
    ".cursor",
    ".codex",
    ".gemini",
    ".continue",
    ".config/fish",
    ".config/git",
    ".config/autostart",
    ".config/systemd",
    ".config/environment.d",
    # Claude Desktop's claude_desktop_config.json: its mcpServers are commands
    # the app starts on the host.
    ".config/Claude",
    ".ssh",
    ".git/hooks",
    # Dev containers: `initializeCommand` runs on the host when the editor
    # opens the folder; the rest configures what runs in the container.
    ".devcontainer",
    # husky's hooks: core.hooksPath is .husky/_, whose stubs run the scripts
    # in .husky/ (the configured hooks directory is found from git's config too).
    ".husky",
)
# Inside every git repository found (a directory holding `.git`), these are protected.
# `commondir` and `config.worktree` redirect where git takes its config from:
# planting either would bypass the read-only `config` (found in review).
PROTECTED_IN_GIT_DIR: tuple[str, ...] = ("config", "hooks", "info", "modules", "commondir", "config.worktree")
# Git dirs are found by what they hold (HEAD, objects/, refs/), not by name:
# bare repositories and `--separate-git-dir` targets are protected alike.
# In a linked worktree's admin dir (.git/worktrees/NAME: HEAD and commondir),
# only the entries that redirect git are protected; git writes the rest.
PROTECTED_IN_WORKTREE_ADMIN_DIR: tuple[str, ...] = ("commondir", "gitdir", "config.worktree")

# How deep below each write root nested repositories and protected files are
# searched. Deeper ones are not protected by the outer layer (Landlock still
# confines writes to the write roots); documented in policy-reference.md.
DEFAULT_SEARCH_DEPTH = 6
