package server

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/kairos-dev/kairos/auth"
)

type tokensResponse struct {
	Tokens map[string]string `json:"tokens"`
}

type tokenResponse struct {
	Token string `json:"token"`
}

// listTokens serves GET /token/:namespace?pool=. With a non-empty pool
// parameter the tokens are listed as "pool:token" (even pool=default, as
// lmstfy does).
func (s *Server) listTokens(c *gin.Context) {
	ns := c.Param("namespace")
	if err := auth.ValidateNamespace(ns); err != nil {
		s.failAdmin(c, err)
		return
	}
	pool := c.Query("pool")
	prefix := pool != ""
	if pool == "" {
		pool = auth.DefaultPool
	}
	if !s.tokens.HasPool(pool) {
		s.failAdmin(c, errAdminPool)
		return
	}
	tokens, err := s.tokens.List(c.Request.Context(), pool, ns, prefix)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	if tokens == nil {
		tokens = map[string]string{}
	}
	c.IndentedJSON(http.StatusOK, tokensResponse{Tokens: tokens})
}

// createToken serves POST /token/:namespace. description (required),
// token (optional, ≥ 20 characters, may be "pool:token"), and the Kairos
// scope parameters queues and roles come from the query or a form body;
// pool from the query only.
func (s *Server) createToken(c *gin.Context) {
	if c.Request.Body != nil {
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxAdminBody)
	}
	if err := c.Request.ParseForm(); err != nil {
		// lmstfy ignores form errors (a bad query escape drops that pair);
		// only an oversized body is refused.
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.failAdmin(c, errBodyTooLarge)
			return
		}
	}
	form := c.Request.Form
	desc, token := form.Get("description"), form.Get("token")
	if desc == "" {
		s.failAdmin(c, errInvalidDesc)
		return
	}
	if token != "" && len(token) < auth.MinUserTokenLength {
		s.failAdmin(c, errTokenTooShort)
		return
	}
	ns := c.Param("namespace")
	if err := auth.ValidateNamespace(ns); err != nil {
		s.failAdmin(c, err)
		return
	}
	scope, err := auth.ParseScope(form.Get("queues"), form.Get("roles"))
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	tok, err := s.tokens.Create(c.Request.Context(), c.Query("pool"), ns, desc, token, scope)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	noteAuditToken(c, tok)
	s.reqLogger(c).WithField("scoped", !scope.IsZero()).Info("token created")
	c.IndentedJSON(http.StatusCreated, tokenResponse{Token: tok})
}

// deleteToken serves DELETE /token/:namespace/:token (":token" may be
// "pool:token"); the token's rate limit goes with it. 204 also for an
// unknown token.
func (s *Server) deleteToken(c *gin.Context) {
	ns := c.Param("namespace")
	if err := auth.ValidateNamespace(ns); err != nil {
		s.failAdmin(c, err)
		return
	}
	pool, token := auth.ParseToken(c.Param("token"))
	if err := s.tokens.Delete(c.Request.Context(), pool, ns, token); err != nil {
		s.failAdmin(c, err)
		return
	}
	if s.throttler != nil {
		if err := s.throttler.Delete(c.Request.Context(), pool, ns, token); err != nil {
			s.reqLogger(c).WithError(err).Error("failed to delete the token's rate limit")
		}
	}
	s.reqLogger(c).Info("token deleted")
	c.Status(http.StatusNoContent)
}
