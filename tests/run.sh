#!/usr/bin/env bash
# The whole nodewright test suite, on a fresh machine: installs what it needs, then
# builds everything (warnings are failures), runs every test, and runs the CLI's
# bundled scenario and example as smoke tests. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

step() { printf '\n== %s\n' "$*"; }
# What is left on the disk target/ is on: a fresh clone's run writes about 7 GB there.
disk_free() { mkdir -p target && df -h target | awk 'NR == 2 { print "disk: " $4 " free for target/" }'; }

# A fresh clone's build is never incremental: skip writing the incremental caches.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi

# The tools come from PyPI and rustup (network, little CPU), and linting the template
# takes seconds of one core: both run while cargo builds, their output kept for after.
# The arm64 Lambda build is not overlapped with anything: beside the debug build it
# made both slower (21 min together on two cores; 10 + 9 one after the other),
# and beside the tests it pushed those that measure reaction times on a clock that
# really runs over their bounds.
tools_log=$(mktemp)
(bash tests/tools.sh && echo && bash tests/lint.sh) >"$tools_log" 2>&1 &
tools_pid=$!
# A failed step ends the run: take the background work down with it.
trap 'kill "$tools_pid" 2>/dev/null || true' EXIT

step "build (warnings are errors)"
disk_free
build_log=$(mktemp)
cargo build --workspace --all-targets 2>&1 | tee "$build_log"
if grep -qE '^warning' "$build_log"; then
  echo "build produced warnings (see above)" >&2
  exit 1
fi

step "format and lints: cargo fmt --check, cargo clippy (warnings are errors)"
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings

step "tools (PyPI, rustup), then template.yaml: cfn-lint, sam validate --lint, IAM and queue checks"
tools_status=0
wait "$tools_pid" || tools_status=$?
cat "$tools_log"
if [ "$tools_status" -ne 0 ]; then
  echo "installing the tools or linting template.yaml failed (see above)" >&2
  exit 1
fi

step "moto[server]"
bash tests/moto.sh true

step "tests, including those that need moto (a plain cargo test reports them as ignored)"
# The one test that reads a real cluster runs only when KUBECONFIG names one; otherwise
# it is skipped here by name, and said so.
real_cluster=state_and_version_read_a_real_cluster_when_kubeconfig_is_set
skip=()
if [ -z "${KUBECONFIG:-}" ]; then
  echo "KUBECONFIG is not set: skipping $real_cluster (needs a real cluster)"
  skip=(--skip "$real_cluster")
fi
bash tests/moto.sh bash tests/test-lanes.sh ${skip[@]+"${skip[@]}"}

step "smoke: nodewright simulate on the bundled scenario (the README's main command)"
./target/debug/nodewright simulate

step "smoke: nodewright plan on the bundled example"
./target/debug/nodewright plan --nodepools cli/examples/nodepools.yaml --snapshot cli/examples/snapshot.json

step "smoke: nodewright disrupt on the bundled example"
./target/debug/nodewright disrupt --nodepools cli/examples/nodepools.yaml --snapshot cli/examples/snapshot.json --now 2025-06-03T00:00:00Z

step "Lambda functions: cargo lambda build --release --arm64, at opt-level 0, without LTO"
# CI's disk is shared and was once too full for this step (the arm64 build writes about
# 2 GB more): nothing runs the debug build (about 5 GB on a fresh clone) after the
# smokes, so on CI it goes first.
if [ -n "${CI:-}" ]; then rm -rf target/debug; fi
disk_free
# Unoptimized: see tests/lambda-build.sh.
bash tests/lambda-build.sh --unoptimized
