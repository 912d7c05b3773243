package accel

// #include "shim.h"
import "C"

import (
	"errors"
	"io"
	"runtime/cgo"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"unsafe"
)

// A Go function the library calls (a dataset's sample function, a checkpointed object's
// methods, a tracker's, the log sink's slog.Handler) runs in an exported trampoline below. Its
// error or panic never reaches C: it is stored in the failureSlot shared with the Go objects that
// make the library call (not per-thread: sample functions run on the dataloader's worker
// threads), the trampoline returns nonzero, the library call fails with ErrCallback, and the
// wrapper attaches the stored error as the *Error's Cause.

// failureSlot holds the first failure of a callback since it was last taken.
type failureSlot struct {
	mu  sync.Mutex
	err error
}

// run calls f, turning an error or a panic into a stored failure and a nonzero return.
func (s *failureSlot) run(f func() error) (status C.int32_t) {
	defer func() {
		if r := recover(); r != nil {
			s.store(&PanicError{Value: r, Stack: debug.Stack()})
			status = 1
		}
	}()
	if err := f(); err != nil {
		s.store(err)
		return 1
	}
	return 0
}

// runPassingOutOfMemory is run, but an error that is running out of memory
// (errors.Is(err, ErrOutOfMemory)) returns ACCEL_ERR_OUT_OF_MEMORY and is not stored: the
// Trainer's auto_find_batch_size tries again smaller, and a later try that succeeds must not
// report it.
func (s *failureSlot) runPassingOutOfMemory(f func() error) C.int32_t {
	outOfMemory := false
	status := s.run(func() error {
		err := f()
		if err != nil && errors.Is(err, ErrOutOfMemory) {
			outOfMemory = true
			return nil
		}
		return err
	})
	if outOfMemory {
		return C.ACCEL_ERR_OUT_OF_MEMORY
	}
	return status
}

