package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
		want := fmt.Sprintf(`{"max_in_flight":%d,"group_max_in_flight":%d}`, mif, gmif)
		body, err := c.putQueueConfig(ctx, namespace, pool, queue, "--max-in-flight", want, "in-flight limits")
		if err != nil {
			return err
		}
		var got struct {
			MIF  int `json:"max_in_flight"`
			GMIF int `json:"group_max_in_flight"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			return fmt.Errorf("--max-in-flight: PUT %s: %w", queue, err)
		}
		if got.MIF != mif || got.GMIF != gmif {
			return fmt.Errorf("--max-in-flight: PUT %s's config %s answered %s: the server did not set the limits", queue, want, bytes.TrimSpace(body))
		}
		return nil
	}
}
