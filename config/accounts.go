package config

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/crypto/bcrypt"

	"github.com/kairos-dev/kairos/engine"
)

// The roles an [Accounts] entry may carry (doc/config.md#accounts), from
// the least to the most it may do: a viewer reads, an operator also acts
// on queues, an admin also manages tokens and limits.
const (
	RoleViewer   = "viewer"
	RoleOperator = "operator"
	RoleAdmin    = "admin"
)

// Roles are the role names, from the least to the most allowed.
var Roles = []string{RoleViewer, RoleOperator, RoleAdmin}

// AccountAccess is what an [Accounts] entry written as a table adds to its
// password: a role and the namespaces the account may touch. An account
// written as `user = "password"` (lmstfy's form) has none, and is a full
// admin of every namespace.
type AccountAccess struct {
	// Role is one of Roles; "" means RoleAdmin.
	Role string
	// Namespaces are the only namespaces the account may touch; nil means
	// every namespace. Routes that do not name one namespace (GET
	// /overview, /limits, /webhooks...) need every namespace.
	Namespaces []string
}

// RoleName returns Role, RoleAdmin when it is empty.
func (a AccountAccess) RoleName() string {
	if a.Role == "" {
		return RoleAdmin
	}
	return a.Role
}

// Access returns the role and namespaces of the account user: those of
// its table in AccountAccess, or a full admin of every namespace.
func (c *Config) Access(user string) AccountAccess {
	a := c.AccountAccess[user]
	a.Role = a.RoleName()
	return a
}

// IsBcryptHash reports whether an [Accounts] password is a bcrypt hash
// (it starts with $2a$, $2b$ or $2y$), compared with bcrypt rather than
// byte for byte.
func IsBcryptHash(pw string) bool {
	return strings.HasPrefix(pw, "$2a$") || strings.HasPrefix(pw, "$2b$") || strings.HasPrefix(pw, "$2y$")
}

// accountEntry is one [Accounts] entry as the file writes it: a password
// string, or a table with Password, Role and Namespaces. Parse turns it
// into Config.Accounts and Config.AccountAccess, and reports a wrong
// entry as a *ValidationError naming its key.
type accountEntry struct{ raw any }

// UnmarshalTOML keeps the value for Parse to check.
func (e *accountEntry) UnmarshalTOML(v any) error {
	e.raw = v
	return nil
}

// accountKeys are the keys of an account written as a table.
var accountKeys = []string{"Password", "Role", "Namespaces"}

// setAccounts fills c.Accounts and c.AccountAccess from the entries of
// the file's [Accounts] table.
func (c *Config) setAccounts(entries map[string]accountEntry) []error {
	if entries == nil {
		return nil
	}
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &ValidationError{Key: key, Reason: fmt.Sprintf(format, args...)})
	}
	c.Accounts = make(map[string]string, len(entries))
	for _, user := range sortedKeys(entries) {
		key := "Accounts." + tomlKeyName(user)
		switch v := entries[user].raw.(type) {
		case string:
			c.Accounts[user] = v
		case map[string]any:
			var a AccountAccess
			password, hasPassword := "", false
			for _, k := range sortedKeys(v) {
				field := k
				if i := slices.IndexFunc(accountKeys, func(s string) bool { return strings.EqualFold(s, k) }); i >= 0 {
					field = accountKeys[i]
				}
				switch field {
				case "Password":
					s, ok := v[k].(string)
					if !ok {
						bad(key+"."+k, "must be a string")
						continue
					}
					password, hasPassword = s, true
				case "Role":
					s, ok := v[k].(string)
					if !ok {
						bad(key+"."+k, "must be a string: %s", strings.Join(Roles, ", "))
						continue
					}
					a.Role = s
				case "Namespaces":
					list, ok := v[k].([]any)
					if !ok {
						bad(key+"."+k, `must be a list of namespace names, e.g. ["billing"]`)
						continue
					}
					a.Namespaces = make([]string, 0, len(list))
					for i, n := range list {
						s, ok := n.(string)
						if !ok {
							bad(fmt.Sprintf("%s.%s[%d]", key, k, i), "must be a string")
							continue
						}
						a.Namespaces = append(a.Namespaces, s)
					}
				default:
					reason := "unknown key (an account takes " + strings.Join(accountKeys, ", ") + ")"
					if near := nearest(k, accountKeys); len(near) > 0 {
						reason = fmt.Sprintf("unknown key (did you mean %s?)", strings.Join(near, " or "))
					}
					bad(key+"."+k, "%s", reason)
				}
			}
			if !hasPassword {
				bad(key+".Password", "is required")
				continue
			}
			c.Accounts[user] = password
			if c.AccountAccess == nil {
				c.AccountAccess = make(map[string]AccountAccess)
			}
			c.AccountAccess[user] = a
		default:
			bad(key, `must be a password ("user = \"password\"") or a table with %s`, strings.Join(accountKeys, ", "))
		}
	}
	return errs
}

