package client

import (
	"errors"
	"net/http"
	"testing"
)

// TestQuotaErrorApart: a quota's 429 and a rate limit's 429 match their own
// sentinel only, as the server words them.
func TestQuotaErrorApart(t *testing.T) {
	quota := newAPIError("PUT", "/api/ns/q", http.StatusTooManyRequests, http.Header{}, []byte(`{"error":"namespace quota exceeded: max_jobs 50"}`))
	limit := newAPIError("PUT", "/api/ns/q", http.StatusTooManyRequests, http.Header{}, []byte(`{"msg":"token(t) produce reach the limit rate, please retry later"}`))
	if !errors.Is(quota, ErrQuotaExceeded) || errors.Is(quota, ErrRateLimited) {
		t.Errorf("quota 429: ErrQuotaExceeded %v, ErrRateLimited %v", errors.Is(quota, ErrQuotaExceeded), errors.Is(quota, ErrRateLimited))
	}
	if errors.Is(limit, ErrQuotaExceeded) || !errors.Is(limit, ErrRateLimited) {
		t.Errorf("rate limit 429: ErrQuotaExceeded %v, ErrRateLimited %v", errors.Is(limit, ErrQuotaExceeded), errors.Is(limit, ErrRateLimited))
	}
	if quota.Message != "namespace quota exceeded: max_jobs 50" {
		t.Errorf("message %q", quota.Message)
	}
}
