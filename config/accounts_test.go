package config

import (
	"reflect"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// TestLoadAccounts: [Accounts] takes lmstfy's `user = "password"` and the
// table form with a role, namespaces and a bcrypt hash, side by side; a
// plain entry is a full admin of every namespace.
func TestLoadAccounts(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("bob-pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	text := minimal + `
[Accounts]
alice = "plain-pw"
[Accounts.bob]
Password = "` + string(hash) + `"
Role = "operator"
Namespaces = ["billing", "shop"]
[Accounts.carol]
password = "c"
role = "viewer"
`
	cfg, warnings, err := LoadWithWarnings(writeConfig(t, text))
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings = %q", warnings)
	}
	wantAccounts := map[string]string{"alice": "plain-pw", "bob": string(hash), "carol": "c"}
	if !reflect.DeepEqual(cfg.Accounts, wantAccounts) {
		t.Errorf("Accounts = %v, want %v", cfg.Accounts, wantAccounts)
	}
	for user, want := range map[string]AccountAccess{
		"alice":             {Role: RoleAdmin},
		"bob":               {Role: RoleOperator, Namespaces: []string{"billing", "shop"}},
		"carol":             {Role: RoleViewer},
		"nobody-configured": {Role: RoleAdmin},
	} {
		if got := cfg.Access(user); !reflect.DeepEqual(got, want) {
			t.Errorf("Access(%q) = %+v, want %+v", user, got, want)
		}
	}
	if !IsBcryptHash(cfg.Accounts["bob"]) || IsBcryptHash("plain-pw") {
		t.Error("IsBcryptHash is wrong")
	}
}

// TestLoadAccountsRefused: a wrong [Accounts] entry stops the server,
// naming the key.
func TestLoadAccountsRefused(t *testing.T) {
	tests := []struct {
		name, accounts, key, reason string
	}{
		{"unknown role", "[Accounts.bob]\nPassword = \"x\"\nRole = \"root\"\n", "Accounts.bob.Role", `unknown role "root"`},
		{"no password", "[Accounts.bob]\nRole = \"viewer\"\n", "Accounts.bob.Password", "is required"},
		{"mistyped key", "[Accounts.bob]\nPassword = \"x\"\nRoles = \"viewer\"\n", "Accounts.bob.Roles", "did you mean Role?"},
		{"unknown key", "[Accounts.bob]\nPassword = \"x\"\nGroup = \"a\"\n", "Accounts.bob.Group", "an account takes Password, Role, Namespaces"},
		{"bad namespace", "[Accounts.bob]\nPassword = \"x\"\nNamespaces = [\"a b\"]\n", "Accounts.bob.Namespaces[0]", `invalid namespace "a b"`},
		{"empty namespaces", "[Accounts.bob]\nPassword = \"x\"\nNamespaces = []\n", "Accounts.bob.Namespaces", "is empty"},
		{"namespaces not a list", "[Accounts.bob]\nPassword = \"x\"\nNamespaces = \"a\"\n", "Accounts.bob.Namespaces", "must be a list"},
		{"password not a string", "[Accounts]\nbob = 3\n", "Accounts.bob", "must be a password"},
		{"broken bcrypt hash", "[Accounts]\nbob = \"$2b$10$short\"\n", "Accounts.bob", "is not one"},
		{"broken bcrypt hash in a table", "[Accounts.bob]\nPassword = \"$2y$99$x\"\n", "Accounts.bob.Password", "is not one"},
		{"AdminHosts URL", "[Kairos]\nAdminHosts = [\"https://admin.example.com/\"]\n", "Kairos.AdminHosts[0]", "not a URL"},
		{"AdminHosts port", "[Kairos]\nAdminHosts = [\"admin.example.com:0\"]\n", "Kairos.AdminHosts[0]", "1..65535"},
		{"AdminHosts empty", "[Kairos]\nAdminHosts = [\"\"]\n", "Kairos.AdminHosts[0]", "want a host name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeConfig(t, minimal+tc.accounts))
			if err == nil {
				t.Fatal("Load accepted it")
			}
			var found bool
			for _, p := range Problems(err) {
				if p.Key == tc.key && strings.Contains(p.Reason, tc.reason) {
					found = true
				}
			}
			if !found {
				t.Errorf("error %q does not name %s with %q", err, tc.key, tc.reason)
			}
		})
	}
}

// TestLoadAdminHosts: the names and name:port entries load as written.
func TestLoadAdminHosts(t *testing.T) {
	cfg, err := Load(writeConfig(t, minimal+"[Kairos]\nAdminHosts = [\"kairos.example.com\", \"10.0.0.5:8443\", \"[::1]:7778\", \"*\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"kairos.example.com", "10.0.0.5:8443", "[::1]:7778", "*"}; !reflect.DeepEqual(cfg.Kairos.AdminHosts, want) {
		t.Errorf("AdminHosts = %q, want %q", cfg.Kairos.AdminHosts, want)
	}
}
