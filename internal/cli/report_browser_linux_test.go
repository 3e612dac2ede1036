package cli

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/gpuexec/gpuexec/internal/report/reporttest"
)

// chromium is Debian's chromium, which .ci/run installs.
const chromium = "/usr/bin/chromium"

// TestReportInBrowser opens the page gpuexec report --html writes, for
// reporttest's Day and for the scripted day run through the real binary
// (runDay), in a real headless chromium: it must load with no console error
// and no exception, fetch nothing but itself, and draw one bar per job that
// held the lock. Skipped without chromium, unless CI=true.
// GPUEXEC_SCREENSHOT=FILE writes a screenshot of reporttest's Day there
// (docs/report.png).
func TestReportInBrowser(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no chromium: %v", err)
		}
		t.Skipf("no chromium: %v", err)
	}
	t.Run("reporttest's day", func(t *testing.T) {
		dir := t.TempDir()
		day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		journalPath := filepath.Join(dir, "day.journal")
		if err := os.WriteFile(journalPath, reporttest.Lines(reporttest.Day(day)), 0o600); err != nil {
			t.Fatal(err)
		}
		page := reportPage(t, "--journal", journalPath, "--since", "2026-12-01T00:00:00Z", "--until", "2026-12-02T00:00:00Z")
		wantPageInBrowser(t, page, reporttest.Ran(reporttest.Day(day)), os.Getenv("GPUEXEC_SCREENSHOT"))
	})
	t.Run("the scripted day", func(t *testing.T) {
		lockPath, journalPath := runDay(t)
		ran := 0
		for _, r := range readJournal(t, journalPath) {
			if r.Started != nil {
				ran++
			}
		}
		if want := countStarted(theDay); ran != want {
			t.Fatalf("the journal has %d jobs that held the lock, the day %d", ran, want)
		}
		page := reportPage(t, "--lock", lockPath, "--since", "1h")
		wantPageInBrowser(t, page, ran, "")
	})
}

// countStarted is how many jobs of the day took the lock.
func countStarted(day []dayJob) int {
	n := 0
	for _, j := range day {
		if j.Started {
			n++
		}
	}
	return n
}

// reportPage runs gpuexec report --html with args and returns the page's
// path; the command must print nothing.
func reportPage(t *testing.T, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	out, err := gpuexecCmd([]string{"TMPDIR=" + dir}, append([]string{"report", "--html", page}, args...)...).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("gpuexec report --html: %v\n%s", err, out)
	}
	return page
}

// wantPageInBrowser opens page in chromium and fails unless it loads with no
// console error and no exception, fetches nothing but itself and draws
// bars bars on its timelines; shot, if not "", gets a screenshot.
func wantPageInBrowser(t *testing.T, page string, bars int, shot string) {
	t.Helper()
	dir := t.TempDir()
	// chromium's TMPDIR, where it puts its singleton socket: a short
	// path (a Unix socket's is at most 107 bytes), removed at the end.
	short, err := os.MkdirTemp("/tmp", "gxb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) })
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.UserDataDir(filepath.Join(dir, "profile")),
		chromedp.WindowSize(1200, 900),
		chromedp.Env("TMPDIR="+short),
		chromedp.Flag("disable-gpu", true),
		// Chromium refuses its sandbox as root, and a container often
		// lacks the namespaces it needs; the page is this test's own.
		chromedp.NoSandbox,
	)
	// A deadline, so that a browser that hangs fails the test.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(ctx)
	defer cancelTab()

	var (
		mu       sync.Mutex
		problems []string
		requests []string
	)
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range e.Args {
					args = append(args, string(a.Value))
				}
				problems = append(problems, fmt.Sprintf("console %s: %s", e.Type, strings.Join(args, " ")))
			}
		case *runtime.EventExceptionThrown:
			problems = append(problems, "exception: "+e.ExceptionDetails.Text)
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError {
				problems = append(problems, fmt.Sprintf("log error (%s): %s %s", e.Entry.Source, e.Entry.Text, e.Entry.URL))
			}
		case *network.EventRequestWillBeSent:
			requests = append(requests, e.Request.URL)
		}
	}); err != nil {
		t.Fatal(err)
	}
	pageURL := (&url.URL{Scheme: "file", Path: filepath.ToSlash(page)}).String()
	if err := chromedp.Do(ctx, chromedp.Navigate(pageURL)); err != nil {
		t.Fatal(err)
	}
	drawn, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("svg rect.bar").length`))
	if err != nil {
		t.Fatal(err)
	}
	title, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	if shot != "" {
		full, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(shot, smallPNG(t, full), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Events and the reply to the last command arrive in order on one
	// connection: every event of the load was seen before Run returned.
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
	for _, r := range requests {
		if r != pageURL {
			t.Errorf("the page made a request: %s (only %s itself is allowed)", r, pageURL)
		}
	}
	if len(requests) == 0 {
		t.Errorf("no request seen, not even the page's own (%s): the listener saw nothing", pageURL)
	}
	if drawn != bars {
		t.Errorf("%d bars on the timeline, want %d (one per job that held the lock)", drawn, bars)
	}
	if !strings.HasPrefix(title, "gpuexec report") {
		t.Errorf("title %q", title)
	}
}

// smallPNG is the PNG b with its 256 most frequent colours alone (each
// other pixel takes the nearest of them): a page of flat colours loses
// little, and the docs keep their screenshot under 200 KB.
func smallPNG(t *testing.T, b []byte) []byte {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	counts := map[color.RGBA]int{}
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			counts[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)]++
		}
	}
	colors := make([]color.RGBA, 0, len(counts))
	for c := range counts {
		colors = append(colors, c)
	}
	sort.Slice(colors, func(i, j int) bool { return counts[colors[i]] > counts[colors[j]] })
	pal := make(color.Palette, 0, 256)
	for _, c := range colors[:min(256, len(colors))] {
		pal = append(pal, c)
	}
	out := image.NewPaletted(bounds, pal)
	index := map[color.RGBA]uint8{}
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			i, ok := index[c]
			if !ok {
				i = uint8(pal.Index(c))
				index[c] = i
			}
			out.SetColorIndex(x, y, i)
		}
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&buf, out); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
