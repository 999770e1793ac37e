#!/usr/bin/env bash
# Builds the test control plane, target/kube/bin/controlplane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and KWOK at the versions go.mod pins, with the
# machine's Go), when it is missing or its sources changed; and unpacks Karpenter's CRDs
# from their modules (crds.lock) into target/kube/crds/<set>/. Quiet when there is
# nothing to do, so tests/kube/up.sh can call it every time.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
src=$root/tests/kube
out=$root/target/kube
mkdir -p "$out/bin" "$out/crds"

if ! command -v go >/dev/null; then
  echo "tests/kube/build.sh: the control plane is built with Go (1.26), which is not on PATH" >&2
  exit 1
fi
# One build at a time: tests starting control planes in parallel wait for the first.
exec 9>"$out/build.lock"
flock 9

# The sources and the toolchain decide the binary.
stamp=$(cd "$src" && { go version; cat go.mod go.sum ./*.go crds.lock; } | sha256sum | cut -c1-16)
if [[ ! -x $out/bin/controlplane || "$(cat "$out/stamp" 2>/dev/null)" != "$stamp" ]]; then
  start=$SECONDS
  echo "tests/kube/build.sh: building the control plane ($(go version | cut -d' ' -f3))" >&2
  version=$(cd "$src" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
  minor=$(echo "$version" | cut -d. -f2)
  pkg=k8s.io/component-base/version
  # What a release build stamps: /version and the components report the real release.
  ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  # On CI the build's cache (about 3 GB) is not worth keeping once the binary is built:
  # the disk is shared and the binary is what later runs use.
  if [ -n "${CI:-}" ]; then
    export GOCACHE=$out/gocache
  fi
  (cd "$src" && GOFLAGS=-buildvcs=false go build -trimpath -ldflags "$ldflags" -o "$out/bin/controlplane.new" .)
  if [ -n "${CI:-}" ]; then
    go clean -cache && rm -rf "$GOCACHE"
  fi
  mv "$out/bin/controlplane.new" "$out/bin/controlplane"
  echo "$stamp" >"$out/stamp"
  echo "tests/kube/build.sh: built $version in $((SECONDS - start)) s" >&2
fi

# Karpenter's CRDs, each set once. The zip is what the module proxy serves (checked
# against the hash in crds.lock); `go mod download` runs outside any module, since these
# modules are read, not built (the provider's go.mod asks for a newer Go than builds here).
grep -v '^#' "$src/crds.lock" | while read -r set module version sum path; do
  [ -n "$set" ] || continue
  mkdir -p "$out/crds/$set"
  marker="$out/crds/$set/.$(echo "$module@$version:$path" | sha256sum | cut -c1-16)"
  [ -e "$marker" ] && continue
  json=$(cd "$(mktemp -d)" && go mod download -json "$module@$version" || true)
  zip=$(echo "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("Zip",""))')
  got=$(echo "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("Sum",""))')
  if [[ -z $zip || ! -f $zip ]]; then
    echo "tests/kube/build.sh: $module@$version could not be downloaded: $json" >&2
    exit 1
  fi
  if [ "$got" != "$sum" ]; then
    echo "tests/kube/build.sh: $module@$version has hash $got, crds.lock pins $sum" >&2
    exit 1
  fi
  python3 - "$zip" "$module@$version/$path" "$out/crds/$set" <<'PY'
import os, sys, zipfile
archive, prefix, dest = sys.argv[1:]
found = 0
with zipfile.ZipFile(archive) as z:
    for name in z.namelist():
        if name.endswith(".yaml") and (name == prefix or (name.startswith(prefix + "/") and "/" not in name[len(prefix) + 1:])):
            with open(os.path.join(dest, os.path.basename(name)), "wb") as f:
                f.write(z.read(name))
            found += 1
if not found:
    sys.exit(f"no CRD manifests at {prefix} in {archive}")
PY
  touch "$marker"
done
