package accel

// #include "shim.h"
import "C"

import (
	"fmt"
	"runtime"
)

// Status is the class of a failure, one of the library's accel_status values. The Err* constants
// are the sentinels to test with errors.Is:
//
//	if errors.Is(err, accel.ErrTimeout) { ... }
type Status int32

// The Err* constants, one per ACCEL_ERR_* value of accel.h, are in status_generated.go
// (tools/gen_raw.py).

// String is the status's constant name in accel.h, e.g. "ACCEL_ERR_CONFIG".
func (s Status) String() string {
	return C.GoString(C.accel_status_name(C.accel_status(s)))
}

// Error makes a Status usable as a sentinel error (errors.Is(err, accel.ErrTimeout)).
func (s Status) Error() string { return s.String() }

// Error is a failed call: its class, the library's message (read on the OS thread that made
// the call, so always this call's own), and, for ErrCallback, what the Go callback returned.
type Error struct {
	Status  Status
	Message string
	// Cause is the error a dataset function, a checkpointed object, a tracker, the logger's
	// slog.Handler, a profiler's trace-ready function or a Trainer's step, compute_metrics or
	// callback returned (a *PanicError when it panicked, also for FindExecutableBatchSize's
	// function); for ErrCancelled from an XxxContext call, ctx.Err() (context.go); nil for
	// failures inside the library.
	Cause error
}

// Error is "ACCEL_ERR_<CLASS>: message", followed by the cause when there is one.
func (e *Error) Error() string {
	text := e.Status.String() + ": " + e.Message
	if e.Cause != nil {
		text += ": " + e.Cause.Error()
	}
	return text
}

// Is reports whether target is this error's Status (the sentinels ErrTimeout, ...).
func (e *Error) Is(target error) bool {
	s, ok := target.(Status)
	return ok && s == e.Status
}

// Unwrap gives the callback's own error, so errors.Is and errors.As reach it too.
func (e *Error) Unwrap() error { return e.Cause }

// PanicError is a panic inside a Go function the library called (a dataset function on a worker
// thread, a checkpoint or tracker callback, a slog.Handler, a trace-ready function, the function
// of FindExecutableBatchSize), recovered there and returned as the Cause of an ErrCallback.
type PanicError struct {
	Value any    // what was passed to panic
	Stack []byte // the goroutine's stack where it panicked
}

// Error is "panic: " and the value.
func (p *PanicError) Error() string { return fmt.Sprintf("panic: %v", p.Value) }

// Unwrap gives the panic value when it was an error (panic(err)).
func (p *PanicError) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}

// call makes one library call and, when it fails, reads its message before the goroutine can
// move to another OS thread: the message is per OS thread (accel.h, "Status and errors"), and
// Go moves goroutines between threads at any call. Every call into the library goes through here
// (the few hottest with its steps written out: LockOSThread, the call, failed, UnlockOSThread).
func call(f func() C.accel_status) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if s := f(); s != C.ACCEL_OK {
		return failed(s)
	}
	return nil
}

// failed is the error of a call that returned s, read on the OS thread that made the call: the
// caller is still locked to it.
func failed(s C.accel_status) error {
	e := &Error{Status: Status(s), Message: C.GoString(C.accel_last_error_message())}
	// The thread's record must be this call's: a mismatch would be a library bug, said so
	// rather than passing on a message that may belong to another call.
	if recorded := C.accel_last_error_status(); recorded != s {
		e.Message += fmt.Sprintf(" (the thread's error record says %v, the call returned %v)",
			Status(recorded), e.Status)
	}
	return e
}

// do makes one library call with h held: use and call together, the shape of most methods.
func do[T any](h *handle[T], kind string, f func(p T) C.accel_status) error {
	return use(h, kind, func(p T) error {
		return call(func() C.accel_status { return f(p) })
	})
}

// newError is an error found by the package itself, before any library call.
func newError(s Status, format string, args ...any) error {
	return &Error{Status: s, Message: fmt.Sprintf(format, args...)}
}
