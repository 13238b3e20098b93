package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/kairos-dev/kairos/auth"
)

type limiterResponse struct {
	Limiter auth.Limit `json:"limiter"`
}

type msgResponse struct {
	Msg string `json:"msg"`
}

// listLimits serves GET /limits?force_update=: every rate limit, sorted by
// namespace and token.
func (s *Server) listLimits(c *gin.Context) {
	entries := []auth.LimitEntry{}
	if s.throttler != nil {
		force, _ := strconv.ParseBool(c.Query("force_update"))
		got, err := s.throttler.List(c.Request.Context(), force)
		if err != nil {
			s.failAdmin(c, err)
			return
		}
		entries = append(entries, got...)
	}
	slices.SortFunc(entries, func(a, b auth.LimitEntry) int {
		if n := strings.Compare(a.Namespace, b.Namespace); n != 0 {
			return n
		}
		return strings.Compare(a.Token, b.Token)
	})
	c.JSON(http.StatusOK, entries)
}

// limitTarget reads and checks the namespace and token of a limit route.
func (s *Server) limitTarget(c *gin.Context) (pool, ns, token string, ok bool) {
	ns = c.Param("namespace")
	if err := auth.ValidateNamespace(ns); err != nil {
		s.failAdmin(c, err)
		return "", "", "", false
	}
	pool, token = auth.ParseToken(c.Param("token"))
	return pool, ns, token, true
}

// getLimit serves GET /token/:namespace/:token/limit: the limit, or 404
// with the body null (lmstfy).
func (s *Server) getLimit(c *gin.Context) {
	pool, ns, token, ok := s.limitTarget(c)
	if !ok {
		return
	}
	if s.throttler != nil {
		l, found, err := s.throttler.Get(c.Request.Context(), pool, ns, token)
		if err != nil {
			s.failAdmin(c, err)
			return
		}
		if found {
			c.JSON(http.StatusOK, l)
			return
		}
	}
	c.JSON(http.StatusNotFound, nil)
}

// readLimit decodes and checks a limiter body in lmstfy's order.
func (s *Server) readLimit(c *gin.Context) (auth.Limit, bool) {
	var l auth.Limit
	if s.throttler == nil {
		s.failAdmin(c, errThrottleDisabled)
		return l, false
	}
	body := http.MaxBytesReader(c.Writer, c.Request.Body, maxAdminBody)
	if err := json.NewDecoder(body).Decode(&l); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.failAdmin(c, errBodyTooLarge)
		} else {
			s.failAdmin(c, errInvalidLimiter)
		}
		return l, false
	}
	if l.Read <= 0 && l.Write <= 0 && l.WriteJobs <= 0 {
		c.JSON(http.StatusBadRequest, limiterResponse{Limiter: l})
		c.Abort()
		return l, false
	}
	if l.Interval <= 0 {
		s.failAdmin(c, errInvalidInterval)
		return l, false
	}
	return l, true
}

// addLimit serves POST /token/:namespace/:token/limit: 201, or 409 when
// the token has a limit already.
func (s *Server) addLimit(c *gin.Context) {
	pool, ns, token, ok := s.limitTarget(c)
	if !ok {
		return
	}
	l, ok := s.readLimit(c)
	if !ok {
		return
	}
	if err := s.throttler.Add(c.Request.Context(), pool, ns, token, l); err != nil {
		if errors.Is(err, auth.ErrLimitExists) {
			err = errLimitExists(token)
		}
		s.failAdmin(c, err)
		return
	}
	c.JSON(http.StatusCreated, limiterResponse{Limiter: l})
}

// setLimit serves PUT /token/:namespace/:token/limit (create or replace).
func (s *Server) setLimit(c *gin.Context) {
	pool, ns, token, ok := s.limitTarget(c)
	if !ok {
		return
	}
	l, ok := s.readLimit(c)
	if !ok {
		return
	}
	if err := s.throttler.Set(c.Request.Context(), pool, ns, token, l); err != nil {
		s.failAdmin(c, err)
		return
	}
	c.JSON(http.StatusOK, limiterResponse{Limiter: l})
}

// deleteLimit serves DELETE /token/:namespace/:token/limit.
func (s *Server) deleteLimit(c *gin.Context) {
	pool, ns, token, ok := s.limitTarget(c)
	if !ok {
		return
	}
	if s.throttler == nil {
		s.failAdmin(c, errThrottleDisabled)
		return
	}
	if err := s.throttler.Delete(c.Request.Context(), pool, ns, token); err != nil {
		s.failAdmin(c, err)
		return
	}
	c.JSON(http.StatusOK, msgResponse{Msg: "success"})
}
