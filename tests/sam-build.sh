#!/usr/bin/env bash
# The deploy path users take, run as the README's "Deploy" runs it: `sam build` from the
# repository root (SAM CLI from PyPI, cargo-lambda and zig beside it on PATH, no
# Docker, nothing to answer), which builds the three arm64 functions with cargo-lambda
# into .aws-sam/build, as `sam deploy` uploads them. Then tests/sam_build_check.py
# checks each of them (an AArch64 ELF whose panics unwind; its size; that it starts and
# answers the Lambda Runtime API, run by qemu-aarch64 against a stand-in Runtime API and
# moto) and what `sam deploy` sends with a saved samconfig.toml.
#
#   bash tests/sam-build.sh                what `sam deploy` uploads (optimized, thin LTO)
#   bash tests/sam-build.sh --unoptimized  the same build at opt-level 0, without LTO (CI)
#   ... --build-only                       `sam build` alone
#   ... --check-only                       the checks of what the last `sam build` built
#
# --unoptimized is what CI runs: the same `sam build`, the same cargo-lambda commands and
# features, with the release profile's optimizer and thin LTO turned off through
# cargo's environment (SAM passes it on). They are most of a release build of the AWS
# SDK crates (LTO alone took over 8 CPU-minutes per function at opt-level 0) and change
# nothing this checks; the binaries are slow, not ones to deploy.
#
# cargo-lambda, ziglang, aws-sam-cli and moto come from PyPI into target/tools/venv (as
# tests/tools.sh installs them), the Rust std for aarch64 from rustup, and qemu-aarch64
# with an AArch64 glibc from Debian's packages (tests/qemu.sh, unpacked under
# target/tools/qemu). Where Debian's packages cannot be had, the functions' ELF headers
# are checked and the run is said to be skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

build=yes check=yes
for arg in "$@"; do
  case "$arg" in
    --unoptimized)
      export CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 \
        CARGO_PROFILE_RELEASE_LTO=off
      ;;
    --build-only) check=no ;;
    --check-only) build=no ;;
    *) echo "usage: bash tests/sam-build.sh [--unoptimized] [--build-only | --check-only]" >&2; exit 2 ;;
  esac
done
if [ "$build$check" = nono ]; then
  echo "sam-build.sh: --build-only and --check-only leave nothing to do" >&2
  exit 2
fi

venv=target/tools/venv
pip() { "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"; }
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
[[ -x $venv/bin/cfn-lint && -x $venv/bin/sam ]] || pip cfn-lint aws-sam-cli
if [ ! -x "$venv/bin/cargo-lambda" ] || ! "$venv/bin/python" -c 'import ziglang' 2>/dev/null; then
  pip cargo-lambda ziglang
fi
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu || rustup target add aarch64-unknown-linux-gnu

# As a user whose virtualenv is active: sam, cargo-lambda and zig on PATH.
export PATH="$PWD/$venv/bin:$PATH"
export SAM_CLI_TELEMETRY=0
if [ "$build" = yes ]; then
  echo "== sam build ($(sam --version), $(cargo lambda --version))"
  started=$(date +%s)
  sam build </dev/null
  echo "sam build: $(($(date +%s) - started)) s"
fi
[ "$check" = yes ] || exit 0

# qemu-aarch64 and the AArch64 glibc the binaries load, from Debian's packages.
qemu_args=()
if qemu=$(bash tests/qemu.sh); then
  read -r qemu_bin sysroot <<<"$qemu"
  qemu_args=(--qemu "$qemu_bin" --sysroot "$sysroot")
else
  echo "sam-build.sh: Debian's qemu-user-static and libc6-arm64-cross could not be fetched: the functions will not be run" >&2
fi

echo "== the built functions, and sam deploy with a saved samconfig.toml"
bash tests/moto.sh "$venv/bin/python" tests/sam_build_check.py .aws-sam/build "${qemu_args[@]}"
