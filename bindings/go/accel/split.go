package accel

// #include "shim.h"
import "C"

import (
	"errors"
	"unsafe"
)

// Work split across the processes (Accelerate's split_between_processes: inference over a list
// of prompts, files, ...) and the trigger (Accelerate's set_trigger and check_trigger: an early
// stop that every rank takes at the same step).

// SplitBetweenProcesses is the indices of the items of a list of count items that this process
// takes, in order (Accelerate 1.15's split_between_processes for a list): process r of P takes a
// contiguous slice, the first count mod P processes one item more, and a process past the end
// takes none. With applyPadding (and P > 1) the list's last index is repeated until every rank
// holds ceil(count/P) indices (none added when P divides count): gather the results and drop the
// repeats. With one process: every index, unpadded. An empty list gives every rank nothing. Not a
// collective: no other rank takes part. A negative count is ErrInvalidArgument.
//
// SplitSlice gives the items themselves.
func (a *Accelerator) SplitBetweenProcesses(count int, applyPadding bool) ([]int, error) {
	var first [64]int64 // most splits fit: one call
	buf := first[:]
	var n C.size_t
	for {
		err := a.do(func(p *C.accel_accelerator) C.accel_status {
			return C.accel_split_between_processes(p, C.int64_t(count), C.bool(applyPadding),
				(*C.int64_t)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n)
		})
		if errors.Is(err, ErrBufferTooSmall) && int(n) > len(buf) {
			buf = make([]int64, int(n))
			continue
		}
		if err != nil {
			return nil, err
		}
		break
	}
	indices := make([]int, int(n))
	for i := range indices {
		indices[i] = int(buf[i])
	}
	return indices, nil
}

// SplitSlice is this process's items of items, as SplitBetweenProcesses splits them:
//
//	mine, err := accel.SplitSlice(acc, prompts, false)
//
// The result is a new slice (with applyPadding its last item repeated); the items are copied as
// Go assigns them (a pointer or a slice still shares what it points to).
func SplitSlice[T any](acc *Accelerator, items []T, applyPadding bool) ([]T, error) {
	indices, err := acc.SplitBetweenProcesses(len(items), applyPadding)
	if err != nil {
		return nil, err
	}
	mine := make([]T, len(indices))
	for i, index := range indices {
		mine[i] = items[index]
	}
	return mine, nil
}

// SplitTensorBetweenProcesses is this process's rows of t (dimension 0), split as
// SplitBetweenProcesses splits a list of that many items. With applyPadding every process gets
// ceil(rows/P) rows, the padding rows copies of t's last row. A scalar is
// ErrShape. Not a collective: each rank splits by the shape alone, so the ranks' tensors must
// have the same number of rows. The caller closes the result.
func (a *Accelerator) SplitTensorBetweenProcesses(t *Tensor, applyPadding bool) (*Tensor, error) {
	return a.tensorResult(t, false, func(p *C.accel_accelerator, tp *C.accel_tensor, out **C.accel_tensor) C.accel_status {
		return C.accel_split_tensor_between_processes(p, tp, C.bool(applyPadding), out)
	})
}

// SetTrigger raises this process's stop flag (an early stop, a NaN loss) for the next
// CheckTrigger. Local: it communicates nothing and waits for no lock, so any goroutine may call
// it, also while another one is inside a collective of this accelerator.
func (a *Accelerator) SetTrigger() error {
	return a.do(func(p *C.accel_accelerator) C.accel_status { return C.accel_set_trigger(p) })
}

// CheckTrigger reports, on every rank, whether any rank called SetTrigger since the last check,
// and lowers every flag again. A collective: call it at the same point of the loop on every
// rank, so that all stop at the same step.
//
//	if stop, err := acc.CheckTrigger(); err != nil || stop { ... }
func (a *Accelerator) CheckTrigger() (bool, error) {
	var out C.bool
	err := a.do(func(p *C.accel_accelerator) C.accel_status { return C.accel_check_trigger(p, &out) })
	return bool(out), err
}

// SplitMap is this process's share of a dictionary of lists (Accelerate's split_between_processes
// for a dict): every value split as SplitSlice splits it, into a new map. Values of different
// lengths are ErrInvalidArgument, as Accelerate raises ValueError.
func SplitMap[K comparable, T any](acc *Accelerator, items map[K][]T, applyPadding bool) (map[K][]T, error) {
	length := -1
	for _, v := range items {
		if length >= 0 && len(v) != length {
			return nil, newError(ErrInvalidArgument,
				"split_between_processes: all values in the dictionary must have the same length (%d and %d)",
				length, len(v))
		}
		length = len(v)
	}
	mine := make(map[K][]T, len(items))
	if length < 0 {
		return mine, nil
	}
	indices, err := acc.SplitBetweenProcesses(length, applyPadding)
	if err != nil {
		return nil, err
	}
	for k, v := range items {
		part := make([]T, len(indices))
		for i, index := range indices {
			part[i] = v[index]
		}
		mine[k] = part
	}
	return mine, nil
}
