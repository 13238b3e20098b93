package server

import (
	"github.com/gin-gonic/gin"

	"github.com/kairos-dev/kairos/auth"
)

// Security switches of the [Kairos] table (doc/config.md): who may read the
// queue sizes and the operational admin endpoints, and how tokens appear in
// metrics.

// sizeGuard is the guard of the two size routes: open as in lmstfy (a token
// prefix still picks the pool), or, with Kairos.AuthenticateSize, checked
// like every other route (token, then scope with the read role).
func (s *Server) sizeGuard() gin.HandlerFunc {
	if s.cfg.Kairos.AuthenticateSize {
		return s.guard(routeOpts{role: auth.RoleRead})
	}
	return s.guard(routeOpts{public: true})
}

// tokenLabel is how a token appears in metric labels: as lmstfy shows it,
// or by its fingerprint with Kairos.HashTokens, so that /metrics reveals no
// token either.
func (s *Server) tokenLabel(token string) string {
	if s.cfg.Kairos.HashTokens {
		return auth.Fingerprint(token)
	}
	return token
}
