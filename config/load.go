package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/BurntSushi/toml"
)

// DecodeError is a TOML syntax error or a value of the wrong type, with
// the line and, when known, the key it concerns. It matches ErrInvalid and
// wraps the underlying BurntSushi/toml error.
type DecodeError struct {
	File   string
	Line   int    // 1-based; 0 when unknown
	Key    string // dotted key, e.g. "Pool.default.DB"; may be empty
	Reason string
	Err    error
}

// Error returns "config FILE: line N: KEY: reason".
func (e *DecodeError) Error() string {
	var b strings.Builder
	b.WriteString("config ")
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(": line ")
		b.WriteString(strconv.Itoa(e.Line))
	}
	if e.Key != "" {
		b.WriteString(": ")
		b.WriteString(e.Key)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap returns the toml error and ErrInvalid.
func (e *DecodeError) Unwrap() []error { return []error{e.Err, ErrInvalid} }

// fileError prefixes the problems of one file with its name, on one line.
type fileError struct {
	file string
	err  error
}

func (e *fileError) Error() string {
	return "config " + e.file + ": " + strings.ReplaceAll(e.err.Error(), "\n", "; ")
}

func (e *fileError) Unwrap() error { return e.err }

// Load reads the TOML file at path over Default and validates it. Unknown
// keys that look like mistakes are errors (see unknownKeys); the others
// are ignored: use LoadWithWarnings to report them.
func Load(path string) (*Config, error) {
	cfg, _, err := LoadWithWarnings(path)
	return cfg, err
}

// LoadWithWarnings is Load that also returns warnings the caller should
// log: unknown keys that are not mistakes (an lmstfy file may carry some)
// and pools ignored because their legacy Version is set. The warnings come
// back with an error too, for the caller to print beside it. A missing or
// unreadable file is an error naming the path; a syntax or type error is a
// *DecodeError naming the line and key; mistyped keys and validation
// problems are *ValidationErrors (see Validate and Problems).
func LoadWithWarnings(path string) (*Config, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config %s: %w", path, err)
	}
	return Parse(path, data)
}

// Parse is LoadWithWarnings for a configuration already in memory; name
// only labels errors. Every problem comes at once: the keys the file
// mistypes (see unknownKeys) and every validation error, in one error,
// with the warnings beside it.
func Parse(name string, data []byte) (*Config, []string, error) {
	cfg := Default()
	file := fileTOML{Config: cfg}
	md, err := toml.Decode(string(data), &file)
	if err != nil {
		return nil, nil, decodeError(name, data, err)
	}
	keyErrs, warnings := unknownKeys(md)
	keyErrs = append(keyErrs, cfg.setAccounts(file.Accounts)...)
	if definedFold(md, "Kairos") && !definedFold(md, "Kairos", "HashTokens") {
		cfg.Kairos.HashTokens = true // a Kairos-style file: hashed by default
	}
	keyErrs = append(keyErrs, caseDuplicates(md)...)
	legacy := cfg.legacyPools()
	for _, pool := range legacy {
		warnings = append(warnings, fmt.Sprintf("Pool.%s: ignored because Version = %q is set (lmstfy ignores such pools too)", pool, cfg.Pool[pool].Version))
	}
	if err := errors.Join(append(keyErrs, cfg.Validate())...); err != nil {
		return nil, warnings, &fileError{file: name, err: err}
	}
	for _, pool := range legacy {
		delete(cfg.Pool, pool)
	}
	return cfg, warnings, nil
}

// fileTOML is what a file decodes into: the Config, whose [Accounts]
// entries (a password or a table each) go through accountEntry.
type fileTOML struct {
	*Config
	Accounts map[string]accountEntry `toml:"Accounts"`
}

// definedFold reports whether the file has the key path (a table, or a
// key of a table), in any case: the decoder matches keys to fields
// ignoring case.
func definedFold(md toml.MetaData, path ...string) bool {
	for _, k := range md.Keys() {
		if len(k) >= len(path) && slices.EqualFunc(k[:len(path)], path, strings.EqualFold) {
			return true
		}
	}
	return false
}

