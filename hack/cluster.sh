#!/usr/bin/env bash
# Brings up / tears down a real single-node Kubernetes cluster on this host, as root, without
# Docker: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd+runc,
# kubelet, kube-proxy (iptables mode) and CNI bridge networking.
#
#   hack/cluster.sh up       idempotent; prints the KUBECONFIG path
#   hack/cluster.sh down     stops only what `up` started (by pid), unmounts, restores the host,
#                            then verifies that no process or mount is left (fails otherwise)
#   hack/cluster.sh status   shows each component
#   hack/cluster.sh restart-apiserver [seconds]
#                            stops the API server for that long (default 10) and starts it again
#   hack/cluster.sh env      prints `export KUBECONFIG=...`
#   hack/cluster.sh deps     installs the Debian packages the cluster needs
#
# Everything the cluster writes lives under ${CLUSTER_DIR} (in the cache, never in the repo).
# Logs of the last run stay in ${CLUSTER_DIR}/logs after `down`.
# There is no cluster DNS: pods reach Services through ClusterIPs and the
# <NAME>_SERVICE_HOST/_PORT environment variables (see docs/cluster.md).
set -Eeuo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap 'echo "hack/cluster.sh: line ${LINENO}: \"${BASH_COMMAND}\" failed" >&2' ERR

# Network layout (override in the environment if it collides with the host's networks).
NODE_NAME="${AO_NODE_NAME:-agent-operator-node}"
BRIDGE="${AO_BRIDGE:-aobr0}"
POD_CIDR="${AO_POD_CIDR:-10.244.0.0/16}"
NODE_IP="${AO_NODE_IP:-10.244.0.1}"
SERVICE_CIDR="${AO_SERVICE_CIDR:-10.96.0.0/16}"
KUBERNETES_SVC_IP="${AO_KUBERNETES_SVC_IP:-10.96.0.1}"
APISERVER_PORT="${AO_APISERVER_PORT:-6443}"
ETCD_CLIENT_PORT="${AO_ETCD_CLIENT_PORT:-12379}"
ETCD_PEER_PORT="${AO_ETCD_PEER_PORT:-12380}"
READY_TIMEOUT="${AO_READY_TIMEOUT:-120}"

S="${CLUSTER_DIR}"
PKI="$S/pki"
CFG="$S/config"
LOGS="$S/logs"
PIDS="$S/pids"
HOST="$S/host" # what the host looked like before `up`, for `down`
RUN="$S/run"
CONTAINERD_SOCK="$RUN/containerd.sock"
COMPONENTS_UP=(etcd kube-apiserver kube-controller-manager kube-scheduler local-provisioner containerd kubelet kube-proxy)

# Sysctls that the kubelet, kube-proxy or the CNI bridge plugin may rewrite; restored on `down`.
SYSCTLS=(
	vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
	kernel/keys/root_maxkeys kernel/keys/root_maxbytes
	net/ipv4/ip_forward net/ipv4/conf/all/route_localnet
	net/bridge/bridge-nf-call-iptables net/bridge/bridge-nf-call-ip6tables
	net/netfilter/nf_conntrack_max net/netfilter/nf_conntrack_tcp_timeout_established
	net/netfilter/nf_conntrack_tcp_timeout_close_wait
)
# Host paths some component creates regardless of configuration; removed on `down` if `up`
# created them.
HOST_PATHS=(/var/log/containers /var/lib/cni /run/containerd /var/run/netns /etc/cni /var/lib/kubelet)

bin() { # component -> path of the cached binary
	case "$1" in
	etcd) echo "${ETCD_BIN_DIR}/etcd" ;;
	crictl) echo "${TOOLS_DIR}/crictl-${CRICTL_VERSION}/crictl" ;;
	local-provisioner) echo "$S/bin/local-provisioner" ;;
	containerd | ctr) command -v "$1" ;;
	*) echo "${K8S_BIN_DIR}/$1" ;;
	esac
}

