"""Built-in defaults: credential paths, credential environment variables and the
files whose modification leads to code execution outside the sandbox.

Standard library only (on the exec hot path). Every list is documented in
``docs/policy-reference.md``; a test checks the two agree.
"""

from __future__ import annotations

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
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_ecdsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
    "/var/run/secrets",
    "/run/secrets",
)

# Environment variables removed from the command's environment. fnmatch-style,
# matched case-sensitively against the variable name.
ENV_DENY_PATTERNS: tuple[str, ...] = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "GITLAB_TOKEN",
    "ACTIONS_RUNTIME_TOKEN",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
    "ACTIONS_ID_TOKEN_REQUEST_URL",
    "NPM_TOKEN",
    "PYPI_TOKEN",
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "AZURE_CLIENT_SECRET",
    "DOCKER_AUTH_CONFIG",
    "SSH_AUTH_SOCK",
    "*_TOKEN",
    "*_TOKEN_*",
    "*_SECRET",
    "*_SECRET_*",
    "*_SECRETS",
    "*_PASSWORD",
    "*_PASSWD",
    "*_API_KEY",
    "*_APIKEY",
    "*_PRIVATE_KEY",
    "*_CREDENTIALS",
    # Found in review: common credentials the patterns above miss.
    "PGPASSWORD",
    "MYSQL_PWD",
    "SECRET_KEY",
    "API_KEY",
    "*_AUTH",
    "*_AUTH_TOKEN",
    "NPM_CONFIG__AUTH*",
    "*_ACCESS_KEY",
    "*_SECRET_KEY",
    "DATABASE_URL",
    "*_DATABASE_URL",
    "VAULT_TOKEN",
    "KUBECONFIG",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
)

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
    ".safebox.toml",
    ".safebox.json",
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
    ".ssh",
    ".git/hooks",
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
