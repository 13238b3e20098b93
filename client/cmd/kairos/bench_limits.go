package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// setLimits returns bench's PrepareQueue for --max-in-flight and
// --group-max-in-flight (issue #32): PUT /queue/NS/Q/config
// {"max_in_flight":N,"group_max_in_flight":M} on the admin API before the
// scenario publishes to Q. As for --shards, the answer must carry both
// values, so that a figure is never given for a queue whose limits were
// not set. The PrepareQueue then, when set, runs first (--shards).
func (c *cli) setLimits(namespace, pool string, mif, gmif int, then func(context.Context, string) error) func(ctx context.Context, queue string) error {
	return func(ctx context.Context, queue string) error {
		if then != nil {
			if err := then(ctx, queue); err != nil {
				return err
			}
		}
		u := httpAddr(c.adminAddr) + "/queue/" + url.PathEscape(namespace) + "/" + url.PathEscape(queue) + "/config"
		if pool != "" {
			u += "?pool=" + url.QueryEscape(pool)
		}
		want := fmt.Sprintf(`{"max_in_flight":%d,"group_max_in_flight":%d}`, mif, gmif)
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader([]byte(want)))
		if err != nil {
			return usagef("--max-in-flight: %v", err)
		}
		req.Header.Set("Content-Type", "application/json")
		if c.adminUser != "" {
			req.SetBasicAuth(c.adminUser, c.adminPass)
		}
		hc := c.httpClient
		if hc == nil {
			hc = http.DefaultClient
		}
		resp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("--max-in-flight: %w", err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if err != nil {
			return fmt.Errorf("--max-in-flight: %w", err)
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("--max-in-flight: PUT %s %s: %d %s (does this server support in-flight limits?)", u, want, resp.StatusCode, bytes.TrimSpace(body))
		}
		var got struct {
			MIF  int `json:"max_in_flight"`
			GMIF int `json:"group_max_in_flight"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			return fmt.Errorf("--max-in-flight: PUT %s: %w", u, err)
		}
		if got.MIF != mif || got.GMIF != gmif {
			return fmt.Errorf("--max-in-flight: PUT %s %s answered %s: the server did not set the limits", u, want, bytes.TrimSpace(body))
		}
		return nil
	}
}
