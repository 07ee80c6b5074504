#!/usr/bin/env bash
# Builds the node's images offline and pushes them into the local registry mirror:
#   registry.k8s.io/pause:3.10            -> <registry>/pause:3.10
#   docker.io/library/busybox:{latest,1.36} -> <registry>/library/busybox:...
#   docker.io/library/nginx:{latest,1.22}   -> <registry>/library/nginx:...
#   docker.io/library/nginx:1.22.1          -> the same files, another image (its config
#                                              differs), for rolling updates to a new image
# Inputs are Debian packages only (busybox-static and gcc on the host; nginx's .deb is
# downloaded with `apt-get download` and unpacked with `dpkg -x`, never installed, so no
# nginx starts on the host). Usage: build.sh REGISTRY_ADDR WORK_DIR
set -euo pipefail
REG=${1:?registry address}
WORK=${2:?work dir}
HERE=$(cd "$(dirname "$0")" && pwd)
PUSH=(python3 "$HERE/ociimage.py" --registry "$REG")
mkdir -p "$WORK"

base_etc() { # rootfs: the files every image has; hosts/resolv.conf/hostname come from CRI
  mkdir -p "$1"/{etc,tmp,root,dev,proc,sys,run,var/tmp}
  chmod 1777 "$1/tmp" "$1/var/tmp"
  printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'www-data:x:33:33:www-data:/var/www:/bin/false' \
    'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' >"$1/etc/passwd"
  printf '%s\n' 'root:x:0:' 'www-data:x:33:' 'nogroup:x:65534:' >"$1/etc/group"
  echo 'hosts: files dns' >"$1/etc/nsswitch.conf"
}

with_busybox() { # rootfs: static busybox plus a symlink per applet
  install -D -m 0755 /bin/busybox "$1/bin/busybox"
  local applet
  /bin/busybox --list-full | while read -r applet; do
    [ -e "$1/$applet" ] || [ -L "$1/$applet" ] && continue
    mkdir -p "$1/$(dirname "$applet")"
    ln -s /bin/busybox "$1/$applet"
  done
}

# pause
R=$WORK/pause
rm -rf "$R" && mkdir -p "$R"
gcc -Os -static -o "$R/pause" "$HERE/pause.c"
strip "$R/pause"
"${PUSH[@]}" --rootfs "$R" --tag pause:3.10 --tag pause:3.9 \
  --entrypoint '["/pause"]' --user 65535:65535 >/dev/null
echo "images: pushed pause"

# busybox
R=$WORK/busybox
rm -rf "$R" && mkdir -p "$R"
base_etc "$R"
with_busybox "$R"
"${PUSH[@]}" --rootfs "$R" --tag library/busybox:latest --tag library/busybox:1.36 \
  --cmd '["sh"]' >/dev/null
echo "images: pushed busybox"

# nginx: Debian's binary and the shared libraries it links, plus busybox for a shell.
R=$WORK/nginx
DEBS=$WORK/debs
X=$WORK/nginx-unpacked
mkdir -p "$DEBS"
if ! ls "$DEBS"/nginx_*.deb "$DEBS"/nginx-common_*.deb >/dev/null 2>&1; then
  (cd "$DEBS" && apt-get download nginx nginx-common 2>/dev/null)
fi
rm -rf "$R" "$X" && mkdir -p "$R" "$X"
for deb in "$DEBS"/nginx_*.deb "$DEBS"/nginx-common_*.deb; do dpkg -x "$deb" "$X"; done
base_etc "$R"
with_busybox "$R"
install -D -m 0755 "$X/usr/sbin/nginx" "$R/usr/sbin/nginx"
install -D -m 0644 "$X/etc/nginx/mime.types" "$R/etc/nginx/mime.types"
install -D -m 0644 "$X/usr/share/nginx/html/index.html" "$R/usr/share/nginx/html/index.html"
ldd "$X/usr/sbin/nginx" | awk '$2 == "=>" {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | sort -u |
  while read -r lib; do
    [ -f "$lib" ] && install -D -m 0755 "$(readlink -f "$lib")" "$R$lib"
  done
mkdir -p "$R"/var/lib/nginx/{body,fastcgi,proxy,scgi,uwsgi} "$R/var/log/nginx"
ln -sf /dev/stdout "$R/var/log/nginx/access.log"
ln -sf /dev/stderr "$R/var/log/nginx/error.log"
cat >"$R/etc/nginx/nginx.conf" <<'CONF'
user www-data;
worker_processes 1;
pid /run/nginx.pid;
error_log /var/log/nginx/error.log notice;
events { worker_connections 512; }
http {
  include /etc/nginx/mime.types;
  default_type application/octet-stream;
  access_log /var/log/nginx/access.log;
  sendfile on;
  server {
    listen 80 default_server;
    root /usr/share/nginx/html;
    index index.html;
    location / { try_files $uri $uri/ =404; }
  }
}
CONF
chroot "$R" /usr/sbin/nginx -t -q
"${PUSH[@]}" --rootfs "$R" --tag library/nginx:latest --tag library/nginx:1.22 \
  --cmd '["nginx","-g","daemon off;"]' --expose 80/tcp --stop-signal SIGQUIT >/dev/null
"${PUSH[@]}" --rootfs "$R" --tag library/nginx:1.22.1 \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env NGINX_VERSION=1.22.1 \
  --cmd '["nginx","-g","daemon off;"]' --expose 80/tcp --stop-signal SIGQUIT >/dev/null
echo "images: pushed nginx"
