package engine

import "testing"

func TestValidTraceParent(t *testing.T) {
	for s, want := range map[string]bool{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":  true,
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00":  true,
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":  false,
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":  false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":  false,
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01":  false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1":   false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-": false,
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":  false,
		"": false,
	} {
		if got := ValidTraceParent(s); got != want {
			t.Errorf("ValidTraceParent(%q) = %v, want %v", s, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { ValidTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01") }); n != 0 {
		t.Fatalf("ValidTraceParent allocates %v times", n)
	}
}

func TestValidTraceState(t *testing.T) {
	long := make([]byte, MaxTraceState+1)
	for i := range long {
		long[i] = 'a'
	}
	for s, want := range map[string]bool{
		"": true, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE": true,
		string(long[:MaxTraceState]): true, string(long): false, "a=b\r\nX: y": false, "a=\x7f": false,
	} {
		if got := ValidTraceState(s); got != want {
			t.Errorf("ValidTraceState(%.20q…) = %v, want %v", s, got, want)
		}
	}
}
