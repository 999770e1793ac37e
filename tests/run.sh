#!/usr/bin/env bash
# The whole nodewright test suite, on a fresh machine: installs what it needs, then
# builds everything (warnings are failures), runs every test, and runs the CLI's
# bundled example as a smoke test. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

step() { printf '\n== %s\n' "$*"; }

step "build (warnings are errors)"
build_log=$(mktemp)
cargo build --workspace --all-targets 2>&1 | tee "$build_log"
if grep -qE '^warning' "$build_log"; then
  echo "build produced warnings (see above)" >&2
  exit 1
fi

step "tests"
bash tests/moto.sh cargo test --workspace 2>&1

step "smoke: nodewright plan on the bundled example"
./target/debug/nodewright plan --nodepools cli/examples/nodepools.yaml --snapshot cli/examples/snapshot.json

step "template.yaml: cfn-lint, sam validate --lint, IAM and queue checks"
bash tests/lint.sh

step "Lambda functions: cargo lambda build --release --arm64"
bash tests/lambda-build.sh
