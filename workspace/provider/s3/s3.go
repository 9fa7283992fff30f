// Package s3 is a provider.BlobStore on an S3-compatible object store
// (MinIO, Ceph RGW, R2, AWS S3), the archive backend chosen by
// `gantry ws serve --storage s3://bucket/prefix?endpoint=…`.
//
// The archive format and its ".meta" commit marker live once in
// provider/archive over any BlobStore; this package only has to keep the
// BlobStore promise that a blob is visible under its key only when complete:
//
//   - Put streams through minio-go's multipart upload (PartSize parts). The
//     object appears only at CompleteMultipartUpload; a reader error, a
//     cancelled context or a dropped connection aborts the upload, so a
//     truncated archive never exists under its key, and archive.Write never
//     reaches the .meta Put.
//   - Small blobs (under one part, like .meta) go up in one PUT, which S3
//     applies atomically.
//
// Tour:
//
//	s3.go    Config, ParseURL, New, Put/Get/Stat/Delete, error mapping
//
// Addressing is path-style (http://host:port/bucket/key), which every
// S3-compatible server accepts; checksums are MinIO client defaults
// (Content-MD5/sha256 as the server needs), not the CRC32 trailers that
// aws-sdk-go-v2 ≥ 1.73 adds and some servers reject.
package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/gantryhq/gantry/internal/par"
	"github.com/gantryhq/gantry/workspace/provider"
)

// Errors.
var (
	// ErrUnreachable: the endpoint did not answer (server down, wrong
	// address). Retryable; it matches provider.ErrUnreachable, which the
	// reconciler records as reason Unreachable.
	ErrUnreachable = provider.NewUnreachable("s3: endpoint unreachable")
	// ErrBadKey: an empty key, or one with "..", "\\" or a leading "/".
	ErrBadKey = errors.New("s3: bad blob key")
	// ErrBadURL: a storage URL that ParseURL cannot use.
	ErrBadURL = errors.New("s3: bad storage URL")
)

// Config configures a BlobStore. Zero values are the documented defaults.
type Config struct {
	// Endpoint is "host:port" of the S3 API. Required.
	Endpoint string
	// Secure selects https; zero = plain http (loopback MinIO).
	Secure bool
	// Bucket holds the blobs. Required.
	Bucket string
	// Prefix is prepended (with "/") to every key; zero = none.
	Prefix string
	// Region; zero = "us-east-1".
	Region string
	// AccessKey and SecretKey; zero = AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY,
	// else MINIO_ROOT_USER/MINIO_ROOT_PASSWORD from the environment.
	AccessKey, SecretKey string
	// PartSize is the multipart part size; zero = 16 MiB (the S3 minimum
	// is 5 MiB, and 10000 parts of 16 MiB cover a 156 GiB archive).
	PartSize uint64
	// MaxRetries bounds minio-go's own retries of one request (network
	// errors, 5xx); zero = 2. Longer outages are the reconciler's to retry,
	// per its backoff policy, with the reason recorded.
	MaxRetries int
	// CreateBucket makes the bucket on New when it is missing.
	CreateBucket bool
	// Transport carries the requests; nil = minio-go's default.
	Transport http.RoundTripper
	// Logger; nil = discard.
	Logger *slog.Logger
}

