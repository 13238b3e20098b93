package server

import "testing"

func TestFormatBody(t *testing.T) {
	for _, tc := range []struct {
		body, as, wantAs, want string
	}{
		{`{"a":1,"b":[2]}`, "", "json", "{\n  \"a\": 1,\n  \"b\": [\n    2\n  ]\n}"},
		{`{"b":1,"a":2}`, "", "json", "{\n  \"b\": 1,\n  \"a\": 2\n}"}, // key order kept
		{`{"a":1}`, "text", "text", `{"a":1}`},
		{`{"a":1}`, "base64", "base64", "eyJhIjoxfQ=="},
		{"hello <b>", "", "text", "hello <b>"}, // escaping is the template's job
		{"hello", "json", "text", "hello"},     // not JSON: best fit
		{"\x00\x01\xff", "", "base64", "AAH/"},
		{"\x00\x01\xff", "text", "base64", "AAH/"},
		{"", "", "text", ""},
		{"line1\nline2\ttab", "", "text", "line1\nline2\ttab"},
		{"\"quoted\"", "", "json", "\"quoted\""},
	} {
		as, got := formatBody([]byte(tc.body), tc.as)
		if as != tc.wantAs || got != tc.want {
			t.Errorf("formatBody(%q, %q) = %q, %q; want %q, %q", tc.body, tc.as, as, got, tc.wantAs, tc.want)
		}
	}
}
