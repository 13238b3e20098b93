package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kairos-dev/kairos/config"
)

func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRunHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "-help"} {
		t.Run(arg, func(t *testing.T) {
			code, stdout, stderr := runMain(t, arg)
			if code != 0 {
				t.Errorf("exit code %d, want 0", code)
			}
			if !strings.HasPrefix(stdout, "usage: kairos-server") || !strings.Contains(stdout, "-c string") {
				t.Errorf("stdout = %q, want the usage", stdout)
			}
			if stderr != "" {
				t.Errorf("stderr = %q, want nothing", stderr)
			}
		})
	}
}

func TestRunBadCommandLine(t *testing.T) {
	for _, args := range [][]string{{"-x"}, {"kairos.toml"}} {
		code, stdout, stderr := runMain(t, args...)
		if code != 2 || stdout != "" || stderr == "" {
			t.Errorf("run(%q) = %d, stdout %q, stderr %q; want 2 and an explanation on stderr", args, code, stdout, stderr)
		}
	}
}

// TestRunConfigErrors: a config that does not load stops the binary with a
// non-zero exit code and every problem printed, a line each, with the
// warnings beside them; nothing is started.
func TestRunConfigErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kairos.toml")
	text := "Prt = 7777\nAdminPort = 7778\nBacktraceLevel = 1\n[AdminRedis]\nAddr = \"127.0.0.1:6379\"\n[Pool.default]\nAdr = \"127.0.0.1:6379\"\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runMain(t, "-c", path)
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if stdout != "" {
		t.Errorf("stdout = %q, want nothing (no logger, no server)", stdout)
	}
	want := "kairos-server: config " + path + ": 4 problems:\n" +
		"  Prt: unknown key (did you mean Port?)\n" +
		"  Pool.default.Adr: unknown key (did you mean Addr?)\n" +
		"  Port: must be 1..65535, not 0\n" +
		"  Pool.default.Addr: is required (set it, or [Kairos] Embedded = true for an in-memory store that loses everything on stop)\n" +
		"kairos-server: config " + path + ": warning: unknown key BacktraceLevel ignored\n"
	if stderr != want {
		t.Errorf("stderr =\n%s\nwant\n%s", stderr, want)
	}

	code, _, stderr = runMain(t, "-c", filepath.Join(t.TempDir(), "missing.toml"))
	if code != 1 || !strings.Contains(stderr, "missing.toml: open") {
		t.Errorf("missing file: exit code %d, stderr %q", code, stderr)
	}
}

func TestRunVersion(t *testing.T) {
	code, stdout, _ := runMain(t, "-v")
	if code != 0 || !strings.HasPrefix(stdout, "kairos-server ") {
		t.Errorf("-v: exit code %d, stdout %q", code, stdout)
	}
}

func TestTokenHint(t *testing.T) {
	cfg := config.Default()
	const base = "create a token: curl -X POST 'http://127.0.0.1:7778/token/<namespace>?description=first'"
	if got := tokenHint(cfg, "http://127.0.0.1:7778"); got != base {
		t.Errorf("without accounts: %q, want %q", got, base)
	}
	cfg.Accounts = map[string]string{"ops": "s3cret", "monitor": "other-secret"}
	got := tokenHint(cfg, "http://127.0.0.1:7778")
	want := "create a token: curl -u 'monitor:PASSWORD' -X POST 'http://127.0.0.1:7778/token/<namespace>?description=first' (PASSWORD: that user's password in [Accounts])"
	if got != want {
		t.Errorf("with accounts: %q, want %q", got, want)
	}
	if strings.Contains(got, "secret") {
		t.Errorf("the hint shows a password: %q", got)
	}
	// The first account that may create tokens everywhere.
	cfg.AccountAccess = map[string]config.AccountAccess{"monitor": {Role: config.RoleViewer}}
	if got := tokenHint(cfg, "a:1"); !strings.Contains(got, "-u 'ops:PASSWORD'") {
		t.Errorf("with a viewer first: %q, want the admin ops", got)
	}
	cfg.AccountAccess = nil
	cfg.Accounts = map[string]string{"o'brien": "x"}
	if got := tokenHint(cfg, "http://a:1"); !strings.Contains(got, `-u 'o'\''brien:PASSWORD'`) {
		t.Errorf("quoting: %q", got)
	}
}

// TestUsageLineNamesEveryFlag: the synopsis lists every flag the help
// describes (it left out -probe).
func TestUsageLineNamesEveryFlag(t *testing.T) {
	_, stdout, _ := runMain(t, "--help")
	lines := strings.Split(stdout, "\n")
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l, "  -") {
			continue
		}
		name := strings.Fields(l)[0]
		if !strings.Contains(lines[0], "["+name+"]") && !strings.Contains(lines[0], "["+name+" ") {
			t.Errorf("usage line %q does not name %s", lines[0], name)
		}
	}
}

// TestVersionFlags: -v, -version and --version print the version.
func TestVersionFlags(t *testing.T) {
	for _, flag := range []string{"-v", "-version", "--version"} {
		code, stdout, stderr := runMain(t, flag)
		if code != 0 || !strings.HasPrefix(stdout, "kairos-server ") || stderr != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 0 and the version", flag, code, stdout, stderr)
		}
	}
}
