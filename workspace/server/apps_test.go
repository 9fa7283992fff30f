package server

import (
	"testing"

	"github.com/gantryhq/gantry/workspace/provider/fake"
)

// The apps domain defaults to localhost on a loopback listen (Chromium
// resolves *.localhost to loopback), none otherwise; the API's AppsURL is
// it on the listen port, https under TLS.
func TestAppsURLDefaults(t *testing.T) {
	for _, tc := range []struct {
		cfg  ServerConfig
		want string
	}{
		{ServerConfig{Listen: "127.0.0.1:7480"}, "http://localhost:7480"},
		{ServerConfig{Listen: "0.0.0.0:7480", InsecureListen: true}, ""},
		{ServerConfig{Listen: "0.0.0.0:443", TLSCert: "c", AppsDomain: "apps.example.com"}, "https://apps.example.com:443"},
	} {
		cfg := tc.cfg
		if cfg.AppsDomain == "" {
			fk := fake.New(0)
			cfg.Data, cfg.Container, cfg.Storage = t.TempDir(), fk, fk
			checked, err := cfg.checked()
			if err != nil {
				t.Fatal(err)
			}
			cfg = checked
		}
		if got := appsURL(cfg); got != tc.want {
			t.Errorf("%+v: AppsURL %q, want %q", tc.cfg.Listen, got, tc.want)
		}
	}
}
