package engine

// MaxNameLength is the longest namespace or queue name (lmstfy: 255).
const MaxNameLength = 255

// ValidName reports whether s is a valid namespace name: 1..255 characters
// from [-_A-Za-z0-9] (lmstfy's ^[-_[:alnum:]]+$).
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// ValidQueueName reports whether s is a valid queue name: a valid name that
// does not start with '_' (names starting with '_' are reserved).
func ValidQueueName(s string) bool {
	return ValidName(s) && s[0] != '_'
}