pid_of() { [ -f "$PIDS/$1.pid" ] && cat "$PIDS/$1.pid" || true; }
alive() { # component
	local p
	p="$(pid_of "$1")"
	[ -n "$p" ] && kill -0 "$p" 2>/dev/null && [ "$(readlink "/proc/$p/exe" 2>/dev/null | sed 's/ (deleted)$//')" = "$(bin "$1")" ]
}

kubectl_() { "$(bin kubectl)" --kubeconfig "${KUBECONFIG_PATH}" "$@"; }

# ---------------------------------------------------------------------------------------------
# host preparation

require_root() { [ "$(id -u)" -eq 0 ] || die "the local cluster needs root (it runs containerd and the kubelet)"; }

ensure_packages() {
	apt_install containerd runc containernetworking-plugins iptables conntrack socat openssl curl iproute2 util-linux procps ripgrep \
		prometheus `# promtool: the unit tests check the metrics and alert rules (internal/metrics)` \
		chromium fonts-dejavu-core # the console's browser e2e (Playwright drives Debian's Chromium)
	[ -x /usr/lib/cni/bridge ] || die "CNI plugins missing in /usr/lib/cni (package containernetworking-plugins)"
}

ensure_binaries() {
	"${HACK_DIR}/build-k8s.sh" all
	"${HACK_DIR}/go-tool.sh" crictl sigs.k8s.io/cri-tools "${CRICTL_VERSION}" sigs.k8s.io/cri-tools/cmd/crictl >/dev/null
}

record_host() {
	# Only the first `up` after a `down` records the host: a second `up` must not record the
	# cluster's own changes as the original state.
	[ -f "$HOST/recorded" ] && return 0
	mkdir -p "$HOST"
	: >"$HOST/sysctls"
	local k
	for k in "${SYSCTLS[@]}"; do
		[ -r "/proc/sys/$k" ] && printf '%s %s\n' "$k" "$(cat "/proc/sys/$k")" >>"$HOST/sysctls"
	done
	: >"$HOST/paths-created"
	local p
	for p in "${HOST_PATHS[@]}"; do
		[ -e "$p" ] || echo "$p" >>"$HOST/paths-created"
	done
	: >"$HOST/cgroups-created"
	local h
	for h in /sys/fs/cgroup /sys/fs/cgroup/*/; do
		h="${h%/}"
		if [ -d "$h" ] && [ ! -e "$h/kubepods" ]; then
			echo "$h/kubepods" >>"$HOST/cgroups-created"
		fi
	done
	local ipt
	for ipt in iptables ip6tables; do
		"$ipt-save" >"$HOST/$ipt.before" 2>/dev/null || true
	done
	touch "$HOST/recorded"
}

setup_network() {
	local prefix="${POD_CIDR#*/}"
	if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
		# Refuse to shadow a network the host already routes.
		if ip -4 route show | awk '{print $1}' | grep -qx "${POD_CIDR}"; then
			die "host already routes ${POD_CIDR}; set AO_POD_CIDR/AO_NODE_IP to a free range"
		fi
		ip link add "$BRIDGE" type bridge
		echo "$BRIDGE" >"$HOST/bridge-created"
	fi
	ip -4 addr show dev "$BRIDGE" | grep -q "inet ${NODE_IP}/" || ip addr add "${NODE_IP}/${prefix}" dev "$BRIDGE"
	ip link set "$BRIDGE" up
	echo 1 >/proc/sys/net/ipv4/ip_forward
	[ -w /proc/sys/net/bridge/bridge-nf-call-iptables ] && echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables
	# Pods reach the outside world through one masquerade rule (the bridge plugin's ipMasq would
	# leave per-container chains behind if a pod is not torn down through CNI).
	if ! iptables -t nat -C POSTROUTING -s "${POD_CIDR}" ! -d "${POD_CIDR}" -m comment --comment agent-operator-pods -j MASQUERADE 2>/dev/null; then
		iptables -t nat -A POSTROUTING -s "${POD_CIDR}" ! -d "${POD_CIDR}" -m comment --comment agent-operator-pods -j MASQUERADE
	fi
}

# ---------------------------------------------------------------------------------------------
# certificates and kubeconfigs (openssl only)

