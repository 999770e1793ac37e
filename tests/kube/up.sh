#!/usr/bin/env bash
# Starts a real Kubernetes control plane on loopback for tests:
#
#   bash tests/kube/up.sh DIR [flags]     # then: KUBECONFIG=DIR/kubeconfig kubectl get nodes
#   bash tests/kube/down.sh DIR
#
# Builds what is missing (tests/kube/build.sh), starts etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and KWOK with Karpenter v1.15.1's CRDs
# installed, writes DIR/kubeconfig (cluster-admin) and DIR/control-plane.json (the
# server, CA, tokens: the `nodewright` user is in the group infra/rbac.yaml binds), and
# returns once it is ready. Flags (after DIR): --crds DIR (another CRD set, e.g.
# target/kube/crds/karpenter-v1.1.1), --apply FILE, --components LIST|none,
# --owner-pid PID (stop when that process is gone), --apiserver-arg/--controller-manager-arg/
# --scheduler-arg/--kwok-arg FLAG; `target/kube/bin/controlplane up` lists them all.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$#" -lt 1 ]; then
  echo "usage: bash tests/kube/up.sh DIR [flags]" >&2
  exit 2
fi
bash "$root/tests/kube/build.sh"
dir=$1
shift
exec "$root/target/kube/bin/controlplane" up "$dir" --crds "$root/target/kube/crds/karpenter-v1.15.1" "$@"
