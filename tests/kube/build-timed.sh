#!/usr/bin/env bash
# tests/kube/build.sh with its wall time and peak memory said (GNU time when the machine
# has it): what the first run of the suite spends on the control plane.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ -x /usr/bin/time ]; then
  /usr/bin/time -f "tests/kube/build.sh: %e s wall, %U s user + %S s system CPU, peak %M KB" \
    bash "$root/tests/kube/build.sh"
else
  bash "$root/tests/kube/build.sh"
fi
echo "the control plane: $("$root/target/kube/bin/controlplane" kube-apiserver --version)"