# put FILE < content: replaces FILE only when the content changed (kube-proxy exits when its
# config file is rewritten, so an idempotent `up` must not touch unchanged files).
put() {
	local tmp
	tmp="$(mktemp "$1.XXXXXX")"
	cat >"$tmp"
	if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv "$tmp" "$1"; fi
}

gen_cert() { # name CN O kind(client|server|both) [SANs]
	local name="$1" cn="$2" o="$3" kind="$4" sans="${5:-}"
	[ -f "$PKI/$name.crt" ] && [ -f "$PKI/$name.key" ] && return 0
	local subj="/CN=${cn}"
	[ -n "$o" ] && subj="/O=${o}${subj}"
	local eku
	case "$kind" in
	client) eku="clientAuth" ;;
	server) eku="serverAuth" ;;
	both) eku="serverAuth,clientAuth" ;;
	esac
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=${eku}"
		[ -n "$sans" ] && echo "subjectAltName=${sans}"
	} >"$PKI/$name.ext"
	openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
	openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
	openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
		-days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
	rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

gen_pki() {
	mkdir -p "$PKI" && chmod 700 "$PKI"
	if [ ! -f "$PKI/ca.crt" ]; then
		openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/ca.key" 2>/dev/null
		openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=agent-operator-local-ca" -days 3650 -sha256 \
			-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
			-out "$PKI/ca.crt" 2>/dev/null
	fi
	if [ ! -f "$PKI/sa.key" ]; then
		openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
		openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
	fi
	gen_cert apiserver kube-apiserver "" server \
		"DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:${KUBERNETES_SVC_IP},IP:${NODE_IP}"
	gen_cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters client
	gen_cert admin kubernetes-admin system:masters client
	gen_cert controller-manager system:kube-controller-manager "" client
	gen_cert scheduler system:kube-scheduler "" client
	gen_cert kube-proxy system:kube-proxy "" client
	gen_cert kubelet "system:node:${NODE_NAME}" system:nodes client
	gen_cert kubelet-serving "system:node:${NODE_NAME}" system:nodes server "DNS:${NODE_NAME},DNS:localhost,IP:${NODE_IP},IP:127.0.0.1"
}

write_kubeconfig() { # path user certname
	local b64="base64 -w0"
	put "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: agent-operator
  cluster:
    server: https://${NODE_IP}:${APISERVER_PORT}
    certificate-authority-data: $($b64 <"$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $($b64 <"$PKI/$3.crt")
    client-key-data: $($b64 <"$PKI/$3.key")
contexts:
- name: agent-operator
  context:
    cluster: agent-operator
    user: $2
current-context: agent-operator
EOF
	chmod 600 "$1"
}

gen_kubeconfigs() {
	mkdir -p "$CFG"
	write_kubeconfig "${KUBECONFIG_PATH}" kubernetes-admin admin
	write_kubeconfig "$CFG/controller-manager.kubeconfig" system:kube-controller-manager controller-manager
	write_kubeconfig "$CFG/scheduler.kubeconfig" system:kube-scheduler scheduler
	write_kubeconfig "$CFG/kubelet.kubeconfig" "system:node:${NODE_NAME}" kubelet
	write_kubeconfig "$CFG/kube-proxy.kubeconfig" system:kube-proxy kube-proxy
}

# ---------------------------------------------------------------------------------------------
# component configuration

write_configs() {
	mkdir -p "$CFG" "$S/cni/net.d" "$S/cni/ipam" "$RUN" "$S/containerd/root" "$S/containerd/state" \
		"$S/containerd/opt" "$S/runc" "$S/kubelet" "$S/kubelet-plugins" "$S/pod-logs" "$S/etcd"
	chmod 700 "$S/etcd"

	put "$S/cni/net.d/10-agent-operator.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "agent-operator",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "${BRIDGE}",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "${POD_CIDR}", "gateway": "${NODE_IP}"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$S/cni/ipam"
      }
    }
  ]
}
EOF

	put "$CFG/containerd.toml" <<EOF
version = 2
root = "$S/containerd/root"
state = "$S/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "${CONTAINERD_SOCK}"

[ttrpc]
  address = "${CONTAINERD_SOCK}.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$S/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/agent-operator/pause:dev"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    discard_unpacked_layers = false
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$S/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$S/cni/net.d"
    max_conf_num = 1
