# shellcheck shell=bash
# A Kubernetes control plane on loopback with simulated nodes, for the workspace
# kubernetes provider's tests. Sourced by scripts/services.sh; also runnable by itself:
#
#   bash scripts/services.d/kubernetes.sh          # build (once) and start
#   bash scripts/services.d/kubernetes.sh stop     # stop what it started
#
# Real: etcd, kube-apiserver, kube-scheduler and kube-controller-manager, built from the
# Go module sources of Kubernetes v1.37.2 (k8s.io/kubernetes with its staging replace lines
# dropped and the k8s.io/* v0.0.0 requirements pinned to v0.37.2; etcd's server through a
# five-line main over go.etcd.io/etcd/server/v3/etcdmain, built in the same go build so the
# two share compiled packages). Simulated: the nodes, by kwok (sigs.k8s.io/kwok), which plays
# the kubelet of every Node object (pods go Pending → Running/Ready, deletions complete) and a
# volume provisioner (claims of the storage class "gantry-sim" get a bound hostPath volume);
# no container runs and no volume holds bytes. The stages kwok plays are in kubernetes/.
#
# Binaries are cached under $GANTRY_CACHE/k8s-v1.37.2 (first build: about 4–6 minutes on 2
# cores); state (etcd data, certificates, logs, kubeconfig) under $GANTRY_SERVICES_DIR/kubernetes.
# It writes an admin kubeconfig to $GANTRY_SERVICES_DIR/kubernetes/kubeconfig and does
# nothing when the API server already answers.
#
#   GANTRY_KUBE_PORT    the API server's port on 127.0.0.1 (default 16443)
#   GANTRY_KUBE_NODES   fake nodes to create (default 4; 16 CPUs, 64 GiB, 110 pods each)

kube_version=v1.37.2
kube_staging_version=v0.37.2
kwok_version=v0.8.0

kube_cache() { echo "${GANTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gantry}/k8s-$kube_version"; }
kube_state() { echo "${GANTRY_SERVICES_DIR:-${TMPDIR:-/tmp}/gantry-services}/kubernetes"; }
kube_port() { echo "${GANTRY_KUBE_PORT:-16443}"; }
kube_log() { echo "services.sh: kubernetes: $*" >&2; }

# build_kubernetes builds the control plane and kwok into the cache unless they are there,
# under the cache's build lock (a background prepare and the service never build twice).
build_kubernetes() {
	local cache b
	cache=$(kube_cache)
	mkdir -p "$cache/bin"
	(
		flock 9
		for b in etcd kube-apiserver kube-scheduler kube-controller-manager kwok; do
			[ -x "$cache/bin/$b" ] || { kube_build "$cache" || exit 1; break; }
		done
	) 9>"$cache/build.lock"
}

# kube_build builds the five binaries in one go build of one module, so that they share
# every compiled package (about 13 CPU-minutes from an empty Go build cache).
kube_build() {
	local cache=$1 src mod
	src="$cache/src"
	kube_log "building etcd, kube-apiserver, kube-scheduler, kube-controller-manager $kube_version and kwok $kwok_version from Go module sources (a few minutes)"
	mod=$(cd "$cache" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$kube_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -n "$mod" ] && [ -d "$mod" ] || { kube_log "go mod download k8s.io/kubernetes@$kube_version failed"; return 1; }
	rm -rf "$src" && cp -r "$mod" "$src" && chmod -R u+w "$src" || return 1
	# The module's go.mod points its k8s.io/* staging modules at ./staging (replace lines);
	# the same modules are published at v0.<minor>: drop the replace block, pin them.
	sed -i -e '/^replace ($/,/^)$/d' -e "s#^\(\t*k8s\.io/[a-z0-9-]*\) v0\.0\.0\$#\1 $kube_staging_version#" "$src/go.mod"
	mkdir -p "$src/gantry/etcd"
	cat >"$src/gantry/etcd/main.go" <<-'EOF'
		// Command etcd is etcd's server, built in the Kubernetes module so that the two share
		// their compiled dependencies.
		package main

		import (
			"os"

			"go.etcd.io/etcd/server/v3/etcdmain"
		)

		func main() { etcdmain.Main(os.Args) }
	EOF
	(
		cd "$src" &&
			GOWORK=off GOFLAGS=-mod=mod go get "sigs.k8s.io/kwok@$kwok_version" &&
			GOWORK=off GOFLAGS=-mod=mod go build -trimpath -ldflags='-s -w' -o "$cache/bin/" \
				./cmd/kube-apiserver ./cmd/kube-scheduler ./cmd/kube-controller-manager ./gantry/etcd \
				sigs.k8s.io/kwok/cmd/kwok
	) || {
		kube_log "go build of the control plane failed"
		return 1
	}
}

