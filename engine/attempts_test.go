package engine

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestErrorText(t *testing.T) {
	if s, cut := ErrorText("short"); s != "short" || cut {
		t.Fatalf("%q %v", s, cut)
	}
	// A 3-byte character across the 4096-byte mark is dropped whole.
	in := strings.Repeat("a", MaxErrorText-1) + "€tail"
	s, cut := ErrorText(in)
	if !cut || s != strings.Repeat("a", MaxErrorText-1) || !utf8.ValidString(s) {
		t.Fatalf("cut %v, %d bytes, valid %v", cut, len(s), utf8.ValidString(s))
	}
	if s, _ := ErrorText(strings.Repeat("x", 10000)); len(s) != MaxErrorText {
		t.Fatalf("%d bytes", len(s))
	}
}

func TestWorkerName(t *testing.T) {
	for in, want := range map[string]string{
		"host-1:4242":            "host-1:4242",
		"a|b c":                  "a_b_c",
		"pod/ns@node.example":    "pod/ns@node.example",
		strings.Repeat("w", 100): strings.Repeat("w", MaxWorkerName),
		"":                       "",
	} {
		if got := WorkerName(in); got != want {
			t.Errorf("WorkerName(%q) = %q, want %q", in, got, want)
		}
	}
}
