// Package dsort sorts gensort records, or text lines ordered as GNU sort
// orders them (format.go: recordFormat), spread over several machines: one
// master and N workers talking gRPC (protocol in dsort/dsortpb), each worker
// sorting its share with extsort (linesort for lines). See README.md for the vocabulary, a
// diagram, the skew scheme and the recovery protocol.
//
// # Master
//
// A Master (master.go: MasterConfig, Run and the control loop;
// master_step.go: one step of it, which detects failures, advances the
// job's JobPhase with the pure nextPhase of plan.go and delivers the
// signals signalFor picks) registers workers, computes the partition
// boundaries from their samples (partition.go), opens the shuffle and merge
// barriers and decides when the job has succeeded or must abort. Its RPC
// handlers are in master_rpc.go, its resumable state file in
// master_state.go.
//
// # Worker
//
// A Worker (worker.go: WorkerConfig, Run, registration) is a phase runner
// over small parts, each with explicit inputs and outputs:
//
//	workDir      workdir.go   the locked temp dir: runs/, recv/, s3in/, s3out/, the state file
//	s3Inputs     s3in.go      -I s3://… (and --share K/N) → local copies in s3in/, before sampling
//	sorter       sorter.go    inputs + memoryPlan → runs, cut at the boundaries (sortedInput)
//	pieceServer  serve.go     sortedInput → ShuffleData streams for the partitions' owners
//	fetcher      fetch.go     peer table → this worker's pieces, committed under recv/
//	merger       merge.go     own runs + received pieces → staged partition files
//	output       output.go    staged partitions → partition.<n> and the done marker
//	s3Output     s3out.go     -O s3://…: partitions up as pending multipart uploads, completed at commit
//	heartbeater  supervise.go state and progress → the master; the job's end or a lost master
//
// runPhases (phases.go) chains the seed's phases, waiting between them for
// the master's signals (worker_rpc.go), which carry each phase's input:
//
//	Sampling      sample the inputs, submit the sample
//	Sorting       partition config → memoryPlan (memory.go), sorter, cutRuns
//	Shuffling     peer table → fetcher pulls every piece (shuffle.go); a
//	              partition whose pieces are in is merged at once
//	Merging       wait for those merges, merge the partitions left
//	Completed     then wait for the master: commit on success (shutdown.go)
//
// supervise runs the phases and the heartbeats side by side until the job
// ends; shutdown.go holds the exits and the cleanup every exit runs.
//
// # Shared
//
// state.go holds the worker's states and their transition table,
// errors.go the sentinels, transport.go dialing, the token and job-ID
// interceptors and the error ↔ status code mapping, tls.go the job's
// mutual TLS (loading and checking the files, the plaintext warning),
// tlsconn.go its gRPC credentials (one write for a flush's records,
// refused handshakes logged) and certs.go the CA and certificates
// `gantry sort certs` makes, pbconv.go the
// conversions to and from dsortpb, codec.go the shuffle's chunk decoder,
// metrics.go the Prometheus metrics, done.go (with done_linux.go and
// done_other.go for the files' identities) the done marker's record of what
// a finished worker's output was made from, so that a rerun has nothing to
// do. Both sides take a clock.Clock
// (MasterConfig.Clock, WorkerConfig.Clock) for their heartbeats, the
// silence timeouts (lost, rejoin, master timeout, register timeout on the
// master), the shutdown grace, the phase times and the worker's state
// history; per-call RPC deadlines and the worker's registration (its
// RegisterTimeout and retries) stay on the wall clock, which gRPC and the
// retry policy use.
package dsort
