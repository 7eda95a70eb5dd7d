# netns_lib.sh: sourced by the tests and benchmarks that build the actor
# topology in network namespaces (198.18.0.0/15).

# bridged_actors NS N PREFIX: in namespace NS (made already) a bridge br0
# at 198.18.0.10/24, and N actor namespaces NSa1 .. NSaN, each with eth0 at
# 198.18.0.2<i>/24 on a veth pair whose bridge-side end (in NS) is named
# PREFIX<i>h. Returns non-zero if any step fails.
bridged_actors() {
	_ns=$1
	_n=$2
	_pre=$3
	ip netns exec "$_ns" ip link set lo up &&
		ip netns exec "$_ns" ip link add br0 type bridge &&
		ip netns exec "$_ns" ip addr add 198.18.0.10/24 dev br0 &&
		ip netns exec "$_ns" ip link set br0 up || return 1
	for _i in $(seq "$_n"); do
		ip netns add "${_ns}a$_i" &&
			ip link add "$_pre${_i}h" netns "$_ns" type veth peer name eth0 netns "${_ns}a$_i" &&
			ip netns exec "$_ns" ip link set "$_pre${_i}h" master br0 &&
			ip netns exec "$_ns" ip link set "$_pre${_i}h" up &&
			ip netns exec "${_ns}a$_i" ip link set lo up &&
			ip netns exec "${_ns}a$_i" ip addr add "198.18.0.2$_i/24" dev eth0 &&
			ip netns exec "${_ns}a$_i" ip link set eth0 up || return 1
	done
}
