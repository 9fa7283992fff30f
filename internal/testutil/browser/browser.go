// Package browser drives headless Chromium for the tests of gantry's web
// pages (the workspace page, the queue dashboard), so that each starts it
// the same way and saves its screenshot the same way. It is a package of
// its own so that only those tests link chromedp.
//
// Tour: Start launches Chromium (testutil.Chromium finds or installs it)
// and returns the context of its first tab, ended with the test;
// Screenshot saves a full-page PNG where $GANTRY_SCREENSHOT says.
package browser

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/gantryhq/gantry/internal/testutil"
)

// Start launches headless Chromium under parent with a window of
// width×height, its own profile in a temp dir, no sandbox or GPU, and no
// background traffic (QUIC, sync, component updates, other background
// networking), and returns the chromedp context of its first tab. The
// browser ends when the test does (or parent ends); the test fails if it
// does not start. extra adds options (flags), e.g.
// chromedp.Flag("host-resolver-rules", "MAP *.example.com 127.0.0.1").
func Start(tb testing.TB, parent context.Context, width, height int, extra ...chromedp.ExecAllocatorOption) context.Context {
	tb.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(testutil.Chromium(tb)),
		chromedp.UserDataDir(tb.TempDir()),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(width, height),
	)
	opts = append(opts, extra...)
	actx, cancelA := chromedp.NewExecAllocator(parent, opts...)
	tb.Cleanup(cancelA)
	ctx, cancelC := chromedp.NewContext(actx)
	tb.Cleanup(cancelC)
	if err := chromedp.Do(ctx); err != nil {
		tb.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// Screenshot saves a full-page screenshot of ctx's tab to
// $GANTRY_SCREENSHOT (e.g. docs/ws-page.png), or to name in the test's temp
// dir when that is unset, and logs where it went.
func Screenshot(tb testing.TB, ctx context.Context, name string) {
	tb.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.Fatalf("screenshot: %v", err)
	}
	out := os.Getenv("GANTRY_SCREENSHOT")
	if out == "" {
		out = filepath.Join(tb.TempDir(), name)
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("screenshot: %s (%d bytes)", out, len(png))
}
