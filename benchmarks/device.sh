#!/usr/bin/env bash
# The benchmarks on a lent machine of many cores (docs/benchmarks.md names
# the machine of each figure): one that has neither network nor
# bubblewrap, from the payload tests/gpu/prepare.sh built here (safebox's
# wheel, its dependencies' wheels, bwrap, socat and rg with their
# libraries). Makes .venv (and, with a baseline wheel in
# $P/baseline/, .venv-base) from the wheels, then runs each benchmark
# named in $BENCHES (default: all of them) with its output in $OUT.
#
#   BASELINE=f5425f0^1 bash tests/gpu/prepare.sh   # here (the commit before capture: bench_capture's baseline)
#   git archive REV python | tar -x -C .devbase       # here, optional: the proxy's baseline source
#   bash benchmarks/device.sh                       # there; OUT=DIR BENCHES="proxy startup" to choose
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
P=$ROOT/tests/gpu/payload
OUTDIR=${OUT:-/tmp/safebox-bench-out}
mkdir -p "$OUTDIR"
[ -d "$P/wheels" ] || { echo "no payload: run tests/gpu/prepare.sh on a machine with network first"; exit 2; }
PY=$(command -v python3)
tag=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')

venv() {  # DIR WHEEL...: a venv without pip, the wheels unpacked into it, safebox's launcher
  local dir=$1; shift
  rm -rf "$dir" && "$PY" -m venv --without-pip "$dir" || return 1
  local site; site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  for w in "$@"; do
    case "$w" in *-cp3[0-9]*-cp3*) case "$w" in *"-$tag-"*) ;; *) continue ;; esac ;; esac
    "$PY" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$w" "$site"
  done
  chmod 755 "$site"/safebox/_bin/*
  "$PY" -c 'import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); import build
build._write_launcher(Path(sys.argv[2]) / "bin" / "python", venv=Path(sys.argv[2]), site=sys.argv[3])' \
    "$ROOT" "$(cd "$dir" && pwd)" "$site"
}

deps=()
for w in "$P"/wheels/*.whl; do case "$w" in */safebox_sandbox-*) ;; *) deps+=("$w") ;; esac; done
venv .venv "$P"/wheels/safebox_sandbox-*.whl "${deps[@]}" || { echo "cannot make .venv"; exit 2; }
base=()
if ls "$P"/baseline/safebox_sandbox-*.whl >/dev/null 2>&1; then
  venv .venv-base "$P"/baseline/safebox_sandbox-*.whl "${deps[@]}" && base=(--baseline "$ROOT/.venv-base/bin/safebox")
fi
# The tools outside this checkout: a benchmark whose work dir is the
# checkout (bench_capture) would find bwrap inside a write root, and
# safebox refuses to run a bwrap a sandboxed command could have replaced.
TOOLS=$(mktemp -d /var/tmp/safebox-bench-tools.XXXXXX)
cp -a "$P/bin" "$P/lib" "$P/seccomp" "$TOOLS/"
chmod 755 "$TOOLS"
export PATH="$TOOLS/bin:$PATH"
ldconfig -p | grep -q 'libseccomp.so.2 ' || export LD_LIBRARY_PATH="$TOOLS/seccomp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "== $(date -u +%FT%TZ) $(uname -r), $(nproc) cores, $("$PY" -V), load $(cut -d' ' -f1-3 /proc/loadavg)"
.venv/bin/safebox doctor 2>&1 | tail -4

bench() {  # NAME ARGS...: one benchmark, its output in $OUTDIR/NAME.txt and its section in $OUTDIR/NAME.md
  local name=$1; shift
  case " ${BENCHES:-proxy raw startup parts tree review capture} " in *" $name "*) ;; *) return 0 ;; esac
  # Every section's markers, so that --write finds its place.
  for m in proxy startup startparts treesize review capture; do printf '<!-- %s:start -->\n<!-- %s:end -->\n' "$m" "$m"; done > "$OUTDIR/$name.md"
  local t0=$EPOCHREALTIME
  timeout "${BENCH_TIMEOUT:-240}" .venv/bin/python "$@" --write "$OUTDIR/$name.md" > "$OUTDIR/$name.txt" 2>&1
  echo "== $name: rc=$? in $(awk "BEGIN {printf \"%.0f\", $EPOCHREALTIME - $t0}") s"
  tail -25 "$OUTDIR/$name.txt"
}
# The proxy against the source tree in .devbase/python (git archive REV python), if carried.
pbase=(); [ -d "$ROOT/.devbase/python" ] && pbase=(--baseline "$ROOT/.devbase/python")
bench proxy benchmarks/bench_proxy.py --no-exec --size-mib 512 --repeat 2 --timed 5 --ttfb 200 "${pbase[@]}"
bench raw benchmarks/bench_proxy.py --raw 2000 "${pbase[@]}"
bench startup benchmarks/bench_startup.py --runs 40 --concurrent 10
bench parts benchmarks/bench_startup_parts.py --runs 25
bench tree benchmarks/bench_tree_size.py --runs 8
bench review benchmarks/bench_review.py --runs 7 --files 10000 --npm 0
bench capture benchmarks/bench_capture.py --size-mib 256 --repeat 5 --rounds 300 "${base[@]}"
exit 0
