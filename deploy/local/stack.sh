#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The local single-node Kubernetes: containerd (or CRI-O) + runc + CNI bridge, etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and kubelet, with a simulated NR1.
#   stack.sh up       bring it up (idempotent); images from $NR1_IMAGES are imported; the
#                     container runtime is $NR1_RUNTIME: containerd (default) or crio
#   stack.sh down     tear it down and leave the machine as it was (idempotent)
#   stack.sh deploy [devicePlugin|dra]  deploy the agent with the local kustomize overlay
#                     in that mode (default devicePlugin) and wait until the node offers the
#                     NR1: its extended resources, or the NR1 driver's ResourceSlice
#   stack.sh restart-kubelet  stop and start the kubelet, as an upgrade or crash would
#   stack.sh restart-runtime  stop and start the container runtime; containers keep
#                     running under their shims (containerd) or conmon (CRI-O)
#   stack.sh stop-apiserver, start-apiserver  stop the API server alone (by PID), start it
#                     again and wait until it is ready
#   stack.sh pause-kubelet, resume-kubelet  freeze the kubelet (SIGSTOP), as a hung one,
#                     and thaw it
#   stack.sh resource-health on|off  switch the kubelet's resource health in pod status
#                     (its feature gates; off unless NR1_RESOURCE_HEALTH=on at up) and
#                     restart the kubelet
#   stack.sh kustomization [local|local-dra]  print the kustomization that deploys that
#                     overlay on this stack's runtime
#   stack.sh status   say what runs
#   stack.sh env      print the environment to use kubectl/crictl against it
#   stack.sh machine-state  print what up changes on the machine and down restores (the
#                     sysctls, whether bpffs is mounted), for the check after down
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

CACHE=${NR1_CACHE:-$HOME/.cache/nr1-agent}
STATE=${NR1_LOCAL_STATE:-/var/lib/nr1-local}
RUN=/run/nr1-local
PKI=$STATE/pki
LOGS=$STATE/logs
KUBELET_ROOT=/var/lib/kubelet # the kubelet's device-plugin socket path is fixed under it
CONTAINERD_SOCK=/run/containerd/containerd.sock
CRIO_SOCK=/run/crio/crio.sock
CRIO=$STATE/crio
SIM_DIR=${NR1_SIM_DIR:-/run/nr1-sim}
BRIDGE=nr1br0
POD_CIDR=10.88.0.0/16
SERVICE_CIDR=10.0.0.0/24
SYSCTLS="vm.overcommit_memory kernel.panic kernel.panic_on_oops"
# The stack's OCI registry listens on the node's address at this port.
REGISTRY_PORT=5000
export PATH=$CACHE/path:$PATH:/usr/sbin:/sbin
export KUBECONFIG=$PKI/admin.kubeconfig
NODE=$(hostname | tr '[:upper:]' '[:lower:]')

log() { printf '[stack] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

node_ip() {
  ip -4 route get 192.0.2.255 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1 |
    grep . || ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1 | head -1
}

pid_alive() { [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }

# start NAME CMD...: runs CMD in its own session, logging to $LOGS/NAME.log.
start() {
  local name=$1; shift
  pid_alive "$name" && return 0
  setsid "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! >"$RUN/$name.pid"
}

# start_supervised NAME CMD...: start, with CMD run again a second after it exits, as a
# cluster's kubelet or systemd restarts its control plane: the scheduler exits by design
# when it finds its cache inconsistent (a pod seen bound to another node, as an API
# server restart can leave it). The pid file names the supervising shell, which stops
# CMD when it is stopped.
start_supervised() {
  local name=$1; shift
  pid_alive "$name" && return 0
  # shellcheck disable=SC2016 # expanded by the supervising shell
  setsid bash -c 'trap "kill -TERM \$child 2>/dev/null; wait \$child; exit 0" TERM
    while :; do
      "$@" & child=$!
      wait $child && rc=0 || rc=$?
      echo "[stack] $0 exited ($rc): started again in 1 s"
      sleep 1
    done' "$name" "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! >"$RUN/$name.pid"
}

# wait_for WHAT SECONDS CMD...: polls CMD until it succeeds.
wait_for() {
  local what=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -ge $deadline ] && die "$what not ready after ${secs}s (logs in $LOGS)"
    sleep 0.2
  done
}

stop_pid() {
  local name=$1 f=$RUN/$1.pid
  [ -f "$f" ] || return 0
  local pid; pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

# runtime names the container runtime: the one the running stack was brought up with,
# else $NR1_RUNTIME.
runtime() {
  if [ -f "$RUN/runtime" ]; then cat "$RUN/runtime"; else echo "${NR1_RUNTIME:-containerd}"; fi
}

runtime_sock() {
  case $(runtime) in
    containerd) echo "$CONTAINERD_SOCK" ;;
    crio) echo "$CRIO_SOCK" ;;
    *) die "NR1_RUNTIME must be containerd or crio, got \"$(runtime)\"" ;;
  esac
}