prepare_kubernetes() {
	kube_ready && kube_all_alive && return 0
	build_kubernetes >/dev/null 2>&1 || true
}

kube_ready() {
	local st
	st=$(kube_state)
	[ -s "$st/kubeconfig" ] && [ -s "$st/pki/ca.crt" ] || return 1
	curl -fsS -m 2 --cacert "$st/pki/ca.crt" "https://127.0.0.1:$(kube_port)/readyz" >/dev/null 2>&1
}

# kube_pki makes a CA, the API server's serving certificate, an admin client certificate
# (group system:masters) and the service-account signing key, once.
kube_pki() {
	local pki=$1
	[ -s "$pki/admin.crt" ] && return 0
	mkdir -p "$pki" && chmod 700 "$pki"
	(
		cd "$pki" || exit 1
		openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=gantry-test-ca" \
			-keyout ca.key -out ca.crt 2>/dev/null &&
			openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout apiserver.key -out apiserver.csr 2>/dev/null &&
			printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,IP:10.96.0.1\nextendedKeyUsage=serverAuth\n' >apiserver.ext &&
			openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile apiserver.ext -out apiserver.crt 2>/dev/null &&
			openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=gantry-admin" -keyout admin.key -out admin.csr 2>/dev/null &&
			printf 'extendedKeyUsage=clientAuth\n' >admin.ext &&
			openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile admin.ext -out admin.crt 2>/dev/null &&
			openssl genrsa -out sa.key 2048 2>/dev/null && openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	) || { kube_log "openssl failed making the certificates in $pki"; return 1; }
}

kube_kubeconfig() {
	local st=$1
	cat >"$st/kubeconfig.tmp" <<-EOF
		apiVersion: v1
		kind: Config
		clusters:
		- name: gantry-test
		  cluster:
		    server: https://127.0.0.1:$(kube_port)
		    certificate-authority: $st/pki/ca.crt
		users:
		- name: gantry-admin
		  user:
		    client-certificate: $st/pki/admin.crt
		    client-key: $st/pki/admin.key
		contexts:
		- name: gantry-test
		  context: {cluster: gantry-test, user: gantry-admin}
		current-context: gantry-test
	EOF
	mv "$st/kubeconfig.tmp" "$st/kubeconfig"
}

# kube_start NAME ARGS...: starts a binary of the cache in the background, detached, with
# its log and pid file in the state dir.
kube_start() {
	local name=$1 st
	shift
	st=$(kube_state)
	# 8>&- 9>&-: the daemon must not inherit (and keep holding) the start or build lock.
	setsid nohup "$(kube_cache)/bin/$name" "$@" >"$st/$name.log" 2>&1 </dev/null 8>&- 9>&- &
	echo $! >"$st/$name.pid"
}

kube_all_alive() {
	local name
	for name in etcd kube-apiserver kube-scheduler kube-controller-manager kwok; do
		kube_alive "$name" || return 1
	done
}

# kube_alive NAME: its pid file names a live process that runs NAME (not a stranger that got
# the pid after a reboot: kube_stop kills what this says is alive).
kube_alive() {
	local f pid
	f="$(kube_state)/$1.pid"
	[ -s "$f" ] || return 1
	pid=$(cat "$f")
	kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "/bin/$1 "
}

# kube_apiserver_args are the API server's flags.
kube_apiserver_args() {
	local st=$1
	cat <<-EOF
		--etcd-servers=http://127.0.0.1:12379
		--bind-address=127.0.0.1
		--advertise-address=127.0.0.1
		--secure-port=$(kube_port)
		--endpoint-reconciler-type=none
		--service-cluster-ip-range=10.96.0.0/16
		--client-ca-file=$st/pki/ca.crt
		--tls-cert-file=$st/pki/apiserver.crt
		--tls-private-key-file=$st/pki/apiserver.key
		--service-account-issuer=https://kubernetes.default.svc
		--service-account-key-file=$st/pki/sa.pub
		--service-account-signing-key-file=$st/pki/sa.key
		--authorization-mode=Node,RBAC
		--kubelet-preferred-address-types=InternalIP
		--cert-dir=$st/apiserver-certs
	EOF
}