func (c *Config) validate() error {
	if c.Endpoint == "" {
		return errors.New("s3: Config.Endpoint is empty (want host:port)")
	}
	if strings.Contains(c.Endpoint, "/") {
		return fmt.Errorf("s3: Config.Endpoint %q: want host:port without a scheme or path", c.Endpoint)
	}
	if c.Bucket == "" {
		return errors.New("s3: Config.Bucket is empty")
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.AccessKey == "" {
		c.AccessKey, c.SecretKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	}
	if c.AccessKey == "" {
		c.AccessKey, c.SecretKey = os.Getenv("MINIO_ROOT_USER"), os.Getenv("MINIO_ROOT_PASSWORD")
	}
	if c.PartSize == 0 {
		c.PartSize = 16 << 20
	}
	if c.PartSize < 5<<20 {
		return fmt.Errorf("s3: Config.PartSize %d: S3 needs at least 5 MiB", c.PartSize)
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = 2
	}
	c.Prefix = strings.Trim(c.Prefix, "/")
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// ParseURL reads "s3://bucket[/prefix]?endpoint=http://host:port[&region=r]
// [&create=1][&part_size=bytes]" into a Config. Credentials come from the
// environment (see Config), never from the URL, so they stay out of process
// listings and logs.
func ParseURL(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("%w: %q: %v", ErrBadURL, raw, err)
	}
	if u.Scheme != "s3" {
		return Config{}, fmt.Errorf("%w: %q: scheme %q, want s3://bucket?endpoint=http://host:port", ErrBadURL, raw, u.Scheme)
	}
	if u.Host == "" {
		return Config{}, fmt.Errorf("%w: %q: no bucket (want s3://bucket?endpoint=…)", ErrBadURL, raw)
	}
	if u.User != nil {
		return Config{}, fmt.Errorf("%w: %q: credentials in the URL; set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY instead", ErrBadURL, raw)
	}
	q := u.Query()
	cfg := Config{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/"), Region: q.Get("region")}
	if cfg.Endpoint, cfg.Secure, err = parseEndpoint(raw, q.Get("endpoint")); err != nil {
		return Config{}, err
	}
	if err := parseURLOptions(raw, q, &cfg); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// parseEndpoint reads the endpoint= parameter ep of the URL raw: the
// endpoint's host:port and whether it is https.
func parseEndpoint(raw, ep string) (host string, secure bool, err error) {
	if ep == "" {
		return "", false, fmt.Errorf("%w: %q: endpoint= is required (e.g. endpoint=http://127.0.0.1:9000)", ErrBadURL, raw)
	}
	eu, err := url.Parse(ep)
	if err != nil || (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" || (eu.Path != "" && eu.Path != "/") {
		return "", false, fmt.Errorf("%w: %q: endpoint %q, want http://host:port or https://host:port", ErrBadURL, raw, ep)
	}
	return eu.Host, eu.Scheme == "https", nil
}

// parseURLOptions reads the create= and part_size= parameters of the URL
// raw into cfg and refuses parameters ParseURL does not know.
func parseURLOptions(raw string, q url.Values, cfg *Config) error {
	if v := q.Get("create"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%w: %q: create=%q, want true or false", ErrBadURL, raw, v)
		}
		cfg.CreateBucket = b
	}
	if v := q.Get("part_size"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: %q: part_size=%q, want a byte count", ErrBadURL, raw, v)
		}
		cfg.PartSize = n
	}
	for k := range q {
		switch k {
		case "endpoint", "region", "create", "part_size":
		default:
			return fmt.Errorf("%w: %q: unknown parameter %q (known: endpoint, region, create, part_size)", ErrBadURL, raw, k)
		}
	}
	return nil
}

// BlobStore is a provider.BlobStore on one bucket. Safe for concurrent use.
type BlobStore struct {
	cfg Config
	cli *minio.Client
	own *http.Transport // the transport New built; nil when Config.Transport was given
}

var _ provider.BlobStore = (*BlobStore)(nil)

// New connects (lazily: no request is made unless CreateBucket is set).
func New(ctx context.Context, cfg Config) (*BlobStore, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// minio-go's default transport, built here so that Close can end its
	// idle connections.
	tr, own := cfg.Transport, (*http.Transport)(nil)
	if tr == nil {
		t, err := minio.DefaultTransport(cfg.Secure)
		if err != nil {
			return nil, fmt.Errorf("s3: transport for %s: %w", cfg.Endpoint, err)
		}
		tr, own = t, t
	}
	cli, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:       cfg.Secure,
		Region:       cfg.Region,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   cfg.MaxRetries,
		Transport:    tr,
	})
	if err != nil {
		return nil, fmt.Errorf("s3: client for %s: %w", cfg.Endpoint, err)
	}
	b := &BlobStore{cfg: cfg, cli: cli, own: own}
	if cfg.CreateBucket {
		if err := b.ensureBucket(ctx); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Close ends the idle keep-alive connections (and their goroutines) of the
// transport New built; a Config.Transport is its owner's to close. The
// store stays usable: a later call dials again.
func (b *BlobStore) Close() error {
	if b.own != nil {
		b.own.CloseIdleConnections()
	}
	return nil
}

func (b *BlobStore) ensureBucket(ctx context.Context) error {
	ok, err := b.cli.BucketExists(ctx, b.cfg.Bucket)
	if err != nil {
		return b.wrap("check bucket", "", err)
	}
	if ok {
		return nil
	}
	err = b.cli.MakeBucket(ctx, b.cfg.Bucket, minio.MakeBucketOptions{Region: b.cfg.Region})
	if err != nil {
		if r := minio.ToErrorResponse(err); r.Code == "BucketAlreadyOwnedByYou" || r.Code == "BucketAlreadyExists" {
			return nil
		}
		return b.wrap("create bucket", "", err)
	}
	return nil
}

func (b *BlobStore) object(key string) (string, error) {
	if key == "" || strings.HasPrefix(key, "/") || strings.Contains(key, "\\") || path.Clean(key) != key {
		return "", fmt.Errorf("%w: %q", ErrBadKey, key)
	}
	for _, p := range strings.Split(key, "/") {
		if p == ".." {
			return "", fmt.Errorf("%w: %q", ErrBadKey, key)
		}
	}
	if b.cfg.Prefix == "" {
		return key, nil
	}
	return b.cfg.Prefix + "/" + key, nil
}

// url is key's address as a user wrote the store's: s3://bucket/prefix/key.
func (b *BlobStore) url(key string) string {
	u := "s3://" + b.cfg.Bucket
	for _, p := range []string{b.cfg.Prefix, key} {
		if p != "" {
			u += "/" + p
		}
	}
	return u
}

// wrap names the operation, key and endpoint, and marks network failures
// with ErrUnreachable.
func (b *BlobStore) wrap(op, key string, err error) error {
	where := b.url(key) + " at " + b.cfg.Endpoint
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &oe) || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %s %s: %v", ErrUnreachable, op, where, err)
	}
	if r := minio.ToErrorResponse(err); r.Code != "" {
		return fmt.Errorf("s3: %s %s: %s: %s: %w", op, where, r.Code, r.Message, err)
	}
	return fmt.Errorf("s3: %s %s: %w", op, where, err)
}

