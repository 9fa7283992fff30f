// Package provider holds the seams between the workspace reconciler and the
// outside world: a Container runtime (process, docker, fake) that runs a
// workspace's command over its volume, and a Storage that owns volumes and
// archives (volumes as directories; archives in a BlobStore: fs, s3, fake).
//
// The reconciler owns every database write; providers only act on the world
// and must be idempotent, because a crash between "called" and "recorded"
// makes the reconciler call again with the same arguments.
//
// Tour:
//
//	provider.go        the interfaces, ContainerState, Spec, sentinels
//	idlocks.go         IDLocks: one call at a time per workspace id
//	archive/           the archive format (tar+zstd, sha256, .meta last) over a
//	                   BlobStore, and Storage = volume directories + a BlobStore
//	fs/                BlobStore on a local directory (atomic renames)
//	process/           Container running the command as a detached process
//	fake/              Container and Storage with injectable latency/failures
//	docker/, s3/       Docker Container and S3 BlobStore
package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// ContainerState is what a Container observes for one workspace.
type ContainerState int

const (
	// Missing: no container (or process) exists for the workspace.
	Missing ContainerState = iota
	// Stopped: a container exists but does not run.
	Stopped
	// Running: the workspace's command runs.
	Running
)

func (s ContainerState) String() string {
	switch s {
	case Missing:
		return "missing"
	case Stopped:
		return "stopped"
	case Running:
		return "running"
	}
	return fmt.Sprintf("ContainerState(%d)", int(s))
}

// Spec is everything a Container needs to start one workspace.
type Spec struct {
	ID        string   // workspace id: the container's identity, stable for its life
	Name      string   // human name, for labels and logs only
	Owner     string   // the workspace's owner, for labels only
	Image     string   // container image (docker); ignored by process
	Command   string   // shell command run with `sh -c`; empty = the provider's default
	VolumeDir string   // host directory holding the workspace's files: cwd and HOME
	Env       []string // extra KEY=VALUE environment
	Limits    Limits   // zero fields: the provider's defaults
	// HTTP: Start returns only once the command accepts connections on
	// its PORT (WaitServing), or fails if the command ends first.
	HTTP bool
	// Ports are the workspace's apps' ports besides PORT, which the
	// server reaches too (a provider that filters ingress admits them).
	Ports []int
}

