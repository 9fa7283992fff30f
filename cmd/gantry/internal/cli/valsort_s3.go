package cli

import (
	"cmp"
	"context"
	"fmt"
	"path"
	"runtime"
	"slices"
	"strings"

	"github.com/gantryhq/gantry/internal/par"
	"github.com/gantryhq/gantry/internal/progress"
	"github.com/gantryhq/gantry/record"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/s3"
)

// isS3URL reports whether a gensort or valsort argument names S3 objects
// (s3://bucket/prefix?endpoint=http://host:port) rather than local files.
func isS3URL(arg string) bool { return strings.HasPrefix(arg, "s3://") }

// openS3Parent opens the store of the s3:// URL raw one level up, on the
// parent of the URL's prefix, and returns the prefix's last part ("" for a
// bucket's root): the key of the object the URL names, or of the "directory"
// it names, in the store. It checks the store before any work (the endpoint
// answers, the credentials are accepted, the bucket exists).
func openS3Parent(ctx context.Context, raw string) (*s3.BlobStore, string, error) {
	cfg, err := s3.ParseURL(raw)
	if err != nil {
		return nil, "", err
	}
	dir, base := path.Split(cfg.Prefix)
	cfg.Prefix = dir
	bs, err := s3.New(ctx, cfg)
	if err != nil {
		return nil, "", err
	}
	if err := bs.Check(ctx); err != nil {
		bs.Close()
		return nil, "", err
	}
	return bs, base, nil
}

// valsortPart is one piece of valsort's sequence when some argument is an
// s3:// URL: a run of consecutive local files (validated together, as
// without S3), or one object of a store.
type valsortPart struct {
	files []string          // the local files, when bs is nil
	bs    *s3.BlobStore     // the object's store
	obj   provider.BlobInfo // the object (key relative to bs)
}

// validateWithS3 is validateRecordFiles for arguments of which some are
// s3:// URLs: the local files and the objects, in the order given, as one
// sequence. Runs of local files are validated as without S3, the objects in
// parallel (at most --threads at once), each in one streaming pass; the
// summaries are combined in order, which checks the seams between them.
func validateWithS3(ctx context.Context, env *Env, o valsortOptions, args []string) (valsortResult, error) {
	var res valsortResult
	var stores []*s3.BlobStore
	defer func() {
		for _, bs := range stores {
			bs.Close()
		}
	}()
	parts, err := valsortParts(ctx, args, o.checksumOnly, &stores)
	if err != nil {
		return res, err
	}
	var total int64
	for _, pt := range parts {
		if pt.bs == nil {
			counts, size := localRecordCounts(pt.files)
			res.names = append(res.names, pt.files...)
			res.counts = append(res.counts, counts...)
			total += size
			continue
		}
		res.names = append(res.names, pt.bs.URL(pt.obj.Key))
		res.counts = append(res.counts, uint64(pt.obj.Size/record.Size))
		total += pt.obj.Size
	}
	p := progress.Start(speedOut(env, o.verbose, o.quiet), "valsort", total, progress.Bytes)
	res.sum, err = validateParts(ctx, parts, record.ValidateOptions{
		Workers: o.workers, ChecksumOnly: o.checksumOnly, Progress: p.Add,
	})
	if err != nil || res.sum.Records == 0 {
		p.Abort()
	} else {
		p.Finish()
	}
	return res, err
}

// valsortParts expands args, in order, into the parts of the sequence: each
// local argument as record.ExpandPaths (ExpandInputPaths with checksumOnly)
// expands it, each s3:// URL into its objects (s3Objects). The stores it
// opens are added to stores, for the caller to close.
func valsortParts(ctx context.Context, args []string, checksumOnly bool, stores *[]*s3.BlobStore) ([]valsortPart, error) {
	expand := record.ExpandPaths
	if checksumOnly {
		expand = record.ExpandInputPaths
	}
	var parts []valsortPart
	for _, a := range args {
		if !isS3URL(a) {
			files, err := expand([]string{a})
			if err != nil {
				return nil, err
			}
			if n := len(parts); n > 0 && parts[n-1].bs == nil {
				parts[n-1].files = append(parts[n-1].files, files...)
			} else {
				parts = append(parts, valsortPart{files: files})
			}
			continue
		}
		bs, objs, err := s3Objects(ctx, a, checksumOnly)
		if err != nil {
			return nil, err
		}
		*stores = append(*stores, bs)
		for _, obj := range objs {
			parts = append(parts, valsortPart{bs: bs, obj: obj})
		}
	}
	return parts, nil
}

