#!/usr/bin/env bash
# The whole nodewright test suite, on a fresh machine: installs what it needs, then
# builds everything (warnings are failures), runs every test, and runs the CLI's
# bundled scenario and example as smoke tests. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

# Each step says when it began (minutes into the run), so a slow run shows where.
step() { printf '\n== %s  [%dm%02ds]\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }
# What is left on the disk target/ is on: a fresh clone's run writes about 7 GB there,
# and the arm64 build 2 GB more.
disk_free() { mkdir -p target && df -h target | awk 'NR == 2 { print "disk: " $4 " free for target/" }'; }

# Waits for work started in the background, prints what it wrote, and ends the run
# when it failed: finish_background PID LOG WHAT.
finish_background() {
  local status=0
  wait "$1" || status=$?
  cat "$2"
  if [ "$status" -ne 0 ]; then
    echo "$3 failed (see above)" >&2
    exit 1
  fi
}

# A fresh clone's build is never incremental: skip writing the incremental caches.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi

# The tools come from PyPI, rustup and Debian (network, little CPU), linting the
# template takes seconds of one core, and the test control plane (Kubernetes from its Go
# modules, tests/kube/build.sh) about 8 CPU-minutes once: they run while cargo builds,
# their output kept for after.
# The arm64 Lambda build is not overlapped with the debug build: beside it, it made
# both slower (21 min together on two cores; 10 + 9 one after the other). Nor with the
# tests: at the idle scheduling class beside them it saved 2.5-7 minutes on this
# project's 2-core machines, but CI's runs took longer with it there (3,934 s against
# 3,322 and 3,613 s after the tests), the tests slowing more than the build gained.
tools_log=$(mktemp)
(bash tests/tools.sh && echo && bash tests/lint.sh && echo && bash tests/kube/build-timed.sh) >"$tools_log" 2>&1 &
tools_pid=$!
# A failed step ends the run: take the background work down with it.
trap 'kill "$tools_pid" 2>/dev/null || true' EXIT

# The CLI's `stack` feature (status and explain on a deployed stack) is on for the
# workspace's build and tests, so its code and its deployed-stack test run; the CLI as
# the README builds it (without) is linted on its own below.
export NODEWRIGHT_WORKSPACE_FEATURES=nodewright-cli/stack

# Clippy lints the workspace's crates as they are built: clippy-driver is rustc with
# clippy's lints, so the build compiles each crate once, linted, and the dependencies
# once, with rustc. (`cargo clippy` after `cargo build` type-checked every dependency a
# second time, the AWS SDK crates included: minutes, and a second copy on the disk.)
# Exported for the whole run, so the test build that follows finds the same fingerprints.
export RUSTC_WORKSPACE_WRAPPER="$(rustc --print sysroot)/bin/clippy-driver"

step "build, linted by clippy (warnings are errors)"
disk_free
build_log=$(mktemp)
cargo build --workspace --all-targets --features "$NODEWRIGHT_WORKSPACE_FEATURES" 2>&1 | tee "$build_log"
if grep -qE '^warning' "$build_log"; then
  echo "build produced warnings (see above)" >&2
  exit 1
fi

step "format: cargo fmt --check, gofmt; clippy on the CLI as the README builds it (no stack feature)"
cargo fmt --all --check
unformatted=$(gofmt -l tests/kube)
if [ -n "$unformatted" ]; then
  echo "gofmt would change: $unformatted" >&2
  exit 1
fi
cargo clippy -p nodewright-cli --bins -- -D warnings

step "tools (PyPI, rustup, Debian), template.yaml (cfn-lint, sam validate --lint, IAM and queue checks), the test control plane (Go)"
finish_background "$tools_pid" "$tools_log" "installing the tools, linting template.yaml or building the control plane"

step "moto[server]"
bash tests/moto.sh true

step "tests, including those that need moto (a plain cargo test reports them as ignored)"
# Every Kubernetes test starts its own control plane (tests/kube/up.sh). The one test
# that reads whatever cluster KUBECONFIG names reads the cluster given, or else one
# started here as a developer would (up.sh, then kubectl apply), stopped at the end.
if [ -z "${KUBECONFIG:-}" ]; then
  suite_cluster=$PWD/target/kube/suite
  bash tests/kube/down.sh "$suite_cluster" 2>/dev/null || true
  rm -rf "$suite_cluster"
  bash tests/kube/up.sh "$suite_cluster" --owner-pid $$ >/dev/null
  trap 'kill "$tools_pid" 2>/dev/null || true; bash tests/kube/down.sh "$suite_cluster" || true' EXIT
  export KUBECONFIG=$suite_cluster/kubeconfig
  target/tools/bin/kubectl apply -f tests/kube/sample-cluster.yaml >/dev/null
  echo "KUBECONFIG: a control plane started by tests/kube/up.sh (ready in $(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["readySeconds"], 1))' "$suite_cluster/control-plane.json") s)"
fi
bash tests/moto.sh bash tests/test-lanes.sh

step "smoke: nodewright simulate on the bundled scenario (the README's main command)"
./target/debug/nodewright simulate

step "smoke: nodewright plan on the bundled example"
./target/debug/nodewright plan --nodepools cli/examples/nodepools.yaml --snapshot cli/examples/snapshot.json

step "smoke: nodewright disrupt on the bundled example"
./target/debug/nodewright disrupt --nodepools cli/examples/nodepools.yaml --snapshot cli/examples/snapshot.json --now 2025-06-03T00:00:00Z

step "Lambda functions: sam build as the README deploys them (cargo lambda build --release --arm64 per function, at opt-level 0, without LTO); each function run on qemu-aarch64 against a stand-in Runtime API; sam deploy with a saved samconfig.toml"
# CI's disk is shared and was once too full for this step (the arm64 build writes about
# 2 GB more): nothing runs the debug build (about 5 GB on a fresh clone) after the
# smokes, so on CI it goes first.
if [ -n "${CI:-}" ]; then rm -rf target/debug; fi
disk_free
# Unoptimized: see tests/sam-build.sh.
bash tests/sam-build.sh --unoptimized