packages_kubernetes() {
	command -v openssl >/dev/null 2>&1 || echo openssl
	command -v curl >/dev/null 2>&1 || echo curl
}

service_kubernetes() {
	local st
	st=$(kube_state)
	kube_ready && kube_all_alive && return 0
	# shellcheck disable=SC2046 # package names have no spaces
	apt_install $(packages_kubernetes) || return 1
	mkdir -p "$st"
	build_kubernetes || return 1
	# One start at a time: services.sh starts this in the background (make test) while a
	# test may ask for it (scripts/services.sh kubernetes); the second finds it running.
	(
		flock 8
		kube_ready && kube_all_alive && exit 0
		kube_up
	) 8>"$st/start.lock"
}

# kube_up starts whatever of the control plane and kwok is not running.
kube_up() {
	local st cache port i
	st=$(kube_state)
	cache=$(kube_cache)
	port=$(kube_port)
	kube_pki "$st/pki" || return 1
	kube_kubeconfig "$st"
	if ! kube_alive etcd; then
		kube_start etcd --name gantry-test --data-dir "$st/etcd" \
			--listen-client-urls http://127.0.0.1:12379 --advertise-client-urls http://127.0.0.1:12379 \
			--listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 \
			--initial-cluster gantry-test=http://127.0.0.1:12380 --listen-metrics-urls http://127.0.0.1:12381 \
			--quota-backend-bytes 8589934592 --unsafe-no-fsync
		wait_port 127.0.0.1 12379 30 || { kube_log "etcd did not start (see $st/etcd.log)"; return 1; }
	fi
	# apiserver.cmd: the binary, then one flag per line (tests start a second API server
	# on the same etcd from it, with another --secure-port).
	{
		echo "$cache/bin/kube-apiserver"
		kube_apiserver_args "$st"
	} >"$st/apiserver.cmd"
	if ! kube_alive kube-apiserver; then
		mapfile -t args < <(tail -n +2 "$st/apiserver.cmd")
		kube_start kube-apiserver "${args[@]}"
	fi
	for ((i = 0; i < 600; i++)); do
		curl -fsS -m 2 --cacert "$st/pki/ca.crt" "https://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
		sleep 0.1
	done
	kube_ready || { kube_log "kube-apiserver is not ready on 127.0.0.1:$port (see $st/kube-apiserver.log)"; return 1; }
	kube_alive kube-scheduler || kube_start kube-scheduler --kubeconfig "$st/kubeconfig" --leader-elect=false \
		--bind-address 127.0.0.1 --secure-port 20259 --kube-api-qps 1000 --kube-api-burst 2000
	kube_alive kube-controller-manager || kube_start kube-controller-manager --kubeconfig "$st/kubeconfig" \
		--leader-elect=false --bind-address 127.0.0.1 --secure-port 20257 \
		--service-account-private-key-file "$st/pki/sa.key" --root-ca-file "$st/pki/ca.crt" \
		--use-service-account-credentials=false --kube-api-qps 1000 --kube-api-burst 2000
	# What `kubectl logs` shows of any workspace container, and where `kubectl exec` runs:
	# kwok's server (the nodes' kubelet endpoint) runs the command on this host, as nobody.
	# (The file is in the container runtime's log format: time, stream, P/F, line.)
	echo "$(date -u +%Y-%m-%dT%H:%M:%S.%NZ) stdout F simulated output of a workspace container (kwok)" >"$st/workspace-container.log"
	kube_stages | sed "s#@LOGS@#$st/workspace-container.log#" >"$st/kwok.yaml"
	kube_alive kwok || kube_start kwok --kubeconfig "$st/kubeconfig" --config "$st/kwok.yaml" \
		--manage-all-nodes=true --cidr 10.128.0.0/12 --node-ip 127.0.0.1 --node-port 20247 --server-address 127.0.0.1:20247 \
		--node-lease-duration-seconds 40
	kube_objects "$st" || return 1
	kube_log "API server on https://127.0.0.1:$port (kubeconfig $st/kubeconfig)"
}

