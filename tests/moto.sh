#!/usr/bin/env bash
# Runs a command with a moto server (AWS API emulator) on a free 127.0.0.1 port.
#
#   bash tests/moto.sh cargo test -p nodewright-aws
#
# Installs moto[server] into target/tools/venv on first use (PyPI), starts it, waits
# until it answers, exports NODEWRIGHT_MOTO_URL / AWS_ENDPOINT_URL / dummy credentials
# / AWS_REGION, runs the command, and stops moto when the command ends (any way).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$#" -eq 0 ]; then
  echo "usage: bash tests/moto.sh <command> [args...]" >&2
  exit 2
fi

venv=target/tools/venv
if [ ! -x "$venv/bin/moto_server" ]; then
  echo "moto.sh: installing moto[server] into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet 'moto[server]'
fi

port=$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
log=$(mktemp -t moto.XXXXXX.log)
# moto_server, with DynamoDB's conditional writes made atomic (see tests/moto_server.py).
"$venv/bin/python" tests/moto_server.py -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
moto_pid=$!
cleanup() {
  kill "$moto_pid" 2>/dev/null || true
  wait "$moto_pid" 2>/dev/null || true
  rm -f "$log"
}
trap cleanup EXIT INT TERM

url="http://127.0.0.1:$port"
# Up to a minute: it answered in 5 s beside one busy core, but a run at low priority on
# a loaded 2-core machine waited more than the 10 s this once allowed, and failed.
for _ in $(seq 1 600); do
  if curl -fsS -o /dev/null "$url/moto-api/" 2>/dev/null; then
    break
  fi
  if ! kill -0 "$moto_pid" 2>/dev/null; then
    echo "moto.sh: moto_server exited:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.1
done
curl -fsS -o /dev/null "$url/moto-api/" || { echo "moto.sh: moto did not answer on $url" >&2; cat "$log" >&2; exit 1; }

export NODEWRIGHT_MOTO_URL="$url"
export AWS_ENDPOINT_URL="$url"
export AWS_ACCESS_KEY_ID=test
export AWS_SECRET_ACCESS_KEY=test
export AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1
unset AWS_PROFILE AWS_SESSION_TOKEN

set +e
"$@"
status=$?
set -e
exit "$status"
