package auth

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		addr          string
		tls, insecure bool
		ok            bool
	}{
		{"127.0.0.1:17480", false, false, true},
		{"127.3.4.5:1", false, false, true},
		{"[::1]:17480", false, false, true},
		{"localhost:17480", false, false, true},
		{"0.0.0.0:17480", false, false, false},
		{":17480", false, false, false},
		{"[::]:17480", false, false, false},
		{"10.0.0.5:17480", false, false, false},
		{"example.com:17480", false, false, false},
		{"0.0.0.0:17480", true, false, true},
		{"0.0.0.0:17480", false, true, true},
	} {
		err := CheckListen(tc.addr, tc.tls, tc.insecure)
		if (err == nil) != tc.ok {
			t.Errorf("CheckListen(%q, tls=%v, insecure=%v) = %v", tc.addr, tc.tls, tc.insecure, err)
		}
		if err != nil && (!errors.Is(err, ErrInsecureListen) || !strings.Contains(err.Error(), "--tls-cert") || !strings.Contains(err.Error(), "--insecure-listen")) {
			t.Errorf("CheckListen(%q): message %q does not name the flags", tc.addr, err)
		}
	}
	if err := CheckListen("nonsense", false, false); err == nil {
		t.Error("an address without a port is accepted")
	}
}

func TestQuotaErrorNamesLimitAndCount(t *testing.T) {
	msg := (&QuotaError{Owner: "alice", What: "running workspaces", Limit: 1, Count: 1}).Error()
	for _, want := range []string{"alice", "limit 1", "has 1 running workspaces"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
}
