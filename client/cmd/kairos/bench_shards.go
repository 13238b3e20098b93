package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// setShards returns bench's PrepareQueue for --shards: PUT
// /queue/NS/Q/config {"shards":K} on the admin API, before the scenario
// publishes to Q. The answer must carry "shards": K; a server that refuses
// the key (one without hot-queue shards rejects unknown keys with a 400)
// or answers without it fails the bench, so that a figure is never given
// for a sharded queue that was not.
func (c *cli) setShards(namespace, pool string, k int) func(ctx context.Context, queue string) error {
	return func(ctx context.Context, queue string) error {
		u := httpAddr(c.adminAddr) + "/queue/" + url.PathEscape(namespace) + "/" + url.PathEscape(queue) + "/config"
		if pool != "" {
			u += "?pool=" + url.QueryEscape(pool)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader([]byte(`{"shards":`+strconv.Itoa(k)+`}`)))
		if err != nil {
			return usagef("--shards: %v", err)
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
			return fmt.Errorf("--shards: %w", err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if err != nil {
			return fmt.Errorf("--shards: %w", err)
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("--shards: PUT %s {\"shards\":%d}: %d %s (does this server support hot-queue shards?)", u, k, resp.StatusCode, bytes.TrimSpace(body))
		}
		var got struct {
			Shards *int `json:"shards"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			return fmt.Errorf("--shards: PUT %s: %w", u, err)
		}
		if got.Shards == nil || *got.Shards != k {
			return fmt.Errorf("--shards: PUT %s {\"shards\":%d} answered %s: the server did not set the shards", u, k, bytes.TrimSpace(body))
		}
		return nil
	}
}