# kube_objects creates, through the API server, the storage class kwok provisions and
# the fake nodes.
kube_objects() {
	local st=$1 n i body
	n=${GANTRY_KUBE_NODES:-4}
	kube_apply "$st" /apis/storage.k8s.io/v1/storageclasses '{"apiVersion":"storage.k8s.io/v1","kind":"StorageClass","metadata":{"name":"gantry-sim","annotations":{"storageclass.kubernetes.io/is-default-class":"true"}},"provisioner":"gantry.dev/simulated","reclaimPolicy":"Delete","volumeBindingMode":"Immediate"}' || return 1
	for ((i = 0; i < n; i++)); do
		body='{"apiVersion":"v1","kind":"Node","metadata":{"name":"sim-node-'$i'","labels":{"type":"kwok","kubernetes.io/hostname":"sim-node-'$i'"}},"status":{"allocatable":{"cpu":"16","memory":"64Gi","pods":"110"},"capacity":{"cpu":"16","memory":"64Gi","pods":"110"}}}'
		kube_apply "$st" /api/v1/nodes "$body" || return 1
	done
}

# kube_apply ST PATH JSON: POSTs an object; one that exists already is fine.
kube_apply() {
	local code
	code=$(curl -sS -m 10 -o /dev/null -w '%{http_code}' --cacert "$1/pki/ca.crt" --cert "$1/pki/admin.crt" --key "$1/pki/admin.key" \
		-H 'Content-Type: application/json' -X POST "https://127.0.0.1:$(kube_port)$2" -d "$3")
	case $code in
	201 | 409) return 0 ;;
	esac
	kube_log "POST $2 answered $code"
	return 1
}

# kube_stop stops what kube_up started and waits until each has exited (SIGKILL after 10 s),
# so that a start right after finds its ports free.
kube_stop() {
	local name pid i
	for name in kwok kube-controller-manager kube-scheduler kube-apiserver etcd; do
		kube_alive "$name" || continue
		pid=$(cat "$(kube_state)/$name.pid")
		kill "$pid" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
		rm -f "$(kube_state)/$name.pid"
	done
	return 0
}

