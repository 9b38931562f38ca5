#!/usr/bin/env bash
# The Debian packages the build and the tests use, each with the probe that tells
# whether what it provides is here.
#   tools/install-deps.sh          installs the missing ones with apt-get (as root;
#                                  otherwise prints the command and fails)
#   tools/install-deps.sh --check  never installs: names the missing packages and the
#                                  command that installs them, and fails (what `make` runs)
set -euo pipefail

check_only=0
if [ "${1:-}" = --check ]; then
  check_only=1
elif [ $# -gt 0 ]; then
  echo "usage: tools/install-deps.sh [--check]" >&2
  exit 2
fi

have() { command -v "$1" >/dev/null 2>&1; }
module() { have pkg-config && pkg-config --exists "$1"; }
# package, then the probe that succeeds when it is installed
PKGS=(
  g++                 "have g++"
  make                "have make"
  pkg-config          "have pkg-config"
  binutils            "have ar && have nm && have readelf"      # static library, ABI checks
  protobuf-c-compiler "have protoc-c"                           # proto/*.proto
  libprotobuf-c-dev   "module libprotobuf-c"                    # the library links it
  libuv1-dev          "module libuv"                            # the TCP transport's event loop
  libssl-dev          "module libcrypto"                        # HMAC-SHA256 of cluster tokens
  libjansson-dev      "module jansson"                          # TF_CONFIG; the tests' JSON vectors
  libcmocka-dev       "module cmocka"                           # tests
  iproute2            "have ip"                                 # the tests' network namespaces
  gnuplot-nox         "have gnuplot"                            # the README's plot (bench/plot_standing.sh)
  jq                  "have jq"                                 # tests/check_trace.sh reads traces
  # The fuzzers (make fuzz; tests/check_fuzz.sh in make test): clang, and libFuzzer's
  # and the sanitizers' runtime, which clang only recommends
  clang               "have clang && have clang++"
  libclang-rt-dev     "have clang && compgen -G \"\$(clang --print-runtime-dir)/libclang_rt.fuzzer-*.a\" >/dev/null"
  # The MPI plugin (make mpi) and its tests (tests/check_mpi.sh); libtpurt never links MPI
  openmpi-bin         "have mpirun"
  libopenmpi-dev      "have mpicxx || have mpicc"
  # The bindings (make bindings; their tests run in make test)
  swig                "have swig"
  python3-dev         "have python3-config"                     # tpurt.i is language-neutral: proven on Python
  mono-devel          "have mcs && have mono"                   # C#
  nunit-console       "have nunit-console"
  libnunit-cil-dev    "[ -e /usr/lib/cli/nunit.framework-2.6.3/nunit.framework.dll ]"
  default-jdk         "have javac && have jar"                  # Java
  junit4              "[ -e /usr/share/java/junit4.jar ]"
  golang-go           "have go"                                 # Go
  # The packages (make deb, nupkg, jar-pom, go-proxy; tests/check_packages.sh)
  dpkg-dev            "have dpkg-buildpackage && have dpkg-architecture"
  debhelper           "have dh"
  lintian             "have lintian"
  nuget               "have nuget"
  maven               "have mvn"
  libmaven-install-plugin-java "[ -d /usr/share/maven-repo/org/apache/maven/plugins/maven-install-plugin ]"
  zip                 "have zip"                                # the Go module proxy's zip
)

missing=()
for ((i = 0; i < ${#PKGS[@]}; i += 2)); do
  eval "${PKGS[i + 1]}" || missing+=("${PKGS[i]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0

install_cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$check_only" -eq 1 ] || [ "$(id -u)" -ne 0 ] || ! have apt-get; then
  echo "tpurt: missing Debian packages: ${missing[*]}" >&2
  if [ "$(id -u)" -eq 0 ]; then
    echo "tpurt: install them with:  bash tools/install-deps.sh" >&2
  else
    echo "tpurt: install them with:  sudo bash tools/install-deps.sh" >&2
  fi
  echo "tpurt: (which runs: apt-get update && $install_cmd)" >&2
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

for ((i = 0; i < ${#PKGS[@]}; i += 2)); do
  eval "${PKGS[i + 1]}" || { echo "tpurt: ${PKGS[i]} is still missing after apt-get" >&2; exit 1; }
done
