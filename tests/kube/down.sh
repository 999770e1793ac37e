#!/usr/bin/env bash
# Stops the control plane `bash tests/kube/up.sh DIR` started, and waits until it is gone.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$#" -ne 1 ]; then
  echo "usage: bash tests/kube/down.sh DIR" >&2
  exit 2
fi
exec "$root/target/kube/bin/controlplane" down "$1"