// legacyPools returns the sorted names of the pools with a Version.
func (c *Config) legacyPools() []string {
	var names []string
	for name, p := range c.Pool {
		if p.Version != "" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// tomlErrRE matches BurntSushi/toml's text for errors found while
// decoding (type mismatches), which are not toml.ParseErrors.
var tomlErrRE = regexp.MustCompile(`^toml: line (\d+)(?: \(last key "(.*?)"\))?: (.*)$`)

func decodeError(name string, data []byte, err error) error {
	de := &DecodeError{File: name, Reason: err.Error(), Err: err}
	var pe toml.ParseError
	if errors.As(err, &pe) {
		de.Line, de.Key, de.Reason = pe.Position.Line, pe.LastKey, pe.Message
		// The lexer has already counted the newline it choked on (a table
		// header missing its "]"), so derive the line from the offset.
		if pos := pe.Position; pos.Len > 0 && pos.Start >= 0 && pos.Start < len(data) {
			de.Line = bytes.Count(data[:pos.Start], []byte("\n")) + 1
		}
		return de
	}
	if m := tomlErrRE.FindStringSubmatch(err.Error()); m != nil {
		de.Line, _ = strconv.Atoi(m[1])
		de.Key, de.Reason = m[2], m[3]
	} else {
		de.Reason = strings.TrimPrefix(de.Reason, "toml: ")
	}
	return de
}

// The keys Kairos knows, by table, from the toml tags.
var (
	topKeys    = append(tomlKeys(Config{}), "Accounts")
	redisKeys  = tomlKeys(RedisConf{})
	kairosKeys = tomlKeys(Kairos{})
	dashKeys   = tomlKeys(Dashboard{})
	tlsKeys    = tomlKeys(TLS{})
)

func tomlKeys(v any) []string {
	t := reflect.TypeOf(v)
	keys := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ","); tag != "" && tag != "-" {
			keys = append(keys, tag)
		}
	}
	return keys
}

// unknownKeys sorts the keys of the file that no Config field took (each
// unknown table once, its own keys not again) into errors and warnings.
//
// An unknown key is an error, a *ValidationError naming it as written,
// when it is most likely a mistake: a near-miss of a key of its table
// ("did you mean Addr?"), a key of another table ("belongs in
// [Kairos]"), or any key in [Kairos], a table only Kairos reads. Other
// unknown keys and tables are warnings: an lmstfy file may carry keys that
// neither lmstfy nor Kairos uses, and it must keep loading.
func unknownKeys(md toml.MetaData) (errs []error, warnings []string) {
	seen := make(map[string]bool)
	for _, k := range md.Undecoded() {
		// Report the shortest unknown prefix: [Pools.default] is the
		// unknown table Pools, whether or not the file names it alone.
		p := k
		switch top := k[0]; {
		case !slices.ContainsFunc(topKeys, func(t string) bool { return strings.EqualFold(t, top) }):
			p = k[:1]
		case (strings.EqualFold(top, "AdminRedis") || strings.EqualFold(top, "Kairos") || strings.EqualFold(top, "Dashboard") || strings.EqualFold(top, "TLS")) && len(k) > 2:
			p = k[:2]
		case strings.EqualFold(top, "Pool") && len(k) > 3:
			p = k[:3]
		}
		s := p.String()
		if seen[s] {
			continue
		}
		seen[s] = true
		isTable := len(p) < len(k)
		switch md.Type(p...) {
		case "Hash", "ArrayHash":
			isTable = true
		}
		if reason := mistake(p, isTable); reason != "" {
			errs = append(errs, &ValidationError{Key: s, Reason: reason})
			continue
		}
		if isTable {
			warnings = append(warnings, fmt.Sprintf("unknown table [%s] ignored", s))
		} else {
			warnings = append(warnings, fmt.Sprintf("unknown key %s ignored", s))
		}
	}
	return errs, warnings
}

