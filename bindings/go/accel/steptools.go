package accel

// #include "shim.h"
import "C"

import (
	"errors"
	"unsafe"
)

// DefaultStartingBatchSize is Accelerate's starting_batch_size: where FindExecutableBatchSize
// starts when the program has no better guess.
const DefaultStartingBatchSize = 128

// NoSync runs fn with model's gradient synchronisation held back (Accelerate's no_sync(model),
// PyTorch DDP's no_sync): Backward inside fn keeps the gradients on this rank, where they add up,
// and the first Backward after it reduces them all. Optimizers still step when called. The end
// runs also when fn fails or panics (fn's error comes first; a panic goes on after). Blocks nest.
// With one process, or a model that is not prepared, there is nothing to hold back. Not a
// collective.
//
//	for i, batch := range micro {
//		step := func() error { return trainStep(batch) }
//		if i < len(micro)-1 {
//			err = acc.NoSync(model, step) // accumulate locally
//		} else {
//			err = step() // this backward reduces every micro-batch's gradients
//		}
//	}
func (a *Accelerator) NoSync(model *Model, fn func() error) error {
	// The model's handle is held for the whole block: the end always reaches the model the
	// begin held back, even when the model is closed inside fn.
	return use(model.ref(), "Model", func(m *C.accel_model) error {
		return a.scoped("NoSync", func(p *C.accel_accelerator) C.accel_status {
			return C.accel_no_sync_begin(p, m)
		}, func(p *C.accel_accelerator) C.accel_status { return C.accel_no_sync_end(p, m) }, fn)
	})
}

// batchSizeState is what FindExecutableBatchSize's trampoline needs: the program's function,
// the first error of it that is not out of memory (returned as it is), and a panic's slot.
type batchSizeState struct {
	fn   func(batchSize int64) error
	err  error
	slot failureSlot
}

//export goaccelBatchSize
func goaccelBatchSize(userData unsafe.Pointer, size C.int64_t) C.int32_t {
	state := boxValue(userData).(*batchSizeState)
	var failure error
	if state.slot.run(func() error {
		failure = state.fn(int64(size))
		return nil
	}) != 0 {
		return C.ACCEL_ERR_CALLBACK // a panic: the slot holds it
	}
	switch {
	case failure == nil:
		return C.ACCEL_OK
	case errors.Is(failure, ErrOutOfMemory):
		return C.ACCEL_ERR_OUT_OF_MEMORY // try again smaller
	}
	state.err = failure
	return C.ACCEL_ERR_CALLBACK
}

// FindExecutableBatchSize is Accelerate's find_executable_batch_size: it calls fn(batchSize)
// from start (DefaultStartingBatchSize is Accelerate's 128) down, and after a try that ran out of
// memory again at int(size * 0.9): 128, 115, 103, ... 9, 8, 7, ... It returns the first size
// whose try returned nil.
//
// Out of memory is an error with status ErrOutOfMemory (errors.Is(err, accel.ErrOutOfMemory)):
// what a library call inside fn returns when LibTorch or the system ran out of memory (a model
// call, a Backward), passed on as it is or wrapped (fmt.Errorf("...: %w", err)), or the sentinel
// accel.ErrOutOfMemory itself. Any other error of fn stops the search and is returned as it is
// (the same error value); a panic in fn stops it with an ErrCallback whose Cause is a
// *PanicError. When no size down to 1 runs (also for a start of 0) the result is ErrOutOfMemory
// "No executable batch size found, reached zero.".
//
// fn runs on the calling goroutine. In a job of several processes every rank calls it with the
// same start and all ranks go on with the same size: after each try every rank learns every
// rank's outcome (a collective), a rank out of memory makes every rank retry smaller, a failure
// stops every rank (ErrPeerFailed on the others). A try that must be retried leaves the random
// generators, the prepared models' gradients, the prepared dataloaders' positions and the
// accumulation counters as they were before it; make the model and optimizer inside fn, as
// Accelerate's examples do, when they depend on the batch size.
func (a *Accelerator) FindExecutableBatchSize(start int64, fn func(batchSize int64) error) (int64, error) {
	if fn == nil {
		return 0, newError(ErrInvalidArgument, "FindExecutableBatchSize: fn is nil")
	}
	state := &batchSizeState{fn: fn}
	box := newBox(state)
	defer freeBox(box) // the library keeps it for this call only
	var out C.int64_t
	err := a.do(func(p *C.accel_accelerator) C.accel_status {
		return C.goaccel_find_executable_batch_size(p, C.int64_t(start), box, &out)
	})
	if state.err != nil {
		return 0, state.err
	}
	if err != nil {
		return 0, state.slot.take(err)
	}
	return int64(out), nil
}
