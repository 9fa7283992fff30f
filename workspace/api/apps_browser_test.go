package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/internal/testutil/browser"
)

// An app's login in headless Chromium: open the app URL (a *.localhost
// host), land on the API's login form, log in with alice's token, and see
// the app's page at the path first asked for, on the app's own host,
// whose document cannot read gantry_app (HttpOnly).
func TestAppLoginInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	e := newAppEnv(t)
	ctx := browser.Start(t, t.Context(), 800, 400)
	steps := []struct {
		name string
		a    chromedp.Action[chromedp.Void]
	}{
		{"open the app", chromedp.Navigate(e.appURL() + "/hello?x=1")},
		{"see the login form", chromedp.WaitVisible(`#app-token`)},
		{"type alice's token", chromedp.SendKeys(`#app-token`, e.alice)},
		{"press log in", chromedp.Click(`#app-login-submit`)},
	}
	for _, st := range steps {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := chromedp.Run(sctx, st.a)
		cancel()
		if err != nil {
			href, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + " " + document.documentElement.outerHTML`))
			t.Fatalf("browser step %q: %v\npage: %s", st.name, err, href)
		}
	}
	var page string
	testutil.WaitFor(t, 20*time.Second, "the app's page", func() (bool, string) {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + (document.body ? document.body.innerText : "") + "\ncookie=" + document.cookie`))
		page = got
		return err == nil && strings.HasPrefix(got, e.appURL()+"/hello?x=1\npath=/hello?x=1"), got
	})
	if strings.Contains(page, "gantry_app") || strings.Contains(page, "gantry_session") {
		t.Errorf("the app's page saw a gantry credential:\n%s", page)
	}
}
