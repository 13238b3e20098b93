package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestProbe: -probe succeeds on 200 only, over http:// and over https://
// with a certificate no system trusts (httptest's own).
func TestProbe(t *testing.T) {
	var status atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(int(status.Load())) })
	plain, secure := httptest.NewServer(h), httptest.NewTLSServer(h)
	defer plain.Close()
	defer secure.Close()
	for _, base := range []string{plain.URL, secure.URL} {
		status.Store(http.StatusOK)
		if code, stdout, stderr := runMain(t, "-probe", base+"/healthz"); code != 0 || !strings.Contains(stdout, "200 OK") {
			t.Errorf("-probe %s: exit %d, %q %q; want 0", base, code, stdout, stderr)
		}
		status.Store(http.StatusServiceUnavailable)
		if code, _, stderr := runMain(t, "-probe", base+"/healthz"); code != 1 || !strings.Contains(stderr, "503") {
			t.Errorf("-probe %s on 503: exit %d, %q; want 1", base, code, stderr)
		}
	}
}