// Transient reports whether err, from a call of a BlobStore or a read of a
// body it returned, may pass if the call is made again: the store was
// unreachable or cut the connection (a body cut short too), or answered
// that it is busy or failed (5xx, 408, 429, SlowDown). A missing key or
// bucket, a refused credential, a bad range and a cancelled context are
// not. minio-go retries a request that fails; a body that stops half-way
// is the caller's to ask for again.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, provider.ErrNotFound) {
		return false
	}
	var r minio.ErrorResponse
	if errors.As(err, &r) && (r.StatusCode != 0 || r.Code != "") {
		return transientAnswer(r)
	}
	// A network operation that failed, or timed out; not any net.Error:
	// every syscall.Errno is one (ENOSPC of a local write too), and so is
	// a *url.Error that a certificate failed.
	var oe *net.OpError
	var ne net.Error
	return errors.Is(err, ErrUnreachable) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &oe) ||
		errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// transientAnswer reports whether the store's answer r says to try again.
func transientAnswer(r minio.ErrorResponse) bool {
	return r.StatusCode >= 500 || r.StatusCode == http.StatusRequestTimeout || r.StatusCode == http.StatusTooManyRequests ||
		slices.Contains([]string{"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable"}, r.Code)
}

// Put uploads r under key. Unknown length goes up in PartSize parts as one
// multipart upload that is completed only after r returned io.EOF; any
// error aborts it, leaving the previous blob under key (if any) untouched.
func (b *BlobStore) Put(ctx context.Context, key string, r io.Reader) error {
	obj, err := b.object(key)
	if err != nil {
		return err
	}
	// Cancel the upload's context on a reader error so minio-go aborts
	// the multipart upload instead of completing a short object.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	er := &errTrackingReader{r: r, cancel: cancel}
	info, err := b.cli.PutObject(ctx, b.cfg.Bucket, obj, er, -1, minio.PutObjectOptions{
		PartSize:    b.cfg.PartSize,
		ContentType: "application/octet-stream",
	})
	if er.err != nil {
		return fmt.Errorf("s3: put %s: source: %w", b.url(key), er.err)
	}
	if err != nil {
		return b.wrap("put", key, err)
	}
	b.cfg.Logger.Debug("s3: put", "key", key, "bytes", info.Size)
	return nil
}

