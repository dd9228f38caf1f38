#!/bin/sh
# mkrootfs.sh DIR - build a minimal offline root filesystem for
# `asf-provision up --rootfs DIR` from this host's own binaries: OpenSSH's
# sshd and sftp-server, bash, coreutils and a few tools, plus every shared
# library they load (found with ldd). No registry, no network.
#
# The result holds the sandbox user "agent" (uid/gid 1000), sshd's
# privilege-separation user "sshd", and the directories asf-provision
# mounts over (/workspace, /etc/asf, /run, /run/sshd, /tmp). Files are owned by root.
# asf-provision also bind-mounts its own /etc/passwd and /etc/group, so the
# copies here only matter when the tree is used some other way.
set -eu

[ $# -eq 1 ] || { echo "usage: mkrootfs.sh DIR" >&2; exit 2; }
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
copy() { # copy a file, keeping its path; symlinks are copied as the file they point to
	[ -e "$dir$1" ] && return 0
	mkdir -p "$dir$(dirname "$1")"
	cp -L "$1" "$dir$1"
}
for b in $bins; do
	[ -e "$b" ] || continue
	copy "$b"
	ldd "$b" 2>/dev/null | awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }' |
	while read -r lib; do
		copy "$lib" # under the name ld.so looks for, with the content of its target
	done
done
# glibc loads NSS modules with dlopen, which ldd cannot see: copy them from libc's directory.
libdir=$(dirname "$(ldd /bin/sh | awk '/libc\.so/ { print $3 }')")
for lib in "$libdir/libnss_files.so.2" "$libdir/libnss_dns.so.2" "$libdir/libresolv.so.2"; do
	if [ -e "$lib" ]; then copy "$lib"; fi
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
echo "mkrootfs.sh: $(du -sh "$dir" | cut -f1) in $dir"
