package main

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kairos-dev/kairos/client/internal/kairostest"
)

// TestTLS: against a server serving TLS on both listeners, the CLI with
// https:// addresses and the CA file (KAIROS_CA_FILE or --ca-file) creates
// a token, publishes, consumes, ACKs and benches; without the CA it is
// refused by certificate verification.
func TestTLS(t *testing.T) {
	srv := kairostest.StartTLS(t)
	env := map[string]string{
		"KAIROS_ADDR": srv.APIURL(), "KAIROS_ADMIN_ADDR": srv.AdminURL(),
		"KAIROS_NAMESPACE": "tls", "KAIROS_CA_FILE": srv.CAFile,
	}
	env["KAIROS_TOKEN"] = strings.TrimSpace(kairos(t, env, "", "token", "create", "-d", "over https").want(t, exitOK).stdout)
	id := strings.TrimSpace(kairos(t, env, "", "publish", "q", "over TLS").want(t, exitOK).stdout)
	r := kairos(t, env, "", "consume", "q", "--ttr", "60").want(t, exitOK)
	if !strings.HasPrefix(r.stdout, id+" tls/q ") || !strings.HasSuffix(r.stdout, "\nover TLS\n") {
		t.Fatalf("consume over https: %q", r.stdout)
	}
	kairos(t, env, "", "ack", "q", id).want(t, exitOK)
	kairos(t, env, "", "consume", "q", "--wait", "0").want(t, exitNotFound)

	// The flag instead of the environment.
	noCA := maps.Clone(env)
	delete(noCA, "KAIROS_CA_FILE")
	kairos(t, noCA, "", "--ca-file", srv.CAFile, "publish", "q", "x").want(t, exitOK)
	// The bench's own HTTP client trusts it too.
	r = kairos(t, env, "", "bench", "publish", "-c", "2", "-d", "200ms", "--json").want(t, exitOK)
	var out struct {
		Result struct {
			Ops int64 `json:"ops"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Result.Ops == 0 {
		t.Fatalf("bench over https: %q: %v", r.stdout, err)
	}

	// Without the CA: refused by the certificate check, on both APIs.
	r = kairos(t, noCA, "", "publish", "q", "x").want(t, exitFailure)
	if !strings.Contains(r.stderr, "certificate signed by unknown authority") {
		t.Errorf("publish without the CA: %q", r.stderr)
	}
	r = kairos(t, noCA, "", "token", "list").want(t, exitFailure)
	if !strings.Contains(r.stderr, "certificate signed by unknown authority") {
		t.Errorf("token list without the CA: %q", r.stderr)
	}
	// A CA file that cannot be read is a usage error.
	r = kairos(t, noCA, "", "--ca-file", filepath.Join(t.TempDir(), "missing.crt"), "publish", "q", "x").want(t, exitUsage)
	if !strings.Contains(r.stderr, "CA file: open ") {
		t.Errorf("missing CA file: %q", r.stderr)
	}
}
