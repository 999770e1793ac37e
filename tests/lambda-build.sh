#!/usr/bin/env bash
# Builds every Lambda function for arm64 with cargo-lambda, as `sam build` does, and
# prints the binary sizes. cargo-lambda and zig (the cross linker) come from PyPI
# into target/tools/venv; the Rust std for aarch64 comes from rustup.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/tools/venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if [ ! -x "$venv/bin/cargo-lambda" ] || ! "$venv/bin/python" -c 'import ziglang' 2>/dev/null; then
  echo "lambda-build.sh: installing cargo-lambda and ziglang into $venv" >&2
  "$venv/bin/python" -m pip install --quiet cargo-lambda ziglang
fi
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu || rustup target add aarch64-unknown-linux-gnu
export PATH="$PWD/$venv/bin:$PATH"

functions=(provisioner interruption)
packages=()
for f in "${functions[@]}"; do
  [ -d "functions/$f" ] && packages+=(-p "nodewright-$f")
done
cargo lambda build --release --arm64 "${packages[@]}"

for f in "${functions[@]}"; do
  bin="target/lambda/$f/bootstrap"
  if [ -d "functions/$f" ]; then
    [ -f "$bin" ] || { echo "lambda-build.sh: $bin was not built" >&2; exit 1; }
    # ELF e_machine 183 is AArch64.
    "$venv/bin/python" - "$bin" "$f" <<'PY'
import os, struct, sys
path, name = sys.argv[1], sys.argv[2]
with open(path, "rb") as f:
    head = f.read(20)
if head[:4] != b"\x7fELF" or struct.unpack("<H", head[18:20])[0] != 183:
    sys.exit(f"lambda-build.sh: {path} is not an arm64 ELF binary")
print(f"{name:<14} {os.path.getsize(path) / 1048576:8.1f} MB  {path}")
PY
  fi
done
