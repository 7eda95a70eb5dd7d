#!/bin/sh
# run.sh: the project's two entry points on a fresh Debian 12 machine.
#   ./run.sh demo   install what is missing, build, run the end-to-end demo
#   ./run.sh test   install what is missing, build, run every test suite
#                   (gcc, clang -Werror, freestanding codec, without DPDK, aarch64 cross
#                   build with its scan paths run under qemu, ASan+UBSan)
set -eu
cd "$(dirname "$0")"

PKGS="build-essential meson ninja-build pkg-config clang llvm libclang-rt-14-dev
      libzstd-dev libcmocka-dev libjansson-dev libxxhash-dev zstd python3 binutils
      dpdk dpdk-dev libdpdk-dev iproute2 ethtool gcc-aarch64-linux-gnu qemu-user
      python3-numpy nftables libsodium-dev libipsec-mb-dev libssl-dev
      python3-cryptography chromium"
# the tests also check the Python package's torch views, and install it
# into a virtual environment as users do (python/make-venv.sh)
TEST_PKGS="python3-torch python3-venv python3-pip python3-setuptools python3-wheel"

install_missing() {
	missing=""
	for p in $PKGS; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	echo "run.sh: installing:$missing" >&2
	SUDO=""
	[ "$(id -u)" -ne 0 ] && SUDO="sudo"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
}

build() { # dir [meson options...]
	dir=$1
	shift
	[ -f "$dir/build.ninja" ] || meson setup "$dir" "$@" >/dev/null
	ninja -C "$dir"
}

cmd=${1:-}
case "$cmd" in
demo)
	install_missing
	build build
	shift
	exec ./build/cli/bfpatch demo "$@"
	;;
test)
	PKGS="$PKGS $TEST_PKGS"
	install_missing
	build build
	# the Python package, as a user installs it, for the tests that use it
	python/make-venv.sh build/pyenv
	meson test -C build --print-errorlogs
	CC=clang build build-clang -Dwerror=true
	meson test -C build-clang --print-errorlogs --suite unit
	# the freestanding codec: its symbols, and its own paths (the CRC32C
	# by tables, where the hosted x86-64 build takes the crc32
	# instruction) through the unit suite
	build build-free -Dfreestanding=true
	meson test -C build-free --print-errorlogs
	# without DPDK (a host that has no libdpdk): the CLI, publisher and
	# shim build and their unit suite passes; this build makes its frame
	# tags with OpenSSL, as a host without intel-ipsec-mb (Arm) does, and
	# checks them against the same independent implementations
	build build-nodpdk -Ddpdk=disabled -Dmac=openssl
	meson test -C build-nodpdk --print-errorlogs --suite unit
	# the aarch64 cross build (BlueField, Grace) compiles, and its scan
	# paths (Advanced SIMD against scalar) and its CRC32C (the crc32c
	# instructions) are right under qemu-aarch64
	build build-aarch64 --cross-file cross/aarch64-linux-gnu.ini -Dfreestanding=true
	meson test -C build-aarch64 --print-errorlogs --suite paths
	build build-asan -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
		meson test -C build-asan --print-errorlogs --timeout-multiplier 4
	echo "run.sh: all test suites passed"
	;;
*)
	echo "usage: ./run.sh demo|test" >&2
	exit 2
	;;
esac
