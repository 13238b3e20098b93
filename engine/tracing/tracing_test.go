package tracing

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// TestNew: tracing is off unless asked for; OTEL_TRACES_EXPORTER,
// OTEL_SDK_DISABLED and the OTLP protocol variables are honoured, and a
// value Kairos cannot honour is an error naming the variable.
func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		enabled bool
		env     map[string]string
		on      bool
		err     string // "" = no error
	}{
		{name: "off by default", on: false},
		{name: "config switch", enabled: true, on: true},
		{name: "OTEL_TRACES_EXPORTER=otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{name: "none wins over the switch", enabled: true, env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}, on: false},
		{name: "SDK disabled", enabled: true, env: map[string]string{"OTEL_SDK_DISABLED": "true"}, on: false},
		{name: "grpc", enabled: true, env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true},
		{name: "traces protocol wins", enabled: true, env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "bogus", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, on: true},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: "OTEL_TRACES_EXPORTER"},
		{name: "http/json", enabled: true, env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, err: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{name: "bad traces protocol", enabled: true, env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"}, err: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v) // the exporters read the environment themselves
			}
			p, err := New(context.Background(), Options{Enabled: tc.enabled, Getenv: func(k string) string { return tc.env[k] }})
			if tc.err != "" {
				if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("New = %v, want an ErrConfig naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = p.Shutdown(context.Background()) }()
			if got := p.Tracer() != nil; got != tc.on || p.Enabled() != tc.on {
				t.Fatalf("tracing on = %v, want %v", got, tc.on)
			}
		})
	}
}

// TestFormat: a span context's W3C form and back.
func TestFormat(t *testing.T) {
	const tp, ts = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "rojo=00f067aa0ba902b7"
	sc := SpanContextOf(tp, ts)
	if !sc.IsValid() || !sc.IsRemote() || !sc.IsSampled() {
		t.Fatalf("SpanContextOf = %v", sc)
	}
	if gotTP, gotTS := Format(sc); gotTP != tp || gotTS != ts {
		t.Fatalf("Format = %q %q", gotTP, gotTS)
	}
	if gotTP, gotTS := Format(trace.SpanContext{}); gotTP != "" || gotTS != "" {
		t.Fatalf("Format of an invalid context = %q %q", gotTP, gotTS)
	}
	if ctx := ContextOf(context.Background(), "", ""); trace.SpanContextFromContext(ctx).IsValid() {
		t.Fatal("ContextOf without a traceparent has a span context")
	}
}
