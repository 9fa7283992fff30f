package main

import (
	"context"
	"fmt"
	"log"
	"net/url"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// privateDB is a database of one server's own on the -db Postgres
// server, dropped at the end.
type privateDB struct {
	adminURL, name, url string
}

var dbSeq atomic.Int64

// newPrivateDB creates database startbench_PID_N on the server at adminURL.
func newPrivateDB(ctx context.Context, adminURL string) (*privateDB, error) {
	u, err := url.Parse(adminURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("-db %q: want a postgres:// URL with a host (%v)", adminURL, err)
	}
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("-db: connect %s (bash scripts/services.sh starts Postgres on loopback): %w", u.Redacted(), err)
	}
	defer admin.Close(ctx)
	d := &privateDB{adminURL: adminURL, name: "startbench_" + strconv.Itoa(os.Getpid()) + "_" + strconv.FormatInt(dbSeq.Add(1), 10)}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{d.name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("-db: create database %s: %w", d.name, err)
	}
	u.Path = "/" + d.name
	d.url = u.String()
	return d, nil
}

func (d *privateDB) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, d.adminURL)
	if err != nil {
		log.Printf("-db: drop database %s: %v", d.name, err)
		return
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.name}.Sanitize()+" WITH (FORCE)"); err != nil {
		log.Printf("-db: drop database %s: %v", d.name, err)
	}
}
