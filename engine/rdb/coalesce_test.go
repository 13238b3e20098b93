package rdb

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeOp is the operation of the coalescer unit tests: run sets out.
type fakeOp struct {
	key  string
	g, i int // caller and call number
	v    int
	out  int
}

// waitPending waits until a batch runs for key in c and n calls are queued
// for the next one.
func waitPending[T any](t *testing.T, c *coalescer[T], key string, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		c.mu.Lock()
		next, busy := c.pending[key]
		l := len(next)
		c.mu.Unlock()
		if busy && l == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %q: busy=%v with %d queued, want busy with %d", key, busy, l, n)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// pendingKeys is how many keys c still tracks.
func pendingKeys[T any](c *coalescer[T]) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// callResult is the outcome of one c.do.
type callResult struct {
	op  fakeOp
	err error
}

// await waits for a call's outcome, failing the test after 2 s.
func await(t *testing.T, what string, ch <-chan callResult) callResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(2 * time.Second):
		t.Fatalf("%s: no result after 2s", what)
		return callResult{}
	}
}

// doAsync runs c.do in a goroutine and sends its outcome.
func doAsync(ctx context.Context, c *coalescer[fakeOp], in fakeOp) <-chan callResult {
	ch := make(chan callResult, 1)
	go func() {
		op, err := c.do(ctx, in.key, in)
		ch <- callResult{op, err}
	}()
	return ch
}

func TestCoalesceConcurrent(t *testing.T) {
	const (
		goroutines = 32
		calls      = 200
		keys       = 4
		max        = 4
	)
	var (
		mu      sync.Mutex
		sizes   = make(map[int]int) // batch size → batches
		running = make(map[string]int)
		total   atomic.Int64
	)
	c := newCoalescer(max, func(ctx context.Context, batch []*batchCall[fakeOp]) {
		if len(batch) == 0 {
			t.Errorf("empty batch")
			return
		}
		if len(batch) > max {
			t.Errorf("batch of %d calls, max %d", len(batch), max)
		}
		key := batch[0].in.key
		for _, b := range batch {
			if b.in.key != key {
				t.Errorf("batch mixes keys %q and %q", key, b.in.key)
			}
			if !errors.Is(b.err, errBatchAborted) {
				t.Errorf("call err before run = %v, want errBatchAborted", b.err)
			}
		}
		mu.Lock()
		sizes[len(batch)]++
		if len(batch) > 1 {
			// Batches of queued calls of one key run one at a time.
			running[key]++
			if running[key] > 1 {
				t.Errorf("key %q: %d batches of queued calls at once", key, running[key])
			}
		}
		mu.Unlock()
		time.Sleep(20 * time.Microsecond)
		for _, b := range batch {
			b.in.out = b.in.v * 2
			b.err = nil
		}
		total.Add(int64(len(batch)))
		if len(batch) > 1 {
			mu.Lock()
			running[key]--
			mu.Unlock()
		}
	})

	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				in := fakeOp{key: fmt.Sprintf("k%d", (g+i)%keys), g: g, i: i, v: g*calls + i + 1}
				got, err := c.do(context.Background(), in.key, in)
				if err != nil {
					t.Errorf("g%d call %d: %v", g, i, err)
					return
				}
				if got.key != in.key || got.g != g || got.i != i || got.v != in.v || got.out != in.v*2 {
					t.Errorf("g%d call %d: got %+v, want %+v with out %d", g, i, got, in, in.v*2)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := total.Load(); n != goroutines*calls {
		t.Errorf("run saw %d calls, want %d", n, goroutines*calls)
	}
	multi := 0
	for size, n := range sizes {
		if size > 1 {
			multi += n
		}
	}
	if multi == 0 {
		t.Errorf("no batch of more than one call: sizes %v", sizes)
	}
	if n := pendingKeys(c); n != 0 {
		t.Errorf("%d keys left pending after all calls", n)
	}
	t.Logf("batch sizes (size: batches): %v", sizes)
}

func TestCoalesceOverMax(t *testing.T) {
	const max = 2
	release := make(chan struct{})
	var (
		mu    sync.Mutex
		sizes []int
	)
	c := newCoalescer(max, func(ctx context.Context, batch []*batchCall[fakeOp]) {
		mu.Lock()
		sizes = append(sizes, len(batch))
		mu.Unlock()
		for _, b := range batch {
			if b.in.v == 0 {
				<-release // the first call holds its batch until told
			}
		}
		for _, b := range batch {
			b.in.out, b.err = b.in.v*2, nil
		}
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release) // do not leave the blocked call behind on failure
		}
	}()

	first := doAsync(context.Background(), c, fakeOp{key: "k", v: 0})
	waitPending(t, c, "k", 0)
	queued := make([]<-chan callResult, max)
	for i := range queued {
		queued[i] = doAsync(context.Background(), c, fakeOp{key: "k", v: 1 + i})
		waitPending(t, c, "k", i+1)
	}
	// The next batch is full: these run alone, beside the blocked batch.
	for i := 0; i < 3; i++ {
		v := 10 + i
		r := await(t, fmt.Sprintf("over-max call %d", v), doAsync(context.Background(), c, fakeOp{key: "k", v: v}))
		if r.err != nil || r.op.out != v*2 {
			t.Errorf("over-max call %d: out %d, err %v; want %d, nil", v, r.op.out, r.err, v*2)
		}
	}
	waitPending(t, c, "k", max) // still queued, untouched
	close(release)
	if r := await(t, "first call", first); r.err != nil || r.op.out != 0 {
		t.Errorf("first call: out %d, err %v", r.op.out, r.err)
	}
	for i, ch := range queued {
		v := 1 + i
		if r := await(t, fmt.Sprintf("queued call %d", v), ch); r.err != nil || r.op.out != v*2 {
			t.Errorf("queued call %d: out %d, err %v; want %d, nil", v, r.op.out, r.err, v*2)
		}
	}
	mu.Lock()
	sort.Ints(sizes)
	got := fmt.Sprint(sizes)
	mu.Unlock()
	// The blocked batch, three lone over-max calls and the full batch.
	if want := fmt.Sprint([]int{1, 1, 1, 1, max}); got != want {
		t.Errorf("batch sizes %s, want %s", got, want)
	}
	if n := pendingKeys(c); n != 0 {
		t.Errorf("%d keys left pending", n)
	}
}

