package archive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/gantryhq/gantry/workspace/provider"
)

// Storage is a provider.Storage whose volumes are directories under Root
// and whose archives live in Blobs.
//
// Layout under Root: "<id>" is a volume; ".staging/<id>" is a restore in
// progress (renamed to "<id>" only when complete, so a volume that exists
// is always whole).
type Storage struct {
	Root  string
	Blobs provider.BlobStore

	// mkdirs makes Provision's directories one at a time. The kernel
	// changes a directory's entries one at a time anyway (the directory's
	// lock), and callers that wait for that lock spin on a CPU while its
	// holder runs: 224 concurrent Mkdirs under one directory (a convergence's
	// provider calls) made no more directories a second than one caller and
	// took twice its CPU, both cores, that a user's request then waited for.
	mkdirs sync.Mutex
}

var _ provider.Storage = (*Storage)(nil)

// ErrBadID is returned for workspace ids that are not a plain name.
var ErrBadID = errors.New("archive: bad workspace id")

func checkID(id string) error {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, `/\`) || strings.HasPrefix(id, ".") {
		return fmt.Errorf("%w: %q", ErrBadID, id)
	}
	return nil
}

// VolumePath is Root/id.
func (s *Storage) VolumePath(id string) string { return filepath.Join(s.Root, id) }

// VolumeExists reports whether Root/id is a directory.
func (s *Storage) VolumeExists(_ context.Context, id string) (bool, error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	fi, err := os.Stat(s.VolumePath(id))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return fi.IsDir(), nil
}

// Provision creates an empty volume.
func (s *Storage) Provision(_ context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := os.MkdirAll(s.Root, 0o755); err != nil {
		return err
	}
	s.mkdirs.Lock()
	err := os.Mkdir(s.VolumePath(id), 0o755)
	s.mkdirs.Unlock()
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	return err
}

// Archive writes the archive for opID (once) and returns its key; the
// volume is left in place: the reconciler records the key first and then
// calls DeleteVolume, so no crash can leave neither a volume nor a recorded
// archive.
func (s *Storage) Archive(ctx context.Context, id, opID string) (string, error) {
	if err := checkID(id); err != nil {
		return "", err
	}
	key := provider.ArchiveKey(id, opID)
	if ok, err := Committed(ctx, s.Blobs, key); err != nil {
		return "", err
	} else if ok {
		return key, nil
	}
	ok, err := s.VolumeExists(ctx, id)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", provider.Permanent("VolumeMissing", fmt.Errorf("archive: workspace %s has no volume and no committed archive %s", id, key))
	}
	if _, err := Write(ctx, s.Blobs, key, s.VolumePath(id)); err != nil {
		return "", err
	}
	return key, nil
}

// Restore extracts key into the volume unless the volume already exists
// (a restore that completed before a crash).
func (s *Storage) Restore(ctx context.Context, id, key string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if ok, err := s.VolumeExists(ctx, id); err != nil || ok {
		return err
	}
	staging := filepath.Join(s.Root, ".staging", id)
	if err := os.MkdirAll(filepath.Dir(staging), 0o755); err != nil {
		return err
	}
	return Extract(ctx, s.Blobs, key, staging, s.VolumePath(id))
}

// DeleteVolume removes Root/id.
func (s *Storage) DeleteVolume(_ context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	return os.RemoveAll(s.VolumePath(id))
}
