#!/usr/bin/env bash
# Installs the Debian packages the build and tests need, if any are missing.
# As root it runs apt-get itself; otherwise it prints the exact command and fails.
# Extra package names may be given as arguments.
set -euo pipefail

PKGS=(g++ make pkg-config binutils protobuf-c-compiler libprotobuf-c-dev libuv1-dev
      libcmocka-dev libjansson-dev)
PKGS+=("$@")

if ! command -v dpkg-query >/dev/null; then
  echo "tpurt: tools/install-deps.sh needs Debian (dpkg-query not found); install: ${PKGS[*]}" >&2
  exit 1
fi

# "install ok installed" (or "hold ok installed"); anything else counts as missing.
installed() { [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == *" ok installed" ]]; }

missing=()
for p in "${PKGS[@]}"; do
  installed "$p" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

install_cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "tpurt: missing Debian packages: ${missing[*]}" >&2
  if command -v sudo >/dev/null; then
    echo "tpurt: run:  sudo apt-get update && sudo $install_cmd" >&2
  else
    echo "tpurt: run as root:  apt-get update && $install_cmd" >&2
  fi
  exit 1
fi

echo "tpurt: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Wait for another apt (e.g. unattended-upgrades) instead of failing on its lock.
APT=(apt-get -q -o DPkg::Lock::Timeout=300 -o Dpkg::Use-Pty=0)

update() {
  local i
  for i in 1 2 3; do
    "${APT[@]}" update >/dev/null && return 0
    sleep $((i * 5))
  done
  return 1
}

# Images often ship with their package lists removed: nothing is found until an update.
lists=$(find /var/lib/apt/lists -maxdepth 1 -type f ! -name lock 2>/dev/null | head -n 1)
if [ -z "$lists" ]; then
  update
  "${APT[@]}" install -y --no-install-recommends "${missing[@]}" >/dev/null
# Stale lists can name versions the mirror no longer has: update and try again.
elif ! "${APT[@]}" install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
  update
  "${APT[@]}" install -y --no-install-recommends "${missing[@]}" >/dev/null
fi

for p in "${missing[@]}"; do
  installed "$p" || { echo "tpurt: package $p is still not installed" >&2; exit 1; }
done