EOF

	put "$CFG/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: ${NODE_IP}
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
containerRuntimeEndpoint: unix://${CONTAINERD_SOCK}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
makeIPTablesUtilChains: false
volumePluginDir: $S/kubelet-plugins
podLogsDir: $S/pod-logs
# Imported images cannot be pulled again: never garbage-collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
  nodefs.inodesFree: "1%"
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
# Room for the load spec (200 concurrent sessions, one workspace pod each).
maxPods: 250
# Each pod's cgroup may hold at most this many processes and threads: a fork bomb in a
# workspace exhausts its own pod, not the node. Kubernetes has no per-pod field for this;
# it is a node setting (docs/security.md).
podPidsLimit: 1024
EOF

	put "$CFG/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $CFG/kube-proxy.kubeconfig
hostnameOverride: ${NODE_NAME}
mode: iptables
clusterCIDR: ${POD_CIDR}
bindAddress: ${NODE_IP}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["primary"]
iptables:
  localhostNodePorts: false
  masqueradeAll: false
  minSyncPeriod: 1s
  syncPeriod: 30s
# Zero means: leave the host's conntrack settings alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
}

# ---------------------------------------------------------------------------------------------
# processes

start() { # component args...
	local name="$1"
	shift
	if alive "$name"; then
		log "$name: already running (pid $(pid_of "$name"))"
		return 0
	fi
	mkdir -p "$LOGS" "$PIDS"
	# setsid: own session, so the daemon outlives the calling make/CI step and its signals.
	# The daemon gets no other inherited descriptor: a caller's flock(1) lock held open by a
	# daemon would never be released.
	(
		for fd in /proc/self/fd/*; do
			fd="${fd##*/}"
			[ "$fd" -gt 2 ] && eval "exec ${fd}>&-" 2>/dev/null
		done
		exec setsid "$(bin "$name")" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null
	) &
	echo $! >"$PIDS/$name.pid"
	log "$name: started (pid $!, log $LOGS/$name.log)"
}

wait_for() { # component description check-command...
	local name="$1" what="$2"
	shift 2
	local deadline=$((SECONDS + READY_TIMEOUT))
	until "$@" >/dev/null 2>&1; do
		if ! alive "$name"; then
			tail -n 30 "$LOGS/$name.log" >&2 || true
			die "$name exited before ${what}; log: $LOGS/$name.log"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			tail -n 30 "$LOGS/$name.log" >&2 || true
			die "$name: ${what} not reached after ${READY_TIMEOUT}s; log: $LOGS/$name.log"
		fi
		sleep 0.5
	done
	log "$name: ${what}"
}

