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
		want := `{"shards":` + strconv.Itoa(k) + `}`
		body, err := c.putQueueConfig(ctx, namespace, pool, queue, "--shards", want, "hot-queue shards")
		if err != nil {
			return err
		}
		var got struct {
			Shards *int `json:"shards"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			return fmt.Errorf("--shards: PUT %s: %w", queue, err)
		}
		if got.Shards == nil || *got.Shards != k {
			return fmt.Errorf("--shards: PUT %s's config %s answered %s: the server did not set the shards", queue, want, bytes.TrimSpace(body))
		}
		return nil
	}
}

// putQueueConfig sends PUT /queue/NS/Q/config with the JSON body want on
// the admin API and returns the answer's body; an error names the bench
// flag that asked for it and, for an answer other than 200, the feature
// the server may lack.
func (c *cli) putQueueConfig(ctx context.Context, namespace, pool, queue, flag, want, feature string) ([]byte, error) {
	u := httpAddr(c.adminAddr) + "/queue/" + url.PathEscape(namespace) + "/" + url.PathEscape(queue) + "/config"
	if pool != "" {
		u += "?pool=" + url.QueryEscape(pool)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader([]byte(want)))
	if err != nil {
		return nil, usagef("%s: %v", flag, err)
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
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: PUT %s %s: %d %s (does this server support %s?)", flag, u, want, resp.StatusCode, bytes.TrimSpace(body), feature)
	}
	return body, nil
}
