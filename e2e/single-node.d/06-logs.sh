# shellcheck shell=bash
# The components' logs are plain text, as klog's: no terminal colour codes in what each
# daemon wrote to its log file since hack/up.sh last started it, nor in a container's
# log read through `kubectl logs`. Sourced by e2e/single-node.sh.

step "logs: no terminal escape codes in the components' log files or in kubectl logs"
for log_name in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
  log_file=$FK_LOG_DIR/$log_name.log
  [ -s "$log_file" ] || fail "no log at $log_file"
  # hack/up.sh appends a '===== <time> starting <name>' line before each start.
  log_since=$(awk '/^===== .* starting /{ buf = "" } { buf = buf $0 "\n" } END { printf "%s", buf }' "$log_file")
  grep -q . <<<"$log_since" || fail "$log_file has nothing since its last start"
  if grep -q $'\e' <<<"$log_since"; then
    fail "$log_file has escape codes: $(grep -m1 $'\e' <<<"$log_since" | cat -v)"
  fi
done
log_dns=$(k -n kube-system logs deploy/kube-dns --tail=20 2>&1) || fail "kubectl logs deploy/kube-dns: $log_dns"
grep -q . <<<"$log_dns" || fail "kube-dns logged nothing"
if grep -q $'\e' <<<"$log_dns"; then
  fail "kube-dns's container log has escape codes: $(grep -m1 $'\e' <<<"$log_dns" | cat -v)"
fi
ok "the five daemons' logs since their start and kube-dns's container log are plain text"
