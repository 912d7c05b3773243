package accel

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
// A cleanup (runtime.AddCleanup) frees what the program forgot to Close once the Go object is
// unreachable. It is the safety net, not the plan: the garbage collector does not see the
// library's memory and may run late, so programs Close what they make (training loops above all).
// Tensors share one cleanup per block of them (tensorBlock): a cleanup of its own cost a tensor
// more than the library's create and free together.
type handle[T any] struct {
	// bit 0: open; the rest: the number of calls running, times two. The zero value is a handle
	// never opened (a Model{} not made here): nothing to free. Read and changed with sync/atomic
	// only, but for a tensor block's first write (newTensorBlock), before the block is shared.
	// First in the struct: 64-bit aligned.
	state int64
	ptr   T
	free  func(T)
	// The cleanup of this handle alone; zero for a tensor (its block has it).
	cleanup runtime.Cleanup
}

const openBit = 1

// initHandle makes h own ptr for owner (the Go object embedding h).
func initHandle[O any, T any](owner *O, h *handle[T], ptr T, free func(T)) {
	h.ptr = ptr
	h.free = free
	h.cleanup = runtime.AddCleanup(owner, free, ptr)
	atomic.StoreInt64(&h.state, openBit)
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
	if h.free == nil {
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

// destroy frees the library handle (only ever of an opened handle, once).
func (h *handle[T]) destroy() { h.free(h.ptr) }

// close marks the handle closed and frees it at once when no call is running. Idempotent. A
// tensor block's cleanup closes its handles this way: the tensors are unreachable then, so no
// call can start, but one that started (holding the handle, not the tensor) may still run, and
// its release frees.
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
			h.cleanup.Stop()
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