// s3Objects opens the store of the s3:// URL raw and returns it with the
// objects the URL stands for, in order: the partition.<n> objects directly
// under its prefix in numeric order (with checksumOnly, every object under
// it in key order), hidden names (".…", the done marker among them)
// skipped. If nothing is under the prefix and the URL names an object, it
// stands for that object, as a local file name does.
func s3Objects(ctx context.Context, raw string, checksumOnly bool) (*s3.BlobStore, []provider.BlobInfo, error) {
	bs, base, err := openS3Parent(ctx, raw)
	if err != nil {
		return nil, nil, err
	}
	objs, err := s3PrefixObjects(ctx, bs, base, checksumOnly)
	if err == nil && len(objs) == 0 && base != "" {
		var size int64
		var ok bool
		if size, ok, err = bs.Stat(ctx, base); ok {
			objs = []provider.BlobInfo{{Key: base, Size: size}}
		}
	}
	if err != nil {
		bs.Close()
		return nil, nil, err
	}
	return bs, objs, nil
}

// s3PrefixObjects lists the objects under base/ in bs (the whole bucket
// when base is "") and keeps those s3Objects describes.
func s3PrefixObjects(ctx context.Context, bs *s3.BlobStore, base string, checksumOnly bool) ([]provider.BlobInfo, error) {
	sub := ""
	if base != "" {
		sub = base + "/"
	}
	list, err := bs.List(ctx, sub)
	if err != nil {
		return nil, err
	}
	visible := list[:0]
	for _, o := range list {
		if !record.HiddenObject(strings.TrimPrefix(o.Key, sub)) {
			visible = append(visible, o)
		}
	}
	if checksumOnly {
		slices.SortFunc(visible, func(x, y provider.BlobInfo) int { return strings.Compare(x.Key, y.Key) })
		return visible, nil
	}
	return partitionObjects(bs, visible, sub)
}

// partitionObjects returns objs (under sub in bs) in partition-number order;
// an object not named partition.<n> directly under sub is an error naming
// it, as a stray file in a local output directory is.
func partitionObjects(bs *s3.BlobStore, objs []provider.BlobInfo, sub string) ([]provider.BlobInfo, error) {
	type part struct {
		n   uint64
		obj provider.BlobInfo
	}
	parts := make([]part, 0, len(objs))
	for _, o := range objs {
		n, ok := record.PartitionNumber(strings.TrimPrefix(o.Key, sub))
		if !ok {
			return nil, fmt.Errorf("%s: not a partition.<n> object; a prefix to validate may hold only partition.<n> objects (--checksum-only takes any)",
				bs.URL(o.Key))
		}
		parts = append(parts, part{n, o})
	}
	slices.SortFunc(parts, func(x, y part) int { return cmp.Compare(x.n, y.n) })
	out := make([]provider.BlobInfo, len(parts))
	for i, p := range parts {
		out[i] = p.obj
	}
	return out, nil
}

// validateParts validates the parts and combines their summaries in order.
// Runs of local files go one after another, each with all opt.Workers; the
// objects are then read at most opt.Workers (0 = GOMAXPROCS) at a time.
func validateParts(ctx context.Context, parts []valsortPart, opt record.ValidateOptions) (record.Summary, error) {
	sums := make([]record.Summary, len(parts))
	var objs []int
	for i, pt := range parts {
		if pt.bs != nil {
			objs = append(objs, i)
			continue
		}
		s, err := record.Validate(ctx, pt.files, opt)
		if err != nil {
			return record.Summary{}, err
		}
		sums[i] = s
	}
	limit := opt.Workers
	if limit <= 0 {
		limit = runtime.GOMAXPROCS(0)
	}
	err := par.Do(ctx, len(objs), limit, func(ctx context.Context, j int) error {
		pt := parts[objs[j]]
		var err error
		sums[objs[j]], err = validateObject(ctx, pt.bs, pt.obj, opt)
		return err
	})
	if err != nil {
		return record.Summary{}, err
	}
	return record.Combine(sums)
}

// validateObject validates one object in one streaming pass.
func validateObject(ctx context.Context, bs *s3.BlobStore, obj provider.BlobInfo, opt record.ValidateOptions) (record.Summary, error) {
	name := bs.URL(obj.Key)
	rc, err := bs.Get(ctx, obj.Key)
	if err != nil {
		return record.Summary{}, err
	}
	defer rc.Close()
	s, err := record.ValidateReader(ctx, name, rc, opt)
	if err != nil {
		return record.Summary{}, err
	}
	if got := int64(s.Records) * record.Size; got != obj.Size {
		return record.Summary{}, fmt.Errorf("%s: read %d bytes, but it was listed with %d: the object changed while being validated",
			name, got, obj.Size)
	}
	return s, nil
}
