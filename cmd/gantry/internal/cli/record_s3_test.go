package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/record"
	"github.com/gantryhq/gantry/workspace/provider/s3"
)

// s3TestBucket makes a fresh bucket on the test MinIO for one test, with
// the credentials in the environment as a user sets them, and returns a
// store on it (to put and read objects directly) and the bucket's s3:// URL
// without the endpoint parameter: url(prefix) adds it. The bucket and its
// objects are removed when the test ends.
func s3TestBucket(t *testing.T) (bs *s3.BlobStore, bucket string, url func(prefix string) string) {
	t.Helper()
	ep := testutil.S3Endpoint(t)
	t.Setenv("AWS_ACCESS_KEY_ID", testutil.S3AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testutil.S3SecretKey)
	b := make([]byte, 5)
	rand.Read(b)
	bucket = "gantry-valsort-" + hex.EncodeToString(b)
	bs, err := s3.New(t.Context(), s3.Config{Endpoint: ep, Bucket: bucket, CreateBucket: true,
		Transport: &http.Transport{DisableKeepAlives: true}}) // no idle connection outlives the test
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(t.Context())
		if list, err := bs.List(ctx, ""); err == nil {
			for _, o := range list {
				bs.Delete(ctx, o.Key)
			}
		}
		mc, err := minio.New(ep, &minio.Options{Creds: credentials.NewStaticV4(testutil.S3AccessKey, testutil.S3SecretKey, ""),
			BucketLookup: minio.BucketLookupPath, Transport: &http.Transport{DisableKeepAlives: true}})
		if err == nil {
			if err := mc.RemoveBucket(ctx, bucket); err != nil {
				t.Errorf("remove bucket %s: %v", bucket, err)
			}
		}
	})
	return bs, bucket, func(prefix string) string {
		u := "s3://" + bucket
		if prefix != "" {
			u += "/" + prefix
		}
		return u + "?endpoint=http://" + ep
	}
}

