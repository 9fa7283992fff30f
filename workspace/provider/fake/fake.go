// Package fake is an in-memory provider.Container and provider.Storage for
// tests and benchmarks: every call sleeps Latency, can be made to fail or
// hang per workspace, and is counted. A call that finds the world already in
// the state it would produce (Start of a running container, Archive of a
// committed key, Restore over an existing volume…) or that overlaps another
// call for the same workspace is counted as a duplicate: the reconciler must
// never cause one.
package fake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gantryhq/gantry/workspace/provider"
)

// Op names a provider call.
type Op string

const (
	Start     Op = "start"
	Stop      Op = "stop"
	Provision Op = "provision"
	Archive   Op = "archive"
	Restore   Op = "restore"
	DeleteVol Op = "delete_volume"
)

// ErrInjected is the failure injected by Fail.
var ErrInjected = errors.New("fake: injected failure")

// Provider is both a Container and a Storage.
type Provider struct {
	// Latency is slept by every mutating call (not by observations).
	Latency time.Duration

	// mu protects the fields below.
	mu         sync.Mutex
	containers map[string]provider.ContainerState
	volumes    map[string]bool
	archives   map[string]bool
	failures   map[string]int // "op/id" → remaining injected failures
	hang       map[string]bool
	calls      map[string]map[Op]int
	lastCall   map[string]time.Time // id → when its latest mutating call began
	inflight   map[string]int
	duplicates []string
	crashes    map[string]crash // id → starts whose command ends at once
	exits      map[string]provider.Exit
}

type crash struct {
	n      int
	status string
	code   int
}

var (
	_ provider.Container    = (*Provider)(nil)
	_ provider.Storage      = (*Provider)(nil)
	_ provider.ExitReporter = (*Provider)(nil)
)

// New returns an empty fake world.
func New(latency time.Duration) *Provider {
	return &Provider{
		Latency:    latency,
		containers: map[string]provider.ContainerState{},
		volumes:    map[string]bool{},
		archives:   map[string]bool{},
		failures:   map[string]int{},
		hang:       map[string]bool{},
		calls:      map[string]map[Op]int{},
		lastCall:   map[string]time.Time{},
		inflight:   map[string]int{},
		crashes:    map[string]crash{},
		exits:      map[string]provider.Exit{},
	}
}

// Crash makes the commands of id's next n starts end right after their
// start returned, with status ("exit 3") and code: Observe then reports
// Stopped and Exited reports the end.
func (p *Provider) Crash(id string, n int, status string, code int) {
	p.mu.Lock()
	p.crashes[id] = crash{n, status, code}
	p.mu.Unlock()
}

// End makes id's running command end now with status and code, as a
// command that crashes after running a while.
func (p *Provider) End(id, status string, code int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.containers[id] == provider.Running {
		p.containers[id] = provider.Stopped
		p.exits[id] = provider.Exit{Status: status, Code: code, At: time.Now(), Output: "running\nthen failed\n"}
	}
}

// Exited reports the end of id's command since since (see Crash).
func (p *Provider) Exited(_ context.Context, id string, since time.Time) (*provider.Exit, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.exits[id]
	if !ok || e.At.Before(since.Truncate(time.Millisecond)) || p.containers[id] == provider.Running {
		return nil, nil
	}
	return &e, nil
}

// Fail makes the next n calls of op for id fail.
func (p *Provider) Fail(op Op, id string, n int) {
	p.mu.Lock()
	p.failures[string(op)+"/"+id] = n
	p.mu.Unlock()
}

// Hang makes calls of op for id block until their context ends (or for
// ever, if it never does) — a hung provider.
func (p *Provider) Hang(op Op, id string, on bool) {
	p.mu.Lock()
	p.hang[string(op)+"/"+id] = on
	p.mu.Unlock()
}

// Calls reports how many times op was called for id.
func (p *Provider) Calls(id string, op Op) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[id][op]
}

// LastCall reports when id's latest mutating call began (zero if none):
// benchmarks use it as the moment a claim had committed, since the
// reconciler calls the provider only after its claim is written.
func (p *Provider) LastCall(id string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastCall[id]
}

// TotalCalls reports all mutating calls.
func (p *Provider) TotalCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, m := range p.calls {
		for _, c := range m {
			n += c
		}
	}
	return n
}

// Duplicates lists every duplicate call seen ("op id: why").
func (p *Provider) Duplicates() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.duplicates...)
}

