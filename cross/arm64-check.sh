#!/bin/sh
# arm64-check.sh: build bfpatch and bfpatch-relay for aarch64 (BlueField
# Arm cores) against Debian's arm64 DPDK, and run them under qemu-user:
# the CLI demo, a patch made on this host applied there, and the relay on
# net_pcap checked by tests/relay/pcaptool.py. Not part of ./run.sh test:
# it downloads about 250 arm64 packages (44 MB).
#
# The arm64 packages are unpacked into a sysroot (dpkg -x), not installed:
# installing libdpdk-dev:arm64 next to libdpdk-dev:amd64 would replace it.
# Needs root (apt, dpkg --add-architecture), gcc-aarch64-linux-gnu and
# qemu-user. The sysroot lives outside /tmp: DPDK refuses to load drivers
# from world-writable directories.
set -eu
cd "$(dirname "$0")/.."
S=${ARM64_SYSROOT:-/var/cache/bfpatch-arm64-sysroot}
B=build-arm64-dpdk
W=$(mktemp -d)
trap 'rm -rf "$W" /var/run/dpdk/bfparm$$' EXIT

if [ ! -f "$S/usr/lib/aarch64-linux-gnu/pkgconfig/libdpdk.pc" ]; then
	dpkg --add-architecture arm64
	apt-get update -qq
	pkgs=$(apt-get install -s libdpdk-dev:arm64 | awk '/^Inst/ && /arm64/ {print $2}')
	mkdir -p "$W/debs" "$S"
	(cd "$W/debs" && apt-get download $pkgs >/dev/null)
	dpkg --remove-architecture arm64
	apt-get update -qq
	for d in "$W"/debs/*.deb; do dpkg -x "$d" "$S"; done
fi
cat > "$W/sysroot.ini" <<EOF
[properties]
pkg_config_libdir = '$S/usr/lib/aarch64-linux-gnu/pkgconfig:$S/usr/share/pkgconfig'
sys_root = '$S'
[built-in options]
c_args = ['-march=armv8-a+crc', '--sysroot=$S']
c_link_args = ['--sysroot=$S']
EOF
export PKG_CONFIG_SYSROOT_DIR="$S"
[ -f "$B/build.ninja" ] || meson setup "$B" --cross-file cross/aarch64-linux-gnu.ini \
	--cross-file "$W/sysroot.ini" -Dtests=disabled -Dzstd=disabled >/dev/null
ninja -C "$B"
file "$B/dpdk_app/bfpatch-relay" "$B/cli/bfpatch"

Q="qemu-aarch64 -L $S"
$Q "$B/cli/bfpatch" demo -p 1M -n 2
# the same patch bytes on both architectures (AVX-512 here, generic there)
[ -x build/cli/bfpatch ] || { echo "build the host tree first (./run.sh test)"; exit 1; }
build/cli/bfpatch synth -o "$W/t" -p 2M -n 1 2>/dev/null
build/cli/bfpatch diff -q "$W/t/step-0000.safetensors" "$W/t/step-0001.safetensors" -o "$W/x86.bfp"
$Q "$B/cli/bfpatch" diff -q "$W/t/step-0000.safetensors" "$W/t/step-0001.safetensors" -o "$W/arm.bfp"
cmp "$W/x86.bfp" "$W/arm.bfp"
echo "ok - aarch64 and x86_64 encode the same bytes"
$Q "$B/cli/bfpatch" apply -q "$W/t/step-0000.safetensors" "$W/x86.bfp" -o "$W/out.safetensors"
cmp "$W/out.safetensors" "$W/t/step-0001.safetensors"
echo "ok - aarch64 applies the x86_64 patch bit-exactly"
build/cli/bfpatch pcap "$W/x86.bfp" -o "$W/in.pcap" --dst 198.18.0.1:7400
$Q "$B/dpdk_app/bfpatch-relay" --no-huge -m 256 --no-pci --file-prefix bfparm$$ -l 0 \
	-d "$S/usr/lib/aarch64-linux-gnu/dpdk/pmds-23.0/librte_net_pcap.so.23" \
	--log-level=lib.eal:error --vdev=net_pcap0,rx_pcap="$W/in.pcap",tx_pcap="$W/out.pcap" -- \
	--run-time 3 --subscriber 198.18.0.11:7500,mac=02:00:00:00:00:11 \
	--subscriber 198.18.0.12:7500,mac=02:00:00:00:00:12 > "$W/relay.log" 2>&1
python3 tests/relay/pcaptool.py check "$W/in.pcap" "$W/out.pcap" 2
echo "ok - the aarch64 relay fans out every frame, byte-identical, checksums valid"
