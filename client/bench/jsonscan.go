package bench

// topLevelStrings is the fast path of response decoding: it finds the
// members named keys of the JSON object b and, for each, stores in vals the
// raw content of its string value (no copy). It returns false whenever it
// cannot answer the way encoding/json would: b is not an object it can
// scan, a wanted member's value is not a string or holds an escape, or a
// key holds an escape (it might spell a wanted name). Callers then decode
// with encoding/json. A wanted key that is absent leaves vals[i] nil; when
// a key appears twice the last one wins, as with encoding/json.
func topLevelStrings(b []byte, keys []string, vals [][]byte) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		key, end, esc := scanString(b, i)
		if end < 0 || esc {
			return false
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		want := -1
		for k, name := range keys {
			if string(key) == name {
				want = k
				break
			}
		}
		if want >= 0 {
			if i >= len(b) || b[i] != '"' {
				return false
			}
			v, end, esc := scanString(b, i)
			if end < 0 || esc {
				return false
			}
			vals[want], i = v, end
		} else if i = skipValue(b, i); i < 0 {
			return false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString scans the string starting at b[i] == '"': its raw content, the
// index after its closing quote (-1 when unterminated or holding a control
// character) and whether it holds an escape.
func scanString(b []byte, i int) (content []byte, end int, escaped bool) {
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, escaped
		case c == '\\':
			escaped = true
			j++
		case c < 0x20:
			return nil, -1, false
		}
	}
	return nil, -1, false
}

// skipValue skips the value starting at b[i] and returns the index after
// it, or -1 when it is not one.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		_, end, _ := scanString(b, i)
		return end
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				_, end, _ := scanString(b, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default: // number, true, false, null
		j := i
		for j < len(b) {
			c := b[j]
			if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r' {
				break
			}
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
}
