#!/usr/bin/env bash
# Puts kubectl from Debian's package (kubernetes-client) at target/tools/bin/kubectl, the
# one the tests run, unpacked from the .deb (no root, no install over a kubectl already
# on the machine), and prints its path. Quiet when it is there.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$root/target/tools/bin/kubectl
if [ ! -x "$bin" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # apt-get download fetches as the caller; a fresh machine may have no package lists yet.
  (cd "$work" && { apt-get download kubernetes-client >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && apt-get download kubernetes-client >/dev/null; }; })
  dpkg -x "$work"/kubernetes-client_*.deb "$work/x"
  mkdir -p "$(dirname "$bin")"
  cp "$work/x/usr/bin/kubectl" "$bin"
fi
echo "$bin"
