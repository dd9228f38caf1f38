#!/bin/sh
# mkrootfs.sh [--profile minimal|agent] DIR - build an offline root
# filesystem for `asf-provision up --rootfs DIR` from this host's own
# binaries, plus every shared library they load (found with ldd). No
# registry, no network.
#
# Profiles:
#   minimal (the default): OpenSSH's sshd and sftp-server, bash, and the
#           coreutils and text tools a file tool and a short command need.
#   agent:  minimal, plus whole Debian packages of this host an agent works
#           with: coreutils (nohup, ...), procps (ps, pkill), util-linux
#           (setsid), python3, git, tmux, ripgrep, curl with the CA
#           certificates, less, patch, tar, gzip, xz, bzip2, findutils,
#           diffutils, the terminal descriptions (TERM) tmux needs, and
#           bash's loadable builtins (libasp's bg helper makes directories
#           and removes files with them, no process started).
#           Each package must be installed on this host (the script names
#           the ones that are not).
#
# The result holds the sandbox user "agent" (uid/gid 1000), sshd's
# privilege-separation user "sshd", and the directories asf-provision
# mounts over (/workspace, /etc/asf, /run, /run/sshd, /tmp). Files are owned by root.
# asf-provision also bind-mounts its own /etc/passwd and /etc/group, so the
# copies here only matter when the tree is used some other way.
set -eu

usage() { echo "usage: mkrootfs.sh [--profile minimal|agent] DIR" >&2; exit 2; }
profile=minimal
case ${1-} in
--profile) [ $# -ge 2 ] || usage; profile=$2; shift 2 ;;
--profile=*) profile=${1#--profile=}; shift ;;
esac
[ $# -eq 1 ] || usage
case $profile in
minimal|agent) ;;
*) echo "mkrootfs.sh: --profile $profile: expected minimal or agent" >&2; exit 2 ;;
esac
dir=$1
[ ! -e "$dir" ] || [ -z "$(ls -A "$dir" 2>/dev/null)" ] || {
	echo "mkrootfs.sh: $dir exists and is not empty" >&2; exit 1; }

bins="/usr/sbin/sshd /usr/lib/openssh/sftp-server /bin/bash /bin/sh
/usr/bin/env /usr/bin/id /usr/bin/cat /usr/bin/ls /usr/bin/cp /usr/bin/mv /usr/bin/rm
/usr/bin/mkdir /usr/bin/rmdir /usr/bin/touch /usr/bin/ln /usr/bin/chmod /usr/bin/stat
/usr/bin/echo /usr/bin/printf /usr/bin/head /usr/bin/tail /usr/bin/wc /usr/bin/sort
/usr/bin/uname /usr/bin/sleep /usr/bin/timeout /usr/bin/kill /usr/bin/grep /usr/bin/sed
/usr/bin/tr /usr/bin/cut /usr/bin/dd /usr/bin/true /usr/bin/false /usr/bin/test
/usr/bin/seq /usr/bin/basename /usr/bin/dirname /usr/bin/pwd /usr/bin/date /usr/bin/getent
/usr/bin/sha256sum /usr/bin/find /usr/bin/xargs /usr/bin/tee /usr/bin/diff /usr/bin/awk"

umask 022
mkdir -p "$dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
copy() { # copy a file, keeping its path; symlinks are copied as the file they point to
	[ -e "$dir$1" ] && return 0
	mkdir -p "$dir$(dirname "$1")"
	cp -L "$1" "$dir$1"
}
# The shared libraries the files listed on stdin load, transitively, and
# their loader, one path a line. From the ELF headers (readelf: the
# program interpreter and the NEEDED names, resolved through ldconfig's
# cache for libc's own ABI), a few processes in all; when readelf or
# ldconfig is missing, or a name is not in the cache (an RPATH), ldd
# runs on each file instead (slow: it loads every library of every file).
ldconfig=$(command -v ldconfig || { [ -x /sbin/ldconfig ] && echo /sbin/ldconfig; } || true)
libs() {
	cat > "$work/files"
	if command -v readelf >/dev/null 2>&1 && [ -n "$ldconfig" ] && libs_readelf; then
		return 0
	fi
	while read -r f; do
		ldd "$f" 2>/dev/null | awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }'
	done < "$work/files" | sort -u
}
libs_readelf() {
	abi=$("$ldconfig" -p | awk '$1 == "libc.so.6" { print $2; exit }')
	"$ldconfig" -p | awk -v abi="$abi" '$2 == abi && $3 == "=>" { print $1, $4 }' > "$work/map"
	tr '\n' '\0' < "$work/files" | xargs -0 readelf -l 2>/dev/null |
		sed -n 's/.*Requesting program interpreter: \(.*\)\]$/\1/p' | sort -u > "$work/libs"
	cp "$work/files" "$work/todo"
	while [ -s "$work/todo" ]; do
		tr '\n' '\0' < "$work/todo" | xargs -0 readelf -d 2>/dev/null |
			sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p' | sort -u |
			awk 'NR == FNR { m[$1] = $2; next } { print ($1 in m) ? m[$1] : "?" $1 }' "$work/map" - |
			sort -u > "$work/needed"
		! grep -q '^?' "$work/needed" || return 1
		sort -u "$work/libs" | comm -13 - "$work/needed" > "$work/todo"
		cat "$work/todo" >> "$work/libs"
	done
	sort -u "$work/libs"
}
for b in $bins; do
	[ -e "$b" ] || continue
	copy "$b"
	echo "$b"
