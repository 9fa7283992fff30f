# Sourced by scripts/services.sh: a 3-master Redis Cluster on loopback for the taskq
# cluster tests (GANTRY_TEST_REDIS_CLUSTER=127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003).
# Ports come from GANTRY_REDIS_CLUSTER_PORTS (default "7001 7002 7003"). No persistence:
# scratch space, like the shared single Redis. A no-op when the cluster already answers.
SERVICES+=(redis_cluster)

packages_redis_cluster() {
	command -v redis-server >/dev/null 2>&1 || echo redis-server
	command -v redis-cli >/dev/null 2>&1 || echo redis-tools
}

service_redis_cluster() {
	local ports=(${GANTRY_REDIS_CLUSTER_PORTS:-7001 7002 7003})
	if redis-cli -h 127.0.0.1 -p "${ports[0]}" cluster info 2>/dev/null | grep -q 'cluster_state:ok'; then
		return 0
	fi
	# shellcheck disable=SC2046 # package names have no spaces
	apt_install $(packages_redis_cluster) || return
	local p nodes=()
	for p in "${ports[@]}"; do
		local dir="$state/redis-cluster/$p"
		mkdir -p "$dir"
		if ! redis-cli -h 127.0.0.1 -p "$p" ping >/dev/null 2>&1; then
			rm -f "$dir/nodes.conf" "$dir/dump.rdb"
			redis-server --bind 127.0.0.1 --port "$p" --dir "$dir" --save "" --appendonly no \
				--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 \
				--daemonize yes --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
		fi
		wait_port 127.0.0.1 "$p" 10 || { log "redis cluster node $p did not start (see $dir/redis.log)"; return 1; }
		nodes+=("127.0.0.1:$p")
	done
	if ! redis-cli -h 127.0.0.1 -p "${ports[0]}" cluster info | grep -q 'cluster_known_nodes:3'; then
		redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
	fi
	local i
	for ((i = 0; i < 100; i++)); do
		redis-cli -h 127.0.0.1 -p "${ports[0]}" cluster info | grep -q 'cluster_state:ok' && {
			log "redis cluster on ${nodes[*]}"
			return 0
		}
		sleep 0.1
	done
	log "redis cluster did not reach cluster_state:ok"
	return 1
}
