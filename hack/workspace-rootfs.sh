#!/usr/bin/env bash
# Builds (once) the root filesystem tarball of the workspace image and prints its path:
# a debootstrap "minbase" Debian ${DEBIAN_SUITE} with a shell and the usual tools.
# Cached at ${AO_CACHE}/rootfs/, keyed by suite and package list.
# Falls back to nothing (exit 3) when debootstrap cannot run; hack/images.sh then uses
# busybox-static instead and says so.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PACKAGES="bash,coreutils,findutils,grep,sed,gawk,diffutils,patch,tar,gzip,procps,python3,git,ca-certificates,less,curl"
key="$(printf '%s %s' "${DEBIAN_SUITE}" "${PACKAGES}" | sha256sum | cut -c1-12)"
out="${AO_CACHE}/rootfs/workspace-${DEBIAN_SUITE}-${key}.tar.gz"
if [ -s "$out" ]; then
	echo "$out"
	exit 0
fi
[ "$(id -u)" -eq 0 ] || { log "debootstrap needs root"; exit 3; }
lock "rootfs-${key}"
if [ -s "$out" ]; then
	echo "$out"
	exit 0
fi
apt_install debootstrap || exit 3

# The Debian mirror apt already uses (deb822 or one-line format), else deb.debian.org.
mirror="$(
	{ grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}'
	  grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '{print $2}'; } |
		grep -v security | head -n1
)" || true
mirror="${mirror:-http://deb.debian.org/debian}"

mkdir -p "${AO_CACHE}/rootfs"
work="$(mktemp -d "${AO_CACHE}/rootfs/build.XXXXXX")"
target="$work/rootfs"
cleanup() {
	local m
	# debootstrap mounts /proc and /sys inside the target; never leave them behind.
	for m in $(awk -v t="$target/" 'index($5, t) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
		umount "$m" 2>/dev/null || umount -l "$m" || true
	done
	rm -rf "$work"
}
trap cleanup EXIT
t0=$SECONDS
log "workspace rootfs: debootstrap --variant=minbase ${DEBIAN_SUITE} from ${mirror} (a few minutes)"
if ! debootstrap --variant=minbase --include="${PACKAGES}" "${DEBIAN_SUITE}" "$target" "$mirror" >"$work/debootstrap.log" 2>&1; then
	tail -n 20 "$work/debootstrap.log" >&2
	log "workspace rootfs: debootstrap failed"
	exit 3
fi
chroot "$target" /bin/sh -c 'apt-get clean' >/dev/null 2>&1 || true
rm -rf "$target"/var/lib/apt/lists/* "$target"/var/cache/apt/*.bin "$target"/usr/share/doc/* \
	"$target"/usr/share/man/* "$target"/usr/share/info/* "$target"/var/log/*.log "$target"/var/log/apt/*
mkdir -p "$target/workspace"
cleanup_mounts_only() { awk -v t="$target/" 'index($5, t) == 1 {print $5}' /proc/self/mountinfo; }
[ -z "$(cleanup_mounts_only)" ] || die "mounts left in $target: $(cleanup_mounts_only)"
tar --numeric-owner --one-file-system -C "$target" --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
	--exclude='./run/*' -czf "$out.tmp" .
mv "$out.tmp" "$out"
log "workspace rootfs: $(du -h "$out" | cut -f1) in $((SECONDS - t0))s -> $out"
echo "$out"
