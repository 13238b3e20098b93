package server

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/server/ui"
)

// TestDashboardBackoffExamples (issue #33 item 5): every backoff policy the
// queue page offers as an example (the field's placeholder and the hint's
// code samples) is one the server accepts. The page once suggested
// "exponential:1s..5m", which PUT /queue/:ns/:q/config refuses.
func TestDashboardBackoffExamples(t *testing.T) {
	b, err := fs.ReadFile(ui.Templates(), "queue.html")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	start := strings.Index(page, `name="backoff"`)
	end := strings.Index(page[start:], "</form>")
	if start < 0 || end < 0 {
		t.Fatal("queue.html: no backoff form")
	}
	form := page[start : start+end]
	var examples []string
	if m := regexp.MustCompile(`placeholder="e\.g\. ([^"]+)"`).FindStringSubmatch(form); m != nil {
		examples = append(examples, m[1])
	}
	for _, m := range regexp.MustCompile(`<code>([^<{]+)</code>`).FindAllStringSubmatch(form, -1) {
		examples = append(examples, m[1])
	}
	if len(examples) < 3 {
		t.Fatalf("found %d backoff examples in the form, want the placeholder and the hint's: %q", len(examples), examples)
	}
	for _, ex := range examples {
		if _, err := engine.ParseBackoff(ex); err != nil {
			t.Errorf("the queue page suggests backoff %q, which the server refuses: %v", ex, err)
		}
	}
}
