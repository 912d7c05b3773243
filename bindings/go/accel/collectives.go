package accel

// #include "shim.h"
import "C"

import "unsafe"

// Collectives: every rank makes the same calls in the same order; with one process each is the
// identity (a copy). A failure in one (a dead peer: ErrPeerFailed, a hung one: ErrTimeout)
// leaves the process group unusable: later collectives fail at once with ErrState.

// tensorResult runs a collective that makes one tensor.
func (a *Accelerator) tensorResult(t *Tensor, nilOK bool, f func(p *C.accel_accelerator, tp *C.accel_tensor, out **C.accel_tensor) C.accel_status) (*Tensor, error) {
	var out *C.accel_tensor
	err := a.withTensor(t, nilOK, func(p *C.accel_accelerator, tp *C.accel_tensor) C.accel_status {
		return f(p, tp, &out)
	})
	if err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// Gather is every rank's tensor concatenated along dimension 0 in rank order, on every rank (a
// scalar counts as one element). Shapes and dtypes must agree: otherwise every rank gets
// ErrShape (or ErrDType) listing each rank's shape.
func (a *Accelerator) Gather(t *Tensor) (*Tensor, error) {
	return a.tensorResult(t, false, func(p *C.accel_accelerator, tp *C.accel_tensor, out **C.accel_tensor) C.accel_status {
		return C.accel_gather(p, tp, out)
	})
}

// GatherForMetrics gathers like Gather (ranks may hold different numbers of rows) and, on a
// dataloader's last batch, drops the samples duplicated to even it out: a metric over the
// result counts every sample exactly once.
func (a *Accelerator) GatherForMetrics(t *Tensor) (*Tensor, error) {
	return a.tensorResult(t, false, func(p *C.accel_accelerator, tp *C.accel_tensor, out **C.accel_tensor) C.accel_status {
		return C.accel_gather_for_metrics(p, tp, out)
	})
}

// PadAcrossProcesses pads t along dim (negative counts from the end) to the largest size any
// rank has there, with padValue, at the end or, with padFirst, at the start.
func (a *Accelerator) PadAcrossProcesses(t *Tensor, dim int64, padValue float64, padFirst bool) (*Tensor, error) {
	return a.tensorResult(t, false, func(p *C.accel_accelerator, tp *C.accel_tensor, out **C.accel_tensor) C.accel_status {
		return C.accel_pad_across_processes(p, tp, C.int64_t(dim), C.double(padValue), C.bool(padFirst), out)
	})
}

// Reduce is the element-wise reduction of every rank's tensor, on every rank.
func (a *Accelerator) Reduce(t *Tensor, r Reduction) (*Tensor, error) {
	return a.tensorResult(t, false, func(p *C.accel_accelerator, tp *C.accel_tensor, out **C.accel_tensor) C.accel_status {
		return C.accel_reduce(p, tp, C.accel_reduction(r), out)
	})
}

// Broadcast gives every rank a copy of rank from's tensor (shape and dtype included). t is read
// on rank from only and may be nil on the others.
func (a *Accelerator) Broadcast(t *Tensor, from int) (*Tensor, error) {
	return a.tensorResult(t, true, func(p *C.accel_accelerator, tp *C.accel_tensor, out **C.accel_tensor) C.accel_status {
		return C.accel_broadcast(p, tp, C.int32_t(from), out)
	})
}

// GatherObject is Accelerate's gather_object for bytes: every rank gives data (any length,
// empty allowed) and receives every rank's bytes in rank order.
func (a *Accelerator) GatherObject(data []byte) ([][]byte, error) {
	var list *C.accel_bytes_list
	err := a.do(func(p *C.accel_accelerator) C.accel_status {
		return C.accel_gather_object(p, unsafe.Pointer(unsafe.SliceData(data)), C.size_t(len(data)), &list)
	})
	if err != nil {
		return nil, err
	}
	return takeBytesList(list)
}