// mistake returns why the unknown key k is an error, or "" when it is
// only worth a warning (see unknownKeys).
func mistake(k toml.Key, isTable bool) string {
	what := "unknown key"
	if isTable {
		what = "unknown table"
	}
	name := k[len(k)-1]
	var table string // "" = the top level
	var known []string
	switch {
	case len(k) == 1:
		known = topKeys
	case len(k) == 2 && strings.EqualFold(k[0], "AdminRedis"):
		table, known = "AdminRedis", redisKeys
	case len(k) == 3 && strings.EqualFold(k[0], "Pool"):
		table, known = "Pool."+k[1], redisKeys
	case len(k) == 2 && strings.EqualFold(k[0], "Kairos"):
		table, known = "Kairos", kairosKeys
	case len(k) == 2 && strings.EqualFold(k[0], "Dashboard"):
		table, known = "Dashboard", dashKeys
	case len(k) == 2 && strings.EqualFold(k[0], "TLS"):
		table, known = "TLS", tlsKeys
	default:
		return ""
	}
	if near := nearest(name, known); len(near) > 0 {
		if isTable {
			for i, n := range near {
				near[i] = "[" + n + "]"
			}
		}
		return fmt.Sprintf("%s (did you mean %s?)", what, strings.Join(near, " or "))
	}
	if !isTable {
		if home := homeOf(name, table); home != "" {
			return fmt.Sprintf("%s (%s belongs %s)", what, name, home)
		}
	}
	if table == "Kairos" {
		return fmt.Sprintf("%s ([Kairos] takes only %s)", what, strings.Join(kairosKeys, ", "))
	}
	if table == "Dashboard" {
		return fmt.Sprintf("%s ([Dashboard] takes only %s)", what, strings.Join(dashKeys, ", "))
	}
	if table == "TLS" {
		return fmt.Sprintf("%s ([TLS] takes only %s)", what, strings.Join(tlsKeys, ", "))
	}
	return ""
}

// homeOf says where a key of another table belongs, when name is one;
// table is where the file put it ("" = the top level).
func homeOf(name, table string) string {
	has := func(keys []string) bool {
		return slices.ContainsFunc(keys, func(k string) bool { return strings.EqualFold(k, name) })
	}
	switch {
	case table != "" && has(topKeys):
		return "at the top of the file, before the first [table]"
	case table != "Kairos" && has(kairosKeys):
		return "in [Kairos]"
	case table != "TLS" && has(tlsKeys):
		return "in [TLS]"
	case (table == "" || table == "Kairos") && has(redisKeys):
		return "in a Redis section: [Pool.NAME] or [AdminRedis]"
	}
	return ""
}

// nearest returns the known keys closest to name, ignoring case, when
// they are close enough to be what was meant: an edit distance (with
// transpositions) of at most 1 for keys of up to 5 characters, 2 up to 9,
// 3 beyond.
func nearest(name string, known []string) []string {
	best, out := -1, []string(nil)
	for _, k := range known {
		limit := 1
		switch n := utf8.RuneCountInString(k); {
		case n > 9:
			limit = 3
		case n > 5:
			limit = 2
		}
		d := editDistance(strings.ToLower(name), strings.ToLower(k))
		switch {
		case d > limit:
		case best < 0 || d < best:
			best, out = d, []string{k}
		case d == best:
			out = append(out, k)
		}
	}
	return out
}

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and transpositions of adjacent
// runes each cost 1.
func editDistance(a, b string) int {
	s, t := []rune(a), []rune(b)
	d := make([][]int, len(s)+1)
	for i := range d {
		d[i] = make([]int, len(t)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(s); i++ {
		for j := 1; j <= len(t); j++ {
			cost := 1
			if s[i-1] == t[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && s[i-1] == t[j-2] && s[i-2] == t[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(s)][len(t)]
}

// caseDuplicates reports the values the file sets twice under spellings
// that differ only in case ([Pool.default] and [pool.default] both with
// an Addr): BurntSushi/toml matches keys to fields ignoring case, so both
// reach the same field and which one wins is not defined. Pool and
// account names are map keys, matched exactly, so they are compared as
// written.
func caseDuplicates(md toml.MetaData) []error {
	var errs []error
	seen := make(map[string]string)
	for _, k := range md.Keys() {
		if t := md.Type(k...); t == "Hash" || t == "ArrayHash" {
			continue
		}
		parts := slices.Clone([]string(k))
		parts[0] = strings.ToLower(parts[0])
		switch {
		case (parts[0] == "adminredis" || parts[0] == "kairos") && len(parts) > 1:
			parts[1] = strings.ToLower(parts[1])
		case parts[0] == "pool" && len(parts) > 2:
			parts[2] = strings.ToLower(parts[2])
		}
		canon, spelled := strings.Join(parts, "\x00"), k.String()
		if first, ok := seen[canon]; ok {
			errs = append(errs, &ValidationError{Key: spelled, Reason: fmt.Sprintf("set twice: also as %s (keys match ignoring case); keep one", first)})
			continue
		}
		seen[canon] = spelled
	}
	return errs
}
