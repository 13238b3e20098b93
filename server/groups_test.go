package server

import (
	"context"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
)

// The HTTP surface of groups and in-flight limits (issue #32) against a
// fake engine: the group parameter on every publishing path, the group in
// the job JSON, the queue config's limits and weights, and the groups
// route. groups_live_test.go runs the scenarios on a real engine.

// TestGroupPublishParam: group= reaches the engine on publish, bulk
// publish and re-publish; an invalid one is a 400 naming it, and the
// engine is not called.
func TestGroupPublishParam(t *testing.T) {
	const id = "01HZZZZZZZZZZZZZZZZZ000000"
	for _, tc := range []struct {
		name, query, group string
		ok                 bool
	}{
		{"none", "", "", true},
		{"a group", "group=shop-42", "shop-42", true},
		{"64 characters", "group=" + strings.Repeat("g", 64), strings.Repeat("g", 64), true},
		{"underscore first", "group=_x", "_x", true},
		{"with priority", "priority=3&group=acme_1", "acme_1", true},
		{"empty", "group=", "", false},
		{"65 characters", "group=" + strings.Repeat("g", 65), "", false},
		{"a dot", "group=a.b", "", false},
		{"a space", "group=a%20b", "", false},
		{"a slash", "group=a%2Fb", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, x := newExtEnv(t)
			var got []*engine.PublishRequest
			x.publish = func(_ context.Context, r *engine.PublishRequest) (string, error) {
				got = append(got, r)
				return id, nil
			}
			x.publishBatch = func(_ context.Context, rs []*engine.PublishRequest) ([]string, error) {
				got = append(got, rs...)
				return []string{"A", "B"}, nil
			}
			for _, target := range []string{"/api/ns/q", "/api/ns/q/job/OLD", "/api/ns/q/bulk"} {
				got = nil
				body := "x"
				if strings.HasSuffix(target, "bulk") {
					body = `[1,2]`
				}
				w := env.api(t, request{method: "PUT", target: target + "?" + tc.query, body: body, header: tok(goodToken)})
				if !tc.ok {
					expect(t, w, http.StatusBadRequest, `{"error":"invalid group"}`)
					if got != nil {
						t.Fatalf("%s: engine called with %+v", target, got)
					}
					continue
				}
				if w.Code != http.StatusCreated || len(got) == 0 {
					t.Fatalf("%s: %d %s, engine got %d jobs", target, w.Code, w.Body, len(got))
				}
				for _, r := range got {
					if r.Group != tc.group {
						t.Fatalf("%s: engine got group %q, want %q", target, r.Group, tc.group)
					}
				}
			}
		})
	}
}

// TestGroupJobJSON: a grouped job names its group in consume, peek, peek
// job and the dead-letter listing; an ungrouped one renders as before, with
// no "group" key.
func TestGroupJobJSON(t *testing.T) {
	env, x := newExtEnv(t)
	grouped := &engine.Job{ID: testJobID(env), Namespace: "ns", Queue: "q", Body: []byte(`{}`), Tries: 1, TTL: 10 * time.Second, State: engine.StateReady, Group: "shop-1"}
	plain := *grouped
	plain.Group = ""
	var job *engine.Job
	x.consume = func(context.Context, *engine.ConsumeRequest) ([]*engine.Job, error) { return []*engine.Job{job}, nil }
	x.peekQueue = func(context.Context, string, string) (*engine.Job, error) { return job, nil }
	x.peekJob = func(context.Context, string, string, string) (*engine.Job, error) { return job, nil }
	x.listDeadPage = func(context.Context, string, string, engine.DeadLetterQuery) (engine.DeadLetterPage, error) {
		return engine.DeadLetterPage{Jobs: []*engine.Job{job}, Next: -1, Size: 1}, nil
	}
	for _, r := range []request{
		{method: "GET", target: "/api/ns/q", header: tok(goodToken)},
		{method: "GET", target: "/api/ns/q", header: extHdr},
		{method: "GET", target: "/api/ns/q/peek", header: tok(goodToken)},
		{method: "GET", target: "/api/ns/q/peek", header: extHdr},
		{method: "GET", target: "/api/ns/q/job/" + grouped.ID, header: tok(goodToken)},
		{method: "GET", target: "/api/ns/q/deadletter/jobs", header: tok(goodToken)},
	} {
		job = grouped
		w := env.api(t, r)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `,"group":"shop-1","job_id":"`) {
			t.Fatalf("%s %s, grouped job: %d %s", r.method, r.target, w.Code, w.Body)
		}
		job = &plain
		w = env.api(t, r)
		if w.Code != http.StatusOK || strings.Contains(w.Body.String(), `"group"`) {
			t.Fatalf("%s %s, ungrouped job: %d %s", r.method, r.target, w.Code, w.Body)
		}
	}
}

