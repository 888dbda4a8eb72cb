"""The variables known to make a later, unsandboxed step run code, load a
library, trust a certificate or reach a host of the writer's choosing
(safebox/ci_job/__init__.py, docs/ci.md "Runner files"), and why a
``$GITHUB_ENV`` entry may not pass on."""

from __future__ import annotations

import re

#: Variables known to make some later program run code, load a library,
#: trust a certificate or reach a host of the writer's choosing. Not the
#: gate (``ci.passEnv`` is, an allowlist): these only never pass through a
#: wildcard, and their refusal says why. Exact names.
ENV_DENY: dict[str, str] = {
    # the dynamic loader and glibc
    "GCONV_PATH": "loads code into every glibc program",
    "HOSTALIASES": "redirects host names",
    "LOCALDOMAIN": "changes name resolution",
    "RES_OPTIONS": "changes name resolution",
    "MALLOC_CHECK_": "changes the allocator",
    # shells
    "BASH_ENV": "a file bash runs before every script",
    "ENV": "a file sh runs at start",
    "SHELLOPTS": "changes how every bash script runs",
    "BASHOPTS": "changes how every bash script runs",
    "PS4": "runs command substitutions when tracing",
    "PROMPT_COMMAND": "a command bash runs",
    "IFS": "changes how every script splits words",
    "CDPATH": "changes where scripts cd",
    "ZDOTDIR": "where zsh finds its start-up files",
    "HOME": "where every tool finds its start-up files",
    "PATH": "use $GITHUB_PATH, whose entries are checked",
    "TMPDIR": "where later steps write temporary files",
    # language runtimes
    "NODE_OPTIONS": "options (--require) for every node process",
    "NODE_PATH": "where node finds modules",
    "NODE_EXTRA_CA_CERTS": "a certificate node trusts",
    "NODE_TLS_REJECT_UNAUTHORIZED": "turns off node's certificate checks",
    "PERL5OPT": "options (-M) for every perl",
    "PERL5LIB": "where perl finds modules",
    "PERLLIB": "where perl finds modules",
    "PERL5DB": "code perl runs",
    "RUBYOPT": "options (-r) for every ruby",
    "RUBYLIB": "where ruby finds libraries",
    "JAVA_TOOL_OPTIONS": "options (-javaagent) for every JVM",
    "_JAVA_OPTIONS": "options for every JVM",
    "JDK_JAVA_OPTIONS": "options for every java launcher",
    "CLASSPATH": "where the JVM finds classes",
    "MAVEN_OPTS": "options for maven's JVM",
    "MAVEN_ARGS": "arguments for every maven run",
    "GRADLE_OPTS": "options for gradle's JVM",
    "DOTNET_STARTUP_HOOKS": "code every .NET program loads",
    "CORECLR_PROFILER_PATH": "code every .NET program loads",
    "RUSTC_WRAPPER": "a program run in place of rustc",
    "RUSTC": "the compiler cargo runs",
    "RUSTFLAGS": "flags (linker, plugins) for rustc",
    "RUSTDOCFLAGS": "flags for rustdoc",
    # compilers and build tools
    "CC": "the C compiler later builds run", "CXX": "the C++ compiler later builds run",
    "CPP": "the preprocessor later builds run", "LD": "the linker later builds run",
    "AR": "the archiver later builds run", "AS": "the assembler later builds run",
    "CFLAGS": "compiler flags (-fplugin, -B)", "CXXFLAGS": "compiler flags (-fplugin, -B)",
    "CPPFLAGS": "preprocessor flags", "LDFLAGS": "linker flags",
    "MAKEFLAGS": "options for every make", "MFLAGS": "options for every make",
    # editors, pagers, helpers other tools start
    "EDITOR": "a program git and others run", "VISUAL": "a program git and others run",
    "PAGER": "a program git and others run", "MANPAGER": "a program man runs",
    "BROWSER": "a program tools run", "LESSOPEN": "a command less runs", "LESSCLOSE": "a command less runs",
    "SSH_ASKPASS": "a program ssh runs", "SUDO_ASKPASS": "a program sudo runs",
    # where traffic goes and whom it trusts
    "HTTP_PROXY": "where later steps' traffic goes", "HTTPS_PROXY": "where later steps' traffic goes",
    "ALL_PROXY": "where later steps' traffic goes", "NO_PROXY": "which traffic bypasses a proxy",
    "FTP_PROXY": "where later steps' traffic goes",
    "SSL_CERT_FILE": "a certificate store later steps trust", "SSL_CERT_DIR": "certificates later steps trust",
    "CURL_CA_BUNDLE": "certificates curl trusts", "REQUESTS_CA_BUNDLE": "certificates python-requests trusts",
    "DOCKER_HOST": "which Docker daemon later steps use", "DOCKER_CONFIG": "docker's credentials and helpers",
    "KUBECONFIG": "which cluster and credentials kubectl uses",
    "AWS_CONFIG_FILE": "AWS credential_process commands", "AWS_SHARED_CREDENTIALS_FILE": "AWS credentials",
    "GOOGLE_APPLICATION_CREDENTIALS": "Google credentials",
    "CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE": "Google credentials",
    # found in review (issue 22): each ran code in a later step
    "XDG_CONFIG_HOME": "where git, and most tools, read their configuration (core.fsmonitor runs)",
    "XDG_CONFIG_DIRS": "where tools read their configuration",
    "XDG_DATA_HOME": "where tools find plugins and data", "XDG_DATA_DIRS": "where tools find plugins and data",
    "MAKEFILES": "makefiles every make reads first ($(shell ...) runs)",
    "TAR_OPTIONS": "options for every tar (--use-compress-program runs a program; actions/cache runs tar)",
    "OPENSSL_CONF": "an OpenSSL configuration (it loads engines and providers)",
    "OPENSSL_ENGINES": "where OpenSSL loads engines from", "OPENSSL_MODULES": "where OpenSSL loads providers from",
    "JAVA_HOME": "the JVM later builds run", "CURL_HOME": "where curl reads .curlrc",
    "WGETRC": "a wget start-up file", "LUA_INIT": "Lua code run at every start",
    "VIMINIT": "commands vim runs at start", "EXINIT": "commands vi runs at start", "MYVIMRC": "a vimrc",
    "GLIBC_TUNABLES": "glibc's tunables (a past loader exploit)", "PROMPT_DIRTRIM": "changes bash prompts",
    "INPUTRC": "readline's start-up file", "TERMINFO": "terminal descriptions programs load",
    "GNUPGHOME": "gpg's keys and configuration", "SSH_AUTH_SOCK": "which agent ssh signs with",
    "GPG_TTY": "where gpg asks for passphrases", "DBUS_SESSION_BUS_ADDRESS": "the session bus later steps talk to",
    # found in the second review: each names a program or a file of code a later tool runs
    "RUSTC_WORKSPACE_WRAPPER": "a program run in place of rustc", "CONFIG_SITE": "a script every configure runs",
    "GRADLE_USER_HOME": "gradle's init scripts", "CCACHE_PREFIX": "a program ccache runs",
    "PKG_CONFIG": "the pkg-config builds run", "CMAKE_C_COMPILER_LAUNCHER": "a program cmake runs",
    "CMAKE_CXX_COMPILER_LAUNCHER": "a program cmake runs", "CMAKE_TOOLCHAIN_FILE": "cmake code every build runs",
    "TARGET_CC": "the C compiler cargo's build scripts run", "HOST_CC": "the C compiler build scripts run",
    "COMPILER_PATH": "where gcc finds its programs", "GCC_EXEC_PREFIX": "where gcc finds its programs",
    "CLOUDSDK_PYTHON": "the python gcloud runs", "JAVA_OPTS": "options for java launch scripts",
    "SBT_OPTS": "options for sbt's JVM", "BUNDLE_GEMFILE": "the Gemfile bundler evaluates",
    "PHPRC": "where php reads php.ini (auto_prepend_file)", "DOTNET_ADDITIONAL_DEPS": "code .NET loads",
    "ELECTRON_RUN_AS_NODE": "turns an Electron app into node", "LESS": "options for less (shell escapes)",
    "AWS_ENDPOINT_URL": "where AWS traffic goes", "LOCPATH": "locale data glibc loads",
}
#: Go's variables (not every name starting with GO: GOOGLE_CLOUD_PROJECT, GOAL).
_GO_NAMES = frozenset({"GOFLAGS", "GOPROXY", "GOTOOLCHAIN", "GOROOT", "GOPATH", "GOBIN", "GOENV", "GOPRIVATE",
                       "GONOSUMDB", "GONOSUMCHECK", "GONOPROXY", "GOSUMDB", "GOINSECURE", "GOEXPERIMENT",
                       "GOCACHE", "GOMODCACHE", "GOWORK", "GOVCS", "GOAUTH", "GODEBUG"})