func TestCoalescePanic(t *testing.T) {
	release1 := make(chan struct{})
	release2 := make(chan struct{})
	entered := make(chan struct{}, 1)
	c := newCoalescer(8, func(ctx context.Context, batch []*batchCall[fakeOp]) {
		switch batch[0].in.v {
		case 0:
			<-release1
		case 1: // the batch of calls 1, 2 and 3 panics
			entered <- struct{}{}
			<-release2
			panic("boom")
		case 100: // a lone call that panics
			panic("lone boom")
		}
		for _, b := range batch {
			b.in.out, b.err = b.in.v*2, nil
		}
	})
	var once1, once2 sync.Once
	defer once1.Do(func() { close(release1) })
	defer once2.Do(func() { close(release2) })

	// doRecover runs a call that may panic and reports what it recovered.
	type outcome struct {
		r         callResult
		recovered any
	}
	doRecover := func(in fakeOp) <-chan outcome {
		ch := make(chan outcome, 1)
		go func() {
			var o outcome
			defer func() {
				o.recovered = recover()
				ch <- o
			}()
			o.r.op, o.r.err = c.do(context.Background(), in.key, in)
		}()
		return ch
	}
	awaitO := func(what string, ch <-chan outcome) outcome {
		t.Helper()
		select {
		case o := <-ch:
			return o
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: no result after 2s", what)
			return outcome{}
		}
	}

	first := doRecover(fakeOp{key: "k", v: 0})
	waitPending(t, c, "k", 0)
	// Calls 1, 2, 3 queue in this order: call 1 leads their batch.
	var queued []<-chan outcome
	for v := 1; v <= 3; v++ {
		queued = append(queued, doRecover(fakeOp{key: "k", v: v}))
		waitPending(t, c, "k", v)
	}
	once1.Do(func() { close(release1) })
	if o := awaitO("call 0", first); o.recovered != nil || o.r.err != nil || o.r.op.out != 0 {
		t.Fatalf("call 0: %+v", o)
	}
	select {
	case <-entered:
	case <-time.After(2 * time.Second):
		t.Fatal("the batch of calls 1-3 did not start")
	}
	waitPending(t, c, "k", 0)
	// Calls 4 and 5 queue behind the batch that will panic.
	var later []<-chan outcome
	for v := 4; v <= 5; v++ {
		later = append(later, doRecover(fakeOp{key: "k", v: v}))
		waitPending(t, c, "k", v-3)
	}
	once2.Do(func() { close(release2) })

	if o := awaitO("call 1 (leader)", queued[0]); o.recovered != "boom" {
		t.Errorf("leader of the panicking batch: recovered %v (result %+v), want panic \"boom\"", o.recovered, o.r)
	}
	for i, ch := range queued[1:] {
		o := awaitO(fmt.Sprintf("call %d", i+2), ch)
		if o.recovered != nil || !errors.Is(o.r.err, errBatchAborted) {
			t.Errorf("call %d in the panicking batch: recovered %v, err %v; want errBatchAborted", i+2, o.recovered, o.r.err)
		}
	}
	for i, ch := range later {
		v := i + 4
		o := awaitO(fmt.Sprintf("call %d", v), ch)
		if o.recovered != nil || o.r.err != nil || o.r.op.out != v*2 {
			t.Errorf("call %d queued behind the panic: %+v, want out %d", v, o, v*2)
		}
	}
	// The key is not stuck.
	if n := pendingKeys(c); n != 0 {
		t.Errorf("%d keys left pending after the panic", n)
	}
	if op, err := c.do(context.Background(), "k", fakeOp{key: "k", v: 7}); err != nil || op.out != 14 {
		t.Errorf("call after the panic: out %d, err %v", op.out, err)
	}

	// A lone call that panics: the panic reaches its caller, the key is freed.
	if o := awaitO("lone panic", doRecover(fakeOp{key: "k", v: 100})); o.recovered != "lone boom" {
		t.Errorf("lone panicking call: recovered %v, want \"lone boom\"", o.recovered)
	}
	if n := pendingKeys(c); n != 0 {
		t.Errorf("%d keys left pending after the lone panic", n)
	}
	if op, err := c.do(context.Background(), "k", fakeOp{key: "k", v: 8}); err != nil || op.out != 16 {
		t.Errorf("call after the lone panic: out %d, err %v", op.out, err)
	}
}

