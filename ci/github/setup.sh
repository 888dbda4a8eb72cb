#!/usr/bin/env bash
# safebox's GitHub Action (action.yml), one step at a time:
#   setup.sh install    safebox, root-owned, in $SAFEBOX_INSTALL_ROOT/safebox-VERSION-DIGEST
#                       (default /opt): `sudo -n python3 build.py install` from the
#                       action's own checkout (host packages, the helper compiled
#                       here, runtime dependencies pinned by hash from
#                       ci/requirements.lock); nothing when an administrator
#                       installed this very checkout already (self-hosted runners)
#   setup.sh apparmor   Ubuntu >= 23.10/24.04: let the bwrap safebox uses create
#                       user namespaces (kernel.apparmor_restrict_unprivileged_userns=1)
#   setup.sh doctor     `safebox doctor`; fails the job with its fix text
#   setup.sh configure  write the `safebox-step` shell for sandboxed steps
# Inputs come from the environment (action.yml sets them): SAFEBOX_POLICY,
# SAFEBOX_PRESETS, SAFEBOX_MODE (enforce|learn), SAFEBOX_REVIEW (true|false), SAFEBOX_LEARN_OUT,
# SAFEBOX_APPARMOR (profile|sysctl|skip), SAFEBOX_INSTALL_ROOT. docs/ci.md
# describes each.
set -euo pipefail

say() { printf 'safebox-action: %s\n' "$*" >&2; }
die() { printf '::error title=safebox::%s\n' "$*" >&2; exit 1; }

ACTION_DIR=${SAFEBOX_ACTION_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
# Everything the action writes lives under RUNNER_TEMP (emptied after each
# job), outside the workspace, so no sandboxed step can write it.
BASE=${SAFEBOX_ACTION_HOME:-${RUNNER_TEMP:?RUNNER_TEMP is not set: not a GitHub runner}/safebox}
BIN="$BASE/bin"

sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }

INSTALL_ROOT=${SAFEBOX_INSTALL_ROOT:-/opt}
# What pip may need from the job's environment, which sudo resets: a mirror
# or a proxy. Every file is still pinned by its hash.
PIP_PASS_ENV="PIP_INDEX_URL PIP_FIND_LINKS PIP_NO_INDEX PIP_CERT HTTPS_PROXY https_proxy HTTP_PROXY http_proxy NO_PROXY no_proxy"

python_() {
  # build.py runs on any python3; the installation needs >= 3.11.
  local py
  py=$(command -v python3) || die "python3 not found (ubuntu-22.04: run actions/setup-python first)"
  "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    die "safebox needs Python >= 3.11 as python3 (ubuntu-22.04: run actions/setup-python first)"
  printf '%s\n' "$py"
}

# The root-owned safebox of this checkout, checked by build.py (owner, mode,
# stamp) each time a step needs it. SAFEBOX_BIN: a safebox given instead.
safebox_() {
  if [ -n "${SAFEBOX_BIN:-}" ]; then printf '%s\n' "$SAFEBOX_BIN"; return; fi
  python3 "$ACTION_DIR/build.py" installed --root "$INSTALL_ROOT" 2>/dev/null ||
    die "safebox is not installed root-owned under $INSTALL_ROOT for this checkout: the install step did not run or failed (its message is above)"
}

install() {
  mkdir -p "$BIN"
  local py sb=
  py=$(python_)
  # Installed already (a self-hosted runner's administrator ran build.py
  # install from this very commit, or an earlier job here did): nothing to do.
  if sb=$("$py" "$ACTION_DIR/build.py" installed --root "$INSTALL_ROOT" 2>/dev/null); then
    say "safebox from this checkout is installed, root-owned: $sb"
  elif [ "$(id -u)" = 0 ] || { command -v sudo >/dev/null && sudo -n true 2>/dev/null; }; then
    # From the action's own checkout (the ref the workflow pinned): root
    # compiles the helper and installs safebox where no step can write it.
    local pass=() v
    for v in $PIP_PASS_ENV; do [ -n "${!v:-}" ] && pass+=("$v=${!v}"); done
    say "installing safebox from $ACTION_DIR, root-owned, under $INSTALL_ROOT"
    sudo_ env "${pass[@]}" "$py" "$ACTION_DIR/build.py" install --root "$INSTALL_ROOT" >&2 ||
      die "sudo -n $py build.py install failed (its message is above)"
    sb=$("$py" "$ACTION_DIR/build.py" installed --root "$INSTALL_ROOT") ||
      die "build.py install ran, but the installation under $INSTALL_ROOT does not pass its checks (above)"
  else
    die "this runner has no passwordless sudo (\`sudo -n true\` failed), and safebox must be installed root-owned so that no step can replace it: an administrator runs, once, as root on this runner: \`$py $ACTION_DIR/build.py install --root $INSTALL_ROOT\` (or from a checkout of this action at the same commit); docs/ci.md#self-hosted-runners"
  fi
  # Only the `safebox` command goes on PATH (for `safebox report` and
  # spelled-out shells): the installation's python must not shadow the job's.
  ln -sfn "$sb" "$BIN/safebox"
  echo "$BIN" >> "$GITHUB_PATH"
}