// validateAccounts checks the passwords (a bcrypt hash must parse), the
// roles and the namespaces of [Accounts], and [Kairos] AdminHosts.
func (c *Config) validateAccounts(p *problems) {
	for _, user := range sortedKeys(c.Accounts) {
		key := "Accounts." + tomlKeyName(user)
		pw := c.Accounts[user]
		if _, ok := c.AccountAccess[user]; ok {
			key += ".Password"
		}
		if IsBcryptHash(pw) {
			if _, err := bcrypt.Cost([]byte(pw)); err != nil {
				p.add(key, "starts like a bcrypt hash but is not one (%v); hash the password with `htpasswd -nbB user PASSWORD` or similar", err)
			}
		}
	}
	for _, user := range sortedKeys(c.AccountAccess) {
		a := c.AccountAccess[user]
		key := "Accounts." + tomlKeyName(user)
		if _, ok := c.Accounts[user]; !ok {
			p.add(key+".Password", "is required")
		}
		if a.Role != "" && !slices.Contains(Roles, a.Role) {
			p.add(key+".Role", "unknown role %q (want %s)", a.Role, strings.Join(Roles, ", "))
		}
		if a.Namespaces != nil && len(a.Namespaces) == 0 {
			p.add(key+".Namespaces", "is empty: list the namespaces the account may touch, or leave the key out for every namespace")
		}
		for i, ns := range a.Namespaces {
			if !engine.ValidName(ns) {
				p.add(fmt.Sprintf("%s.Namespaces[%d]", key, i), "invalid namespace %q: want 1..%d characters of [-_A-Za-z0-9]", ns, engine.MaxNameLength)
			}
		}
	}
	for i, h := range c.Kairos.AdminHosts {
		if err := checkAdminHost(h); err != nil {
			p.add(fmt.Sprintf("Kairos.AdminHosts[%d]", i), "%q: %v", h, err)
		}
	}
}

// checkAdminHost checks one [Kairos] AdminHosts entry: a host name or IP
// address, with or without a port, as a browser sends it in Host, or "*".
func checkAdminHost(h string) error {
	if h == "*" {
		return nil // every name: the operator gives up the Host check
	}
	if h == "" || strings.TrimSpace(h) != h {
		return fmt.Errorf("want a host name, e.g. \"admin.example.com\" or \"admin.example.com:8443\"")
	}
	if strings.ContainsAny(h, "/?#@ ") {
		return fmt.Errorf("want a host name with an optional port, not a URL")
	}
	host := h
	if hh, port, err := net.SplitHostPort(h); err == nil {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("the port must be 1..65535")
		}
		host = hh
	} else if strings.Count(h, ":") > 1 && net.ParseIP(h) == nil {
		return fmt.Errorf("write an IPv6 address with a port as [addr]:port")
	}
	if host == "" {
		return fmt.Errorf("the host is empty")
	}
	return nil
}

// tomlKeyName writes a key as TOML would need it: bare when it can be,
// quoted otherwise.
func tomlKeyName(k string) string {
	if k != "" && strings.IndexFunc(k, func(r rune) bool {
		return !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0 {
		return k
	}
	return strconv.Quote(k)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
