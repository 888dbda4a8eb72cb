#!/usr/bin/env bash
# The GPU check (issue 28; docs/gpu.md): on a machine with an NVIDIA GPU, no
# network and no bubblewrap needed, from the payload tests/gpu/prepare.sh
# built. Runs `nvidia-smi -L` and a PyTorch CUDA matmul outside, under
# `safebox exec --allow-gpu` in each layer mode, and under `safebox exec`
# without the flag (which must fail); prints the timings side by side and
# exits non-zero if any expectation fails. Results also go to $OUT if set.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
P=$ROOT/tests/gpu/payload
OUTFILE=${OUT:-/tmp}/gpu-check.txt
exec > >(tee "$OUTFILE") 2>&1
[ -d "$P/wheels" ] || { echo "no payload: run tests/gpu/prepare.sh on a machine with network first"; exit 2; }
command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: not a machine with an NVIDIA GPU"; exit 2; }

PY=$(command -v python3)
tag=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
SITE=$(mktemp -d /var/tmp/safebox-gpu-site.XXXXXX)
for w in "$P"/wheels/*.whl; do
  case "$w" in *-cp3[0-9]*-cp3*) case "$w" in *"-$tag-"*) ;; *) continue ;; esac ;; esac
  "$PY" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$w" "$SITE"
done
chmod 755 "$SITE"/safebox/_bin/* 2>/dev/null
# The tools run through their own loader (bin/*); only libseccomp is added to
# the search path, and only if that machine lacks one: this machine's libc
# must never reach that machine's programs (python3, nvidia-smi).
export PATH="$P/bin:$PATH"
ldconfig -p | grep -q 'libseccomp.so.2 ' || export LD_LIBRARY_PATH="$P/seccomp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SB=("$PY" -I -c "import sys; sys.path.insert(0, '$SITE'); from safebox.cli import main; sys.argv[0] = 'safebox'; main()")
WORK=$(mktemp -d /var/tmp/safebox-gpu-work.XXXXXX)
cp "$ROOT/tests/gpu/matmul.py" "$WORK/"
cd "$WORK" || exit 2

echo "== $(date -u +%FT%TZ) $(uname -r); driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
nvidia-smi -L
ls -l /dev/nvidia* /dev/dri 2>/dev/null
"${SB[@]}" doctor
fail=0
row() {  # name, expect (ok | fail | rc=N: that exit status exactly), command...
  local name=$1 expect=$2; shift 2
  local t0 t1 out rc
  t0=$EPOCHREALTIME; out=$("$@" 2>&1); rc=$?; t1=$EPOCHREALTIME
  local got=ok; [ "$rc" -ne 0 ] && got=fail
  case $expect in rc=*) got=rc=$rc ;; esac
  local mark=PASS; [ "$got" != "$expect" ] && { mark=FAIL; fail=1; }
  printf '%-44s %-4s rc=%-3s %6.2fs  %s\n' "$name" "$mark" "$rc" "$(awk "BEGIN {print $t1 - $t0}")" "$(echo "$out" | tail -1)"
  [ "$mark" = FAIL ] && echo "$out" | tail -8 | sed 's/^/      | /' 
}
row "outside: nvidia-smi -L" ok nvidia-smi -L
row "outside: matmul" ok "$PY" matmul.py
echo '{"network": {"allowAllUnixSockets": true}}' > "$WORK/all-unix.json"
row "safebox --allow-gpu (helper-only), no key" rc=125 "${SB[@]}" exec --allow-gpu --without bwrap -- nvidia-smi -L
for mode in both helper-only bwrap-only; do
  # Without bubblewrap no host socket can be hidden, and CUDA needs unix
  # sockets: --allow-gpu there takes network.allowAllUnixSockets (docs/gpu.md).
  case $mode in both) w=() ;; helper-only) w=(--without bwrap -p "$WORK/all-unix.json") ;; bwrap-only) w=(--without helper) ;; esac
  row "safebox --allow-gpu ($mode): nvidia-smi -L" ok "${SB[@]}" exec --allow-gpu "${w[@]}" -- nvidia-smi -L
  row "safebox --allow-gpu ($mode): matmul" ok "${SB[@]}" exec --allow-gpu "${w[@]}" -- "$PY" matmul.py
done
row "safebox --allow-gpu=0 (both): matmul" ok "${SB[@]}" exec --allow-gpu=0 -- "$PY" matmul.py
row "safebox, no flag (both): nvidia-smi -L" fail "${SB[@]}" exec -- nvidia-smi -L
# matmul.py exits 2 when torch loads but CUDA is unavailable: the refusal
# is the device's absence, not some other failure (3: no torch at all).
row "safebox, no flag (both): matmul" rc=2 "${SB[@]}" exec -- "$PY" matmul.py
row "safebox, no flag (helper-only): matmul" rc=2 "${SB[@]}" exec --without bwrap -- "$PY" matmul.py
echo "== $([ $fail -eq 0 ] && echo 'every expectation held' || echo 'SOME EXPECTATION FAILED')"
rm -rf "$SITE" "$WORK"
exit $fail