// TestGroupQueueConfig: PUT /queue/:ns/:q/config sets and clears the
// limits and weights, keeps what it does not name, and refuses invalid
// values with a 400 naming them; GET reads them back, and a queue without
// any reads as before.
func TestGroupQueueConfig(t *testing.T) {
	env, x := newExtEnv(t)
	var stored engine.QueueConfig
	sets := 0
	x.queueConfig = func(context.Context, string, string) (engine.QueueConfig, error) { return stored, nil }
	x.setQueueConfig = func(_ context.Context, _, _ string, cfg engine.QueueConfig) error { stored = cfg; sets++; return nil }
	const plain = `{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":1}`
	steps := []struct {
		name   string
		req    request
		status int
		resp   string
	}{
		{"a queue without limits", request{method: "GET", target: "/queue/ns/q/config"}, 200, plain},
		{"limits", request{method: "PUT", target: "/queue/ns/q/config", body: `{"max_in_flight":5,"group_max_in_flight":2}`}, 200,
			`{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":1,"max_in_flight":5,"group_max_in_flight":2}`},
		{"weights keep the limits", request{method: "PUT", target: "/queue/ns/q/config", body: `{"group_weights":{"vip":10,"b":1}}`}, 200,
			`{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":1,"max_in_flight":5,"group_max_in_flight":2,"group_weights":{"b":1,"vip":10}}`},
		{"read back", request{method: "GET", target: "/queue/ns/q/config"}, 200,
			`{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":1,"max_in_flight":5,"group_max_in_flight":2,"group_weights":{"b":1,"vip":10}}`},
		{"shards above max_in_flight", request{method: "PUT", target: "/queue/ns/q/config", body: `{"shards":8}`}, 400,
			`{"error":"max_in_flight must be at least the queue's shards"}`},
		{"max_in_flight below the shards asked with it", request{method: "PUT", target: "/queue/ns/q/config", body: `{"shards":4,"max_in_flight":3}`}, 400,
			`{"error":"max_in_flight must be at least the queue's shards"}`},
		{"shards and a limit that fits", request{method: "PUT", target: "/queue/ns/q/config", body: `{"shards":4,"max_in_flight":4}`}, 200,
			`{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":4,"max_in_flight":4,"group_max_in_flight":2,"group_weights":{"b":1,"vip":10}}`},
		{"negative max_in_flight", request{method: "PUT", target: "/queue/ns/q/config", body: `{"max_in_flight":-1}`}, 400,
			`{"error":"invalid max_in_flight: an integer 0..1000000 (0: no limit)"}`},
		{"huge group_max_in_flight", request{method: "PUT", target: "/queue/ns/q/config", body: `{"group_max_in_flight":1000001}`}, 400,
			`{"error":"invalid group_max_in_flight: an integer 0..1000000 (0: no limit)"}`},
		{"a weight of 0", request{method: "PUT", target: "/queue/ns/q/config", body: `{"group_weights":{"a":1,"z":0}}`}, 400,
			`{"error":"invalid group_weights: the weight of \"z\" must be 1..100"}`},
		{"a weight of 101", request{method: "PUT", target: "/queue/ns/q/config", body: `{"group_weights":{"a":101}}`}, 400,
			`{"error":"invalid group_weights: the weight of \"a\" must be 1..100"}`},
		{"a bad group name", request{method: "PUT", target: "/queue/ns/q/config", body: `{"group_weights":{"a b":2}}`}, 400,
			`{"error":"invalid group_weights: \"a b\" is not a valid group name"}`},
		{"a weight not an integer", request{method: "PUT", target: "/queue/ns/q/config", body: `{"group_weights":{"a":1.5}}`}, 400,
			`{"error":"invalid queue config: the body should be a JSON object {\"backoff\":string,\"dead_ttl_ms\":int,\"paused\":bool,\"shards\":int,\"max_in_flight\":int,\"group_max_in_flight\":int,\"group_weights\":{string:int}}"}`},
		{"0 removes the limits, {} the weights", request{method: "PUT", target: "/queue/ns/q/config", body: `{"shards":1,"max_in_flight":0,"group_max_in_flight":0,"group_weights":{}}`}, 200, plain},
	}
	for _, st := range steps {
		before := sets
		w := env.admin(t, st.req)
		if w.Code != st.status || w.Body.String() != st.resp {
			t.Fatalf("%s: %d %s\nwant %d %s", st.name, w.Code, w.Body, st.status, st.resp)
		}
		if st.status != 200 && sets != before {
			t.Fatalf("%s: refused, yet the config was written", st.name)
		}
	}
	if stored.MaxInFlight != 0 || stored.GroupMaxInFlight != 0 || stored.GroupWeights != nil {
		t.Fatalf("after clearing: %+v", stored)
	}

	t.Run("too many weights", func(t *testing.T) {
		var b strings.Builder
		b.WriteString(`{"group_weights":{`)
		for i := 0; i <= maxGroupWeights; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"g` + strconv.Itoa(i) + `":2`)
		}
		b.WriteString(`}}`)
		w := env.admin(t, request{method: "PUT", target: "/queue/ns/q/config", body: b.String()})
		expect(t, w, 400, `{"error":"invalid group_weights: at most 1000 groups"}`)
	})
}

// groupingEngine is a fakeEngine with engine.Grouper.
type groupingEngine struct {
	*fakeEngine
	groups func(ctx context.Context, ns, q string, limit int) (engine.QueueGroups, error)
}

func (g *groupingEngine) QueueGroups(ctx context.Context, ns, q string, limit int) (engine.QueueGroups, error) {
	return g.groups(ctx, ns, q, limit)
}

// TestGroupsRoute: GET /queue/:ns/:q/groups answers the engine's groups
// with the queue's names, passes the limit (20 by default, 1..500), and
// answers 501 for an engine without groups.
func TestGroupsRoute(t *testing.T) {
	var asked []int
	ge := &groupingEngine{fakeEngine: &fakeEngine{}, groups: func(_ context.Context, ns, q string, limit int) (engine.QueueGroups, error) {
		asked = append(asked, limit)
		if ns != "ns" || q != "q" {
			return engine.QueueGroups{}, nil
		}
		return engine.QueueGroups{
			InFlight: 3, MaxInFlight: 5, GroupMaxInFlight: 2, Total: 2,
			// big is at group_max_in_flight, not yet out of the engine's
			// rotation: the route says it is limited all the same.
			Groups: []engine.GroupStats{{Group: "big", Ready: 20000, InFlight: 2, Weight: 1}, {Group: "", Ready: 4, InFlight: 1, Weight: 1}},
		}, nil
	}}
	env := newEnv(t, func(_ *config.Config, d *Deps) { d.Engines["default"] = ge })
	expect(t, env.admin(t, request{method: "GET", target: "/queue/ns/q/groups"}), 200,
		`{"namespace":"ns","queue":"q","in_flight":3,"max_in_flight":5,"group_max_in_flight":2,"groups":[`+
			`{"group":"big","ready":20000,"in_flight":2,"weight":1,"limited":true},{"group":"","ready":4,"in_flight":1,"weight":1,"limited":false}],"total":2,"truncated":false}`)
	expect(t, env.admin(t, request{method: "GET", target: "/queue/ns/other/groups?limit=500"}), 200,
		`{"namespace":"ns","queue":"other","in_flight":0,"max_in_flight":0,"group_max_in_flight":0,"groups":[],"total":0,"truncated":false}`)
	if !reflect.DeepEqual(asked, []int{20, 500}) {
		t.Fatalf("limits asked: %v", asked)
	}
	for _, bad := range []string{"limit=0", "limit=501", "limit=x"} {
		expect(t, env.admin(t, request{method: "GET", target: "/queue/ns/q/groups?" + bad}), 400, `{"error":"invalid limit"}`)
	}
	expect(t, env.admin(t, request{method: "GET", target: "/queue/ns/_q/groups"}), 400, `{"error":"queue name contains forbidden characters"}`)
	expect(t, env.admin(t, request{method: "GET", target: "/queue/ns/q/groups?pool=b"}), 501, `{"error":"this pool's engine keeps no groups"}`)
}
