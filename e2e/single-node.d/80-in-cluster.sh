# shellcheck shell=bash
# The apiserver as pods see it: the `kubernetes` Service's EndpointSlice points at the
# advertise address on the control-plane bridge (kube-proxy routes from slices only), and
# the DNS addon runs on the pod network, talking to the API in-cluster with its
# ServiceAccount token (kube-rs inference: KUBERNETES_SERVICE_HOST and the projected
# token), so a Ready kube-dns pod is a kube-rs in-cluster client that works.
# Sourced by e2e/single-node.sh; uses its step/ok/fail/k helpers.

step "in-cluster: the kubernetes Service's EndpointSlice points at the apiserver"
slice=$(k get endpointslice kubernetes -o 'jsonpath={.endpoints[0].addresses[0]}:{.ports[0].port} {.metadata.labels.kubernetes\.io/service-name}' 2>&1) \
  || fail "kubectl get endpointslice kubernetes: $slice"
[ "$slice" = "$FK_API_ADDR:$FK_API_PORT kubernetes" ] \
  || fail "EndpointSlice kubernetes: want '$FK_API_ADDR:$FK_API_PORT kubernetes', got '$slice'"
ok "$slice"

step "in-cluster: kube-dns runs on the pod network with its own token, and is Ready"
dns_pod=$(k -n kube-system get pods -l k8s-app=kube-dns \
  -o 'jsonpath={range .items[*]}{.metadata.name}|{.spec.hostNetwork}|{.status.podIP}|{.status.conditions[?(@.type=="Ready")].status}|{.spec.serviceAccountName}{"\n"}{end}' 2>&1) \
  || fail "kubectl get pods -l k8s-app=kube-dns: $dns_pod"
# '|'-separated: an unset hostNetwork is an empty field, which whitespace would swallow.
IFS='|' read -r name host_net pod_ip ready sa <<<"$(head -n 1 <<<"$dns_pod")"
[ -n "$name" ] || fail "no kube-dns pod"
[ "$host_net" != true ] || fail "kube-dns pod $name runs on the host network"
[[ $pod_ip == 10.244.* ]] || fail "kube-dns pod $name has IP '$pod_ip', not a pod-network address"
[ "$sa" = kube-dns ] || fail "kube-dns pod $name runs as ServiceAccount '$sa'"
[ "$ready" = True ] || fail "kube-dns pod $name is not Ready (Ready=$ready)"
ok "$name at $pod_ip, ServiceAccount kube-dns, Ready"
