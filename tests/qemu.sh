#!/usr/bin/env bash
# Puts qemu-aarch64 (Debian's qemu-user-static) and the AArch64 glibc and libgcc the
# arm64 Lambda binaries load (libc6-arm64-cross, libgcc-s1-arm64-cross) under
# target/tools/qemu, unpacked from the .debs (no root, nothing installed on the
# machine, no binfmt registration), and prints "QEMU SYSROOT": run a binary with
# `QEMU -L SYSROOT BINARY`. Quiet when they are there; fails when Debian's packages
# cannot be had (tests/sam-build.sh then checks the ELF headers only, and says so).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/target/tools/qemu
qemu=$dir/usr/bin/qemu-aarch64-static
sysroot=$dir/usr/aarch64-linux-gnu
if [ ! -x "$qemu" ] || [ ! -e "$sysroot/lib/ld-linux-aarch64.so.1" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  packages=(qemu-user-static libc6-arm64-cross libgcc-s1-arm64-cross)
  # apt-get download fetches as the caller; a fresh machine may have no package lists yet.
  (cd "$work" && { apt-get download "${packages[@]}" >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && apt-get download "${packages[@]}" >/dev/null; }; })
  mkdir -p "$dir"
  # Of qemu-user-static's 60 MB, only the AArch64 emulator.
  dpkg-deb --fsys-tarfile "$work"/qemu-user-static_*.deb | tar -x -C "$dir" ./usr/bin/qemu-aarch64-static
  dpkg -x "$work"/libc6-arm64-cross_*.deb "$dir"
  dpkg -x "$work"/libgcc-s1-arm64-cross_*.deb "$dir"
fi
echo "$qemu $sysroot"
