package accel

// #include "shim.h"
import "C"

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Profiler is Accelerate's accelerator.profile(ProfileKwargs(...)) on LibTorch's profiler: it
// records the operators that run between Start and Stop on the goroutine that called Start.
//
//	p, err := accel.NewProfiler(acc)
//	defer p.Close()
//	p.Set("wait", 1); p.Set("warmup", 1); p.Set("active", 2); p.Set("repeat", 2)
//	p.Set("output_trace_dir", "traces")   // profile_<rank>.json at Stop
//	p.OnTraceReady(func(p *accel.Profiler) error {
//		table, err := p.Table("self_cpu_time_total", 10)
//		...
//	})
//	p.Start()
//	for ... {
//		p.Step()   // at the start of each step, as torch.profiler's prof.step()
//		...        // the training step
//	}
//	p.Stop()
//
// Options (Set, before Start): activities ("cpu", "cuda" or "cpu,cuda"; default cpu),
// torch.profiler's schedule (wait, warmup, active, repeat, skip_first: setting any gives a
// schedule, with wait 0, warmup 0, active 1, repeat 0, skip_first 0 for the others; without one
// the whole block is one window), record_shapes, profile_memory, with_stack, with_flops,
// with_modules (false), output_trace_dir (none). With output_trace_dir, Stop writes every rank's
// last complete window to <dir>/profile_<rank>.json as Chrome-trace JSON (chrome://tracing,
// Perfetto) and is a collective; the main process logs the window's summary table at info level.
//
// Threads: LibTorch records the thread that started it, and Start, Step and Stop must come from
// that OS thread (ErrState otherwise). So Start locks the calling goroutine to its OS thread
// (runtime.LockOSThread) until Stop, or Close on that goroutine: call Start, the profiled work,
// Step and Stop on one goroutine.
type Profiler struct {
	h     *handle[*C.accel_profiler]
	state *profilerState
}

// profilerState is what a profiler's calls and its trace-ready trampoline share. It holds the
// handle, not the Profiler: the trampoline's box must not keep the Profiler reachable, or its
// cleanup would never run.
type profilerState struct {
	h *handle[*C.accel_profiler]
	// The failure of the trace-ready function, attached to the Step or Stop that completed the
	// window.
	slot failureSlot
	// The OS thread Start locked its goroutine to (goaccel_thread_id); 0 when not locked.
	thread atomic.Uintptr
}

func (p *Profiler) ref() *handle[*C.accel_profiler] {
	if p == nil {
		return nil
	}
	return p.h.orUnopened()
}

// NewProfiler is a profiler of acc's process, not started.
func NewProfiler(acc *Accelerator) (*Profiler, error) {
	var out *C.accel_profiler
	err := acc.do(func(a *C.accel_accelerator) C.accel_status { return C.accel_profiler_new(a, &out) })
	if err != nil {
		return nil, err
	}
	p := &Profiler{state: &profilerState{}}
	p.h = newHandle(p, out)
	p.state.h = p.h
	return p, nil
}

func (p *Profiler) do(f func(p *C.accel_profiler) C.accel_status) error {
	return do(p.ref(), "Profiler", f)
}

// slotOf is the profiler's failure slot (nil for a Profiler not made by NewProfiler, whose calls
// fail before any callback).
func (p *Profiler) slotOf() *failureSlot {
	if p == nil || p.state == nil {
		return nil
	}
	return &p.state.slot
}

// Set sets an option ("active", 2) before Start.
func (p *Profiler) Set(key string, value any) error {
	return use(p.ref(), "Profiler", func(cp *C.accel_profiler) error {
		return setOption(key, value, func(k, v *C.char) C.accel_status { return C.accel_profiler_set(cp, k, v) })
	})
}

// traceReady is what the trace-ready trampoline gets: the program's function and its profiler.
type traceReady struct {
	fn    func(p *Profiler) error
	state *profilerState
}

//export goaccelTraceReady
func goaccelTraceReady(userData unsafe.Pointer, _ *C.accel_profiler) C.int32_t {
	ready := boxValue(userData).(*traceReady)
	// The Profiler the function gets shares the program's handle (the Step or Stop that runs
	// this holds it).
	view := &Profiler{h: ready.state.h, state: ready.state}
	return ready.state.slot.run(func() error { return ready.fn(view) })
}

// The trace-ready boxes the library holds, by profiler: accel_profiler_set_on_trace_ready has no
// release function, so the box is freed when it is replaced or the profiler freed.
var (
	traceBoxesMu sync.Mutex
	traceBoxes   = map[*C.accel_profiler]*C.uintptr_t{}
)

// swapTraceReady records box as p's and returns the one it replaces (nil: none).
func swapTraceReady(p *C.accel_profiler, box *C.uintptr_t) *C.uintptr_t {
	traceBoxesMu.Lock()
	defer traceBoxesMu.Unlock()
	old := traceBoxes[p]
	if box == nil {
		delete(traceBoxes, p)
	} else {
		traceBoxes[p] = box
	}
	return old
}

