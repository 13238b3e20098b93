package auth

import "errors"

// Sentinel errors. Messages that the admin API shows to clients are lmstfy's,
// verbatim; check them with errors.Is (some are wrapped with a reason).
var (
	// ErrPoolNotFound means the pool is not configured.
	ErrPoolNotFound = errors.New("the pool was not exists")
	// ErrTokenExists means Create was given a token that already exists.
	ErrTokenExists = errors.New("the token has already existed")
	// ErrTokenTooShort means a user-chosen token is shorter than
	// MinUserTokenLength (or has an empty secret after its pool prefix).
	ErrTokenTooShort = errors.New("the user token was too short")
	// ErrInvalidToken means the token does not exist for the namespace.
	ErrInvalidToken = errors.New("invalid token")
	// ErrNotCached means Store.VerifyCached cannot answer from memory: only
	// Verify, with a round trip to the admin Redis, can.
	ErrNotCached = errors.New("auth: token not in the cache")
	// ErrLimitExists means Throttler.Add found a limit already set.
	ErrLimitExists = errors.New("throttler limit already exists")
	// ErrInvalidLimit means a Limit fails Validate; it is wrapped with the
	// reason (for instance "interval should be > 0").
	ErrInvalidLimit = errors.New("invalid limit")
	// ErrInvalidScope means a scope names an unknown or ungrantable role, or
	// an invalid queue name.
	ErrInvalidScope = errors.New("invalid scope")
	// ErrInvalidNamespace means a namespace name has characters outside
	// [-_A-Za-z0-9] (or is empty).
	ErrInvalidNamespace = errors.New("namespace name contains forbidden characters")
	// ErrNamespaceTooLong means a namespace name is longer than
	// engine.MaxNameLength.
	ErrNamespaceTooLong = errors.New("the namespace name was too long")
	// ErrReservedToken means Create was given a token starting with
	// HashedPrefix, which only hashed forms and fingerprints use.
	ErrReservedToken = errors.New(`the token must not start with "` + HashedPrefix + `"`)
	// ErrAmbiguousFingerprint means a fingerprint given to an admin
	// operation matches several tokens; give more digits or the token.
	ErrAmbiguousFingerprint = errors.New("the fingerprint matches several tokens")
	// ErrUnknownFingerprint means a limit cannot be set for a fingerprint
	// that matches no token (the full token is needed then).
	ErrUnknownFingerprint = errors.New("the fingerprint matches no token")
)