apparmor() {
  local knob=/proc/sys/kernel/apparmor_restrict_unprivileged_userns
  if [ ! -e "$knob" ] || [ "$(cat "$knob")" != 1 ]; then
    return 0
  fi
  local bwrap
  bwrap=$(readlink -f "$(command -v bwrap)") || die "bwrap not found"
  case "${SAFEBOX_APPARMOR:-profile}" in
    profile)
      # The targeted fix (the one `safebox doctor` prints): this bwrap, and
      # nothing else, may create user namespaces. The sysctl stays on.
      say "kernel.apparmor_restrict_unprivileged_userns=1: installing an AppArmor profile for $bwrap"
      printf 'abi <abi/4.0>,\ninclude <tunables/global>\nprofile safebox-bwrap %s flags=(unconfined) {\n  userns,\n}\n' \
        "$bwrap" | sudo_ tee /etc/apparmor.d/safebox-bwrap >/dev/null
      sudo_ apparmor_parser -r /etc/apparmor.d/safebox-bwrap
      ;;
    sysctl)
      say "kernel.apparmor_restrict_unprivileged_userns=1: turning it off for this runner (apparmor: sysctl)"
      sudo_ sysctl -q -w kernel.apparmor_restrict_unprivileged_userns=0
      ;;
    skip) say "kernel.apparmor_restrict_unprivileged_userns=1 and apparmor: skip: bwrap may not work" ;;
    *) die "input apparmor: '${SAFEBOX_APPARMOR}' is not one of profile, sysctl, skip" ;;
  esac
}

doctor() {
  local sb out rc=0
  sb=$(safebox_)
  out=$("$sb" doctor 2>&1) || rc=$?
  printf '%s\n' "$out" >&2
  if [ "$rc" -ne 0 ]; then
    # The first failed check and its fix, as the job's error annotation.
    die "safebox doctor: this runner cannot sandbox: $(printf '%s\n' "$out" | grep -m1 -A1 '^fail' | tr '\n' ' ')"
  fi
}

# One word for /bin/sh: single-quoted, each ' written as '\''.
shq() { local q=\'\\\'\'; printf "'%s'" "${1//\'/$q}"; }

# Copy the policies a step will run under out of the workspace, now, before
# any sandboxed step: a step may write the workspace, and a policy it could
# rewrite would decide the next step's sandbox. Steps read only the copies.
snapshot_policies() {
  local policy=$1
  rm -rf "$BASE/policies" && mkdir -p "$BASE/policies/steps"
  if [ -n "$policy" ]; then
    case "$policy" in *.toml) cp -- "$policy" "$BASE/policies/job.toml" ;; *) cp -- "$policy" "$BASE/policies/job.json" ;; esac
  fi
  local steps="${GITHUB_WORKSPACE:-$PWD}/.github/safebox"
  if [ -d "$steps" ] && [ ! -L "$steps" ]; then
    # Per-step policies: .github/safebox/JOB/STEP.{json,toml}; regular files only, never a link.
    (cd "$steps" && find . -mindepth 2 -maxdepth 2 -type f \( -name '*.json' -o -name '*.toml' \) -print0) |
      while IFS= read -r -d '' f; do
        mkdir -p "$BASE/policies/steps/$(dirname "$f")"
        cp -- "$steps/$f" "$BASE/policies/steps/$f"
      done
  fi
  printf '{}\n' > "$BASE/policies/empty.json"
}

