# shellcheck shell=bash
# Private registries: a second docker-registry (distribution 2.8) on 127.0.0.1:5001 asks
# for HTTP basic auth (an htpasswd file, bcrypt) and holds busybox as
# 127.0.0.1:5001/private/busybox:latest; containerd reaches it over plain HTTP through a
# certs.d hosts.toml that lives only as long as this check. Then, every pod with
# imagePullPolicy Always:
#   - no pull secret: the pull fails, ErrImagePull/ImagePullBackOff with the registry's 401;
#   - `kubectl create secret docker-registry regcred` + imagePullSecrets: Running;
#   - a ServiceAccount with imagePullSecrets: the ServiceAccount admission plugin copies
#     them into a pod that names none, and the pod runs.
# Everything (namespace, pulled image, registry process and data, hosts.toml) is removed at
# the end, and on failure by an EXIT trap that then hands over to the caller's.
# Traffic stays on 127.0.0.1. Sourced by e2e/single-node.sh; uses its step/ok/fail/k
# helpers and hack/lib/runtime.sh (rt::daemon, rt::stop_pidfile, RT_CERTS_D,
# RT_CONTAINERD_SOCK).

PS_NS=pull-secrets-e2e
PS_ADDR=127.0.0.1:5001
PS_USER=e2e-puller
PS_PASS=e2e-$RANDOM$RANDOM
PS_IMAGE=$PS_ADDR/private/busybox:latest
PS_SOURCE=docker.io/library/busybox:latest
PS_HOSTS_DIR=$RT_CERTS_D/$PS_ADDR
PS_MARK="# Written by e2e/single-node.d/22-pull-secrets.sh; removed when it ends."
PS_CTR=(ctr --address "$RT_CONTAINERD_SOCK" -n k8s.io)
PS_TMP=""
# What the runtime says when the registry refuses: containerd quotes the 401.
PS_AUTH_ERROR='401 Unauthorized|[Uu]nauthori[sz]ed|authorization failed|no basic auth credentials|authentication required'

