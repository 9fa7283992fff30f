package archive

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gantryhq/gantry/workspace/provider"
)

// Snapshots: every archive a workspace's ARCHIVING operations wrote stays
// under archives/<id>/<op>/ until the leader's archive GC removes it (keep
// the newest N; all of a deleted workspace's after the retention). A
// deleted workspace leaves a tombstone, archives/<id>/deleted, whose time
// starts the retention.

var _ provider.ArchiveStore = (*Storage)(nil)

const archivesPrefix = "archives/"

// TombstoneKey marks workspace id as deleted at the blob's time.
func TombstoneKey(id string) string { return archivesPrefix + id + "/deleted" }

// Archives lists workspace id's archives, newest first, with their .meta
// digests (committed archives) and the uncommitted leftovers of
// interrupted writes.
func (s *Storage) Archives(ctx context.Context, id string) ([]provider.ArchiveInfo, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	blobs, err := s.Blobs.List(ctx, archivesPrefix+id+"/")
	if err != nil {
		return nil, err
	}
	h := group(blobs)[id]
	if h == nil {
		return nil, nil
	}
	out := h.Archives[:0]
	for _, a := range h.Archives {
		if a.Committed {
			m, err := ReadMeta(ctx, s.Blobs, a.Key)
			switch {
			case errors.Is(err, provider.ErrMetaNotFound):
				continue // deleted (retention, GC) between the listing and now
			case err != nil:
				return nil, err
			}
			a.SHA256 = m.SHA256
		}
		out = append(out, a)
	}
	return out, nil
}

// Holders lists every workspace id that has blobs, with its archives
// (newest first, without digests) and its tombstone's time.
func (s *Storage) Holders(ctx context.Context) (map[string]*provider.ArchiveHolder, error) {
	blobs, err := s.Blobs.List(ctx, archivesPrefix)
	if err != nil {
		return nil, err
	}
	return group(blobs), nil
}

// group sorts a listing of archives/ into holders by workspace id.
func group(blobs []provider.BlobInfo) map[string]*provider.ArchiveHolder {
	out := map[string]*provider.ArchiveHolder{}
	parts := map[string]*archiveParts{}
	for i := range blobs {
		b := &blobs[i]
		rest, _ := strings.CutPrefix(b.Key, archivesPrefix)
		id, tail, ok := strings.Cut(rest, "/")
		if !ok || rest == b.Key || checkID(id) != nil {
			continue
		}
		h := out[id]
		if h == nil {
			h = &provider.ArchiveHolder{ID: id}
			out[id] = h
		}
		if b.Modified.After(h.Newest) {
			h.Newest = b.Modified
		}
		if tail == "deleted" {
			h.Deleted = b.Modified
			continue
		}
		key, isMeta := strings.CutSuffix(b.Key, ".meta")
		p := parts[key]
		if p == nil {
			p = &archiveParts{id: id}
			parts[key] = p
		}
		if isMeta {
			p.meta = b
		} else {
			p.blob = b
		}
	}
	for key, p := range parts {
		out[p.id].Archives = append(out[p.id].Archives, p.info(key))
	}
	for _, h := range out {
		slices.SortFunc(h.Archives, func(a, b provider.ArchiveInfo) int {
			if c := b.Created.Compare(a.Created); c != 0 {
				return c
			}
			return strings.Compare(b.Key, a.Key) // op ids are UUIDv7: later sorts first
		})
	}
	return out
}

// archiveParts are the blob and the .meta of one archive key.
type archiveParts struct {
	id         string
	blob, meta *provider.BlobInfo
}

// info describes the archive: committed when both parts exist, created
// when its .meta was written (the commit).
func (p *archiveParts) info(key string) provider.ArchiveInfo {
	a := provider.ArchiveInfo{Key: key, Committed: p.blob != nil && p.meta != nil}
	if p.blob != nil {
		a.Size, a.Created = p.blob.Size, p.blob.Modified
	}
	if p.meta != nil {
		a.Created = p.meta.Modified
	}
	return a
}

// DeleteArchive removes the archive under key: its .meta first, so an
// archive half deleted is an uncommitted leftover, never a corrupt one.
func (s *Storage) DeleteArchive(ctx context.Context, key string) error {
	if !strings.HasPrefix(key, archivesPrefix) || strings.HasSuffix(key, ".meta") {
		return fmt.Errorf("archive: %q is not an archive key", key)
	}
	if err := s.Blobs.Delete(ctx, provider.MetaKey(key)); err != nil {
		return err
	}
	return s.Blobs.Delete(ctx, key)
}

// Tombstone records that workspace id was deleted now (the retention of
// its archives starts here).
func (s *Storage) Tombstone(ctx context.Context, id string, now time.Time) error {
	if err := checkID(id); err != nil {
		return err
	}
	return s.Blobs.Put(ctx, TombstoneKey(id), strings.NewReader(now.UTC().Format(time.RFC3339)+"\n"))
}

// Forget removes every blob of workspace id, the tombstone last.
func (s *Storage) Forget(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	blobs, err := s.Blobs.List(ctx, archivesPrefix+id+"/")
	if err != nil {
		return err
	}
	slices.SortFunc(blobs, func(a, b provider.BlobInfo) int {
		// .meta before its archive; the tombstone after everything.
		rank := func(k string) int {
			switch {
			case strings.HasSuffix(k, "/deleted"):
				return 2
			case strings.HasSuffix(k, ".meta"):
				return 0
			}
			return 1
		}
		return rank(a.Key) - rank(b.Key)
	})
	for _, b := range blobs {
		if err := s.Blobs.Delete(ctx, b.Key); err != nil {
			return err
		}
	}
	return nil
}

var _ provider.Forker = (*Storage)(nil)

// Snapshot packs workspace id's volume into an archive under key, leaving
// the volume (a fork's copy of a STANDBY workspace). A committed key is
// kept as it is.
func (s *Storage) Snapshot(ctx context.Context, id, key string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if ok, err := Committed(ctx, s.Blobs, key); err != nil || ok {
		return err
	}
	if ok, err := s.VolumeExists(ctx, id); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("%w: workspace %s has no volume to snapshot", provider.ErrNotFound, id)
	}
	_, err := Write(ctx, s.Blobs, key, s.VolumePath(id))
	return err
}

// CopyArchive copies the committed archive under from to to: the blob,
// then its .meta, so to is committed only once it is whole. The copy's
// digest is the original's (Extract verifies it at restore).
func (s *Storage) CopyArchive(ctx context.Context, from, to string) error {
	if ok, err := Committed(ctx, s.Blobs, to); err != nil || ok {
		return err
	}
	if ok, err := Committed(ctx, s.Blobs, from); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("%w: %s is not a committed archive", provider.ErrArchiveNotFound, from)
	}
	for _, k := range []string{from, provider.MetaKey(from)} {
		rc, err := s.Blobs.Get(ctx, k)
		if err != nil {
			return err
		}
		err = s.Blobs.Put(ctx, to+strings.TrimPrefix(k, from), rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("archive: copy %s: %w", k, err)
		}
	}
	return nil
}
