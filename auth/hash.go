package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Hashed tokens (StoreOptions.HashTokens, ThrottlerOptions.HashTokens).
//
// A token stored hashed is kept in Redis as HashedPrefix followed by the 64
// lower-case hex digits of the SHA-256 of its secret (the part after
// "pool:"), wherever lmstfy's layout keeps the token itself: the field of
// tk/{pool}/{ns} and tks/{pool}/{ns}, the "{pool}/{ns}/{token}" field of
// __throttler_keys__ and the token-bucket keys. Its fingerprint, shown by
// listings instead of the token, is HashedPrefix and the first
// FingerprintDigits hex digits.
//
// No presented token may start with HashedPrefix (Verify refuses it, Create
// will not make it), so the hashed forms found in a dump of the admin Redis
// can never be used as tokens.

// HashedPrefix starts every hashed token form and every fingerprint.
const HashedPrefix = "sha256-"

// FingerprintDigits is how many hex digits of the hash a fingerprint shows
// (48 bits: a collision within one namespace is practically impossible).
const FingerprintDigits = 12

const hashDigits = 2 * sha256.Size

// HashToken returns the stored form of a token in hashed mode:
// "sha256-" + hex(SHA-256(secret)).
func HashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	var b [len(HashedPrefix) + hashDigits]byte
	copy(b[:], HashedPrefix)
	hex.Encode(b[len(HashedPrefix):], sum[:])
	return string(b[:])
}

// Fingerprint returns the fingerprint of a token, "sha256-" + the first 12
// hex digits of its hash. token may be a secret or a stored hashed form
// (whose fingerprint is its own prefix).
func Fingerprint(token string) string {
	if !isHashedForm(token) {
		token = HashToken(token)
	}
	return token[:len(HashedPrefix)+FingerprintDigits]
}

// IsFingerprint reports whether s names a token by its hash: HashedPrefix
// and FingerprintDigits to 64 lower-case hex digits (a fingerprint or a
// full stored form).
func IsFingerprint(s string) bool {
	rest, ok := strings.CutPrefix(s, HashedPrefix)
	return ok && len(rest) >= FingerprintDigits && len(rest) <= hashDigits && isLowerHex(rest)
}

// isHashedForm reports whether s is a full stored hashed form.
func isHashedForm(s string) bool {
	return len(s) == len(HashedPrefix)+hashDigits && IsFingerprint(s)
}

// reservedToken reports whether a presented or requested secret uses the
// prefix reserved for hashed forms.
func reservedToken(secret string) bool { return strings.HasPrefix(secret, HashedPrefix) }

// hashedFormOf returns the hashed form of a stored token field, which is
// either a hashed form already or a token stored in clear.
func hashedFormOf(field string) string {
	if isHashedForm(field) {
		return field
	}
	return HashToken(field)
}

// displayToken is how listings show a stored token field: hashed forms, and
// every token when hash is set, as fingerprints; tokens stored in clear as
// they are otherwise (lmstfy's listing).
func displayToken(field string, hash bool) string {
	if hash || isHashedForm(field) {
		return Fingerprint(field)
	}
	return field
}

// matchFingerprint returns the fields whose hashed form starts with fp.
func matchFingerprint(fields []string, fp string) []string {
	var out []string
	for _, f := range fields {
		if strings.HasPrefix(hashedFormOf(f), fp) {
			out = append(out, f)
		}
	}
	return out
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
