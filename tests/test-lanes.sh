#!/usr/bin/env bash
# Runs every test of the workspace, including those that need moto (run it through
# tests/moto.sh, which provides the server), in the order that keeps the suite short:
#
# 1. everything but the three functions' crates, alone: the CPU-bound suites (core,
#    the simulator, the CLI) and the moto and API-server adapter tests;
# 2. then the functions' end-to-end tests in two lanes at once: the interruption
#    function's in one, the provisioner's and the disruption function's in the other.
#    They spend most of their time waiting on a clock that really runs (nodes boot,
#    polls, the 15 s validation delay), not on the CPU, so two lanes take about the
#    longest lane's time instead of the sum.
#
# Extra arguments go to every test binary (after `--`), e.g. `--skip NAME`.
# Fails when any lane fails; every lane runs to its end and is printed whole.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }
elapsed() { printf '%dm%02ds' $((SECONDS / 60)) $((SECONDS % 60)); }

functions=(nodewright-provisioner nodewright-interruption nodewright-disruption)
exclude=()
for f in "${functions[@]}"; do exclude+=(--exclude "$f"); done

step "tests: everything but the functions' crates"
SECONDS=0
cargo test --workspace "${exclude[@]}" -- --include-ignored "$@" 2>&1
echo "(tests outside the functions: $(elapsed))"

step "tests: the functions, in two lanes (their output follows, lane by lane)"
SECONDS=0
lane_a=$(mktemp) lane_b=$(mktemp)
trap 'rm -f "$lane_a" "$lane_b"' EXIT
(cargo test -p nodewright-interruption -- --include-ignored "$@" >"$lane_a" 2>&1) &
pid_a=$!
(cargo test -p nodewright-provisioner -p nodewright-disruption -- --include-ignored "$@" >"$lane_b" 2>&1) &
pid_b=$!
status_a=0 status_b=0
wait "$pid_a" || status_a=$?
wait "$pid_b" || status_b=$?
printf '\n-- lane 1: nodewright-interruption (exit %d)\n' "$status_a"
cat "$lane_a"
printf '\n-- lane 2: nodewright-provisioner, nodewright-disruption (exit %d)\n' "$status_b"
cat "$lane_b"
echo "(the functions' tests: $(elapsed))"
if [ "$status_a" -ne 0 ] || [ "$status_b" -ne 0 ]; then
  echo "test-lanes.sh: a lane failed (see above)" >&2
  exit 1
fi
