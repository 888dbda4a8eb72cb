#!/usr/bin/env bash
# The Quick start demo: a throwaway HOME with fake credentials, then four
# attempts inside the sandbox, each next to the same attempt without it.
set -u
SAFEBOX=${1:-safebox}
# Not under /tmp: the sandbox has a private /tmp, which would hide the
# demo home for a reason other than the one being shown.
demo=$(mktemp -d /var/tmp/safebox-demo.XXXXXX)
chmod 755 "$demo"
srv_pid=
cleanup() { [ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null; rm -rf "$demo"; }
trap cleanup EXIT
export HOME="$demo/home"
mkdir -p "$HOME/.ssh" "$HOME/.aws-real" "$demo/work"
echo "FAKE-PRIVATE-KEY" > "$HOME/.ssh/id_rsa"
echo "[default] aws_secret_access_key=FAKE" > "$HOME/.aws-real/credentials"
ln -s "$HOME/.aws-real" "$HOME/.aws"          # a symlinked credential dir, as on WSL2
cd "$demo/work"
python3 -m http.server 0 --bind 127.0.0.1 >"$demo/srv.log" 2>&1 &
srv_pid=$!
for _ in $(seq 50); do port=$(grep -o 'port [0-9]*' "$demo/srv.log" | grep -o '[0-9]*'); [ -n "$port" ] && break; sleep 0.1; done

fails=0
check() { # check "what" expected(blocked|works) command...
  local what=$1 want=$2; shift 2
  if "$@" >/dev/null 2>"$demo/err"; then got=works; else got=blocked; fi
  if [ "$got" = "$want" ]; then mark="ok  "; else mark="FAIL"; fails=$((fails+1)); fi
  printf '%s %-48s %s\n' "$mark" "$what" "$got$( [ "$got" = blocked ] && printf ' (%s)' "$(tail -n1 "$demo/err" | sed 's/.*: //' | cut -c1-50)")"
}
echo "== without the sandbox =="
check "read ~/.ssh/id_rsa"                 works   cat "$HOME/.ssh/id_rsa"
check "read ~/.aws/credentials (symlink)"  works   cat "$HOME/.aws/credentials"
check "write outside the work dir"         works   sh -c "echo x > '$HOME/outside'"
check "reach a local server (network)"     works   curl -sSf -m 5 "http://127.0.0.1:$port/"
rm -f "$HOME/outside"
echo "== inside: $SAFEBOX exec -- ... =="
check "read ~/.ssh/id_rsa"                 blocked "$SAFEBOX" exec -- cat "$HOME/.ssh/id_rsa"
check "read ~/.aws/credentials (symlink)"  blocked "$SAFEBOX" exec -- cat "$HOME/.aws/credentials"
check "write outside the work dir"         blocked "$SAFEBOX" exec -- sh -c "echo x > '$HOME/outside'"
check "reach a local server (network)"     blocked "$SAFEBOX" exec -- curl -sSf -m 5 "http://127.0.0.1:$port/"
check "write inside the work dir"          works   "$SAFEBOX" exec -- sh -c "echo hello > notes.txt && cat notes.txt"
echo
"$SAFEBOX" exec -v -- true 2>&1 | sed 's/^/    /'
if [ "$fails" -eq 0 ]; then echo "demo: every check behaved as expected"; else echo "demo: $fails check(s) did not"; fi
exit "$fails"
