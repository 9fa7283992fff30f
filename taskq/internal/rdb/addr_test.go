package rdb

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The address forms Open reads, and what each becomes: the servers to dial
// first, the Sentinel master set, credentials and database.
func TestParseAddr(t *testing.T) {
	type want struct {
		Init                       []string
		Master, User, Pass         string
		SentinelUser, SentinelPass string
		DB                         int
	}
	cases := []struct {
		addr string
		want want
	}{
		{"127.0.0.1:6379", want{Init: []string{"127.0.0.1:6379"}}},
		{"127.0.0.1:7000,127.0.0.1:7001", want{Init: []string{"127.0.0.1:7000", "127.0.0.1:7001"}}},
		{"redis://u:p@127.0.0.1:6380/2", want{Init: []string{"127.0.0.1:6380"}, User: "u", Pass: "p", DB: 2}},
		{"redis://127.0.0.1:26379?master_set=m", want{Init: []string{"127.0.0.1:26379"}, Master: "m"}},
		{"redis-sentinel://127.0.0.1:26379/mymaster", want{Init: []string{"127.0.0.1:26379"}, Master: "mymaster"}},
		{"redis-sentinel://127.0.0.1:26379,127.0.0.1:26380, 127.0.0.1:26381/m?db=3",
			want{Init: []string{"127.0.0.1:26379", "127.0.0.1:26380", "127.0.0.1:26381"}, Master: "m", DB: 3}},
		{"redis-sentinel://app:s%3Acret@10.0.0.1,10.0.0.2:5000/m",
			want{Init: []string{"10.0.0.1:26379", "10.0.0.2:5000"}, Master: "m", User: "app", Pass: "s:cret"}},
		{"redis-sentinel://:pw@[::1]:26379,[::1]/m?sentinel_password=sp&sentinel_username=su",
			want{Init: []string{"[::1]:26379", "[::1]:26379"}, Master: "m", Pass: "pw", SentinelUser: "su", SentinelPass: "sp"}},
	}
	for _, c := range cases {
		opt, err := parseAddr(c.addr)
		if err != nil {
			t.Errorf("%s: %v", c.addr, err)
			continue
		}
		got := want{Init: opt.InitAddress, Master: opt.Sentinel.MasterSet, User: opt.Username, Pass: opt.Password,
			SentinelUser: opt.Sentinel.Username, SentinelPass: opt.Sentinel.Password, DB: opt.SelectDB}
		if d := cmp.Diff(c.want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", c.addr, d)
		}
	}
}

// A redis-sentinel address without hosts or without a master name, or
// with a bad port, database or parameter, is refused by Open with an
// error that says what is wrong (and is not an outage).
func TestOpenRefusesBadSentinelAddress(t *testing.T) {
	cases := map[string]string{
		"redis-sentinel://":                               "no sentinel hosts",
		"redis-sentinel:///m":                             "no sentinel hosts",
		"redis-sentinel://u:p@/m":                         "no sentinel hosts",
		"redis-sentinel://127.0.0.1:26379":                "master name",
		"redis-sentinel://127.0.0.1:26379/":               "master name",
		"redis-sentinel://127.0.0.1:26379/a/b":            "master name",
		"redis-sentinel://127.0.0.1:26379,,127.0.0.1:1/m": "empty sentinel host",
		"redis-sentinel://127.0.0.1:0/m":                  "bad port",
		"redis-sentinel://127.0.0.1:x/m":                  "bad port",
		"redis-sentinel://127.0.0.1:26379/m?db=x":         "db",
		"redis-sentinel://127.0.0.1:26379/m?master=m":     "unknown parameter",
		"127.0.0.1:7000,,127.0.0.1:7001":                  "empty host",
	}
	for addr, want := range cases {
		r, err := Open(addr)
		if err == nil {
			r.Close()
			t.Errorf("Open(%q) succeeded", addr)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), addr) || errors.Is(err, ErrUnreachable) {
			t.Errorf("Open(%q) = %v, want an error naming the address and %q, not ErrUnreachable", addr, err, want)
		}
	}
}