# kube_stages are the stages kwok plays (its Stage API, kwok.x-k8s.io/v1alpha1): nodes turn
# Ready; pods go Running and Ready once scheduled; a deleted pod goes at once; a claim of
# the class gantry-sim gets a hostPath volume made for it (the controller manager's volume
# binder binds the two), and a released volume is deleted. (kwok plays the stages of
# resources other than nodes and pods one at a time, so the fewer steps, the faster.)
kube_stages() {
	cat <<-'EOF'
		apiVersion: kwok.x-k8s.io/v1alpha1
		kind: Stage
		metadata: {name: sim-node-ready}
		spec:
		  resourceRef: {apiGroup: v1, kind: Node}
		  selector:
		    matchExpressions:
		    - {key: '.status.conditions.[] | select( .type == "Ready" ) | .status', operator: NotIn, values: ['True']}
		  next:
		    statusTemplate: |
		      {{ $now := Now }}
		      conditions:
		      {{ range NodeConditions }}
		      - lastHeartbeatTime: {{ $now | Quote }}
		        lastTransitionTime: {{ $now | Quote }}
		        message: {{ .message | Quote }}
		        reason: {{ .reason | Quote }}
		        status: {{ .status | Quote }}
		        type: {{ .type | Quote }}
		      {{ end }}
		      addresses:
		      - {address: {{ NodeIP | Quote }}, type: InternalIP}
		      - {address: {{ .metadata.name | Quote }}, type: Hostname}
		      daemonEndpoints:
		        kubeletEndpoint: {Port: {{ NodePort }}}
		      allocatable:
		      {{ YAML .status.allocatable 1 }}
		      capacity:
		      {{ YAML .status.capacity 1 }}
		      nodeInfo: {architecture: amd64, operatingSystem: linux, kubeletVersion: kwok, containerRuntimeVersion: kwok, kernelVersion: kwok, kubeProxyVersion: kwok, osImage: kwok, bootID: "", machineID: "", systemUUID: ""}
		      phase: Running
		---
		apiVersion: kwok.x-k8s.io/v1alpha1
		kind: Stage
		metadata: {name: sim-pod-ready}
		spec:
		  resourceRef: {apiGroup: v1, kind: Pod}
		  selector:
		    matchExpressions:
		    - {key: .metadata.deletionTimestamp, operator: DoesNotExist}
		    - {key: .spec.nodeName, operator: Exists}
		    - {key: .status.phase, operator: In, values: [Pending]}
		  next:
		    statusTemplate: |
		      {{ $now := Now }}
		      conditions:
		      - {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
		      - {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
		      - {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
		      - {type: PodScheduled, status: "True", lastTransitionTime: {{ $now | Quote }}}
		      containerStatuses:
		      {{ range .spec.containers }}
		      - {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: true, restartCount: 0, state: {running: {startedAt: {{ $now | Quote }}}}}
		      {{ end }}
		      hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
		      podIP: {{ PodIPWith .spec.nodeName false .metadata.uid .metadata.name .metadata.namespace | Quote }}
		      phase: Running
		      startTime: {{ $now | Quote }}
		---
		apiVersion: kwok.x-k8s.io/v1alpha1
		kind: Stage
		metadata: {name: sim-pod-delete}
		spec:
		  resourceRef: {apiGroup: v1, kind: Pod}
		  selector:
		    matchExpressions:
		    - {key: .metadata.deletionTimestamp, operator: Exists}
		  next: {delete: true}
		---
		apiVersion: kwok.x-k8s.io/v1alpha1
		kind: Stage
		metadata: {name: sim-claim-provision}
		spec:
		  resourceRef: {apiGroup: v1, kind: PersistentVolumeClaim}
		  selector:
		    matchExpressions:
		    - cel: {expression: "self.spec.storageClassName == 'gantry-sim'"}
		    - cel: {expression: "!has(self.metadata.deletionTimestamp)"}
		    - cel: {expression: "!has(self.spec.volumeName)"}
		  steps:
		  - apply:
		      template: |
		        apiVersion: v1
		        kind: PersistentVolume
		        metadata:
		          name: sim-{{ .metadata.uid }}
		          annotations: {pv.kubernetes.io/provisioned-by: gantry.dev/simulated}
		        spec:
		          accessModes:
		          {{ YAML .spec.accessModes 2 }}
		          capacity:
		          {{ YAML .spec.resources.requests 2 }}
		          persistentVolumeReclaimPolicy: Delete
		          storageClassName: gantry-sim
		          volumeMode: Filesystem
		          claimRef: {apiVersion: v1, kind: PersistentVolumeClaim, name: {{ .metadata.name | Quote }}, namespace: {{ .metadata.namespace | Quote }}, uid: {{ .metadata.uid | Quote }}}
		          hostPath: {path: "/sim/{{ .metadata.uid }}", type: DirectoryOrCreate}
		---
		apiVersion: kwok.x-k8s.io/v1alpha1
		kind: Stage
		metadata: {name: sim-volume-release}
		spec:
		  resourceRef: {apiGroup: v1, kind: PersistentVolume}
		  selector:
		    matchExpressions:
		    - cel: {expression: "self.spec.storageClassName == 'gantry-sim'"}
		    - cel: {expression: "has(self.status.phase) && self.status.phase == 'Released'"}
		  next: {delete: true}
		---
		apiVersion: kwok.x-k8s.io/v1alpha1
		kind: ClusterLogs
		metadata: {name: sim-logs}
		spec:
		  logs:
		  - containers: [workspace]
		    logsFile: @LOGS@
		---
		apiVersion: kwok.x-k8s.io/v1alpha1
		kind: ClusterExec
		metadata: {name: sim-exec}
		spec:
		  execs:
		  - containers: [workspace]
		    local:
		      workDir: /tmp
		      securityContext: {runAsUser: 65534, runAsGroup: 65534}
	EOF
}

SERVICES+=(kubernetes)

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	if [ "${1:-}" = stop ]; then
		kube_stop
	else # start through services.sh: its lock, its helpers (apt_install, wait_port)
		exec bash "$(dirname "$0")/../services.sh" kubernetes
	fi
fi