func TestCoalesceContext(t *testing.T) {
	type ctxKey struct{}
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	var (
		mu   sync.Mutex
		errs = make(map[int]error) // first v of a batch → ctx.Err() at the end of run
		vals = make(map[int]any)
	)
	c := newCoalescer(8, func(ctx context.Context, batch []*batchCall[fakeOp]) {
		if batch[0].in.v == 0 {
			<-release
		}
		mu.Lock()
		errs[batch[0].in.v] = ctx.Err()
		vals[batch[0].in.v] = ctx.Value(ctxKey{})
		mu.Unlock()
		for _, b := range batch {
			b.in.out, b.err = b.in.v*2, nil
		}
	})

	// A lone call whose ctx is already cancelled.
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "lone"))
	cancel()
	if op, err := c.do(ctx, "k", fakeOp{key: "k", v: 9}); err != nil || op.out != 18 {
		t.Errorf("cancelled lone call: out %d, err %v", op.out, err)
	}

	// A leader cancelled while its batch runs, and queued callers (the
	// next batch's leader among them) cancelled while they wait.
	ctx0, cancel0 := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "leader"))
	defer cancel0()
	first := doAsync(ctx0, c, fakeOp{key: "k", v: 0})
	waitPending(t, c, "k", 0)
	var queued []<-chan callResult
	var cancels []context.CancelFunc
	for v := 1; v <= 3; v++ {
		ctxV, cancelV := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, fmt.Sprint("q", v)))
		cancels = append(cancels, cancelV)
		queued = append(queued, doAsync(ctxV, c, fakeOp{key: "k", v: v}))
		waitPending(t, c, "k", v)
	}
	cancel0()
	for _, cancelV := range cancels {
		cancelV()
	}
	once.Do(func() { close(release) })
	if r := await(t, "leader", first); r.err != nil || r.op.out != 0 {
		t.Errorf("cancelled leader: out %d, err %v", r.op.out, r.err)
	}
	for i, ch := range queued {
		v := i + 1
		if r := await(t, fmt.Sprintf("queued call %d", v), ch); r.err != nil || r.op.out != v*2 {
			t.Errorf("cancelled queued call %d: out %d, err %v", v, r.op.out, r.err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, v := range []int{9, 0, 1} { // the lone call, the first batch, the queued batch
		if err, ok := errs[v]; !ok {
			t.Errorf("no batch led by call %d", v)
		} else if err != nil {
			t.Errorf("batch led by call %d: run's ctx.Err() = %v, want nil", v, err)
		}
	}
	// The batch keeps its leader's context values (tracing and the like).
	for v, want := range map[int]string{9: "lone", 0: "leader", 1: "q1"} {
		if vals[v] != want {
			t.Errorf("batch led by call %d: ctx value %v, want %q", v, vals[v], want)
		}
	}
}
