#!/usr/bin/env bash
# The whole nodewright test suite, on a fresh machine: installs what it needs, then
# builds everything (warnings are failures), runs every test, and runs the CLI's
# bundled scenario and example as smoke tests. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

step() { printf '\n== %s\n' "$*"; }

# A fresh clone's build is never incremental: skip writing the incremental caches.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi

# Two things run while cargo builds the workspace, their output kept for after: the
# tools from PyPI and rustup, then linting template.yaml; and the arm64 Lambda build
# (its own target dir, so the two cargo builds do not wait on each other's lock).
# Neither may overlap the tests (some measure reaction times on a clock that really
# runs), and on two cores the builds together fill the time each alone leaves idle
# (one big crate compiling, a binary linking).
tools_log=$(mktemp)
(bash tests/tools.sh && echo && bash tests/lint.sh) >"$tools_log" 2>&1 &
tools_pid=$!
lambda_log=$(mktemp)
(
  # cargo-lambda and zig come with the tools: wait for them.
  while kill -0 "$tools_pid" 2>/dev/null; do sleep 2; done
  CARGO_TARGET_DIR=target/arm64 bash tests/lambda-build.sh --unoptimized
) >"$lambda_log" 2>&1 &
lambda_pid=$!
# A failed step ends the run: take the background work down with it.
trap 'kill "$tools_pid" "$lambda_pid" 2>/dev/null || true' EXIT

step "build (warnings are errors)"
build_log=$(mktemp)
cargo build --workspace --all-targets 2>&1 | tee "$build_log"
if grep -qE '^warning' "$build_log"; then
  echo "build produced warnings (see above)" >&2
  exit 1
fi

step "tools (PyPI, rustup), then template.yaml: cfn-lint, sam validate --lint, IAM and queue checks"
tools_status=0
wait "$tools_pid" || tools_status=$?
cat "$tools_log"
if [ "$tools_status" -ne 0 ]; then
  echo "installing the tools or linting template.yaml failed (see above)" >&2
  exit 1
fi

step "Lambda functions: cargo lambda build --release --arm64, at opt-level 0"
# Unoptimized: see tests/lambda-build.sh.
lambda_status=0
wait "$lambda_pid" || lambda_status=$?
cat "$lambda_log"
if [ "$lambda_status" -ne 0 ]; then
  echo "the arm64 Lambda build failed (see above)" >&2
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
