#!/usr/bin/env bash
# Runs every test of the workspace, including those that need moto (run it through
# tests/moto.sh, which provides the server), in the order that keeps the suite short:
#
# 1. the CPU-bound suites one binary after another: core, the engine, the
#    simulator (its own crate), the CLI, the AWS adapter's moto tests and the doc tests;
# 2. then the tests against a real control plane in three lanes at once: the kube
#    adapter's; the interruption function's, testkit's and the benchmarks' suites (the
#    Lambda suite runs each function for a minute); the provisioner's and the
#    disruption function's. They spend most of their time waiting on clocks that really
#    run (a control plane starting, nodes booting, polls, the 15 s validation delay),
#    so three lanes take about the longest lane's time instead of the sum.
#
# The binaries are the ones `cargo test --workspace` builds, run directly (from their
# package's directory, as cargo runs them): `cargo test -p <one crate>` would resolve
# features for that crate alone and rebuild the AWS SDK crates to match.
#
# Extra arguments go to every test binary, e.g. `--skip NAME`.
# Fails when any binary fails; every lane runs to its end and is printed whole.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }
elapsed() { printf '%dm%02ds' $((SECONDS / 60)) $((SECONDS % 60)); }

# "package<TAB>package dir<TAB>executable" per test binary of the workspace build.
# The workspace's features as tests/run.sh builds them (the CLI's deployed-stack code).
features=${NODEWRIGHT_WORKSPACE_FEATURES:-nodewright-cli/stack}
binaries=$(cargo test --workspace --features "$features" --no-run --message-format=json 2>/dev/null | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        name = m["package_id"].rsplit("#", 1)[-1].split("@")[0]
        print(name, os.path.dirname(m["manifest_path"]), m["executable"], sep="\t")
')
if [ -z "$binaries" ]; then
  echo "test-lanes.sh: cargo built no test binaries" >&2
  exit 1
fi

# Runs the test binaries of the listed packages (`others`: of every package but the functions)
# one after another; the exit status is 1 if any failed.
run() {
  local status=0 package dir exe
  while IFS=$'\t' read -r package dir exe; do
    if [ "$1" = "others" ]; then
      case " $real_cluster " in *" $package "*) continue ;; esac
    else
      case " $1 " in *" $package "*) ;; *) continue ;; esac
    fi
    printf -- '-- %s: %s\n' "$package" "${exe#"$PWD"/}"
    # Each binary gets a moto server of its own: one server answers one request at a
    # time, and what a test leaves in it (instances, launch templates) makes every later
    # DescribeInstances slower; shared by every lane on a busy machine, it made the
    # functions' setups wait past their deadlines. (The Lambda bench also resets its
    # moto before each cluster size, which would take the other tests' tables.)
    bash tests/moto.sh bash -c 'cd "$1" && shift && exec "$@"' _ "$dir" "$exe" --include-ignored "${@:2}" || status=1
  done <<<"$binaries"
  return "$status"
}

real_cluster="nodewright-provisioner nodewright-interruption nodewright-disruption nodewright-kube nodewright-testkit nodewright-bench"

step "tests: the CPU-bound suites"
SECONDS=0
status_c=0
cpu_bound=$(mktemp)
(run others "$@" 2>&1 || exit 1) | tee "$cpu_bound" || status_c=1
cargo test --workspace --features "$features" --doc 2>&1 | tee -a "$cpu_bound" || status_c=1
echo "(the CPU-bound suites: $(elapsed))"

step "tests against a real control plane, in three lanes (their output follows, lane by lane)"
SECONDS=0
lane_a=$(mktemp) lane_b=$(mktemp) lane_k=$(mktemp)
trap 'rm -f "$cpu_bound" "$lane_a" "$lane_b" "$lane_k"' EXIT
(run "nodewright-kube" "$@" >"$lane_k" 2>&1) &
pid_k=$!
(run "nodewright-interruption nodewright-testkit nodewright-bench" "$@" >"$lane_a" 2>&1) &
pid_a=$!
(run "nodewright-provisioner nodewright-disruption" "$@" >"$lane_b" 2>&1) &
pid_b=$!
status_a=0 status_b=0 status_k=0
wait "$pid_k" || status_k=$?
wait "$pid_a" || status_a=$?
wait "$pid_b" || status_b=$?
printf '\n-- lane 1: nodewright-kube (exit %d)\n' "$status_k"
cat "$lane_k"
printf '\n-- lane 2: nodewright-interruption, nodewright-testkit, nodewright-bench (exit %d)\n' "$status_a"
cat "$lane_a"
printf '\n-- lane 3: nodewright-provisioner, nodewright-disruption (exit %d)\n' "$status_b"
cat "$lane_b"
echo "(the tests against a real control plane: $(elapsed))"
if [ "$status_c" -ne 0 ] || [ "$status_a" -ne 0 ] || [ "$status_b" -ne 0 ] || [ "$status_k" -ne 0 ]; then
  # Each failure's panic message, last: a failed test's captured output (the functions'
  # metric lines above all) can run to thousands of lines before it.
  printf '\n== why each failed test failed\n'
  grep -h -A 12 "panicked at" "$cpu_bound" "$lane_k" "$lane_a" "$lane_b" |
    grep -v '^{"' | cut -c1-600 | head -n 120 || true
  echo "test-lanes.sh: tests failed (see above)" >&2
  exit 1
fi