configure() {
  local sb
  sb=$(safebox_)
  mkdir -p "$BIN"
  local args=() p
  local policy=${SAFEBOX_POLICY:-}
  if [ -z "$policy" ] && [ -f "${GITHUB_WORKSPACE:-.}/.github/safebox.toml" ]; then
    policy="${GITHUB_WORKSPACE:-.}/.github/safebox.toml"
  fi
  if [ -n "$policy" ]; then
    case "$policy" in /*) ;; *) policy="${GITHUB_WORKSPACE:-$PWD}/$policy" ;; esac
    [ -f "$policy" ] || die "input policy: $policy does not exist"
    "$sb" policy check "$policy" >&2 || die "input policy: $policy is not a valid policy (see above)"
  fi
  snapshot_policies "$policy"
  local job_policy=""
  for p in "$BASE"/policies/job.*; do [ -f "$p" ] && job_policy=$p; done
  [ -n "$job_policy" ] && args+=(-p "$job_policy")
  for f in $(cd "$BASE/policies/steps" && find . -type f | sort); do
    f=${f#./}
    "$sb" policy check "$BASE/policies/steps/$f" >/dev/null || die "per-step policy .github/safebox/$f is not a valid policy (see above)"
    say "step policy: .github/safebox/$f (steps of job ${f%%/*} with id $(basename "${f%.*}") run under it)"
  done
  local presets=${SAFEBOX_PRESETS:-}
  for p in ${presets//,/ }; do
    case "$p" in npm|pip|cargo|go|maven|github) args+=(--preset "$p") ;;
      *) die "input presets: unknown preset '$p' (npm, pip, cargo, go, maven, github)" ;; esac
  done
  local log="$BASE/audit.jsonl" learned=${SAFEBOX_LEARN_OUT:-$BASE/learned-policy.json}
  local mode=${SAFEBOX_MODE:-enforce}
  args+=(--audit-log "$log")
  case "${SAFEBOX_REVIEW:-false}" in
    true) args+=(--review) ;;
    false) ;;
    *) die "input review: '${SAFEBOX_REVIEW}' is not true or false" ;;
  esac
  case "$mode" in
    enforce|learn) ;;
    *) die "input mode: '${SAFEBOX_MODE}' is not enforce or learn" ;;
  esac
  # The shell for sandboxed steps: `shell: safebox-step {0}`. Its arguments
  # are fixed here, where no step can change them ($BIN is outside the
  # workspace and every write root). A POSIX sh script: every word quoted
  # with '...' (bash's printf %q may write $'...', which dash does not know).
  # Each step is keyed by $GITHUB_JOB/$GITHUB_ACTION (the step's id; the
  # runner names a step without one __run, __run_2, ...: docs/ci.md).
  {
    printf '#!/bin/sh\n# written by safebox action configure: shell: safebox-step {0}\n'
    printf 'script=$1\nrc=0\n'
    printf "job=\$(printf '%%s' \"\${GITHUB_JOB:-job}\" | tr -c 'A-Za-z0-9_.-' '_')\n"
    printf "step=\$(printf '%%s' \"\${GITHUB_ACTION:-step}\" | tr -c 'A-Za-z0-9_.-' '_')\n"
    printf 'case "$job" in .|..) job=_ ;; esac\ncase "$step" in .|..) step=_ ;; esac\n'
    printf 'steps=%s\n' "$(shq "$BASE/policies/steps")"
    if [ "$mode" = learn ]; then
      printf 'out=%s/"$job/$step.json"\nmkdir -p %s/"$job"\n' "$(shq "$BASE/learned")" "$(shq "$BASE/learned")"
      printf 'set -- --learn "$out"\n'
    else
      # This step's own policy when the workspace had one at configure time, else the job's.
      printf 'set --\n'
      printf 'for f in "$steps/$job/$step.json" "$steps/$job/$step.toml"; do [ -f "$f" ] && set -- -p "$f"; done\n'
    fi
    printf '%s exec' "$(shq "$sb")"
    for p in "${args[@]}"; do printf ' %s' "$(shq "$p")"; done
    printf ' "$@" -- bash --noprofile --norc -eo pipefail "$script" || rc=$?\n'
    if [ "$mode" = learn ]; then
      # Every step so far, merged: one policy for the whole job too.
      printf '%s policy suggest %s -o %s >/dev/null 2>&1 || true\n' "$(shq "$sb")" "$(shq "$log")" "$(shq "$learned")"
      # The step's summary: the file to commit and what it adds to the job's policy.
      printf 'if [ -f "$out" ] && [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then {\n'
      printf '  printf "### safebox learned step \\`%%s/%%s\\`\\n\\nCommit it as \\`.github/safebox/%%s/%%s.json\\` to run this step under it in enforce mode (docs/ci.md#per-step-learn-then-enforce).\\n\\nWhat the step needed beyond the job'"'"'s policy (\\`safebox policy diff\\`):\\n\\n\\`\\`\\`\\n" "$job" "$step" "$job" "$step"\n'
      printf '  %s policy diff %s "$out" 2>&1 | sed "s/\\`\\`\\`/\\`\\` \\`/g"\n' "$(shq "$sb")" "$(shq "${job_policy:-$BASE/policies/empty.json}")"
      printf '  printf "\\`\\`\\`\\n\\n<details><summary>%%s/%%s.json</summary>\\n\\n\\`\\`\\`json\\n" "$job" "$step"\n'
      printf '  sed "s/\\`\\`\\`/\\`\\` \\`/g" "$out"\n'
      printf '  printf "\\`\\`\\`\\n</details>\\n"\n'
      printf '} >> "$GITHUB_STEP_SUMMARY"; fi\n'
    fi
    printf 'exit $rc\n'
  } > "$BIN/safebox-step.tmp"
  chmod 0755 "$BIN/safebox-step.tmp"
  mv -f "$BIN/safebox-step.tmp" "$BIN/safebox-step"
  grep -qxF "$BIN" "${GITHUB_PATH:-/dev/null}" 2>/dev/null || echo "$BIN" >> "${GITHUB_PATH:-/dev/null}"
  {
    echo "shell=$BIN/safebox-step {0}"
    echo "audit-log=$log"
    echo "learned-policy=$learned"
    echo "learned-dir=$BASE/learned"
  } >> "${GITHUB_OUTPUT:-/dev/null}"
  say "sandboxed steps: shell: safebox-step {0} (runs: safebox exec ${args[*]} -- bash -e STEP)"
}

case "${1:-}" in
  install) install ;;
  apparmor) apparmor ;;
  doctor) doctor ;;
  configure) configure ;;
  *) die "usage: setup.sh install|apparmor|doctor|configure" ;;
esac