func putObject(t *testing.T, bs *s3.BlobStore, key string, data []byte) {
	t.Helper()
	if err := bs.Put(t.Context(), key, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

func getObject(t *testing.T, bs *s3.BlobStore, key string) []byte {
	t.Helper()
	rc, err := bs.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGensortS3MatchesLocal(t *testing.T) {
	bs, _, url := s3TestBucket(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // gensort's temporary files: none must be left
	local := t.TempDir()

	// The same records, as local files and as objects: three parts, one more
	// file, and one large enough for a multipart upload (5 MiB parts).
	runs := [][]string{
		{"gensort", "-c", "--parts", "3", "-b", "0", "3000", "f"},
		{"gensort", "-c", "-s", "-b", "3000", "700", "g"},
		{"gensort", "-c", "-b", "3700", "120000", "h"},
	}
	for i, run := range runs {
		n := len(run) - 1
		localRun := append(append([]string{}, run[:n]...), filepath.Join(local, run[n]))
		u := url("in/" + run[n])
		if i == 2 {
			u += "&part_size=5242880"
		}
		s3Run := append(append([]string{}, run[:n]...), u)
		codeL, _, sumL := runRecordCmd(t, localRun...)
		codeS, outS, sumS := runRecordCmd(t, s3Run...)
		if codeL != 0 || codeS != 0 || sumS != sumL || outS != "" {
			t.Fatalf("%v: local exit %d %q, S3 exit %d stdout %q stderr %q; want the same -c checksum", run, codeL, sumL, codeS, outS, sumS)
		}
	}
	for _, name := range []string{"f.0000", "f.0001", "f.0002", "g", "h"} {
		want, err := os.ReadFile(filepath.Join(local, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := getObject(t, bs, "in/"+name); !bytes.Equal(got, want) {
			t.Errorf("object in/%s: %d bytes differ from the local file's %d", name, len(got), len(want))
		}
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("gensort left %d entries in $TMPDIR", len(ents))
	}

	// A hidden object (a sort's staged upload) is not input.
	putObject(t, bs, "in/.staged", sortedRecords(10, 0))
	_, wantOut, wantErr := runRecordCmd(t, "valsort", "--checksum-only", local)
	for _, threads := range []string{"0", "1", "3"} {
		code, stdout, stderr := runRecordCmd(t, "valsort", "--checksum-only", "-t", threads, url("in"))
		if code != 0 || stdout != wantOut || stderr != wantErr {
			t.Errorf("-t %s: valsort --checksum-only over S3: exit %d\n%s%s\nwant the local report\n%s", threads, code, stdout, stderr, wantOut)
		}
	}
	if !strings.HasPrefix(wantOut, "Records: 123700\n") {
		t.Errorf("local report %q", wantOut)
	}
}

func TestValsortS3Partitions(t *testing.T) {
	bs, bucket, url := s3TestBucket(t)
	const parts, per = 12, 50 // partition.10 and .11 sort between .1 and .2 as strings
	data := sortedRecords(parts*per, 0)
	var sum record.Checksum
	sum.AddAll(data)
	chunk := func(i int) []byte { return data[i*per*record.Size : (i+1)*per*record.Size] }
	for i := range parts {
		putObject(t, bs, fmt.Sprintf("out/partition.%d", i), chunk(i))
	}
	putObject(t, bs, "out/"+record.DoneMarker, []byte("job-1\n"))
	putObject(t, bs, "out/.partition.3.upload", []byte("not records"))
	// The same sequence in pieces: local files before and after the objects.
	dir := t.TempDir()
	head, tail := filepath.Join(dir, "head"), filepath.Join(dir, "tail")
	testutil.WriteRecords(t, head, chunk(0))
	os.Mkdir(tail, 0o755)
	testutil.WriteRecords(t, filepath.Join(tail, "partition.0"), chunk(parts-1))
	for i := 1; i < parts-1; i++ {
		putObject(t, bs, fmt.Sprintf("mid/partition.%d", i), chunk(i))
	}
	// Unordered: across a seam, and inside an object.
	putObject(t, bs, "swapped/partition.0", chunk(1))
	putObject(t, bs, "swapped/partition.1", chunk(0))
	raw := make([]byte, 100*record.Size)
	record.Generate(raw, 0, record.GenOptions{})
	putObject(t, bs, "raw/partition.0", chunk(0)[:10*record.Size])
	putObject(t, bs, "raw/partition.1", raw)
	putObject(t, bs, "partial/partition.0", chunk(0)[:250])
	putObject(t, bs, "stray/partition.0", chunk(0))
	putObject(t, bs, "stray/notes.txt", nil)

	obj := func(key string) string { return "s3://" + bucket + "/" + key }
	success := fmt.Sprintf("Records: %d\nChecksum: %s\nDuplicate keys: 0\nSUCCESS - all records are in order\n", parts*per, sum)
	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		report    string // exact, if set
		reportHas string
		stderrHas string
	}{
		{"partitions in numeric order", []string{url("out")}, 0, success, "", ""},
		{"bounded parallel reads", []string{"-t", "2", url("out")}, 0, success, "", ""},
		{"local files and objects in order", []string{head, url("mid"), tail}, 0, success, "", ""},
		{"one object", []string{url("out/partition.11")}, 0, "", "Records: 50\n", ""},
		{"unordered at an object boundary", []string{url("swapped")}, 1, "", "First unordered record is record 50\n  (the first record of " +
			obj("swapped/partition.1") + ", after the last of " + obj("swapped/partition.0") + ")\n", ""},
		{"unordered inside an object", []string{url("raw")}, 1, "", "  (record 2 of " + obj("raw/partition.1") + ")\n", ""},
		{"partial record", []string{url("partial")}, 1, "", "", obj("partial/partition.0") + ": partial record found at end: 250 bytes"},
		{"stray object", []string{url("stray")}, 1, "", "", obj("stray/notes.txt") + ": not a partition.<n> object"},
		{"empty prefix", []string{url("nothing")}, 1, "", "", "there must be at least one record to be validated: " + url("nothing")},
		{"empty prefix allowed", []string{"--allow-empty", url("nothing")}, 0, "Records: 0\nChecksum: 0\nDuplicate keys: 0\nSUCCESS - all records are in order\n", "", ""},
		{"-s takes no URL", []string{"-s", url("out")}, 1, "", "", "-s reads local summary files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runRecordCmd(t, append([]string{"valsort"}, tc.args...)...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tc.code, stderr)
			}
			if tc.report != "" && stdout != tc.report {
				t.Errorf("report\n%s\nwant\n%s", stdout, tc.report)
			}
			if !strings.Contains(stdout, tc.reportHas) {
				t.Errorf("report %q lacks %q", stdout, tc.reportHas)
			}
			if !strings.Contains(stderr, tc.stderrHas) || (tc.stderrHas == "" && stderr != "") {
				t.Errorf("stderr %q, want %q", stderr, tc.stderrHas)
			}
		})
	}
}

func TestValsortS3Errors(t *testing.T) {
	_, bucket, url := s3TestBucket(t)
	missing := strings.Replace(url("in"), bucket, bucket+"-missing", 1)
	for _, tc := range []struct {
		name      string
		secret    string // AWS_SECRET_ACCESS_KEY, if set
		args      []string
		stderrHas string
	}{
		{"valsort, bad credentials", "wrong-secret", []string{"valsort", url("in")}, "refused the credentials"},
		{"gensort, bad credentials", "wrong-secret", []string{"gensort", "10", url("in/f")}, "refused the credentials"},
		{"valsort, missing bucket", "", []string{"valsort", "--checksum-only", missing}, "bucket \"" + bucket + "-missing\" does not exist"},
		{"gensort, missing bucket", "", []string{"gensort", "10", strings.Replace(missing, "/in?", "/in/f?", 1)}, "does not exist"},
		{"no endpoint", "", []string{"valsort", "s3://" + bucket + "/in"}, "endpoint= is required"},
		{"gensort names no object", "", []string{"gensort", "10", url("")}, "names no object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.secret != "" {
				t.Setenv("AWS_SECRET_ACCESS_KEY", tc.secret)
			}
			code, _, stderr := runRecordCmd(t, tc.args...)
			if code != 1 || !strings.Contains(stderr, tc.stderrHas) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr, tc.stderrHas)
			}
		})
	}
}
