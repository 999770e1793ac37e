#!/usr/bin/env bash
# Installs every tool the suite needs that cargo does not build, all from PyPI into
# target/tools/venv, plus the Rust std for aarch64 from rustup: cfn-lint and
# aws-sam-cli (tests/lint.sh, tests/sam-build.sh), moto[server] (tests/moto.sh),
# cargo-lambda and ziglang (tests/sam-build.sh), kubectl from Debian's kubernetes-client
# package (tests/kube/kubectl.sh), and qemu-aarch64 with an AArch64 glibc from Debian's
# packages (tests/qemu.sh, to run the arm64 functions). Each of those scripts installs what it lacks on first use;
# this installs them all up front, so tests/run.sh can do it while cargo builds.
# Installs run one after another (the same order the scripts would) because they
# share the venv.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/tools/venv
pip() { "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"; }
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
[[ -x $venv/bin/cfn-lint && -x $venv/bin/sam ]] || pip cfn-lint aws-sam-cli
[ -x "$venv/bin/moto_server" ] || pip 'moto[server]'
if [ ! -x "$venv/bin/cargo-lambda" ] || ! "$venv/bin/python" -c 'import ziglang' 2>/dev/null; then
  pip cargo-lambda ziglang
fi
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu || rustup target add aarch64-unknown-linux-gnu
bash tests/kube/kubectl.sh >/dev/null
# Not fatal: without it, tests/sam-build.sh checks the functions' ELF headers and says so.
bash tests/qemu.sh >/dev/null || echo "tools.sh: qemu-aarch64 could not be fetched from Debian"
echo "tools.sh: cfn-lint, sam, moto, cargo-lambda, zig, the aarch64 std, kubectl and qemu-aarch64 are installed"