// begin counts the call, detects overlap and redundant calls, sleeps, and
// returns the injected failure if any. redundant reports (under mu) whether
// the world is already as the call would leave it.
func (p *Provider) begin(ctx context.Context, op Op, id string, redundant func() bool) (func(), error) {
	p.mu.Lock()
	if p.calls[id] == nil {
		p.calls[id] = map[Op]int{}
	}
	p.calls[id][op]++
	p.lastCall[id] = time.Now()
	p.inflight[id]++
	if p.inflight[id] > 1 {
		p.duplicates = append(p.duplicates, fmt.Sprintf("%s %s: overlaps another call", op, id))
	}
	if redundant() {
		p.duplicates = append(p.duplicates, fmt.Sprintf("%s %s: already done", op, id))
	}
	key := string(op) + "/" + id
	hang := p.hang[key]
	fail := p.failures[key] > 0
	if fail {
		p.failures[key]--
	}
	p.mu.Unlock()
	done := func() { p.mu.Lock(); p.inflight[id]--; p.mu.Unlock() }
	if hang {
		<-ctx.Done()
		done()
		return nil, ctx.Err()
	}
	if p.Latency > 0 {
		t := time.NewTimer(p.Latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			done()
			return nil, ctx.Err()
		}
	}
	if fail {
		done()
		return nil, fmt.Errorf("%w: %s %s", ErrInjected, op, id)
	}
	return done, nil
}

// Start marks the container running (it needs the volume).
func (p *Provider) Start(ctx context.Context, spec provider.Spec) error {
	done, err := p.begin(ctx, Start, spec.ID, func() bool { return p.containers[spec.ID] == provider.Running })
	if err != nil {
		return err
	}
	defer done()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.volumes[spec.ID] {
		return fmt.Errorf("fake: start %s: no volume", spec.ID)
	}
	delete(p.exits, spec.ID)
	if c := p.crashes[spec.ID]; c.n > 0 {
		c.n--
		p.crashes[spec.ID] = c
		p.containers[spec.ID] = provider.Stopped
		p.exits[spec.ID] = provider.Exit{Status: c.status, Code: c.code, At: time.Now(), Output: "starting\nboom\n"}
		return nil
	}
	p.containers[spec.ID] = provider.Running
	return nil
}

// Stop marks the container stopped.
func (p *Provider) Stop(ctx context.Context, id string) error {
	done, err := p.begin(ctx, Stop, id, func() bool { return p.containers[id] != provider.Running })
	if err != nil {
		return err
	}
	defer done()
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.containers[id]; ok {
		p.containers[id] = provider.Stopped
	}
	return nil
}

// Observe reports the container state.
func (p *Provider) Observe(_ context.Context, id string) (provider.ContainerState, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.containers[id], nil
}

// VolumePath is a fake path.
func (p *Provider) VolumePath(id string) string { return "fake://volumes/" + id }

// VolumeExists reports the volume.
func (p *Provider) VolumeExists(_ context.Context, id string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.volumes[id], nil
}

// Provision creates the volume.
func (p *Provider) Provision(ctx context.Context, id string) error {
	done, err := p.begin(ctx, Provision, id, func() bool { return p.volumes[id] })
	if err != nil {
		return err
	}
	defer done()
	p.mu.Lock()
	p.volumes[id] = true
	p.mu.Unlock()
	return nil
}

// Archive commits the archive key of opID.
func (p *Provider) Archive(ctx context.Context, id, opID string) (string, error) {
	key := provider.ArchiveKey(id, opID)
	done, err := p.begin(ctx, Archive, id, func() bool { return p.archives[key] })
	if err != nil {
		return "", err
	}
	defer done()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.volumes[id] && !p.archives[key] {
		return "", provider.Permanent("VolumeMissing", fmt.Errorf("fake: archive %s: no volume", id))
	}
	p.archives[key] = true
	return key, nil
}

// Restore recreates the volume from key.
func (p *Provider) Restore(ctx context.Context, id, key string) error {
	done, err := p.begin(ctx, Restore, id, func() bool { return p.volumes[id] })
	if err != nil {
		return err
	}
	defer done()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.archives[key] {
		return provider.Permanent("ArchiveNotFound", fmt.Errorf("%w: %s", provider.ErrArchiveNotFound, key))
	}
	p.volumes[id] = true
	return nil
}

// DeleteVolume removes the volume.
func (p *Provider) DeleteVolume(ctx context.Context, id string) error {
	done, err := p.begin(ctx, DeleteVol, id, func() bool { return false })
	if err != nil {
		return err
	}
	defer done()
	p.mu.Lock()
	delete(p.volumes, id)
	p.mu.Unlock()
	return nil
}
