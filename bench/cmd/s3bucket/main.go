// Command s3bucket makes or removes a bucket for the S3 benchmarks:
//
//	s3bucket make   's3://bucket?endpoint=http://127.0.0.1:9000'
//	s3bucket remove 's3://bucket?endpoint=http://127.0.0.1:9000'   (its objects first)
//
// Credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/gantryhq/gantry/workspace/provider/s3"
)

func main() {
	if len(os.Args) != 3 || os.Args[1] != "make" && os.Args[1] != "remove" {
		fmt.Fprintln(os.Stderr, "usage: s3bucket make|remove s3://bucket?endpoint=http://host:port")
		os.Exit(2)
	}
	if err := run(context.Background(), os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "s3bucket:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, op, url string) error {
	cfg, err := s3.ParseURL(url)
	if err != nil {
		return err
	}
	cfg.Prefix = ""
	cfg.CreateBucket = op == "make"
	bs, err := s3.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer bs.Close()
	if op == "make" {
		return nil
	}
	blobs, err := bs.List(ctx, "")
	if err != nil {
		return err
	}
	for _, b := range blobs {
		if err := bs.Delete(ctx, b.Key); err != nil {
			return err
		}
	}
	return bs.RemoveBucket(ctx)
}
