#!/usr/bin/env bash
# Installs the Debian packages the build and tests need, if any are missing.
# As root it runs apt-get itself; otherwise it prints the exact command and fails.
set -euo pipefail

PKGS=(g++ make pkg-config protobuf-c-compiler libprotobuf-c-dev libuv1-dev libcmocka-dev
      libjansson-dev)
[ "$#" -gt 0 ] && PKGS+=("$@")

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "tpurt: missing Debian packages: ${missing[*]}" >&2
  echo "tpurt: run as root:  apt-get update && $cmd" >&2
  exit 1
fi
echo "tpurt: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# An image whose package lists were cleaned cannot find anything until an update.
if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$' -e '^auxfiles$')" ] ||
   ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
