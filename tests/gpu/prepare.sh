#!/usr/bin/env bash
# Build the GPU check's payload here (a machine with network and bubblewrap),
# for a machine that has neither: tests/gpu/payload/, ignored by git, carried
# to the device (docs/gpu.md, "Tests"). Then, there: bash tests/gpu/check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
P=tests/gpu/payload
rm -rf "$P" && mkdir -p "$P/wheels" "$P/bin" "$P/lib"
python3 build.py wheel >/dev/null
cp dist/safebox_sandbox-*manylinux*.whl "$P/wheels/"
for v in 3.11 3.12 3.13; do
  .venv/bin/pip download -q --disable-pip-version-check --only-binary=:all: --python-version "$v" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$P/wheels" click pydantic pyseccomp
done
# bwrap, socat and rg with every library they load and this machine's
# loader: they run there through it, whatever that machine's libc.
for tool in bwrap socat rg; do
  exe=$(command -v "$tool")
  cp "$exe" "$P/lib/$tool"
  ldd "$exe" | awk '/=>/ {print $3} /ld-linux/ {print $1}' | while read -r lib; do
    [ -f "$lib" ] && cp -L "$lib" "$P/lib/"
  done
  printf '#!/bin/sh\nd=$(dirname "$(readlink -f "$0")")/../lib\nexec "$d/ld-linux-x86-64.so.2" --library-path "$d" "$d/%s" "$@"\n' \
    "$tool" > "$P/bin/$tool"
  chmod 755 "$P/bin/$tool"
done
# libseccomp alone in its own folder: that one goes on LD_LIBRARY_PATH there
# (pyseccomp loads it), where this machine's libc must never be found.
mkdir -p "$P/seccomp"
cp -L "$(ldconfig -p | awk '/libseccomp.so.2 / {print $NF; exit}')" "$P/seccomp/"
du -sh "$P"
# BASELINE=COMMIT: that commit's wheel too, in payload/baseline/, for the
# benchmarks that compare with an older install (benchmarks/device.sh).
if [ -n "${BASELINE:-}" ]; then
  wt=$(mktemp -d /var/tmp/safebox-baseline.XXXXXX)
  git worktree add -q --detach "$wt" "$BASELINE"
  (cd "$wt" && python3 build.py wheel >/dev/null)
  mkdir -p "$P/baseline" && cp "$wt"/dist/safebox_sandbox-*manylinux*.whl "$P/baseline/"
  git worktree remove --force "$wt"
  du -sh "$P"
fi