curl_admin() { curl -sf --max-time 3 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$@"; }
node_ready() {
	[ "$(kubectl_ get node "${NODE_NAME}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}
default_sa() { kubectl_ -n default get serviceaccount default; }
ctr_ok() { ctr --address "${CONTAINERD_SOCK}" version; }

# The dynamic volume provisioner (hack/local-provisioner) and the default StorageClass
# "standard", so PersistentVolumeClaims bind as on kind.
start_provisioner() {
	if ! alive local-provisioner; then
		(cd "${REPO_ROOT}" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -o "$S/bin/local-provisioner" ./hack/local-provisioner) ||
			die "building hack/local-provisioner failed"
	fi
	start local-provisioner -kubeconfig "${KUBECONFIG_PATH}" -dir "$S/volumes"
	kubectl_ apply -f - >/dev/null <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: agent-operator.dev/local-path
reclaimPolicy: Delete
volumeBindingMode: Immediate
EOF
}

import_pause() {
	local tar="$S/images/pause.tar"
	if [ ! -f "$tar" ]; then
		log "pause image: building"
		(cd "${REPO_ROOT}" && go_env_for_builds && GOFLAGS=-buildvcs=false go run ./hack/images -images pause -out "$S/images" -quiet)
	fi
	ctr --address "${CONTAINERD_SOCK}" -n k8s.io images import "$tar" >/dev/null
	log "pause image: imported into containerd (k8s.io namespace)"
}

start_apiserver() {
	start kube-apiserver --etcd-servers "http://127.0.0.1:${ETCD_CLIENT_PORT}" \
		--bind-address "${NODE_IP}" --advertise-address "${NODE_IP}" --secure-port "${APISERVER_PORT}" \
		--service-cluster-ip-range "${SERVICE_CIDR}" --allow-privileged=true \
		--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
		--client-ca-file "$PKI/ca.crt" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
		--kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
		--kubelet-certificate-authority "$PKI/ca.crt" --kubelet-preferred-address-types InternalIP \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
		--profiling=false --v=1
	wait_for kube-apiserver "ready (/readyz)" curl_admin "https://${NODE_IP}:${APISERVER_PORT}/readyz"
}

# restart_apiserver SECONDS: stops the API server, keeps it down for SECONDS, starts it again
# with the same flags and waits for /readyz (the chaos e2e spec of docs/security.md).
restart_apiserver() {
	local down="${1:-10}"
	alive kube-apiserver || die "kube-apiserver is not running: run '$0 up' first"
	stop kube-apiserver
	sleep "$down"
	start_apiserver
}

up() {
	require_root
	local t0=$SECONDS
	ensure_packages
	ensure_binaries
	# A cluster whose processes are gone but whose state is still here was killed, not brought
	# down (a session or CI job that ended mid-run). Starting on its etcd would bring back every
	# namespace, operator install and workspace pod it had, and they would compete with whatever
	# runs next: clean it up the way `down` does, so `up` always means an empty cluster unless
	# one is running.
	if [ -d "$S/etcd" ] && ! alive etcd; then
		log "found the state of a cluster that was never brought down (etcd is not running): removing it first"
		down
	fi
	mkdir -p "$S"
	if ! alive etcd && [ -d "$LOGS" ] && [ ! -f "$PIDS/etcd.pid" ]; then
		rm -rf "$S/logs.prev" && mv "$LOGS" "$S/logs.prev"
	fi
	mkdir -p "$LOGS" "$PIDS"
	record_host
	setup_network
	gen_pki
	gen_kubeconfigs
	write_configs
	local tstart=$SECONDS

	start etcd --name "${NODE_NAME}" --data-dir "$S/etcd" \
		--listen-client-urls "http://127.0.0.1:${ETCD_CLIENT_PORT}" --advertise-client-urls "http://127.0.0.1:${ETCD_CLIENT_PORT}" \
		--listen-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" --initial-advertise-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" \
		--initial-cluster "${NODE_NAME}=http://127.0.0.1:${ETCD_PEER_PORT}" --listen-metrics-urls "" \
		--unsafe-no-fsync --snapshot-count 10000 --log-level warn
	wait_for etcd "healthy" curl -sf --max-time 2 "http://127.0.0.1:${ETCD_CLIENT_PORT}/health"

	start_apiserver

	start kube-controller-manager --kubeconfig "$CFG/controller-manager.kubeconfig" \
		--authentication-kubeconfig "$CFG/controller-manager.kubeconfig" --authorization-kubeconfig "$CFG/controller-manager.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
		--root-ca-file "$PKI/ca.crt" --service-account-private-key-file "$PKI/sa.key" \
		--cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
		--flex-volume-plugin-dir "$S/kubelet-plugins" --profiling=false --v=1
	start kube-scheduler --kubeconfig "$CFG/scheduler.kubeconfig" \
		--authentication-kubeconfig "$CFG/scheduler.kubeconfig" --authorization-kubeconfig "$CFG/scheduler.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false --profiling=false --v=1
	start_provisioner
	start containerd --config "$CFG/containerd.toml" --log-level warn
	wait_for containerd "serving on ${CONTAINERD_SOCK}" ctr_ok
	import_pause

	start kubelet --config "$CFG/kubelet.yaml" --kubeconfig "$CFG/kubelet.kubeconfig" \
		--hostname-override "${NODE_NAME}" --node-ip "${NODE_IP}" --root-dir "$S/kubelet" --cert-dir "$S/kubelet/pki" --v=1
	start kube-proxy --config "$CFG/kube-proxy.yaml" --v=1

	wait_for kube-controller-manager "healthy" curl -skf --max-time 2 https://127.0.0.1:10257/healthz
	wait_for kube-scheduler "healthy" curl -skf --max-time 2 https://127.0.0.1:10259/healthz
	wait_for kubelet "healthy (:10248/healthz)" curl -sf --max-time 2 http://127.0.0.1:10248/healthz
	wait_for kubelet "node ${NODE_NAME} Ready" node_ready
	wait_for kube-proxy "healthy (:10256/healthz)" curl -sf --max-time 2 http://127.0.0.1:10256/healthz
	wait_for kube-controller-manager "default ServiceAccount created" default_sa
	wait_for local-provisioner "watching claims (default StorageClass standard)" grep -q 'local-provisioner running' "$LOGS/local-provisioner.log"
	echo "export KUBECONFIG=${KUBECONFIG_PATH}" >"$S/env"
	log "cluster up: components started and ready in $((SECONDS - tstart))s (total $((SECONDS - t0))s)"
	echo "KUBECONFIG=${KUBECONFIG_PATH}"
}

# ---------------------------------------------------------------------------------------------
# teardown

stop() { # component [timeout-seconds]
	local name="$1" timeout="${2:-20}" p
	p="$(pid_of "$name")"
	if [ -z "$p" ] || ! alive "$name"; then
		rm -f "$PIDS/$name.pid"
		return 0
	fi
	kill -TERM "$p" 2>/dev/null || true
	local deadline=$((SECONDS + timeout))
	while kill -0 "$p" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
	if kill -0 "$p" 2>/dev/null; then
		log "$name: did not stop after ${timeout}s, sending SIGKILL"
		kill -KILL "$p" 2>/dev/null || true
		while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
	fi
	rm -f "$PIDS/$name.pid"
	log "$name: stopped"
}

stop_all() { # components...: SIGTERM to all at once, then wait for each (SIGKILL after 30s)
	local c pids=()
	for c in "$@"; do
		if alive "$c"; then
			kill -TERM "$(pid_of "$c")" 2>/dev/null || true
			pids+=("$c")
		else
			rm -f "$PIDS/$c.pid"
		fi
	done
	for c in "${pids[@]}"; do stop "$c" 30; done
}

# Processes whose command line names our state dir (containerd shims carry our socket path).
# Read with bash builtins only: a grep would match its own command line.
state_procs() {
	local p cmd
	for p in /proc/[0-9]*; do
		p="${p#/proc/}"
		[ "$p" = "$$" ] || [ "$p" = "$BASHPID" ] && continue
		[ -r "/proc/$p/cmdline" ] || continue
		cmd="$(cmdline_of "$p")"
		[[ "$cmd" == *"$S/"* ]] && echo "$p"
	done
	return 0
}

cmdline_of() { # pid -> command line with spaces (builtins only)
	local arg out=""
	while IFS= read -r -d '' arg; do out+="$arg "; done 2>/dev/null <"/proc/$1/cmdline" || true
	printf '%s' "$out"
}

# Processes running inside pod cgroups (only meaningful when `up` created the kubepods cgroups).
pod_procs() {
	[ -s "$HOST/cgroups-created" ] || return 0
	local p
	for p in /proc/[0-9]*; do
		grep -q ':/kubepods' "$p/cgroup" 2>/dev/null && echo "${p#/proc/}"
	done
	return 0
}

state_mounts() { # mount points under the state dir, deepest first
	awk -v s="$S/" 'index($5, s) == 1 {print $5}' /proc/self/mountinfo | sed 's/\\040/ /g' | awk '{print length($0) " " $0}' | sort -rn | cut -d' ' -f2-
}

cri_cleanup() {
	alive containerd || return 0
	local crictl
	crictl="$(bin crictl)"
	if [ -x "$crictl" ]; then
		local cc=("$crictl" --runtime-endpoint "unix://${CONTAINERD_SOCK}" --timeout 30s)
		local pods
		pods="$("${cc[@]}" pods -q 2>/dev/null || true)"
		if [ -n "$pods" ]; then
			log "containerd: stopping and removing $(echo "$pods" | wc -l) pod sandbox(es) through CRI"
			# shellcheck disable=SC2086
			"${cc[@]}" stopp $pods >/dev/null 2>&1 || true
			# shellcheck disable=SC2086
			"${cc[@]}" rmp -f $pods >/dev/null 2>&1 || true
		fi
	fi
	# Anything the CRI did not remove: kill the tasks directly.
	local ns id
	for ns in $(ctr --address "${CONTAINERD_SOCK}" namespaces ls -q 2>/dev/null); do
		for id in $(ctr --address "${CONTAINERD_SOCK}" -n "$ns" tasks ls -q 2>/dev/null); do
			ctr --address "${CONTAINERD_SOCK}" -n "$ns" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
			ctr --address "${CONTAINERD_SOCK}" -n "$ns" tasks delete -f "$id" >/dev/null 2>&1 || true
		done
	done
}

# Removes KUBE-* chains (and the jumps to them) that were not there before `up`: a safety net
# behind `kube-proxy --cleanup`, which leaves e.g. KUBE-FIREWALL behind.
iptables_cleanup() {
	local ipt table c rule
	for ipt in iptables ip6tables; do
		command -v "$ipt" >/dev/null || continue
		for table in filter nat mangle raw; do
			local new=()
			for c in $("$ipt-save" -t "$table" 2>/dev/null | sed -n 's/^:\(KUBE-[^ ]*\) .*/\1/p'); do
				grep -q "^:$c " "$HOST/$ipt.before" 2>/dev/null || new+=("$c")
			done
			[ ${#new[@]} -gt 0 ] || continue
			for c in "${new[@]}"; do "$ipt" -t "$table" -F "$c" 2>/dev/null || true; done
			for c in "${new[@]}"; do
				while read -r rule; do
					[ -n "$rule" ] || continue
					# iptables-save quotes comments the way a shell does.
					eval "\"$ipt\" -t $table -D ${rule#-A }" 2>/dev/null || true
				done < <("$ipt-save" -t "$table" 2>/dev/null | grep -E -- "^-A .* -j $c( |\$)" || true)
			done
			for c in "${new[@]}"; do "$ipt" -t "$table" -X "$c" 2>/dev/null || log "WARNING: could not delete $ipt $table chain $c"; done
		done
	done
}

restore_host() {
	iptables_cleanup
	if [ -f "$HOST/sysctls" ]; then
		local k v
		while read -r k v; do
			[ -w "/proc/sys/$k" ] || continue
			[ "$(cat "/proc/sys/$k")" = "$v" ] || echo "$v" >"/proc/sys/$k" 2>/dev/null || log "WARNING: could not restore sysctl $k=$v"
		done <"$HOST/sysctls"
	fi
	while iptables -t nat -D POSTROUTING -s "${POD_CIDR}" ! -d "${POD_CIDR}" -m comment --comment agent-operator-pods -j MASQUERADE 2>/dev/null; do :; done
	if [ -f "$HOST/bridge-created" ] && ip link show "$BRIDGE" >/dev/null 2>&1; then
		ip link del "$BRIDGE"
	fi
	local c
	if [ -f "$HOST/cgroups-created" ]; then
		while read -r c; do
			# Leaf-first removal of the kubelet's cgroup tree.
			[ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
		done <"$HOST/cgroups-created"
	fi
	if [ -f "$HOST/paths-created" ]; then
		while read -r c; do
			[ -e "$c" ] || continue
			# Only remove what holds no real data: dangling symlinks, sockets and empty dirs.
			find "$c" -depth \( -type l -o -type s -o -type d -empty \) -delete 2>/dev/null || true
			find "$c" -depth -path "$c/results/*" -type f -delete 2>/dev/null || true # CNI result cache
			find "$c" -depth -type d -empty -delete 2>/dev/null || true
			if [ -e "$c" ]; then log "WARNING: left $c in place (not empty)"; fi
		done <"$HOST/paths-created"
	fi
}

down() {
	require_root
	local t0=$SECONDS
	if [ ! -d "$S" ]; then
		log "cluster down: nothing to do (${S} does not exist)"
		return 0
	fi
	stop_all kube-proxy kube-scheduler kube-controller-manager local-provisioner kubelet
	cri_cleanup
	stop_all containerd
	stop_all kube-apiserver
	stop_all etcd

	# Leftover shims or container processes of this cluster (identified by our state path or the
	# pod cgroups that `up` created), by pid.
	local p
	for p in $(state_procs) $(pod_procs); do
		log "killing leftover process $p: $(cmdline_of "$p" | cut -c1-160)"
		kill -KILL "$p" 2>/dev/null || true
	done
	sleep 0.5

	if [ -x "$(bin kube-proxy)" ]; then
		"$(bin kube-proxy)" --cleanup --v=0 >>"$LOGS/kube-proxy-cleanup.log" 2>&1 || log "WARNING: kube-proxy --cleanup failed (see $LOGS/kube-proxy-cleanup.log)"
	fi

	local m
	while read -r m; do
		[ -n "$m" ] || continue
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "WARNING: could not unmount $m"
	done < <(state_mounts)

	restore_host
	# Fails (keeping the state for another `down`) if anything is left.
	verify_down

	# Keep the logs for post-mortems; everything else goes.
	local keep
	for keep in "$S"/*; do
		case "$(basename "$keep")" in logs | logs.prev) continue ;; esac
		rm -rf "$keep"
	done
	log "cluster down in $((SECONDS - t0))s (logs kept in $LOGS)"
}

verify_down() {
	local problems=0 p m
	for p in $(state_procs) $(pod_procs); do
		echo "left behind: process $p $(cmdline_of "$p" | cut -c1-160)" >&2
		problems=$((problems + 1))
	done
	while read -r m; do
		[ -n "$m" ] || continue
		echo "left behind: mount $m" >&2
		problems=$((problems + 1))
	done < <(state_mounts)
	if ip link show "$BRIDGE" >/dev/null 2>&1 && [ -f "$HOST/bridge-created" ]; then
		echo "left behind: network interface $BRIDGE" >&2
		problems=$((problems + 1))
	fi
	local ipt c
	for ipt in iptables ip6tables; do
		for c in $("$ipt-save" 2>/dev/null | sed -n 's/^:\(KUBE-[^ ]*\) .*/\1/p'); do
			grep -q "^:$c " "$HOST/$ipt.before" 2>/dev/null && continue
			echo "left behind: $ipt chain $c" >&2
			problems=$((problems + 1))
		done
	done
	if iptables-save 2>/dev/null | grep -q agent-operator-pods; then
		echo "left behind: iptables masquerade rule agent-operator-pods" >&2
		problems=$((problems + 1))
	fi
	local cg
	while read -r cg; do
		[ -n "$cg" ] && [ -e "$cg" ] || continue
		echo "left behind: cgroup $cg" >&2
		problems=$((problems + 1))
	done < <(cat "$HOST/cgroups-created" 2>/dev/null)
	if [ "$problems" -gt 0 ]; then
		die "cluster down left ${problems} thing(s) behind (see above)"
	fi
	log "verified: no process, mount, interface or iptables rule of the cluster is left"
}

status() {
	local c
	for c in "${COMPONENTS_UP[@]}"; do
		if alive "$c"; then
			printf '%-24s running  pid %-8s rss %6s MiB  log %s\n' "$c" "$(pid_of "$c")" \
				"$(($(awk '/^VmRSS/{print $2}' "/proc/$(pid_of "$c")/status") / 1024))" "$LOGS/$c.log"
		else
			printf '%-24s stopped\n' "$c"
		fi
	done
	[ -f "${KUBECONFIG_PATH}" ] && echo "KUBECONFIG=${KUBECONFIG_PATH}"
	return 0
}

case "${1:-}" in
deps) require_root; ensure_packages ;;
up) up ;;
down) down ;;
status) status ;;
restart-apiserver) restart_apiserver "${2:-10}" ;;
env) echo "export KUBECONFIG=${KUBECONFIG_PATH}" ;;
kubeconfig) echo "${KUBECONFIG_PATH}" ;;
*) die "usage: $0 up|down|status|restart-apiserver [seconds]|env|kubeconfig|deps" ;;
esac
