#!/usr/bin/env bash
# Runs every test of the workspace, including those that need moto (run it through
# tests/moto.sh, which provides the server), in the order that keeps the suite short:
#
# 1. everything but the three functions' crates, one binary after another: the
#    CPU-bound suites (core, the simulator, the CLI), the moto and API-server adapter
#    tests, and the doc tests;
# 2. then the functions' tests in two lanes at once: the interruption function's in
#    one, the provisioner's and the disruption function's in the other. Their
#    end-to-end tests spend most of their time waiting on a clock that really runs
#    (nodes boot, polls, the 15 s validation delay), so two lanes take about the
#    longest lane's time instead of the sum.
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
binaries=$(cargo test --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
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
      case " $functions " in *" $package "*) continue ;; esac
    else
      case " $1 " in *" $package "*) ;; *) continue ;; esac
    fi
    printf -- '-- %s: %s\n' "$package" "${exe#"$PWD"/}"
    (cd "$dir" && "$exe" --include-ignored "${@:2}") || status=1
  done <<<"$binaries"
  return "$status"
}

functions="nodewright-provisioner nodewright-interruption nodewright-disruption"

step "tests: everything but the functions' crates"
SECONDS=0
status_c=0
run others "$@" 2>&1 || status_c=$?
cargo test --workspace --doc 2>&1 || status_c=$?
echo "(tests outside the functions: $(elapsed))"

step "tests: the functions, in two lanes (their output follows, lane by lane)"
SECONDS=0
lane_a=$(mktemp) lane_b=$(mktemp)
trap 'rm -f "$lane_a" "$lane_b"' EXIT
(run "nodewright-interruption" "$@" >"$lane_a" 2>&1) &
pid_a=$!
(run "nodewright-provisioner nodewright-disruption" "$@" >"$lane_b" 2>&1) &
pid_b=$!
status_a=0 status_b=0
wait "$pid_a" || status_a=$?
wait "$pid_b" || status_b=$?
printf '\n-- lane 1: nodewright-interruption (exit %d)\n' "$status_a"
cat "$lane_a"
printf '\n-- lane 2: nodewright-provisioner, nodewright-disruption (exit %d)\n' "$status_b"
cat "$lane_b"
echo "(the functions' tests: $(elapsed))"
if [ "$status_c" -ne 0 ] || [ "$status_a" -ne 0 ] || [ "$status_b" -ne 0 ]; then
  echo "test-lanes.sh: tests failed (see above)" >&2
  exit 1
fi