write_configs() {
  local health
  health=$(gate "${NR1_RESOURCE_HEALTH:-off}")
  local ip=$1
  mkdir -p "$STATE/containerd" "$STATE/cni/net.d" "$STATE/kubelet"
  [ "$(runtime)" = crio ] && write_crio_config
  # The stack's registry is trusted by the stack's CA, as a cluster trusts its own
  # registry's: containerd by its hosts directory, CRI-O (containers/image) by the
  # system's per-registry certificate directory, removed by down.
  mkdir -p "$STATE/containerd/certs.d/$ip:$REGISTRY_PORT"
  cat >"$STATE/containerd/certs.d/$ip:$REGISTRY_PORT/hosts.toml" <<EOT
server = "https://$ip:$REGISTRY_PORT"
[host."https://$ip:$REGISTRY_PORT"]
  capabilities = ["pull", "resolve"]
  ca = "$PKI/ca.crt"
EOT
  if [ "$(runtime)" = crio ]; then
    # What down removes: the directories made here, or only the registry's.
    if [ ! -f "$STATE/certs.ours" ]; then
      if [ ! -d /etc/containers ]; then echo /etc/containers; elif [ ! -d /etc/containers/certs.d ]; then echo /etc/containers/certs.d; else echo "/etc/containers/certs.d/$ip:$REGISTRY_PORT"; fi >"$STATE/certs.ours"
    fi
    mkdir -p "/etc/containers/certs.d/$ip:$REGISTRY_PORT"
    cp "$PKI/ca.crt" "/etc/containers/certs.d/$ip:$REGISTRY_PORT/ca.crt"
  fi
  cat >"$STATE/containerd/config.toml" <<EOT
version = 3
root = "$STATE/containerd/root"
state = "/run/containerd"
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "nr1.local/pause:1"
[plugins.'io.containerd.cri.v1.images'.registry]
  config_path = "$STATE/containerd/certs.d"
[plugins.'io.containerd.cri.v1.runtime']
  # The machine lacks CAP_SYS_RESOURCE in the bounding set: without this every sandbox
  # fails writing oom_score_adj.
  restrict_oom_score_adj = true
  # DRA mode's claims reach containers as CDI devices.
  enable_cdi = true
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "$STATE/cni/net.d"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = "$CACHE/path/runc"
  SystemdCgroup = false
EOT
  cat >"$STATE/cni/net.d/10-nr1.conflist" <<EOT
{
  "cniVersion": "1.0.0",
  "name": "nr1-local",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "dataDir": "$STATE/cni/ipam", "ranges": [[{"subnet": "$POD_CIDR"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
EOT
  cat >"$STATE/kubelet/config.yaml" <<EOT
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$(runtime_sock)
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
# The stack's images are imported (nr1.local/…), and the same image is pulled again from
# the stack's registry under its name there by make release's test: the kubelet's record
# of that pull names the registry's image only, and by default (NeverVerifyPreloadedImages)
# it then refuses the imported name to a pod whose pull policy is Never. A cluster pulling
# from its registry alone never meets this.
imagePullCredentialsVerificationPolicy: NeverVerify
# Imported images cannot be pulled again: an image collected is an image lost.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
serializeImagePulls: false
rotateCertificates: false
nodeStatusUpdateFrequency: 2s
syncFrequency: 5s
# The kubelet's resource health (beta, on by default since 1.36) writes one pod status
# entry per allocated device, and a device-plugin unit is one MB: a CG booking most of
# the node would never get a status, and every unit booked costs the kubelet CPU.
featureGates:
  ResourceHealthStatus: $health
  ResourceHealthStatusMessage: $health
EOT
}

# write_crio_config writes CRI-O's configuration: every path it writes under the stack's
# state, cgroupfs as the kubelet's driver, the local pause image, CDI, container events.
write_crio_config() {
  mkdir -p "$CRIO/crio.conf.d"
  cat >"$CRIO/crio.conf" <<EOT
[crio]
root = "$CRIO/storage"
runroot = "$RUN/crio-storage"
storage_driver = "overlay"
log_dir = "$CRIO/pods"
version_file = "$RUN/crio-version"
version_file_persist = "$CRIO/version"
clean_shutdown_file = "$CRIO/clean.shutdown"
[crio.api]
listen = "$CRIO_SOCK"
stream_address = "127.0.0.1"
stream_port = "0"
[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
namespaces_dir = "$RUN/crio-ns"
pinns_path = "$CACHE/path/pinns"
container_exits_dir = "$RUN/crio-exits"
container_attach_socket_dir = "$RUN/crio-attach"
# The kubelet follows containers through CRI's container events.
enable_pod_events = true
irqbalance_config_restore_file = "disable"
log_to_journald = false
[crio.runtime.runtimes.runc]
runtime_path = "$CRIO/runc"
runtime_type = "oci"
runtime_root = "$RUN/crio-runc"
monitor_path = "$(command -v conmon)"
monitor_cgroup = "pod"
monitor_env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
[crio.image]
pause_image = "nr1.local/pause:1"
pause_command = "/pause"
pinned_images = ["nr1.local/pause:1"]
signature_policy = "$CRIO/policy.json"
[crio.network]
network_dir = "$STATE/cni/net.d"
plugin_dirs = ["/usr/lib/cni"]
[crio.nri]
enable_nri = false
EOT
  echo '{"default": [{"type": "insecureAcceptAnything"}]}' >"$CRIO/policy.json"
  # runc is reached through this, which fits a bundle to the machine before runc reads
  # it, as containerd's settings do for containerd:
  # - the machine lacks CAP_SYS_RESOURCE in the bounding set, so no process may lower
  #   its oom_score_adj: oomScoreAdj is raised to the floor (containerd:
  #   restrict_oom_score_adj);
  # - CRI-O asks for hugetlb limits whenever /proc/cgroups lists the controller, which a
  #   hybrid machine does with hugetlb on the unified hierarchy alone, where runc's v1
  #   manager cannot set them: they are dropped (containerd: disable_hugetlb_controller);
  # - CRI-O gives a privileged container every capability it knows, and runc cannot
  #   grant one the bounding set lacks: those are dropped (containerd gives a privileged
  #   container its own bounding set).
  local lacking
  lacking=$(lacking_caps)
  local hugetlb=true
  [ -d /sys/fs/cgroup/hugetlb ] || [ -f /sys/fs/cgroup/cgroup.controllers ] || hugetlb=false
  cat >"$CRIO/runc" <<EOT
#!/bin/sh
bundle= prev=
for a in "\$@"; do
  case \$prev in --bundle|-b) bundle=\$a ;; esac
  case \$a in --bundle=*) bundle=\${a#--bundle=} ;; esac
  prev=\$a
done
if [ -n "\$bundle" ] && [ -f "\$bundle/config.json" ]; then
  jq --argjson floor "\$(cat /proc/self/oom_score_adj)" --argjson hugetlb $hugetlb --argjson lacking '$lacking' '
    if (.process.oomScoreAdj // \$floor) < \$floor then .process.oomScoreAdj = \$floor else . end
    | if \$hugetlb or .linux.resources.hugepageLimits == null then . else del(.linux.resources.hugepageLimits) end
    | if .process.capabilities == null then . else .process.capabilities |= map_values(. - \$lacking) end
  ' "\$bundle/config.json" >"\$bundle/config.json.nr1" && mv "\$bundle/config.json.nr1" "\$bundle/config.json"
fi
exec $CACHE/path/runc "\$@"
EOT
  chmod 0755 "$CRIO/runc"
}

# lacking_caps prints, as a JSON list, the capabilities this machine's bounding set
# lacks, by their OCI names (Linux numbers them in this order).
lacking_caps() {
  local names="CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE
    NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO SYS_CHROOT
    SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE
    AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ
    PERFMON BPF CHECKPOINT_RESTORE"
  local bnd i=0 n out=()
  bnd=$((16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status)))
  for n in $names; do
    (( (bnd >> i) & 1 )) || out+=("\"CAP_$n\"")
    i=$((i + 1))
  done
  local IFS=,
  echo "[${out[*]}]"
}

gate() {
  case $1 in
    on) echo true ;;
    off) echo false ;;
    *) die "resource health: $1 is neither on nor off" ;;
  esac
}

# resource_health switches the kubelet's resource health feature gates and restarts it.
resource_health() {
  local value
  value=$(gate "$1")
  if grep -q '^featureGates:' "$STATE/kubelet/config.yaml"; then
    sed -i -E "s/^(  ResourceHealthStatus(Message)?:) .*/\1 $value/" "$STATE/kubelet/config.yaml"
  else
    printf 'featureGates:\n  ResourceHealthStatus: %s\n  ResourceHealthStatusMessage: %s\n' "$value" "$value" >>"$STATE/kubelet/config.yaml"
  fi
  restart_kubelet
}

import_images() {
  local dir=${NR1_IMAGES:-}
  [ -n "$dir" ] && [ -d "$dir" ] || return 0
  for tar in "$dir"/*.tar; do
    [ -f "$tar" ] || continue
    # Each archive is one image index for amd64 and arm64: the image stays the index,
    # this machine's platform is kept and unpacked, the others' blobs are dropped.
    if [ "$(runtime)" = crio ]; then
      import_crio "$tar"
    else
      ctr -a "$CONTAINERD_SOCK" -n k8s.io images import --local "$tar" >/dev/null
    fi
    log "imported $(basename "$tar")"
  done
}

# import_crio writes one image archive into CRI-O's storage under the name the archive
# gives it, this machine's platform chosen from its index.
import_crio() {
  local tar=$1 name
  name=$(tar -xOf "$tar" index.json | jq -r '.manifests[0].annotations["io.containerd.image.name"] // empty')
  [ -n "$name" ] || die "$tar names no image (io.containerd.image.name)"
  crio-copyimg --root "$CRIO/storage" --runroot "$RUN/crio-storage" --storage-driver overlay \
    --signature-policy "$CRIO/policy.json" --import-from "oci-archive:$tar" --image-name "$name" >/dev/null
}

up() {
  [ "$(id -u)" = 0 ] || die "the local stack needs root"
  local want=${NR1_RUNTIME:-containerd}
  if [ -f "$RUN/runtime" ] && [ "$(cat "$RUN/runtime")" != "$want" ]; then
    die "the stack runs $(cat "$RUN/runtime"), not $want: make down first"
  fi
  case $want in containerd | crio) ;; *) die "NR1_RUNTIME must be containerd or crio, got \"$want\"" ;; esac
  NR1_RUNTIME=$want "$here/build.sh"
  mkdir -p "$STATE" "$RUN" "$LOGS" "$KUBELET_ROOT"
  echo "$want" >"$RUN/runtime"
  if [ ! -f "$STATE/sysctl.saved" ]; then
    for s in $SYSCTLS; do echo "$s=$(sysctl -n "$s")"; done >"$STATE/sysctl.saved"
  fi
  local ip; ip=$(node_ip)
  [ -n "$ip" ] || die "no global IPv4 address for the node"
  "$here/pki.sh" "$PKI" "$NODE" "$ip"
  write_configs "$ip"
  if [ ! -d "$SIM_DIR/dev" ]; then
    mountpoint -q "$SIM_DIR" || { mkdir -p "$SIM_DIR" && mount -t tmpfs -o size=64m,mode=0755 nr1-sim "$SIM_DIR"; }
    "${NR1_BIN:-$here/../../bin}/nr1-sim" --dir "$SIM_DIR" create >&2
  fi

  # bpffs is not mounted at boot here; the agent pins BPF state in it and mounts it with
  # bidirectional propagation, which needs a shared mount.
  if ! mountpoint -q /sys/fs/bpf; then
    mount -t bpf bpf /sys/fs/bpf && touch "$RUN/bpffs.ours"
  fi
  mount --make-shared /sys/fs/bpf

  start_runtime
  import_images
  start_registry "$ip"

  start etcd etcd --name nr1-local --data-dir "$STATE/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster nr1-local=http://127.0.0.1:2380
  wait_for etcd 30 curl -fsS http://127.0.0.1:2379/health

  start_apiserver "$ip"

  start_supervised kube-controller-manager kube-controller-manager --kubeconfig="$PKI/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$PKI/controller-manager.kubeconfig" --authorization-kubeconfig="$PKI/controller-manager.kubeconfig" \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --use-service-account-credentials=true --leader-elect=false --bind-address=127.0.0.1 \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
    --controllers='*,-nodeipam' --node-monitor-grace-period=20s
  start_supervised kube-scheduler kube-scheduler --kubeconfig="$PKI/scheduler.kubeconfig" \
    --authentication-kubeconfig="$PKI/scheduler.kubeconfig" --authorization-kubeconfig="$PKI/scheduler.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1
  start_kubelet
  wait_for "node $NODE Ready" 90 node_ready
  wait_for "default ServiceAccount" 60 kubectl -n default get serviceaccount default
  log "up: node $NODE ($ip); export KUBECONFIG=$KUBECONFIG"
}

# start_registry runs the stack's OCI registry (CNCF distribution) on the node's address,
# serving TLS by the stack's CA: make release pushes there, and the runtime pulls from it.
start_registry() {
  local ip=$1
  mkdir -p "$STATE/registry"
  cat >"$STATE/registry/config.yml" <<EOT
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage:
  filesystem: {rootdirectory: $STATE/registry/data}
  delete: {enabled: true}
http:
  addr: $ip:$REGISTRY_PORT
  tls: {certificate: $PKI/registry.crt, key: $PKI/registry.key}
EOT
  start registry registry serve "$STATE/registry/config.yml"
  wait_for registry 30 curl -fsS --cacert "$PKI/ca.crt" -o /dev/null "https://$ip:$REGISTRY_PORT/v2/"
}

start_runtime() {
  case $(runtime) in
    containerd)
      start containerd containerd --config "$STATE/containerd/config.toml"
      wait_for containerd 30 ctr -a "$CONTAINERD_SOCK" version
      ;;
    crio)
      start crio crio --config "$CRIO/crio.conf" --config-dir "$CRIO/crio.conf.d"
      wait_for CRI-O 60 crictl -r "unix://$CRIO_SOCK" version
      ;;
  esac
}

restart_runtime() {
  local name
  name=$(runtime)
  pid_alive "$name" || die "$name is not running"
  stop_pid "$name"
  start_runtime
  wait_for "$name CRI" 30 crictl -r "unix://$(runtime_sock)" info
}

# The audit log records the agent's own requests only: make e2e checks them against the
# agent's RBAC rules.
AUDIT_LOG=$LOGS/kube-apiserver-audit.log

start_apiserver() {
  local ip=$1
  cat >"$STATE/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: ["system:serviceaccount:nr1-system:nr1-agent"]
  - level: None
POLICY
  start kube-apiserver kube-apiserver --etcd-servers=http://127.0.0.1:2379 \
    --bind-address=0.0.0.0 --secure-port=6443 --advertise-address="$ip" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range="$SERVICE_CIDR" --authorization-mode=Node,RBAC \
    --allow-privileged=true --enable-priority-and-fairness=false \
    --audit-policy-file="$STATE/audit-policy.yaml" --audit-log-path="$AUDIT_LOG" --audit-log-format=json
  wait_for kube-apiserver 60 curl -fsS --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" https://127.0.0.1:6443/readyz
}

# stop_apiserver stops the API server alone, as a crash or an upgrade would: the
# kubelet, the controllers and the pods keep running.
stop_apiserver() {
  pid_alive kube-apiserver || die "kube-apiserver is not running"
  stop_pid kube-apiserver
}

# pause_kubelet freezes the kubelet (SIGSTOP), as a hung kubelet: its sockets stay in
# place and connected but nothing answers. resume_kubelet thaws it.
pause_kubelet() {
  pid_alive kubelet || die "kubelet is not running"
  kill -STOP "$(cat "$RUN/kubelet.pid")"
}

resume_kubelet() {
  pid_alive kubelet || die "kubelet is not running"
  kill -CONT "$(cat "$RUN/kubelet.pid")"
  wait_for "kubelet healthz" 30 curl -fsS http://127.0.0.1:10248/healthz
}

start_kubelet() {
  start kubelet kubelet --config="$STATE/kubelet/config.yaml" --kubeconfig="$PKI/kubelet.kubeconfig" \
    --root-dir="$KUBELET_ROOT" --hostname-override="$NODE"
}

restart_kubelet() {
  stop_pid kubelet
  start_kubelet
  wait_for "kubelet healthz" 30 curl -fsS http://127.0.0.1:10248/healthz
}

deploy() {
  local mode=${1:-devicePlugin} repo overlay
  repo=$(cd "$here/../.." && pwd)
  case $mode in
    devicePlugin) overlay=local ;;
    dra) overlay=local-dra ;;
    *) die "deploy: mode must be devicePlugin or dra, got \"$mode\"" ;;
  esac
  kubectl label node "$NODE" neureality.ai/nr1=true --overwrite >/dev/null
  kubectl apply -k "$(kustomization "$repo/deploy/kustomize" "$overlay")" >/dev/null
  # A re-imported image under the same tag needs new pods to be used.
  kubectl -n nr1-system rollout restart daemonset/nr1-agent >/dev/null
  kubectl -n nr1-system rollout status daemonset/nr1-agent --timeout=120s >/dev/null ||
    die "agent DaemonSet not ready: $(kubectl -n nr1-system get pods -o wide 2>&1)
$(kubectl -n nr1-system get events --sort-by=.lastTimestamp 2>&1 | tail -20)"
  if [ "$mode" = dra ]; then
    wait_for "the NR1 driver's ResourceSlice of node $NODE" 60 nr1_slice
  else
    # Slices a DRA run left would keep offering the NR1 twice (README, moving a node
    # from one mode to the other).
    kubectl delete resourceslices --field-selector "spec.driver=$DRA_DRIVER,spec.nodeName=$NODE" >/dev/null
    wait_for "node allocatable neureality.ai/compute_dma_memory_in_mb" 60 nr1_allocatable
  fi
  log "agent deployed in $mode mode; node $NODE offers the NR1"
}

# kustomization DIR OVERLAY prints the kustomization to deploy: the overlay, with the
# crio component on a CRI-O stack (written under the state directory, which kustomize
# reaches by a relative path only).
kustomization() {
  local dir=$1 overlay=$2
  if [ "$(runtime)" != crio ]; then
    echo "$dir/overlays/$overlay"
    return
  fi
  local k=$STATE/kustomize/$overlay rel
  mkdir -p "$k"
  rel=$(realpath --relative-to="$k" "$dir")
  cat >"$k/kustomization.yaml" <<EOT
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $rel/overlays/$overlay
components:
  - $rel/components/crio
EOT
  echo "$k"
}

DRA_DRIVER=nr1.neureality.ai

nr1_slice() {
  [ -n "$(kubectl get resourceslices --field-selector "spec.driver=$DRA_DRIVER,spec.nodeName=$NODE" -o name)" ]
}

nr1_allocatable() {
  local v
  v=$(kubectl get node "$NODE" -o jsonpath='{.status.allocatable.neureality\.ai/compute_dma_memory_in_mb}')
  [ -n "$v" ] && [ "$v" != 0 ]
}

node_ready() {
  [ "$(kubectl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

down() {
  [ "$(id -u)" = 0 ] || die "the local stack needs root"
  stop_pid kubelet
  if [ -S "$CONTAINERD_SOCK" ] && pid_alive containerd; then
    crictl -r "unix://$CONTAINERD_SOCK" rmp -af >/dev/null 2>&1 || true
  fi
  if [ -S "$CRIO_SOCK" ] && pid_alive crio; then
    crictl -r "unix://$CRIO_SOCK" rmp -af >/dev/null 2>&1 || true
  fi
  for c in kube-scheduler kube-controller-manager kube-apiserver etcd containerd crio registry; do stop_pid "$c"; done
  # Shims whose containers were not removed (the runtime died first) go by their
  # arguments: containerd's namespace, or the bundle under CRI-O's storage.
  pkill -KILL -f "containerd-shim-runc-v2 -namespace k8s.io" 2>/dev/null || true
  pkill -KILL -f "conmon .*$CRIO/" 2>/dev/null || true
  kill_cgroup_tasks
  unmount_under "$KUBELET_ROOT" /run/containerd "$STATE" /run/netns "$SIM_DIR" "$RUN"
  if [ -f "$RUN/bpffs.ours" ]; then
    unmount_under /sys/fs/bpf
  fi
  remove_cgroups
  ip link del "$BRIDGE" 2>/dev/null || true
  cleanup_iptables
  if [ -f "$STATE/sysctl.saved" ]; then
    while IFS== read -r k v; do sysctl -qw "$k=$v" || true; done <"$STATE/sysctl.saved"
  fi
  if [ -f "$STATE/certs.ours" ]; then rm -rf "$(cat "$STATE/certs.ours")"; fi
  rm -rf "$STATE" "$KUBELET_ROOT" /var/lib/nr1-agent /var/log/pods /var/log/containers "$RUN" /run/containerd /run/crio "$SIM_DIR" /run/netns/cni-* 2>/dev/null || true
  # The CDI specs of DRA claims whose pods were removed without the kubelet unpreparing them.
  rm -f /var/run/cdi/nr1.neureality.ai_*.json 2>/dev/null || true
  log "down"
}

kubepods_dirs() {
  for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods.slice; do
    [ -d "$d" ] && echo "$d"
  done
  return 0
}

# kill_cgroup_tasks kills whatever still runs in the pods' cgroups.
kill_cgroup_tasks() {
  local d
  for d in $(kubepods_dirs); do
    find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | xargs -r kill -KILL 2>/dev/null || true
  done
  sleep 0.2
}

remove_cgroups() {
  local d
  for d in $(kubepods_dirs); do
    for _ in 1 2 3 4 5; do
      find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [ -d "$d" ] || break
      sleep 0.2
    done
  done
}

unmount_under() {
  local root m
  for root in "$@"; do
    [ -e "$root" ] || continue
    root=$(readlink -f "$root")
    # Deepest first.
    awk -v r="$root" '$5 == r || index($5, r "/") == 1 {print $5}' /proc/self/mountinfo | sort -r |
      while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  done
}

cleanup_iptables() {
  command -v iptables-save >/dev/null || return 0
  local t c
  for t in filter nat mangle; do
    for c in $(iptables -t "$t" -S 2>/dev/null | awk '$1 == "-N" && ($2 ~ /^KUBE-/ || $2 ~ /^CNI-/) {print $2}'); do
      { iptables -t "$t" -S 2>/dev/null | grep -E "^-A [A-Z-]+ .*-j $c( |$)" | sed 's/^-A/-D/' |
        while read -r rule; do eval "iptables -t $t $rule" 2>/dev/null || true; done; } || true
      iptables -t "$t" -F "$c" 2>/dev/null || true
    done
    for c in $(iptables -t "$t" -S 2>/dev/null | awk '$1 == "-N" && ($2 ~ /^KUBE-/ || $2 ~ /^CNI-/) {print $2}'); do
      iptables -t "$t" -X "$c" 2>/dev/null || true
    done
  done
}

machine_state() {
  for s in $SYSCTLS; do echo "$s=$(sysctl -n "$s")"; done
  if mountpoint -q /sys/fs/bpf; then echo "bpffs=mounted"; else echo "bpffs=unmounted"; fi
}

status() {
  echo "runtime: $(runtime)"
  for c in containerd crio etcd kube-apiserver kube-controller-manager kube-scheduler kubelet registry; do
    if pid_alive "$c"; then echo "$c: running (pid $(cat "$RUN/$c.pid"))"; else echo "$c: stopped"; fi
  done
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  machine-state) machine_state ;;
  deploy) deploy "${2:-devicePlugin}" ;;
  restart-kubelet) restart_kubelet ;;
  restart-runtime) restart_runtime ;;
  stop-apiserver) stop_apiserver ;;
  start-apiserver) start_apiserver "$(node_ip)" ;;
  pause-kubelet) pause_kubelet ;;
  resume-kubelet) resume_kubelet ;;
  resource-health) resource_health "${2:-}" ;;
  kustomization) kustomization "$(cd "$here/../kustomize" && pwd)" "${2:-local}" ;;
  env) echo "export KUBECONFIG=$KUBECONFIG PATH=$CACHE/path:\$PATH CONTAINER_RUNTIME_ENDPOINT=unix://$(runtime_sock) NR1_RUNTIME=$(runtime) NR1_AUDIT_LOG=$AUDIT_LOG NR1_REGISTRY=$(node_ip):$REGISTRY_PORT NR1_REGISTRY_CA=$PKI/ca.crt" ;;
  *) echo "usage: $0 up|down|deploy [devicePlugin|dra]|restart-kubelet|restart-runtime|stop-apiserver|start-apiserver|pause-kubelet|resume-kubelet|resource-health on|off|status|env|machine-state" >&2; exit 2 ;;
esac