#: Name prefixes refused the same way (``LD_PRELOAD``, ``GIT_SSH_COMMAND``, ...).
ENV_DENY_PREFIXES: dict[str, str] = {
    "LD_": "a dynamic-loader variable (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH) loads code into every program",
    "BASH_FUNC_": "an exported bash function runs in every later bash",
    "PYTHON": "a Python start-up variable (PYTHONSTARTUP, PYTHONPATH, PYTHONHOME) runs code in every python",
    "LUA_INIT": "Lua code run at every start",
    "PIP_": "pip's configuration (index, trusted hosts) for later installs",
    "UV_": "uv's configuration (index) for later installs",
    "NPM_CONFIG_": "npm's configuration (registry, script-shell) for later installs",
    "YARN_": "yarn's configuration for later installs",
    "GIT_": "git's configuration (GIT_SSH_COMMAND, GIT_CONFIG_*, GIT_EXEC_PATH) runs code",
    "CGO_": "cgo's compiler flags for later builds",
    "CARGO_": "cargo's configuration (build.rustc-wrapper, registries) for later builds",
    "RUSTUP_": "rustup's configuration (toolchain) for later builds",
    "GITHUB_": "the runner's own context: a step may not rewrite it",
    "RUNNER_": "the runner's own context: a step may not rewrite it",
    "ACTIONS_": "the runner's own context: a step may not rewrite it",
    "SAFEBOX_": "safebox's own settings for later steps",
    "CI_": "the CI's own context",
}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def env_refusal(name: str, allowed: tuple[str, ...] = ()) -> str | None:
    """Why ``name`` may not be set for later steps through $GITHUB_ENV, or
    None: it must be a plain name that ``ci.passEnv`` (``allowed``) names; a
    name known to run code must be named exactly, never by a wildcard."""
    from safebox._record import glob_match

    if not _NAME.match(name):
        return "not a plain variable name ([A-Za-z_][A-Za-z0-9_]*)"
    if name in allowed:
        return None
    runs_code = code_running(name)
    if any(glob_match(name, p) for p in allowed if p != name):
        if runs_code is None:
            return None
        return (f"{runs_code}: a wildcard in ci.passEnv never passes it; fix, only if a later step must have it: "
                f"add {name!r} itself to ci.passEnv")
    if runs_code is not None:
        return (f"not in ci.passEnv ({runs_code}); fix, only if a later step must have it: add {name!r} to "
                "ci.passEnv in the policy")
    return f"not in ci.passEnv; fix: add {name!r} to ci.passEnv in the policy"


def code_running(name: str) -> str | None:
    """Why a variable is known to make a later program run code, or None
    (the names a wildcard in ``ci.passEnv`` never passes)."""
    upper = name.upper()
    why = ENV_DENY.get(upper)
    if why is not None:
        return why
    if upper in _GO_NAMES:
        return "go's configuration (GOFLAGS, GOPROXY, GOTOOLCHAIN) for later builds"
    for prefix, why in ENV_DENY_PREFIXES.items():
        # PYTHON_VERSION is a setup-python output, not Python's own variable.
        if upper.startswith(prefix) and not (prefix == "PYTHON" and upper.startswith("PYTHON_")):
            return why
    if upper.endswith("_PROXY"):
        return "where later steps' traffic goes"
    return None
