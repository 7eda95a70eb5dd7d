#!/bin/sh
# check_symbols.sh LIB.a|LIB.so [freestanding]
# Every global symbol the codec library defines starts with bfp_, so it
# cannot clash with the programs that link it; with "freestanding", the
# only symbols it needs from outside are memcpy, memset and memmove,
# the calls the codec's copy and fill builtins may compile to.
set -eu
lib=$1
mode=${2:-}
case "$lib" in
*.so*) defined=$(nm -D --defined-only "$lib" | awk 'NF==3 {print $3}' | sort -u) ;;
*) defined=$(nm -g --defined-only "$lib" | awk 'NF==3 {print $3}' | sort -u) ;;
esac
[ -n "$defined" ] || { echo "no symbols in $lib"; exit 1; }
bad=$(printf '%s\n' "$defined" | grep -v '^bfp_' || true)
if [ -n "$bad" ]; then
	echo "global symbols without the bfp_ prefix:"; echo "$bad"; exit 1
fi
echo "$(printf '%s\n' "$defined" | wc -l) global symbols, all bfp_"
if [ "$mode" = freestanding ]; then
	undef=$(nm -u "$lib" | awk 'NF==2 {print $2}' | sort -u)
	ext=$(printf '%s\n' "$undef" | grep -vxF "$defined" || true)
	bad=$(printf '%s\n' "$ext" | grep -vx -e memcpy -e memset -e memmove -e '' || true)
	if [ -n "$bad" ]; then
		echo "freestanding codec needs symbols beyond memcpy/memset/memmove:"; echo "$bad"; exit 1
	fi
	echo "external symbols: $(printf '%s ' $ext)"
fi