type errTrackingReader struct {
	r      io.Reader
	cancel context.CancelFunc
	err    error
}

func (e *errTrackingReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
		e.cancel()
	}
	return n, err
}

// Get opens the blob; provider.ErrNotFound if absent.
func (b *BlobStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	obj, err := b.object(key)
	if err != nil {
		return nil, err
	}
	o, err := b.cli.GetObject(ctx, b.cfg.Bucket, obj, minio.GetObjectOptions{})
	if err != nil {
		return nil, b.wrap("get", key, err)
	}
	// GetObject is lazy; Stat makes the request so a missing key or a dead
	// server is reported here rather than on the first Read.
	if _, err := o.Stat(); err != nil {
		o.Close()
		if isNotFound(err) {
			return nil, fmt.Errorf("%w: %s", provider.ErrNotFound, b.url(key))
		}
		return nil, b.wrap("get", key, err)
	}
	return &objectReader{Object: o, missing: fmt.Errorf("%w: %s", provider.ErrNotFound, b.url(key))}, nil
}

// objectReader reports a key deleted after Get's Stat (the first Read is
// a second request) as provider.ErrNotFound, as Get itself would have:
// a listing racing a retention delete then skips the key instead of
// failing.
type objectReader struct {
	*minio.Object
	missing error
	changed error // for a read pinned to an ETag (GetRangeOf)
}

func (r *objectReader) Read(p []byte) (int, error) {
	n, err := r.Object.Read(p)
	switch {
	case err == nil || err == io.EOF:
	case isNotFound(err):
		err = r.missing
	case r.changed != nil && minio.ToErrorResponse(err).StatusCode == http.StatusPreconditionFailed:
		err = r.changed
	}
	return n, err
}

// ErrChanged: the object is no longer the version a read was pinned to
// (GetRangeOf): it was written again since it was listed.
var ErrChanged = errors.New("s3: the object changed")

// Stat reports the blob's size and whether it exists.
func (b *BlobStore) Stat(ctx context.Context, key string) (int64, bool, error) {
	obj, err := b.object(key)
	if err != nil {
		return 0, false, err
	}
	info, err := b.cli.StatObject(ctx, b.cfg.Bucket, obj, minio.StatObjectOptions{})
	if err != nil {
		if isNotFound(err) {
			return 0, false, nil
		}
		return 0, false, b.wrap("stat", key, err)
	}
	return info.Size, true, nil
}

// Delete removes the blob; a missing key is not an error.
func (b *BlobStore) Delete(ctx context.Context, key string) error {
	obj, err := b.object(key)
	if err != nil {
		return err
	}
	if err := b.cli.RemoveObject(ctx, b.cfg.Bucket, obj, minio.RemoveObjectOptions{}); err != nil && !isNotFound(err) {
		return b.wrap("delete", key, err)
	}
	return nil
}

// List lists the objects under prefix (within the store's Prefix).
func (b *BlobStore) List(ctx context.Context, prefix string) ([]provider.BlobInfo, error) {
	objPrefix := prefix
	if b.cfg.Prefix != "" {
		objPrefix = b.cfg.Prefix + "/" + prefix
	}
	var out []provider.BlobInfo
	for o := range b.cli.ListObjects(ctx, b.cfg.Bucket, minio.ListObjectsOptions{Prefix: objPrefix, Recursive: true}) {
		if o.Err != nil {
			return nil, b.wrap("list", prefix, o.Err)
		}
		key := o.Key
		if b.cfg.Prefix != "" {
			key = strings.TrimPrefix(key, b.cfg.Prefix+"/")
		}
		out = append(out, provider.BlobInfo{Key: key, Size: o.Size, Modified: o.LastModified, ETag: strings.Trim(o.ETag, `"`)})
	}
	return out, nil
}

func isNotFound(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.Code == "NoSuchKey" || r.StatusCode == 404 && r.Code != "NoSuchBucket"
}