// WaitServing polls until addr's address accepts a TCP connection; gone
// reports (as an error) a command that ended meanwhile. It ends with ctx.
func WaitServing(ctx context.Context, id string, addr func(context.Context) (string, error), gone func(context.Context) error) error {
	var last error
	for {
		a, err := addr(ctx)
		if err == nil {
			var c net.Conn
			if c, err = (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", a); err == nil {
				c.Close()
				return nil
			}
		}
		last = err
		if err := gone(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("provider: workspace %s: its command serves no HTTP on its PORT (%v): %w", id, last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Limits bound a workspace's resources: CPUs (fractional cores), Memory
// (bytes) and Pids (processes and threads). Zero is "no limit of the
// workspace's own".
type Limits struct {
	CPUs   float64
	Memory int64
	Pids   int64
}

// LimitChecker is a Container that cannot enforce every limit: CheckLimits
// says which of l it would not enforce, so the API refuses them at create
// and update instead of ignoring them at start.
type LimitChecker interface {
	CheckLimits(l Limits) error
}

// SpecChecker is a Container that cannot start some specs however often it
// tries (the Docker and Kubernetes providers: a workspace without an image
// when the server has no default one): CheckSpec says why, so the API
// refuses the spec at create and update instead of the reconciler retrying
// its start. Limits are LimitChecker's.
type SpecChecker interface {
	CheckSpec(s Spec) error
}

// Container runs workspaces. Every method is idempotent and safe to call
// from several goroutines for different ids; the reconciler never calls two
// methods for one id at once within a replica.
type Container interface {
	// Start makes the workspace's command run and returns once it does.
	// Starting a running workspace is a no-op.
	Start(ctx context.Context, spec Spec) error
	// Stop stops the command and keeps the volume. Stopping a stopped or
	// missing workspace is a no-op. After Stop, Observe reports Stopped or
	// Missing.
	Stop(ctx context.Context, id string) error
	// Observe reports the workspace's container state. It must not fail
	// for an unknown id: that is Missing.
	Observe(ctx context.Context, id string) (ContainerState, error)
}

// Endpointer is a Container that can tell where a running workspace serves
// HTTP: the command gets a PORT environment variable and Endpoint returns
// the host:port the server's proxy (/w/{id}/) reaches it on.
type Endpointer interface {
	Endpoint(ctx context.Context, id string) (hostport string, err error)
}

// ErrNotRunning is returned by Endpoint for a workspace that is not running.
var ErrNotRunning = errors.New("provider: workspace not running")

// BlobStore stores immutable blobs by key ("archives/<id>/<op>/home.tar.zst").
// Keys use '/' separators and never contain "..".
type BlobStore interface {
	// Put stores r under key. The blob is visible under key only once it
	// is complete (temp name + rename, or a single-object upload); a
	// failed Put leaves nothing under key. Putting an existing key
	// replaces it.
	Put(ctx context.Context, key string, r io.Reader) error
	// Get opens the blob; ErrNotFound if absent.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Stat reports the blob's size and whether it exists.
	Stat(ctx context.Context, key string) (size int64, ok bool, err error)
	// Delete removes the blob; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List returns every complete blob whose key starts with prefix (a
	// Put in progress is not listed), in no particular order.
	List(ctx context.Context, prefix string) ([]BlobInfo, error)
}

// BlobInfo is one listed blob.
type BlobInfo struct {
	Key      string
	Size     int64
	Modified time.Time // when its Put completed
	ETag     string    // the store's tag of the content ("" where the store keeps none)
}

// Storage owns a workspace's volume and archives (the seed's Storage
// Provider). Every method is idempotent.
type Storage interface {
	// VolumePath is where the workspace's volume lives on this host; the
	// Container mounts or uses it as the working directory.
	VolumePath(id string) string
	// VolumeExists reports whether the volume exists.
	VolumeExists(ctx context.Context, id string) (bool, error)
	// Provision creates an empty volume (the PROVISIONING fix: a new
	// workspace has no archive). No-op if it exists.
	Provision(ctx context.Context, id string) error
	// Archive packs the volume into an archive whose key is derived from
	// opID only, so a retry after a crash finds the committed archive and
	// writes nothing again; then it deletes the volume. Returns the key.
	Archive(ctx context.Context, id, opID string) (key string, err error)
	// Restore fills the volume from the archive under key, verifying its
	// checksum and refusing entries that would escape the volume. A
	// complete volume is only ever in place when Restore returns nil.
	Restore(ctx context.Context, id, key string) error
	// DeleteVolume removes the volume; no-op if absent.
	DeleteVolume(ctx context.Context, id string) error
}

// ArchiveStore is a Storage that keeps every archive a workspace's
// ARCHIVING operations wrote (snapshots) and can list and remove them.
type ArchiveStore interface {
	// Archives lists workspace id's archives, newest first, committed
	// ones with their sha256.
	Archives(ctx context.Context, id string) ([]ArchiveInfo, error)
	// Holders lists every workspace id that has blobs (without digests).
	Holders(ctx context.Context) (map[string]*ArchiveHolder, error)
	// DeleteArchive removes one archive, its commit marker first.
	DeleteArchive(ctx context.Context, key string) error
	// Tombstone records that workspace id was deleted at now.
	Tombstone(ctx context.Context, id string, now time.Time) error
	// Forget removes every blob of workspace id.
	Forget(ctx context.Context, id string) error
}

// An Adopter is a Container whose workspaces belong to their owner in a
// way it must be told of when the owner changes (workspace/pool.go).
type Adopter interface {
	// Adopt gives the running workspace id to owner: a warm pool's member
	// just claimed, until then its own (workspace.PoolOwner). Docker moves
	// its container from the pool members' network to owner's. Adopting
	// twice is a no-op.
	Adopt(ctx context.Context, id, owner string) error
}

// A Discarder is a Container that keeps records of a workspace beside its
// processes (the process provider: its output log, pid and exit files):
// Discard removes them once the workspace is deleted, after its Stop, so
// nothing of a deleted workspace's output stays on the host. Discarding
// twice, or what was never there, is a no-op.
type Discarder interface {
	Discard(ctx context.Context, id string) error
}

// Forker is a Storage that can give a new workspace a copy of another's
// files (ws fork): Snapshot packs workspace id's volume into an archive
// under key and leaves the volume in place (the caller makes sure no
// command runs in it meanwhile); CopyArchive copies the committed archive
// under from to to (its .meta last, so to is committed only once whole).
// Both are idempotent.
type Forker interface {
	Snapshot(ctx context.Context, id, key string) error
	CopyArchive(ctx context.Context, from, to string) error
}

// ArchiveInfo is one archive of a workspace.
type ArchiveInfo struct {
	Key       string    `json:"key"`
	Size      int64     `json:"size"`
	SHA256    string    `json:"sha256,omitempty"`
	Created   time.Time `json:"created"`   // when it was committed (its .meta written)
	Committed bool      `json:"committed"` // false: an interrupted write's leftover, never restored
	Current   bool      `json:"current"`   // the one the workspace's next restore uses (filled by the API)
}

// ArchiveHolder is a workspace id that has blobs in the archive storage.
type ArchiveHolder struct {
	ID       string
	Archives []ArchiveInfo // newest first
	Deleted  time.Time     // its tombstone's time; zero if it has none
	Newest   time.Time     // its newest blob's time
}

// Errors a provider returns. The reconciler treats the ones wrapped in a
// *PermanentError as terminal at once (no retries): they need an admin.
var (
	ErrNotFound         = errors.New("provider: not found")
	ErrArchiveNotFound  = errors.New("provider: archive not found")
	ErrMetaNotFound     = errors.New("provider: archive .meta not found")
	ErrChecksumMismatch = errors.New("provider: archive checksum mismatch")
	ErrUnsafePath       = errors.New("provider: archive entry escapes the volume")
	ErrCorruptArchive   = errors.New("provider: corrupt archive")
)

// ErrUnreachable matches (errors.Is) every provider error that means "the
// backend did not answer": the Docker engine is down, the S3 endpoint
// refuses connections. Such failures are retryable; the reconciler records
// them with error_info.reason "Unreachable" and retries them per its
// backoff policy, and the HealthMonitor shows them as "ObserveFailed".
// Backends declare their own sentinel with NewUnreachable so that callers
// can test for either.
var ErrUnreachable = errors.New("provider: backend unreachable")

// NewUnreachable returns a sentinel error with message msg that also
// matches ErrUnreachable under errors.Is (docker.ErrEngineUnreachable,
// s3.ErrUnreachable).
func NewUnreachable(msg string) error { return &unreachableError{msg: msg} }

type unreachableError struct{ msg string }

func (e *unreachableError) Error() string        { return e.msg }
func (e *unreachableError) Is(target error) bool { return target == ErrUnreachable }

// PermanentError marks a failure that retrying cannot fix. Reason is the
// error_info.reason the reconciler records (e.g. "ChecksumMismatch").
type PermanentError struct {
	Reason string
	Err    error
}

func (e *PermanentError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// ReasonError is a retryable failure that names its error_info.reason
// (e.g. a Kubernetes Pod that is "Unschedulable" or in "ImagePullBackOff"):
// the reconciler retries it per its policy like any failure, and records
// Reason instead of the generic ActionFailed.
type ReasonError struct {
	Reason string
	Err    error
}

func (e *ReasonError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *ReasonError) Unwrap() error { return e.Err }

// ChangeNotifier is a Container that learns of its workspaces' changes
// (a process ended, a Pod changed) and can tell the server, which
// publishes each id as a monitor hint instead of waiting for a poll.
type ChangeNotifier interface {
	OnChange(f func(id string))
}

// Permanent wraps err as a PermanentError with reason.
func Permanent(reason string, err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Reason: reason, Err: err}
}

// ArchiveKey is the key every Storage uses for the archive written by
// operation opID of workspace id: deriving it from opID makes a repeated
// Archive after a crash land on the same key.
func ArchiveKey(id, opID string) string {
	return "archives/" + id + "/" + opID + "/home.tar.zst"
}

// MetaKey is the commit marker written after the archive under key.
func MetaKey(key string) string { return key + ".meta" }

// ContainerFuncs adapts functions to a Container (for tests).
type ContainerFuncs struct {
	StartFunc   func(ctx context.Context, spec Spec) error
	StopFunc    func(ctx context.Context, id string) error
	ObserveFunc func(ctx context.Context, id string) (ContainerState, error)
}

func (f ContainerFuncs) Start(ctx context.Context, s Spec) error   { return f.StartFunc(ctx, s) }
func (f ContainerFuncs) Stop(ctx context.Context, id string) error { return f.StopFunc(ctx, id) }
func (f ContainerFuncs) Observe(ctx context.Context, id string) (ContainerState, error) {
	return f.ObserveFunc(ctx, id)
}

var _ Container = ContainerFuncs{}

// LogReader is a Container that keeps its workspaces' command output.
type LogReader interface {
	// Logs writes the last tail lines of id's output (tail <= 0: all of
	// it) to w, then, with follow, what the command writes next, across
	// restarts, until ctx ends.
	Logs(ctx context.Context, id string, tail int, follow bool, w io.Writer) error
}

// Exit is how a workspace's command ended.
type Exit struct {
	Status string    // "exit 3", "signal killed"
	Code   int       // the exit status; -1 when a signal ended it
	At     time.Time // when it ended
	Output string    // the last lines it wrote
}

// ExitError is Start's error for a command that ended at once.
type ExitError struct{ Exit Exit }

func (e *ExitError) Error() string {
	return fmt.Sprintf("the command ended (%s); its last output:\n%s", e.Exit.Status, e.Exit.Output)
}

// ExitReporter is a Container that knows when a workspace's command ended.
type ExitReporter interface {
	// Exited reports the command's end if it ended at or after since and
	// has not been started again; nil when it has not.
	Exited(ctx context.Context, id string, since time.Time) (*Exit, error)
}

// Execer is a Container that can run a command inside a running workspace.
type Execer interface {
	// Exec runs spec.Argv in the workspace (its files, its environment)
	// with stdin (nil: none), streaming its output as it comes, and returns
	// its exit status (128+N when signal N ended it). With spec.TTY the
	// command runs on a terminal: its output (stdout and stderr merged, as
	// a terminal shows them) goes to stdout, and the end of stdin is sent
	// as the terminal's end-of-file character.
	Exec(ctx context.Context, spec ExecSpec, stdin io.Reader, stdout, stderr io.Writer) (status int, err error)
}

// ExecSpec is a command to run in a running workspace.
type ExecSpec struct {
	ID        string
	Name      string // the workspace's name ($GANTRY_WORKSPACE_NAME, as its command has it)
	VolumeDir string // the workspace's files on the host (the process provider's working directory)
	Argv      []string
	Env       []string // the workspace's own KEY=VALUE environment (a container has it already)
	TTY       *TTY     // nil: pipes
}

// TTY asks Exec for a terminal of Size, resized to each size Resize
// delivers until the command ends.
type TTY struct {
	Size   WinSize
	Resize <-chan WinSize
}

// WinSize is a terminal's size in characters.
type WinSize struct{ Rows, Cols uint16 }

// DefaultWinSize is the size of a terminal nobody gave a size for.
var DefaultWinSize = WinSize{Rows: 24, Cols: 80}
