package accel

// #include "shim.h"
import "C"

import (
	"runtime"
	"sync/atomic"
	"unsafe"
)

// handle owns one library handle T (a *C.accel_tensor, ...) for a Go object (a *Tensor, ...).
//
// The library forbids freeing a handle while another call on it runs (accel.h, "Threads"), and
// Close may be called from any goroutine, at any time. So every call holds a use of the handle
// (acquire/release), Close only marks it closed, and whichever of Close and the last running
// call comes last frees it: Close never waits, and a call that started before Close finishes
// with a live handle. A call that starts after Close fails with ErrState. The state is one
// atomic word: no lock on any call.
//
// A cleanup (runtime.AddCleanup) closes what the program forgot to Close once the Go object is
// unreachable. It is the safety net, not the plan: the garbage collector does not see the
// library's memory and may run late, so programs Close what they make (training loops above
// all). The handle lives outside its Go object, as the cleanup's argument: a call that started
// holds the handle, not the object, and the cleanup's close then leaves the free to its release.
// Close does not stop the cleanup, which finds the handle closed. Tensors share one cleanup per
// block of them (tensorBlock): a cleanup of its own cost a tensor more than the library's create
// and free together.
type handle[T any] struct {
	// bit 0: open; the rest: the number of calls running, times two. The zero value is a handle
	// never opened: nothing to free. Read and changed with sync/atomic only, but for the first
	// write, before the handle is shared. First in the struct: 64-bit aligned.
	state int64
	ptr   T // kept after the free: a zero ptr means never opened
}

const openBit = 1

// newHandle is an open handle of ptr for owner, closed by a cleanup once owner is unreachable.
func newHandle[O any, T any](owner *O, ptr T) *handle[T] {
	h := &handle[T]{state: openBit, ptr: ptr}
	runtime.AddCleanup(owner, closeHandle[T], h)
	return h
}

func closeHandle[T any](h *handle[T]) { h.close() }

// orUnopened is h, or for a Go object never made by its constructor (a Model{}) a handle never
// opened, whose calls fail naming that.
func (h *handle[T]) orUnopened() *handle[T] {
	if h == nil {
		return new(handle[T])
	}
	return h
}

// acquire starts a use of the handle: its pointer, or ErrState once it is closed. A nil handle
// (from a nil *Tensor, ...) is ErrInvalidArgument. Every successful acquire has one release.
func (h *handle[T]) acquire(kind string) (T, error) {
	var zero T
	if h == nil {
		return zero, errNil(kind)
	}
	for {
		s := atomic.LoadInt64(&h.state)
		if s&openBit == 0 {
			return zero, h.notOpen(kind)
		}
		if atomic.CompareAndSwapInt64(&h.state, s, s+2) {
			return h.ptr, nil
		}
	}
}

// errNil and notOpen are out of line: acquire stays small enough to inline.
func errNil(kind string) error { return newError(ErrInvalidArgument, "nil *accel.%s", kind) }

func (h *handle[T]) notOpen(kind string) error {
	var zero T
	if any(h.ptr) == any(zero) {
		return newError(ErrInvalidArgument, "an accel.%s not made by this package (use its constructor)", kind)
	}
	return errClosed(kind)
}

func errClosed(kind string) error {
	return newError(ErrState, "the accel.%s was used after Close", kind)
}

// release ends a use; the last use after Close frees the handle.
func (h *handle[T]) release() {
	if atomic.AddInt64(&h.state, -2) == 0 {
		h.destroy()
	}
}

// destroy frees the library handle (only ever of an opened handle, once): the free of its type,
// chosen here rather than kept in every handle (a tensor's handle is two words).
func (h *handle[T]) destroy() {
	switch p := any(h.ptr).(type) {
	case *C.accel_tensor:
		C.accel_tensor_free(p)
	case *C.accel_accelerator:
		forgetLiveAccelerator(p) // before the free: the contexts' interruptions use it
		C.accel_accelerator_free(p)
	case *C.accel_config:
		C.accel_config_free(p)
	case *C.accel_model:
		C.accel_model_free(p)
	case *C.accel_optimizer:
		C.accel_optimizer_free(p)
	case *C.accel_scheduler:
		C.accel_scheduler_free(p)
	case *C.accel_dataset:
		C.accel_dataset_free(p)
	case *C.accel_dataloader:
		C.accel_dataloader_free(p) // also stops the workers: the library's free closes first
	case *C.accel_tokenizer:
		C.accel_tokenizer_free(p)
	case *C.accel_local_sgd:
		C.accel_local_sgd_free(p) // one not ended ends no_sync without averaging
	case *C.accel_trainer:
		C.accel_trainer_free(p) // releases its steps' and callbacks' boxes
	case *C.accel_profiler:
		// Taken before the free, which may give the address to the next profiler made.
		box := takeTraceReady(p)
		C.accel_profiler_free(p)
		if box != nil {
			freeBox(box) // the library calls the trace-ready function no more
		}
	default:
		panic("accel: a handle of no known type") // a bug of this package: every type is above
	}
}

// close marks the handle closed and frees it at once when no call is running. Idempotent. The
// cleanups close this way: the object is unreachable then, so no call can start, but one that
// started (holding the handle, not the object) may still run, and its release frees.
func (h *handle[T]) close() error {
	if h == nil {
		return nil
	}
	for {
		s := atomic.LoadInt64(&h.state)
		if s&openBit == 0 {
			return nil
		}
		if atomic.CompareAndSwapInt64(&h.state, s, s&^openBit) {
			if s == openBit { // no call running
				h.destroy()
			}
			return nil
		}
	}
}

// closed reports whether Close was called.
func (h *handle[T]) closed() bool { return h == nil || atomic.LoadInt64(&h.state)&openBit == 0 }

// prepared holds the handle for accel_prepare: its pointer and the release to call afterwards.
func prepared[T any](h *handle[T], kind string, raw func(T) unsafe.Pointer) (unsafe.Pointer, func(), error) {
	p, err := h.acquire(kind)
	if err != nil {
		return nil, nil, err
	}
	return raw(p), h.release, nil
}

// use runs f with the handle held (acquire, f, release).
func use[T any](h *handle[T], kind string, f func(p T) error) error {
	p, err := h.acquire(kind)
	if err != nil {
		return err
	}
	defer h.release()
	return f(p)
}