// Check makes one request to prove the store usable before work starts:
// the endpoint answers, the credentials are accepted and the bucket exists.
// Its errors name the store and say which of these failed.
func (b *BlobStore) Check(ctx context.Context) error {
	ok, err := b.cli.BucketExists(ctx, b.cfg.Bucket)
	if err != nil {
		r := minio.ToErrorResponse(err)
		switch r.Code {
		case "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken":
			return fmt.Errorf("s3: %s at %s refused the credentials (%s: %s); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
				b.url(""), b.cfg.Endpoint, r.Code, r.Message)
		case "AccessDenied":
			return fmt.Errorf("s3: %s at %s denied access (%s); the credentials lack a permission on the bucket",
				b.url(""), b.cfg.Endpoint, r.Message)
		}
		return b.wrap("check bucket", "", err)
	}
	if !ok {
		return fmt.Errorf("s3: bucket %q does not exist at %s", b.cfg.Bucket, b.cfg.Endpoint)
	}
	return nil
}

// URL is key's address as a user writes it: s3://bucket/prefix/key.
func (b *BlobStore) URL(key string) string { return b.url(key) }

// GetRange returns n bytes of the blob from offset off (fewer at its end).
func (b *BlobStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	return b.GetRangeOf(ctx, key, "", off, n)
}

// GetRangeOf is GetRange of the version of key whose ETag is etag (as List
// reported it): once the object was written again its reads fail with
// ErrChanged, so ranges read at different times are of one version.
// An empty etag reads whatever version is there.
func (b *BlobStore) GetRangeOf(ctx context.Context, key, etag string, off, n int64) (io.ReadCloser, error) {
	obj, err := b.object(key)
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return io.NopCloser(strings.NewReader("")), nil
	}
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(off, off+n-1); err != nil {
		return nil, fmt.Errorf("s3: get %s: %w", b.url(key), err)
	}
	r := &objectReader{missing: fmt.Errorf("%w: %s", provider.ErrNotFound, b.url(key))}
	if etag != "" {
		if err := opts.SetMatchETag(etag); err != nil {
			return nil, fmt.Errorf("s3: get %s: %w", b.url(key), err)
		}
		r.changed = fmt.Errorf("%w: %s is no longer the version listed (ETag %s)", ErrChanged, b.url(key), etag)
	}
	o, err := b.cli.GetObject(ctx, b.cfg.Bucket, obj, opts)
	if err != nil {
		return nil, b.wrap("get", key, err)
	}
	r.Object = o
	return r, nil
}

// PutFile uploads the file at path under key: one PUT when it is small,
// else a multipart upload of PartSize parts sent in parallel, which the
// store makes visible only when complete (a killed upload leaves nothing
// under key; the previous blob, if any, stays).
func (b *BlobStore) PutFile(ctx context.Context, key, path string) error {
	obj, err := b.object(key)
	if err != nil {
		return err
	}
	info, err := b.cli.FPutObject(ctx, b.cfg.Bucket, obj, path, minio.PutObjectOptions{
		PartSize: b.cfg.PartSize, NumThreads: 4, ContentType: "application/octet-stream",
	})
	if err != nil {
		return b.wrap("put", key, err)
	}
	b.cfg.Logger.Debug("s3: put", "key", key, "bytes", info.Size)
	return nil
}

// RemoveBucket removes the (empty) bucket: for tests that made their own.
func (b *BlobStore) RemoveBucket(ctx context.Context) error {
	if err := b.cli.RemoveBucket(ctx, b.cfg.Bucket); err != nil {
		return b.wrap("remove bucket", "", err)
	}
	return nil
}

// PendingUpload is a multipart upload whose parts are all up but which is
// not completed: nothing is visible under Key until CompleteUpload, and
// AbortUpload drops it. A sort stages its partitions so and completes them
// at commit, with no copy.
type PendingUpload struct {
	Key      string               `json:"key"`
	UploadID string               `json:"upload_id,omitempty"` // "" for an empty file: one PUT at completion
	Parts    []minio.CompletePart `json:"parts,omitempty"`
	Size     int64                `json:"size"`
}

