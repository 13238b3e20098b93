package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

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

// Load reads the TOML file at path over Default and validates it. Keys the
// file sets but Kairos does not use are ignored; use LoadWithWarnings to
// report them.
func Load(path string) (*Config, error) {
	cfg, _, err := LoadWithWarnings(path)
	return cfg, err
}

// LoadWithWarnings is Load that also returns warnings the caller should
// log: keys Kairos does not use (an lmstfy file may carry some) and pools
// ignored because their legacy Version is set. A missing or unreadable
// file is an error naming the path; a syntax or type error is a
// *DecodeError naming the line and key; validation problems are
// *ValidationErrors (see Validate and Problems).
func LoadWithWarnings(path string) (*Config, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config %s: %w", path, err)
	}
	return Parse(path, data)
}

// Parse is LoadWithWarnings for a configuration already in memory; name
// only labels errors.
func Parse(name string, data []byte) (*Config, []string, error) {
	cfg := Default()
	md, err := toml.Decode(string(data), cfg)
	if err != nil {
		return nil, nil, decodeError(name, data, err)
	}
	warnings := unusedKeys(md)
	legacy := cfg.legacyPools()
	for _, pool := range legacy {
		warnings = append(warnings, fmt.Sprintf("Pool.%s: ignored because Version = %q is set (lmstfy ignores such pools too)", pool, cfg.Pool[pool].Version))
	}
	if err := cfg.Validate(); err != nil {
		return nil, warnings, &fileError{file: name, err: err}
	}
	for _, pool := range legacy {
		delete(cfg.Pool, pool)
	}
	return cfg, warnings, nil
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

// unusedKeys lists the keys of the file that no Config field took, once
// per unknown table (its own keys are not listed again).
func unusedKeys(md toml.MetaData) []string {
	var out []string
	var tables []string
	for _, k := range md.Undecoded() {
		s := k.String()
		covered := false
		for _, t := range tables {
			if strings.HasPrefix(s, t+".") {
				covered = true
				break
			}
		}
		if covered {
			continue
		}
		switch md.Type(k...) {
		case "Hash", "ArrayHash":
			tables = append(tables, s)
			out = append(out, fmt.Sprintf("unknown table [%s] ignored", s))
		default:
			out = append(out, fmt.Sprintf("unknown key %s ignored", s))
		}
	}
	return out
}