done > "$work/elf"
# glibc loads NSS modules with dlopen, which ldd cannot see: copy them from libc's directory.
libdir=$(dirname "$(ldd /bin/sh | awk '/libc\.so/ { print $3 }')")
for lib in "$libdir/libnss_files.so.2" "$libdir/libnss_dns.so.2" "$libdir/libresolv.so.2"; do
	if [ -e "$lib" ]; then copy "$lib"; fi
done

# The agent profile: whole packages, as dpkg installed them on this host
# (documentation, manuals and translations left out), then the libraries
# their programs and Python's extension modules load.
AGENT_PACKAGES="coreutils procps util-linux findutils diffutils grep sed tar gzip xz-utils bzip2
less patch python3 python3-minimal python3.11 python3.11-minimal libpython3.11-minimal
libpython3.11-stdlib git tmux ripgrep curl ca-certificates ncurses-base bash-builtins"
if [ "$profile" = agent ]; then
	missing=
	for p in $AGENT_PACKAGES; do
		[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] ||
			missing="$missing $p"
	done
	[ -z "$missing" ] || {
		echo "mkrootfs.sh: --profile agent copies packages this host lacks:$missing" >&2
		echo "mkrootfs.sh: install them first: apt-get install$missing" >&2
		exit 1; }
	list=$work/list
	# shellcheck disable=SC2086
	# The top-level links of a merged /usr (/bin -> usr/bin) are left out:
	# the files under them land in the tree's own directories.
	dpkg-query -L $AGENT_PACKAGES |
		grep -Ev '^/usr/share/(doc|man|info|locale|lintian|bug)(/|$)|^/(bin|sbin|lib|lib32|lib64|libx32)$' |
		sort -u > "$list"
	# tar keeps each listed symlink as a link and does not descend into the
	# listed directories (every file of a package is listed by itself).
	tar -C / --no-recursion -cf - -T "$list" 2>/dev/null | tar -C "$dir" -xf -
	# update-ca-certificates' output is no package's file: copy the bundle.
	mkdir -p "$dir/etc/ssl/certs"
	cp -L /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/"
	# The C.UTF-8 locale (libc-bin's; tmux will not start without a UTF-8 one).
	if [ -d /usr/lib/locale/C.utf8 ]; then
		mkdir -p "$dir/usr/lib/locale"
		cp -R /usr/lib/locale/C.utf8 "$dir/usr/lib/locale/"
	fi
	while read -r f; do
		case $f in
		*.so|*.so.*|/usr/bin/*|/bin/*|/usr/sbin/*|/sbin/*|/usr/lib/git-core/*) ;;
		*) continue ;;
		esac
		[ -f "$f" ] && [ ! -L "$f" ] || continue
		echo "$f"
	done < "$list" >> "$work/elf"
fi
# Under the name ld.so looks for, with the content of its target.
libs < "$work/elf" | while read -r lib; do
	copy "$lib"
done

mkdir -p "$dir/etc" "$dir/etc/asf" "$dir/workspace" "$dir/home/agent" "$dir/run/sshd" \
	"$dir/tmp" "$dir/var/empty" "$dir/proc" "$dir/sys" "$dir/dev" "$dir/root"
chmod 1777 "$dir/tmp"
chmod 0700 "$dir/root"
cat > "$dir/etc/passwd" <<EOP
root:x:0:0:root:/root:/bin/bash
sshd:x:101:65534:sshd privilege separation:/run/sshd:/usr/sbin/nologin
agent:x:1000:1000:sandbox user:/home/agent:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOP
cat > "$dir/etc/group" <<EOG
root:x:0:
agent:x:1000:
nogroup:x:65534:
EOG
printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n' > "$dir/etc/nsswitch.conf"
: > "$dir/etc/resolv.conf"
printf '127.0.0.1 localhost\n::1 localhost\n' > "$dir/etc/hosts"
chown 1000:1000 "$dir/home/agent" "$dir/workspace"
echo "mkrootfs.sh: $profile profile, $(du -sh "$dir" | cut -f1) in $dir"
