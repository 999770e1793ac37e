#!/usr/bin/env bash
# Builds every Lambda function for arm64 with cargo-lambda, as `sam build` does, checks
# that each is an arm64 ELF whose panics unwind, and prints the binary sizes.
# cargo-lambda and zig (the cross linker) come from PyPI into target/tools/venv; the
# Rust std for aarch64 comes from rustup. Honours CARGO_TARGET_DIR.
#
#   bash tests/lambda-build.sh                what `sam build` deploys (optimized)
#   bash tests/lambda-build.sh --unoptimized  the same profile at opt-level 0 (CI)
#
# --unoptimized is what CI runs: it proves the functions compile, link and unwind for
# arm64 through cargo-lambda's release path, without the optimizer and without thin
# LTO (the two are most of a release build of the AWS SDK crates — LTO alone took over
# 8 CPU-minutes per function binary at opt-level 0 — and neither changes whether they
# build). It leaves binaries that are slow, not ones to deploy.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  "") ;;
  --unoptimized)
    export CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 \
      CARGO_PROFILE_RELEASE_LTO=off
    ;;
  *) echo "usage: bash tests/lambda-build.sh [--unoptimized]" >&2; exit 2 ;;
esac

venv=target/tools/venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if [ ! -x "$venv/bin/cargo-lambda" ] || ! "$venv/bin/python" -c 'import ziglang' 2>/dev/null; then
  echo "lambda-build.sh: installing cargo-lambda and ziglang into $venv" >&2
  "$venv/bin/python" -m pip install --quiet cargo-lambda ziglang
fi
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu || rustup target add aarch64-unknown-linux-gnu
export PATH="$PWD/$venv/bin:$PATH"

functions=(provisioner interruption disruption)
packages=()
for f in "${functions[@]}"; do
  [ -d "functions/$f" ] && packages+=(-p "nodewright-$f")
done
cargo lambda build --release --arm64 "${packages[@]}"

target_dir=${CARGO_TARGET_DIR:-target}
for f in "${functions[@]}"; do
  bin="$target_dir/lambda/$f/bootstrap"
  if [ -d "functions/$f" ]; then
    [ -f "$bin" ] || { echo "lambda-build.sh: $bin was not built" >&2; exit 1; }
    # ELF e_machine 183 is AArch64.
    # Panics must unwind (see [profile.release] in Cargo.toml). Which panic runtime was
    # linked tells: panic_unwind brings in std's handler for foreign exceptions, and
    # panic_abort leaves its source path. Sections and symbols do not tell: .eh_frame,
    # .gcc_except_table and the unwinder (zig links libunwind statically, and the binary
    # is stripped) are there either way, because the prebuilt std is built to unwind.
    # Checked by hand against a panic=abort build from cargo lambda, which this rejects.
    "$venv/bin/python" - "$bin" "$f" <<'PY'
import os, struct, sys
path, name = sys.argv[1], sys.argv[2]
with open(path, "rb") as f:
    data = f.read()
if data[:4] != b"\x7fELF" or struct.unpack("<H", data[18:20])[0] != 183:
    sys.exit(f"lambda-build.sh: {path} is not an arm64 ELF binary")
if b"Rust cannot catch foreign exceptions" not in data or b"/panic_abort/" in data:
    sys.exit(f"lambda-build.sh: {path} was built with panic=abort: a panic would kill the "
             "process and fail the whole batch (set panic = \"unwind\" in [profile.release])")
print(f"{name:<14} {os.path.getsize(path) / 1048576:8.1f} MB  panics unwind  {path}")
PY
  fi
done
