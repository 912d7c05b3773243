package accel

import "testing"

// The per-call costs of bench/calls (go test -bench . -run '^$'), for profiling one process.

func BenchmarkTensorCreateClose(b *testing.B) {
	for i := 0; b.Loop(); i++ {
		t, err := FromSlice([]float32{float32(i)})
		if err != nil {
			b.Fatal(err)
		}
		t.Close()
	}
}

func BenchmarkElementCount(b *testing.B) {
	t, err := FromSlice([]float32{1})
	if err != nil {
		b.Fatal(err)
	}
	defer t.Close()
	for b.Loop() {
		if _, err := t.ElementCount(); err != nil {
			b.Fatal(err)
		}
	}
}