ps_cleanup() {
  k delete namespace "$PS_NS" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  # Every reference the pulls made: the tag and the repo digest (containerd would
  # otherwise report the private registry's digest as other busybox pods' imageID).
  local refs=()
  mapfile -t refs < <("${PS_CTR[@]}" images ls -q 2>/dev/null | grep -F "$PS_ADDR/" || true)
  [ ${#refs[@]} -eq 0 ] || "${PS_CTR[@]}" images rm "${refs[@]}" >/dev/null 2>&1 || true
  if [ -n "$PS_TMP" ]; then
    rt::stop_pidfile "$PS_TMP/registry.pid" docker-registry 2>/dev/null || true
    rm -rf "$PS_TMP"
    PS_TMP=""
  fi
  if grep -qxF "$PS_MARK" "$PS_HOSTS_DIR/hosts.toml" 2>/dev/null; then
    rm -rf "$PS_HOSTS_DIR"
  fi
}
# The caller's EXIT trap (single-node.sh's `finish`), run after ours with the exit status
# it would have seen.
PS_PREV_TRAP=$(trap -p EXIT)
PS_PREV_CMD=""
if [ -n "$PS_PREV_TRAP" ]; then
  ps_words=()
  eval "ps_words=($PS_PREV_TRAP)" # trap -- 'command' EXIT
  PS_PREV_CMD=${ps_words[2]}
fi
ps_on_exit() {
  local rc=$?
  ps_cleanup
  # The caller's trap reads $? first; `(exit $rc) ||` sets it without tripping `set -e`.
  if [ $rc -eq 0 ]; then
    eval "$PS_PREV_CMD"
  else
    (exit $rc) || eval "$PS_PREV_CMD"
  fi
}
trap ps_on_exit EXIT
ps_restore_trap() {
  if [ -n "$PS_PREV_TRAP" ]; then eval "$PS_PREV_TRAP"; else trap - EXIT; fi
}
# Prints a pod's first container's waiting reason and message, tab-separated.
ps_waiting() { # pod
  k -n "$PS_NS" get pod "$1" \
    -o 'jsonpath={.status.containerStatuses[0].state.waiting.reason}{"\t"}{.status.containerStatuses[0].state.waiting.message}' \
    2>/dev/null || true
}
ps_wait_running() { # pod
  local phase="" i
  for ((i = 0; i < 120; i++)); do
    phase=$(k -n "$PS_NS" get pod "$1" -o 'jsonpath={.status.phase}' 2>/dev/null || true)
    [ "$phase" = Running ] && return 0
    sleep 0.5
  done
  k -n "$PS_NS" describe pod "$1" 2>&1 | tail -n 25 || true
  fail "pod $1 phase '${phase:-none}', not Running after 60 s (waiting: $(ps_waiting "$1"))"
}
# Creates a pod of the private image, pulled every time; extra lines go into its spec.
ps_pod() { # name [spec lines...]
  local name=$1 out i
  shift
  # Admission reads ServiceAccounts from the apiserver's watch cache: a brand-new one may
  # take a moment to be seen (at most 10 s).
  for ((i = 0; i < 20; i++)); do
    if out=$(k -n "$PS_NS" apply -f - 2>&1 <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $name}
spec:
  terminationGracePeriodSeconds: 2
$(printf '  %s\n' "$@")
  containers:
  - name: c
    image: $PS_IMAGE
    imagePullPolicy: Always
    command: [sleep, "3600"]
EOF
    ); then
      return 0
    fi
    grep -q 'not found' <<<"$out" || break
    sleep 0.5
  done
  fail "create pod $name: $out"
}

step "pull secrets: a registry with htpasswd auth on $PS_ADDR holding $PS_IMAGE"
command -v htpasswd >/dev/null || fail "htpasswd not found (hack/install-deps.sh installs apache2-utils)"
if curl -s -o /dev/null --max-time 2 "http://$PS_ADDR/v2/"; then
  fail "something already listens on $PS_ADDR"
fi
if [ -e "$PS_HOSTS_DIR" ] && ! grep -qxF "$PS_MARK" "$PS_HOSTS_DIR/hosts.toml" 2>/dev/null; then
  fail "$PS_HOSTS_DIR exists and is not this check's"
fi
# A namespace left by an interrupted run is still terminating: wait (at most 60 s).
ps_cleanup
for ((i = 0; i < 120; i++)); do
  k get namespace "$PS_NS" >/dev/null 2>&1 || break
  sleep 0.5
done
PS_TMP=$(mktemp -d /tmp/ferrokube-pull-secrets.XXXXXX)
htpasswd -Bbc "$PS_TMP/htpasswd" "$PS_USER" "$PS_PASS" >/dev/null 2>&1 || fail "htpasswd -B failed"
cat >"$PS_TMP/config.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $PS_TMP/data
  delete:
    enabled: true
http:
  addr: $PS_ADDR
auth:
  htpasswd:
    realm: ferrokube-e2e
    path: $PS_TMP/htpasswd
EOF
rt::daemon docker-registry serve "$PS_TMP/config.yml" >>"$PS_TMP/registry.log" 2>&1 </dev/null &
echo $! >"$PS_TMP/registry.pid"
code=""
for ((i = 0; i < 50; i++)); do
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$PS_ADDR/v2/" || true)
  [ "$code" = 401 ] && break
  sleep 0.2
done
[ "$code" = 401 ] || fail "the registry on $PS_ADDR answers '${code:-nothing}', not 401 (log: $(tail -n 5 "$PS_TMP/registry.log"))"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 -u "$PS_USER:$PS_PASS" "http://$PS_ADDR/v2/" || true)
[ "$code" = 200 ] || fail "with the user's password the registry answers '${code:-nothing}', not 200"
mkdir -p "$PS_HOSTS_DIR"
cat >"$PS_HOSTS_DIR/hosts.toml" <<EOF
$PS_MARK
# Plain HTTP to the e2e's private registry (also keeps a catch-all _default mirror off it).
server = "http://$PS_ADDR"

[host."http://$PS_ADDR"]
  capabilities = ["pull", "resolve"]
EOF
if ! "${PS_CTR[@]}" images ls -q | grep -qxF "$PS_SOURCE"; then
  # Not pulled by an earlier check: from the local mirror, as a pod's pull would.
  out=$(timeout 60 "${PS_CTR[@]}" images pull --hosts-dir "$RT_CERTS_D" "$PS_SOURCE" 2>&1) ||
    fail "ctr pull $PS_SOURCE: $out"
fi
out=$(timeout 60 "${PS_CTR[@]}" images push --plain-http --user "$PS_USER:$PS_PASS" "$PS_IMAGE" "$PS_SOURCE" 2>&1) ||
  fail "ctr push $PS_IMAGE: $out"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$PS_ADDR/v2/private/busybox/tags/list" || true)
[ "$code" = 401 ] || fail "an anonymous tag list answers '${code:-nothing}', not 401"
tags=$(curl -s --max-time 2 -u "$PS_USER:$PS_PASS" "http://$PS_ADDR/v2/private/busybox/tags/list" || true)
[[ $tags == *'"latest"'* ]] || fail "the registry does not list private/busybox:latest: ${tags:-nothing}"
ok "registry pid $(cat "$PS_TMP/registry.pid"): 401 anonymous, 200 as $PS_USER; $PS_IMAGE pushed"

