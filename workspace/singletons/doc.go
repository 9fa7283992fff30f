// Package singletons holds the workspace loops that run once per cluster,
// on the leader (leader/: a Postgres advisory lock; always this process on
// SQLite): the HealthMonitor, sole writer of observed_status; the TTL
// manager; the archive GC; the audit retention; the warm pools' refill.
//
// Tour:
//
//	singletons.go  Run…: campaign, run the loops while leader, stop them
//	               when leadership is lost; LeaderStore; Metrics
//	monitor.go     HealthMonitor: observe each workspace, write
//	               observed_status, end an executed operation observed at its
//	               target (workspace.Decide); MonitorStore
//	ttl.go         TTLManager: idle RUNNING → STANDBY, long STANDBY →
//	               PENDING, by CAS on desired_version; TTLStore
//	archivegc.go   ArchiveGC: keep the newest N archives, drop a deleted
//	               workspace's after the retention
//	retention.go   Retention: prune the audit log and expired page sessions
//	pools.go       PoolFiller: keep each template's warm pool at its size
//	               (drain old versions and failed members, add the missing)
package singletons
