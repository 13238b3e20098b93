package engine

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Backoff is a retry policy: the delay before the n-th retry (n = the
// number of deliveries so far, from 1).
type Backoff struct {
	// Kind is "fixed", "exponential" or "ladder".
	Kind string `json:"kind"`
	// Fixed: Base. Exponential: Base × Factor^(n-1), capped at Max, minus
	// up to Jitter (0..1) of it at random.
	Base   time.Duration `json:"-"`
	Factor float64       `json:"factor,omitempty"`
	Max    time.Duration `json:"-"`
	Jitter float64       `json:"jitter,omitempty"`
	// Ladder: Steps[n-1], the last step repeating.
	Steps []time.Duration `json:"-"`
}

var errBackoff = errors.New("invalid backoff")

// ParseBackoff reads a policy in its text form:
//
//	fixed:30s
//	exponential:1s,factor=2,max=10m,jitter=0.2
//	10s,30s,1m,2m,5m              (a ladder)
func ParseBackoff(s string) (*Backoff, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return nil, nil
	}
	bad := func(why string) (*Backoff, error) {
		return nil, fmt.Errorf("%w %q: %s: %w", errBackoff, s, why, ErrInvalid)
	}
	switch {
	case strings.HasPrefix(s, "fixed:"):
		d, err := time.ParseDuration(s[len("fixed:"):])
		if err != nil || d < 0 {
			return bad("fixed needs a duration such as fixed:30s")
		}
		return &Backoff{Kind: "fixed", Base: d}, nil
	case strings.HasPrefix(s, "exponential:"), strings.HasPrefix(s, "exp:"):
		parts := strings.Split(s[strings.Index(s, ":")+1:], ",")
		base, err := time.ParseDuration(parts[0])
		if err != nil || base <= 0 {
			return bad("exponential needs a base duration such as exponential:1s")
		}
		b := &Backoff{Kind: "exponential", Base: base, Factor: 2, Max: time.Hour}
		for _, p := range parts[1:] {
			k, v, ok := strings.Cut(p, "=")
			if !ok {
				return bad("options are factor=, max=, jitter=")
			}
			switch k {
			case "factor":
				f, err := strconv.ParseFloat(v, 64)
				if err != nil || f < 1 || f > 100 || math.IsNaN(f) {
					return bad("factor must be 1..100")
				}
				b.Factor = f
			case "max":
				d, err := time.ParseDuration(v)
				if err != nil || d <= 0 {
					return bad("max must be a positive duration")
				}
				b.Max = d
			case "jitter":
				f, err := strconv.ParseFloat(v, 64)
				if err != nil || f < 0 || f > 1 || math.IsNaN(f) {
					return bad("jitter must be 0..1")
				}
				b.Jitter = f
			default:
				return bad("unknown option " + k)
			}
		}
		return b, nil
	default:
		var steps []time.Duration
		for _, p := range strings.Split(s, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(p))
			if err != nil || d < 0 {
				return bad("a ladder is a comma-separated list of durations such as 10s,30s,1m")
			}
			steps = append(steps, d)
		}
		if len(steps) > 64 {
			return bad("a ladder has at most 64 steps")
		}
		return &Backoff{Kind: "ladder", Steps: steps}, nil
	}
}

// String returns the policy in the text form ParseBackoff reads.
func (b *Backoff) String() string {
	if b == nil {
		return "none"
	}
	switch b.Kind {
	case "fixed":
		return "fixed:" + b.Base.String()
	case "exponential":
		s := fmt.Sprintf("exponential:%s,factor=%g,max=%s", b.Base, b.Factor, b.Max)
		if b.Jitter > 0 {
			s += fmt.Sprintf(",jitter=%g", b.Jitter)
		}
		return s
	default:
		parts := make([]string, len(b.Steps))
		for i, d := range b.Steps {
			parts[i] = d.String()
		}
		return strings.Join(parts, ",")
	}
}

// Delay returns the delay before the retry after the n-th delivery; rnd in
// [0,1) draws the jitter.
func (b *Backoff) Delay(n int, rnd float64) time.Duration {
	if b == nil || n < 1 {
		return 0
	}
	switch b.Kind {
	case "fixed":
		return b.Base
	case "exponential":
		d := float64(b.Base) * math.Pow(b.Factor, float64(n-1))
		if d > float64(b.Max) {
			d = float64(b.Max)
		}
		return time.Duration(d * (1 - b.Jitter*rnd))
	default:
		if len(b.Steps) == 0 {
			return 0
		}
		if n > len(b.Steps) {
			n = len(b.Steps)
		}
		return b.Steps[n-1]
	}
}
