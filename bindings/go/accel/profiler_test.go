package accel_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// someWork runs a few LibTorch operators: what a profiled step records.
func someWork(t *testing.T, m *accel.Model) {
	x := must(accel.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3))
	defer x.Close()
	y := must(m.Call("forward", x))
	y.Close()
}

func TestProfilerScheduleCallsTraceReadyPerWindow(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	m := linearModel(t, 3, 2)
	defer m.Close()
	p := must(accel.NewProfiler(acc))
	defer p.Close()
	for _, o := range [][2]any{{"wait", 1}, {"warmup", 1}, {"active", 2}, {"repeat", 2}} {
		ok(t, p.Set(o[0].(string), o[1]))
	}
	ok(t, p.OnTraceReady(func(*accel.Profiler) error { return errors.New("replaced, never called") }))
	windows := 0
	var counts []int64
	ok(t, p.OnTraceReady(func(p *accel.Profiler) error {
		windows++
		counts = append(counts, must(p.WindowCount()))
		return nil
	}))
	ok(t, p.Start())
	for range 20 {
		ok(t, p.Step())
		someWork(t, m)
	}
	ok(t, p.Stop())
	// min(20 / (wait + warmup + active), repeat): torch.profiler's count.
	if windows != 2 || must(p.WindowCount()) != 2 || counts[0] != 1 || counts[1] != 2 {
		t.Fatalf("%d trace-ready calls (window counts %v), WindowCount %d", windows, counts, must(p.WindowCount()))
	}
	wantStatus(t, p.Set("with_stack", true), accel.ErrState) // fixed once started
	ok(t, p.Stop())                                          // stopped already: nothing to do
	wantStatus(t, p.Set("activities", "tpu"), accel.ErrState)
	q := must(accel.NewProfiler(acc))
	defer q.Close()
	wantStatus(t, q.Set("activities", "tpu"), accel.ErrInvalidArgument, "tpu")
	wantStatus(t, q.Step(), accel.ErrState) // not started
	// A function set, then none: the windows complete without a call.
	ok(t, q.Set("active", 1))
	ok(t, q.OnTraceReady(func(*accel.Profiler) error { return errors.New("removed, never called") }))
	ok(t, q.OnTraceReady(nil))
	ok(t, q.Start())
	for range 3 {
		ok(t, q.Step())
		someWork(t, m)
	}
	ok(t, q.Stop())
	if n := must(q.WindowCount()); n != 4 { // steps 0 (from Start) to 3, each a window
		t.Fatalf("%d windows of one step in 4 steps", n)
	}
}

func TestProfilerWritesTheTraceAndTheTable(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	m := linearModel(t, 3, 2)
	defer m.Close()
	dir := filepath.Join(t.TempDir(), "traces")
	p := must(accel.NewProfiler(acc))
	defer p.Close()
	ok(t, p.Set("record_shapes", true))
	ok(t, p.Set("output_trace_dir", dir))
	ok(t, p.Start())
	for range 3 {
		ok(t, p.Step())
		someWork(t, m)
	}
	// Start, Step and Stop belong to the starting thread, to which Start locked this goroutine:
	// another goroutine is on another thread.
	fromElsewhere := make(chan error)
	go func() { fromElsewhere <- p.Step() }()
	wantStatus(t, <-fromElsewhere, accel.ErrState, "thread")
	ok(t, p.Stop())
	trace, err := os.ReadFile(filepath.Join(dir, "profile_0.json"))
	ok(t, err)
	if !strings.Contains(string(trace), `"aten::`) || !strings.Contains(string(trace), "traceEvents") {
		t.Fatalf("profile_0.json has no aten:: events:\n%.500s", trace)
	}
	table := must(p.Table("", -1))
	if !strings.Contains(table, "Self CPU time total:") || !strings.Contains(table, "aten::") {
		t.Fatalf("table:\n%s", table)
	}
	short := must(p.Table("self_cpu_time_total", 1))
	if len(short) >= len(table) || !strings.Contains(short, "Self CPU time total:") {
		t.Fatalf("one row:\n%s", short)
	}
	_, err = p.Table("colour", -1)
	wantStatus(t, err, accel.ErrInvalidArgument)
	exported := filepath.Join(t.TempDir(), "window.json")
	ok(t, p.ExportChromeTrace(exported))
	if again, err := os.ReadFile(exported); err != nil || !strings.Contains(string(again), `"aten::`) {
		t.Fatalf("the exported trace (%v):\n%.500s", err, again)
	}
	if n := must(p.WindowCount()); n != 1 {
		t.Fatalf("%d windows without a schedule", n)
	}
}

func TestATraceReadyFailureComesBackFromStep(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	m := linearModel(t, 3, 2)
	defer m.Close()
	boom := errors.New("no room for traces")
	for _, fail := range []func() error{
		func() error { return boom },
		func() error { panic("trace-ready panicked") },
	} {
		p := must(accel.NewProfiler(acc))
		ok(t, p.Set("active", 1)) // every step completes a window
		ok(t, p.OnTraceReady(func(*accel.Profiler) error { return fail() }))
		ok(t, p.Start())
		someWork(t, m)
		e := wantStatus(t, p.Step(), accel.ErrCallback, "trace-ready")
		var panicked *accel.PanicError
		if errors.As(e, &panicked) {
			if panicked.Value != "trace-ready panicked" {
				t.Fatalf("the panic came back as %v", panicked.Value)
			}
		} else if !errors.Is(e, boom) {
			t.Fatalf("Step failed with %v, not the function's error", e)
		}
		// Closed while running (after a failed window the library's Step and Stop fail too):
		// stopped without a trace, and the thread is free for the next profiler.
		ok(t, p.Close())
		ok(t, p.Close())
		wantStatus(t, p.Start(), accel.ErrState, "after Close")
	}
	// A profiler closed while running stops; the thread is free for the next one.
	p := must(accel.NewProfiler(acc))
	ok(t, p.Start())
	ok(t, p.Close())
	q := must(accel.NewProfiler(acc))
	defer q.Close()
	ok(t, q.Start())
	ok(t, q.Stop())
	_, err := accel.NewProfiler(nil)
	wantStatus(t, err, accel.ErrInvalidArgument)
	var none *accel.Profiler
	wantStatus(t, none.Start(), accel.ErrInvalidArgument, "nil *accel.Profiler")
	wantStatus(t, none.Stop(), accel.ErrInvalidArgument, "nil *accel.Profiler")
	wantStatus(t, (&accel.Profiler{}).Start(), accel.ErrInvalidArgument, "not made by this package")
	wantStatus(t, (&accel.Profiler{}).OnTraceReady(nil), accel.ErrInvalidArgument, "not made by this package")
	ok(t, none.Close())
}
