#!/usr/bin/env bash
# Runs every fuzz target of nodewright-core for a while, one after another.
#
#   shared/core/fuzz/run.sh [seconds-per-target]    (default 60)
#
# For humans, not CI. Works on the stable toolchain: cargo-fuzz needs a few unstable
# rustc flags (-Zsanitizer=address etc.), which RUSTC_BOOTSTRAP=1 unlocks on stable.
# New corpus entries land in corpus/<target>/ (committed); crashes in artifacts/<target>/
# (ignored). After a long run, minimize before committing:
#   RUSTC_BOOTSTRAP=1 cargo fuzz cmin -O -a <target> corpus/<target> -- -use_counters=0
# (-use_counters=0 keeps every covered edge but not hit-count buckets: a few hundred
# files per target instead of thousands.)
# A crash, once fixed, goes to ../tests/fuzz-regressions/<target>/ so that
# `cargo test -p nodewright-core --test fuzz_corpus` replays it on every test run.
set -euo pipefail

seconds="${1:-60}"
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
cd "$here"

export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

# -O: optimized; -a: debug assertions and overflow checks on, as in `cargo test`, so
# arithmetic overflow is found as a panic instead of silently wrapping.
flags=(-O -a)

run() {
    local target="$1" max_len="$2"
    shift 2
    mkdir -p "corpus/$target"
    # The first directory is the corpus libFuzzer writes to; the others are read-only seeds.
    local seeds=()
    for d in "seeds/$target" "$@"; do
        [ -d "$d" ] && seeds+=("$d")
    done
    echo "== $target: ${seconds}s" >&2
    cargo fuzz run "${flags[@]}" "$target" "corpus/$target" "${seeds[@]}" -- \
        -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
}

run manifests 8192 "$repo/shared/core/tests/fixtures/nodepools" "$repo/cli/tests/data"
run snapshot 8192 "$repo/cli/tests/data"
run catalog 4096 "$repo/cli/tests/data"
run event 4096 "$repo/cli/tests/data"
run claim 4096
