// Package headless starts the headless Chromium of the browser tests
// (chromedp), apart from package testio so that only the tests that drive
// a browser link chromedp.
package headless

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/paymentsapi/paymentsapi/internal/testio"
)

// Chrome starts headless Chromium for t (testio.Chromium finds it, or
// skips or fails the test without it), stopped when t ends. Only loopback
// addresses resolve in it: what a test opens must need nothing else. opts
// add to the defaults (a window size, hidden scrollbars).
func Chrome(t *testing.T, opts ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	bin := testio.Chromium(t)
	all := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(all, opts...)...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	return ctx
}
