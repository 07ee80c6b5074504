# shellcheck shell=bash
# Pod securityContext.fsGroup: the group is a supplemental group of the container's
# process, and the pod's volumes (emptyDir, configMap, secret) belong to it, emptyDir
# group-writable with the setgid bit so new files inherit the group
# (fsGroupChangePolicy OnRootMismatch). Checked with `id` and `ls -ln` through kubectl
# exec. Sourced by e2e/single-node.sh; uses its step/ok/fail/k helpers.

fsg_cleanup() {
  k delete pod fsgroup --ignore-not-found --wait=false >/dev/null 2>&1 || true
  k delete configmap fsgroup-cfg --ignore-not-found >/dev/null 2>&1 || true
  k delete secret fsgroup-sec --ignore-not-found >/dev/null 2>&1 || true
}

step "fsGroup: a pod running as 1000:3000 with fsGroup 2000 and three volumes"
fsg_cleanup
k wait --for=delete pod/fsgroup --timeout=30s >/dev/null 2>&1 || true
out=$(k create configmap fsgroup-cfg --from-literal=greeting=hello 2>&1) || fail "create configmap: $out"
out=$(k create secret generic fsgroup-sec --from-literal=password=s3cret 2>&1) || fail "create secret: $out"
out=$(k apply -f - 2>&1 <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: fsgroup}
spec:
  terminationGracePeriodSeconds: 2
  securityContext:
    runAsUser: 1000
    runAsGroup: 3000
    fsGroup: 2000
    fsGroupChangePolicy: OnRootMismatch
  volumes:
  - {name: data, emptyDir: {}}
  - {name: cfg, configMap: {name: fsgroup-cfg}}
  - {name: sec, secret: {secretName: fsgroup-sec}}
  containers:
  - name: c
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sleep, "3600"]
    volumeMounts:
    - {name: data, mountPath: /data}
    - {name: cfg, mountPath: /etc/cfg}
    - {name: sec, mountPath: /etc/sec}
EOF
) || fail "apply: $out"
out=$(k wait --for=condition=Ready pod/fsgroup --timeout=60s 2>&1) || {
  k get pod fsgroup -o yaml || true
  fail "fsgroup pod not Ready: $out"
}
ok "pod Ready"

step "fsGroup: id shows the supplemental group; the volumes belong to it"
id_out=$(kx fsgroup -- id) || fail "exec id: $id_out"
printf '  id: %s\n' "$id_out"
grep -q '^uid=1000 gid=3000 groups=.*\b2000\b' <<<"$id_out" || fail "id: want uid 1000, gid 3000, group 2000: $id_out"
# ls -ldn: mode, links, uid, gid; the emptyDir is rwxrwsrwx (world-writable as upstream
# makes it, plus setgid) and group 2000.
data=$(kx fsgroup -- ls -ldn /data) || fail "exec ls /data: $data"
printf '  /data: %s\n' "$data"
awk '{exit !($1 == "drwxrwsrwx" && $4 == "2000")}' <<<"$data" || fail "/data: want drwxrwsrwx group 2000: $data"
made=$(kx fsgroup -- sh -c 'touch /data/new && ls -ln /data/new') || fail "exec touch: $made"
printf '  new file: %s\n' "$made"
awk '{exit !($3 == "1000" && $4 == "2000")}' <<<"$made" || fail "a new file in /data: want 1000:2000 (setgid dir): $made"
for f in /etc/cfg/greeting /etc/sec/password; do
  got=$(kx fsgroup -- ls -lnL "$f") || fail "exec ls $f: $got"
  printf '  %s: %s\n' "$f" "$got"
  awk '{exit !($4 == "2000" && substr($1, 5, 1) == "r")}' <<<"$got" || fail "$f: want group 2000, group-readable: $got"
  content=$(kx fsgroup -- cat "$f") || fail "user 1000 cannot read $f: $content"
done
ok "id has group 2000; /data drwxrwsrwx :2000 and new files inherit it; configMap and secret files group 2000, readable by the pod's user"
fsg_cleanup