func takeTraceReady(p *C.accel_profiler) *C.uintptr_t { return swapTraceReady(p, nil) }

// OnTraceReady sets the function called, on the goroutine of the Step or Stop that completed it,
// each time a recorded window is complete (Accelerate's on_trace_ready); it may read the window
// (Table, ExportChromeTrace, WindowCount of the profiler it gets). Its error, or its panic (as a
// *PanicError), comes back as the Cause of that Step's or Stop's ErrCallback. nil: none. The
// function is kept until it is replaced or the profiler closed: Close the profiler when fn holds
// on to it.
func (p *Profiler) OnTraceReady(fn func(p *Profiler) error) error {
	return use(p.ref(), "Profiler", func(cp *C.accel_profiler) error {
		var box *C.uintptr_t
		if fn != nil {
			box = newBox(&traceReady{fn: fn, state: p.state})
		}
		if err := call(func() C.accel_status { return C.goaccel_profiler_set_on_trace_ready(cp, box) }); err != nil {
			if box != nil {
				freeBox(box) // refused: the library never calls it
			}
			return err
		}
		if old := swapTraceReady(cp, box); old != nil {
			freeBox(old)
		}
		return nil
	})
}

// Start starts recording: step 0 of the schedule. It locks the calling goroutine to its OS
// thread until Stop (see Profiler). ErrState when started before, or when another profiler is
// recording on this thread.
func (p *Profiler) Start() error {
	if p == nil || p.state == nil { // fails: a nil Profiler, or one not made by NewProfiler
		return p.do(func(cp *C.accel_profiler) C.accel_status { return C.accel_profiler_start(cp) })
	}
	runtime.LockOSThread()
	err := p.do(func(cp *C.accel_profiler) C.accel_status { return C.accel_profiler_start(cp) })
	if err != nil || !p.state.thread.CompareAndSwap(0, uintptr(C.goaccel_thread_id())) {
		runtime.UnlockOSThread()
	}
	return p.slotOf().take(err)
}

// Step begins the next step (torch.profiler's prof.step()): call it at the start of each step.
// When it completes a window, the trace-ready function runs, and its failure is this call's.
func (p *Profiler) Step() error {
	err := p.do(func(cp *C.accel_profiler) C.accel_status { return C.accel_profiler_step(cp) })
	return p.slotOf().take(err)
}

// Stop ends the profiled block: the last window completes (the trace-ready function runs), and
// with output_trace_dir every rank writes its trace (a collective). It ends Start's lock of the
// goroutine to its thread. Stopping a profiler that is not running does nothing.
func (p *Profiler) Stop() error {
	err := p.do(func(cp *C.accel_profiler) C.accel_status { return C.accel_profiler_stop(cp) })
	p.unlockThread()
	return p.slotOf().take(err)
}

// unlockThread undoes Start's runtime.LockOSThread when called by the goroutine Start locked:
// only that goroutine runs on the thread it was locked to.
func (p *Profiler) unlockThread() {
	if p == nil || p.state == nil {
		return
	}
	t := p.state.thread.Load()
	if t != 0 && t == uintptr(C.goaccel_thread_id()) && p.state.thread.CompareAndSwap(t, 0) {
		runtime.UnlockOSThread()
	}
}

// Table is the summary table of the last complete window (torch's key_averages().table()): a
// row per operator with self and total CPU time and calls, sorted by sortBy (cpu_time_total,
// self_cpu_time_total, count, name; "": cpu_time_total), at most rowLimit rows (-1: all), ending
// with "Self CPU time total: ...".
func (p *Profiler) Table(sortBy string, rowLimit int64) (string, error) {
	csort, free, err := optionalCString(sortBy, "sortBy")
	if err != nil {
		return "", err
	}
	defer free()
	var text string
	err = use(p.ref(), "Profiler", func(cp *C.accel_profiler) (err error) {
		text, err = readText(func(buf *C.char, capacity C.size_t, size *C.size_t) C.accel_status {
			return C.accel_profiler_table(cp, csort, C.int64_t(rowLimit), buf, capacity, size)
		})
		return err
	})
	return text, err
}

// ExportChromeTrace writes the last complete window to path as Chrome-trace JSON (made
// atomically).
func (p *Profiler) ExportChromeTrace(path string) error {
	cpath, free, err := cString(path, "the path")
	if err != nil {
		return err
	}
	defer free()
	return p.do(func(cp *C.accel_profiler) C.accel_status { return C.accel_profiler_export_chrome_trace(cp, cpath) })
}

// WindowCount is how many windows were complete (trace-ready calls) so far.
func (p *Profiler) WindowCount() (int64, error) {
	v, err := query(p.ref(), "Profiler", func(cp *C.accel_profiler, out *C.int64_t) C.accel_status {
		return C.accel_profiler_window_count(cp, out)
	})
	return int64(v), err
}

// Close frees the profiler; one still running stops without writing anything when closed on
// the goroutine that started it (which it then unlocks from its thread). Idempotent; safe from
// any goroutine.
func (p *Profiler) Close() error {
	err := p.ref().close()
	p.unlockThread()
	return err
}