// StartUpload sends the file at path up as the parts of a new multipart
// upload of key (PartSize each, 4 at once) and leaves it pending.
func (b *BlobStore) StartUpload(ctx context.Context, key, path string) (PendingUpload, error) {
	obj, err := b.object(key)
	if err != nil {
		return PendingUpload{}, err
	}
	f, err := os.Open(path)
	if err != nil {
		return PendingUpload{}, fmt.Errorf("s3: upload %s: %w", b.url(key), err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return PendingUpload{}, fmt.Errorf("s3: upload %s: %w", b.url(key), err)
	}
	u := PendingUpload{Key: key, Size: fi.Size()}
	if u.Size == 0 {
		return u, nil
	}
	core := minio.Core{Client: b.cli}
	if u.UploadID, err = core.NewMultipartUpload(ctx, b.cfg.Bucket, obj, minio.PutObjectOptions{ContentType: "application/octet-stream"}); err != nil {
		return u, b.wrap("start upload", key, err)
	}
	// S3 takes at most 10,000 parts: a larger file gets larger parts.
	part := max(int64(b.cfg.PartSize), ((u.Size+9999)/10000+1<<20-1)&^(1<<20-1))
	n := int((u.Size + part - 1) / part)
	u.Parts = make([]minio.CompletePart, n)
	err = par.Do(ctx, n, 4, func(ctx context.Context, i int) error {
		off := int64(i) * part
		size := min(part, u.Size-off)
		p, err := core.PutObjectPart(ctx, b.cfg.Bucket, obj, u.UploadID, i+1, io.NewSectionReader(f, off, size), size, minio.PutObjectPartOptions{DisableContentSha256: b.cfg.Secure})
		if err != nil {
			return b.wrap(fmt.Sprintf("upload part %d of", i+1), key, err)
		}
		u.Parts[i] = minio.CompletePart{PartNumber: i + 1, ETag: p.ETag}
		return nil
	})
	if err != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		core.AbortMultipartUpload(actx, b.cfg.Bucket, obj, u.UploadID)
		cancel()
		return PendingUpload{}, err
	}
	return u, nil
}

// ErrUploadGone: a pending upload is no longer on the server (completed or
// aborted already).
var ErrUploadGone = errors.New("s3: the pending upload is gone")

// CompleteUpload makes the pending upload the blob under its key, whole.
// An upload the server no longer has is ErrUploadGone.
func (b *BlobStore) CompleteUpload(ctx context.Context, u PendingUpload) error {
	obj, err := b.object(u.Key)
	if err != nil {
		return err
	}
	if u.UploadID == "" {
		return b.Put(ctx, u.Key, strings.NewReader(""))
	}
	_, err = minio.Core{Client: b.cli}.CompleteMultipartUpload(ctx, b.cfg.Bucket, obj, u.UploadID, u.Parts, minio.PutObjectOptions{})
	if minio.ToErrorResponse(err).Code == "NoSuchUpload" {
		return fmt.Errorf("%w: %s (upload %s)", ErrUploadGone, b.url(u.Key), u.UploadID)
	}
	if err != nil {
		return b.wrap("complete upload", u.Key, err)
	}
	return nil
}

// AbortUpload drops a pending upload; one already gone is not an error.
func (b *BlobStore) AbortUpload(ctx context.Context, key, uploadID string) error {
	obj, err := b.object(key)
	if err != nil || uploadID == "" {
		return err
	}
	err = minio.Core{Client: b.cli}.AbortMultipartUpload(ctx, b.cfg.Bucket, obj, uploadID)
	if err != nil && minio.ToErrorResponse(err).Code != "NoSuchUpload" {
		return b.wrap("abort upload", key, err)
	}
	return nil
}

// PendingUploadsOf lists the IDs of the multipart uploads of key not
// completed. (The exact key: MinIO lists uploads by object name only, not
// by prefix as AWS does.)
func (b *BlobStore) PendingUploadsOf(ctx context.Context, key string) ([]string, error) {
	obj, err := b.object(key)
	if err != nil {
		return nil, err
	}
	var ids []string
	for u := range b.cli.ListIncompleteUploads(ctx, b.cfg.Bucket, obj, false) {
		if u.Err != nil {
			return nil, b.wrap("list uploads", key, u.Err)
		}
		if u.Key == obj {
			ids = append(ids, u.UploadID)
		}
	}
	return ids, nil
}