step "pull secrets: without a pull secret the pull is refused (ErrImagePull/ImagePullBackOff, 401)"
out=$(k create namespace "$PS_NS" 2>&1) || fail "create namespace: $out"
ready=0
for ((i = 0; i < 60; i++)); do
  k -n "$PS_NS" get serviceaccount default >/dev/null 2>&1 && { ready=1; break; }
  sleep 0.5
done
[ $ready -eq 1 ] || fail "no default ServiceAccount in $PS_NS after 30 s"
ps_pod no-secret
seen="" refused=""
for ((i = 0; i < 120; i++)); do
  seen=$(ps_waiting no-secret)
  case ${seen%%$'\t'*} in
  ErrImagePull | ImagePullBackOff)
    if grep -qE "$PS_AUTH_ERROR" <<<"${seen#*$'\t'}"; then
      refused=$seen
      break
    fi
    # The back-off's message may not quote the error: the kubelet's events do.
    events=$(k -n "$PS_NS" get events --field-selector involvedObject.name=no-secret \
      -o 'jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}' 2>/dev/null || true)
    if line=$(grep -E "$PS_AUTH_ERROR" <<<"$events" | head -n 1) && [ -n "$line" ]; then
      refused="${seen%%$'\t'*}	(event) $line"
      break
    fi
    ;;
  esac
  sleep 0.5
done
phase=$(k -n "$PS_NS" get pod no-secret -o 'jsonpath={.status.phase}' 2>/dev/null || true)
[ "$phase" != Running ] || fail "pod no-secret is Running: the registry let an anonymous pull through"
[ -n "$refused" ] || fail "no ErrImagePull/ImagePullBackOff with an auth error after 60 s (last waiting state: '${seen:-none}')"
printf '  %s\n' "${refused:0:300}"
ok "refused without credentials"

step "pull secrets: kubectl create secret docker-registry regcred; a pod naming it runs"
out=$(k -n "$PS_NS" create secret docker-registry regcred --docker-server="$PS_ADDR" \
  --docker-username="$PS_USER" --docker-password="$PS_PASS" 2>&1) || fail "create secret: $out"
type=$(k -n "$PS_NS" get secret regcred -o 'jsonpath={.type}' 2>&1 || true)
[ "$type" = kubernetes.io/dockerconfigjson ] || fail "secret regcred has type '$type'"
ps_pod with-secret 'imagePullSecrets: [{name: regcred}]'
ps_wait_running with-secret
image_id=$(k -n "$PS_NS" get pod with-secret -o 'jsonpath={.status.containerStatuses[0].imageID}' 2>/dev/null || true)
ok "pod with-secret Running (imageID ${image_id:-none})"

step "pull secrets: a ServiceAccount's imagePullSecrets are copied into its pod, which runs"
out=$(k -n "$PS_NS" apply -f - 2>&1 <<'EOF'
apiVersion: v1
kind: ServiceAccount
metadata: {name: puller}
imagePullSecrets: [{name: regcred}]
EOF
) || fail "create ServiceAccount puller: $out"
ps_pod via-account 'serviceAccountName: puller'
copied=$(k -n "$PS_NS" get pod via-account -o 'jsonpath={.spec.imagePullSecrets[*].name}' 2>&1 || true)
[ "$copied" = regcred ] || fail "pod via-account's spec.imagePullSecrets names '${copied:-nothing}', not regcred"
ps_wait_running via-account
# With pull policy Always, the image being on the node now does not let the first pod in.
phase=$(k -n "$PS_NS" get pod no-secret -o 'jsonpath={.status.phase}' 2>/dev/null || true)
[ "$phase" != Running ] || fail "pod no-secret became Running without credentials"
ok "spec.imagePullSecrets [regcred] from the ServiceAccount; Running; no-secret still $(ps_waiting no-secret | cut -f1)"

step "pull secrets: delete namespace $PS_NS, the pulled image, the registry and its hosts.toml"
k delete namespace "$PS_NS" --ignore-not-found --wait=false >/dev/null 2>&1 || true
gone=0
for ((i = 0; i < 120; i++)); do
  k get namespace "$PS_NS" >/dev/null 2>&1 || { gone=1; break; }
  sleep 0.5
done
[ $gone -eq 1 ] || fail "namespace $PS_NS still exists 60 s after the delete"
registry_pid=$(cat "$PS_TMP/registry.pid")
ps_cleanup
ps_restore_trap
[ ! -d "/proc/$registry_pid" ] || fail "the registry (pid $registry_pid) still runs"
[ ! -e "$PS_HOSTS_DIR" ] || fail "$PS_HOSTS_DIR is still there"
! "${PS_CTR[@]}" images ls -q | grep -qxF "$PS_IMAGE" || fail "containerd still has $PS_IMAGE"
ok "namespace gone, registry (pid $registry_pid) stopped, image and hosts.toml removed"