func (s *failureSlot) store(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// resolve attaches the stored failure to a library ErrCallback error (other errors pass).
func (s *failureSlot) resolve(err error) error {
	var e *Error
	if s == nil || !errors.As(err, &e) || e.Status != ErrCallback || e.Cause != nil {
		return err
	}
	s.mu.Lock()
	e.Cause, s.err = s.err, nil
	s.mu.Unlock()
	return err
}

// take is resolve for a caller that holds the slot's calls to itself for the whole call (the
// trackers' lock): whatever is left after the call (a tracker's failure the library did not
// report, because a file tracker's ErrIO came first) is dropped, not left for a later call.
func (s *failureSlot) take(err error) error {
	if s == nil {
		return err
	}
	err = s.resolve(err)
	s.mu.Lock()
	s.err = nil
	s.mu.Unlock()
	return err
}

// liveBoxes counts the callback boxes the library still holds (the tests watch the release
// functions run through it).
var liveBoxes atomic.Int64

// newBox puts a cgo.Handle of v into C memory, the callbacks' user_data: C may keep it after the
// registering call, which it may not do with a Go pointer.
func newBox(v any) *C.uintptr_t {
	box := (*C.uintptr_t)(C.malloc(C.size_t(unsafe.Sizeof(C.uintptr_t(0)))))
	*box = C.uintptr_t(cgo.NewHandle(v))
	liveBoxes.Add(1)
	return box
}

// freeBox undoes newBox: the library's release function, and the path of a failed registration
// (after which the library never calls back).
func freeBox(box *C.uintptr_t) {
	cgo.Handle(*box).Delete()
	C.free(unsafe.Pointer(box))
	liveBoxes.Add(-1)
}

func boxValue(userData unsafe.Pointer) any {
	return cgo.Handle(*(*C.uintptr_t)(userData)).Value()
}

// sampleState is what a function dataset's callbacks need (lengths: a ragged dataset's only).
type sampleState struct {
	fn      func(index int64, fields [][]byte) error
	lengths func(index int64, lengths []int64) error
	slot    *failureSlot
}

//export goaccelSample
func goaccelSample(index C.int64_t, buffers *unsafe.Pointer, sizes *C.size_t, count C.size_t, userData unsafe.Pointer) C.int32_t {
	state := boxValue(userData).(*sampleState)
	return state.slot.run(func() error {
		bufs := unsafe.Slice(buffers, int(count))
		lens := unsafe.Slice(sizes, int(count))
		fields := make([][]byte, len(bufs))
		for i := range bufs {
			fields[i] = unsafe.Slice((*byte)(bufs[i]), int(lens[i]))
		}
		return state.fn(int64(index), fields)
	})
}

//export goaccelSampleLengths
func goaccelSampleLengths(index C.int64_t, lengths *C.int64_t, count C.size_t, userData unsafe.Pointer) C.int32_t {
	state := boxValue(userData).(*sampleState)
	return state.slot.run(func() error {
		return state.lengths(int64(index), unsafe.Slice((*int64)(unsafe.Pointer(lengths)), int(count)))
	})
}

//export goaccelRelease
func goaccelRelease(userData unsafe.Pointer) {
	freeBox((*C.uintptr_t)(userData))
}

// streamState is what a stream's callback needs.
type streamState struct {
	next   func(epoch, position int64, s *Sample) (bool, error)
	dtypes []DType // the fields' element types, which Sample.Set checks typed data against
	slot   *failureSlot
}

// A stream callback's results (accel_stream_fn): 0 a sample, 1 the end of the stream, anything
// else a failure. failureSlot.run's nonzero return cannot be passed on as it is: it is 1.
const (
	streamSample = 0
	streamEnd    = 1
	streamFailed = -1
)

//export goaccelStreamSample
func goaccelStreamSample(epoch, position C.int64_t, sample *C.accel_sample, userData unsafe.Pointer) C.int32_t {
	state := boxValue(userData).(*streamState)
	s := &Sample{p: sample, dtypes: state.dtypes}
	defer func() { s.p = nil }() // the library's sample ends with this call
	more := false
	if state.slot.run(func() (err error) {
		more, err = state.next(int64(epoch), int64(position), s)
		return err
	}) != 0 {
		return streamFailed
	}
	if !more {
		return streamEnd
	}
	return streamSample
}

// checkpointState is what a registered object's callbacks need.
type checkpointState struct {
	obj  Stateful
	slot *failureSlot
}

//export goaccelSave
func goaccelSave(writer *C.accel_state_writer, userData unsafe.Pointer) C.int32_t {
	state := boxValue(userData).(*checkpointState)
	w := &StateWriter{p: writer}
	defer func() { w.p = nil }() // the library's writer ends with this call
	return state.slot.run(func() error { return state.obj.SaveState(w) })
}

//export goaccelLoad
func goaccelLoad(data unsafe.Pointer, size C.size_t, userData unsafe.Pointer) C.int32_t {
	state := boxValue(userData).(*checkpointState)
	return state.slot.run(func() error {
		// A copy: the library's bytes are borrowed for this call only.
		return state.obj.LoadState(append([]byte{}, unsafe.Slice((*byte)(data), int(size))...))
	})
}

// trackerState is what a custom tracker's callbacks need (AddTracker). It must not reach the
// Accelerator: the library holds the box until the accelerator is freed, and a box that kept the
// Accelerator reachable would keep its cleanup from ever running.
type trackerState struct {
	tracker Tracker
	slot    *failureSlot
}

// The tracker callbacks get copies of the library's values (borrowed for the call only), which
// the tracker may keep.

//export goaccelTrackerStart
func goaccelTrackerStart(project *C.char, config *C.accel_values, userData unsafe.Pointer) C.int32_t {
	state := boxValue(userData).(*trackerState)
	return state.slot.run(func() error {
		cfg, err := valuesFromC(config)
		if err != nil {
			return err
		}
		return state.tracker.Start(C.GoString(project), cfg)
	})
}

//export goaccelTrackerLog
func goaccelTrackerLog(values *C.accel_values, step C.int64_t, userData unsafe.Pointer) C.int32_t {
	state := boxValue(userData).(*trackerState)
	return state.slot.run(func() error {
		v, err := valuesFromC(values)
		if err != nil {
			return err
		}
		return state.tracker.Log(v, int64(step))
	})
}

//export goaccelTrackerFinish
func goaccelTrackerFinish(userData unsafe.Pointer) C.int32_t {
	state := boxValue(userData).(*trackerState)
	return state.slot.run(state.tracker.Finish)
}

//export goaccelLogSink
func goaccelLogSink(level C.accel_log_level, rank C.int32_t, flags C.accel_log_flags, message *C.char, userData unsafe.Pointer) C.int32_t {
	state := boxValue(userData).(*logState)
	return state.slot.run(func() error { return state.write(level, rank, flags, message) })
}

// StateWriter receives a checkpointed object's bytes during SaveState. It is valid only inside
// the SaveState call that received it, on its goroutine.
type StateWriter struct {
	p *C.accel_state_writer
}

var _ io.Writer = (*StateWriter)(nil)

// Write appends data to the object's saved state; after SaveState returned it fails with
// ErrState.
func (w *StateWriter) Write(data []byte) (int, error) {
	if w.p == nil {
		return 0, newError(ErrState, "StateWriter.Write after its SaveState returned")
	}
	if len(data) == 0 {
		return 0, nil
	}
	err := call(func() C.accel_status {
		return C.accel_state_writer_write(w.p, unsafe.Pointer(&data[0]), C.size_t(len(data)))
	})
	if err != nil {
		return 0, err
	}
	return len(data), nil
}
