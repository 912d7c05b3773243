package accel

// #include "shim.h"
// /* The hot calls: none calls back into Go or keeps a pointer it is given, so cgo may skip its
//    callback bookkeeping and leave their arguments and out-parameters on the stack. */
// #cgo nocallback goaccel_tensor_from_data
// #cgo noescape goaccel_tensor_from_data
// #cgo nocallback accel_tensor_free
// #cgo nocallback accel_tensor_element_count
// #cgo noescape accel_tensor_element_count
import "C"

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"unsafe"
)

// DType is a tensor's element type.
type DType int32

// Element types (accel.h, accel_dtype). F16 and BF16 have no Go type: use FromBytes and Bytes.
const (
	F32  DType = C.ACCEL_DTYPE_F32
	F64  DType = C.ACCEL_DTYPE_F64
	F16  DType = C.ACCEL_DTYPE_F16
	BF16 DType = C.ACCEL_DTYPE_BF16
	I64  DType = C.ACCEL_DTYPE_I64
	I32  DType = C.ACCEL_DTYPE_I32
	I16  DType = C.ACCEL_DTYPE_I16
	I8   DType = C.ACCEL_DTYPE_I8
	U8   DType = C.ACCEL_DTYPE_U8
	Bool DType = C.ACCEL_DTYPE_BOOL
)

var dtypeNames = map[DType]string{F32: "f32", F64: "f64", F16: "f16", BF16: "bf16", I64: "i64",
	I32: "i32", I16: "i16", I8: "i8", U8: "u8", Bool: "bool"}

// String is the short name: "f32", "u8", ...
func (d DType) String() string {
	if name, ok := dtypeNames[d]; ok {
		return name
	}
	return "DType(" + strconv.Itoa(int(d)) + ")"
}

// Size is the size of one element in bytes (0 for a value that is no DType).
func (d DType) Size() int { return int(C.accel_dtype_size(C.accel_dtype(d))) }

// MaxDims is the most dimensions a tensor may have across the interface.
const MaxDims = C.ACCEL_MAX_DIMS

// Element is a Go type with a tensor element type of the same layout.
type Element interface {
	float32 | float64 | int64 | int32 | int16 | int8 | uint8 | bool
}

// DTypeOf is the element type of T.
func DTypeOf[T Element]() DType {
	var zero T
	switch any(zero).(type) {
	case float32:
		return F32
	case float64:
		return F64
	case int64:
		return I64
	case int32:
		return I32
	case int16:
		return I16
	case int8:
		return I8
	case uint8:
		return U8
	default: // bool: the only other Element
		return Bool
	}
}

// Tensor is a tensor held by the library (a LibTorch tensor). Values cross by copy; no method
// changes a tensor. Close it when done (or make it in a Scope): its memory is invisible to Go's
// garbage collector.
type Tensor struct {
	h *handle[*C.accel_tensor] // in its block's handles; nil for a Tensor{} not made here
}

func (t *Tensor) ref() *handle[*C.accel_tensor] {
	if t == nil {
		return nil
	}
	return t.h.orUnopened()
}

// Tensors are made in blocks that share one cleanup: runtime.AddCleanup and Cleanup.Stop for
// each tensor cost more than the library's create and free together (measured, see
// bench/calls). The cleanup of a block runs once none of its tensors is reachable, and closes
// those the program did not; a tensor kept alive thus keeps at most tensorBlockSize-1 forgotten
// neighbours, never a closed one, which Close freed at once.
const tensorBlockSize = 32

type tensorBlock struct {
	tensors [tensorBlockSize]Tensor // what the program holds, and what the cleanup watches
	next    atomic.Int32            // the next free slot
	// Outside the block: the cleanup's argument must not keep the block reachable.
	handles *[tensorBlockSize]handle[*C.accel_tensor]
}

// currentBlock is where the next tensor is made.
var currentBlock atomic.Pointer[tensorBlock]

// newTensorBlock makes a block whose handles are open already, with no tensor (a nil ptr, which
// the cleanup skips): taking a slot is then one atomic add and plain writes.
func newTensorBlock() *tensorBlock {
	b := &tensorBlock{handles: new([tensorBlockSize]handle[*C.accel_tensor])}
	for i := range b.handles {
		b.handles[i].state = openBit // no other goroutine has the block yet
	}
	runtime.AddCleanup(b, closeTensorHandles, b.handles)
	return b
}

// closeTensorHandles is a block's cleanup: it closes what the program did not (the tensors are
// unreachable, so no call can start; one still running holds the handle and frees it at its
// release). The runtime orders it after every write to the block (for the race detector too).
func closeTensorHandles(handles *[tensorBlockSize]handle[*C.accel_tensor]) {
	for i := range handles {
		if handles[i].ptr != nil {
			handles[i].close()
		}
	}
}

// newTensor gives p to a new Tensor, in a free slot of the current block.
func newTensor(p *C.accel_tensor) *Tensor {
	for {
		b := currentBlock.Load()
		if b != nil {
			if i := b.next.Add(1) - 1; i < tensorBlockSize {
				h := &b.handles[i]
				h.ptr = p // the slot is this goroutine's alone: the add above gave it
				t := &b.tensors[i]
				t.h = h
				return t
			}
		}
		// Full: the first to replace it wins; a losing new block is dropped unused.
		currentBlock.CompareAndSwap(b, newTensorBlock())
	}
}

// FromSlice copies data into a new CPU tensor of the given shape, row-major (C order): the
// last dimension varies fastest. Without a shape it is one-dimensional with len(data) elements.
// The library keeps no reference to data.
func FromSlice[T Element](data []T, shape ...int64) (*Tensor, error) {
	var zero T
	bytes := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(data))), len(data)*int(unsafe.Sizeof(zero)))
	if shape == nil {
		shape = []int64{int64(len(data))}
	}
	return fromData(bytes, DTypeOf[T](), shape)
}

// Scalar is a tensor with no dimensions holding v.
func Scalar[T Element](v T) (*Tensor, error) {
	return fromData(unsafe.Slice((*byte)(unsafe.Pointer(&v)), unsafe.Sizeof(v)), DTypeOf[T](), []int64{})
}

// FromBytes copies raw elements of dtype (row-major, native byte order) into a new tensor: the
// way to make F16 and BF16 tensors. len(data) must be the shape's element count times
// dtype.Size(). An empty shape makes a scalar.
func FromBytes(data []byte, dtype DType, shape ...int64) (*Tensor, error) {
	return fromData(data, dtype, shape)
}

func fromData(data []byte, dtype DType, shape []int64) (*Tensor, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	var shapePtr *C.int64_t
	if len(shape) > 0 {
		shapePtr = (*C.int64_t)(unsafe.Pointer(&shape[0]))
	}
	var s C.accel_status
	// Go memory without Go pointers, read during the call only: allowed by cgo's rules. The
	// hottest call of all, so no closure: call's steps written out.
	runtime.LockOSThread()
	out := C.goaccel_tensor_from_data((*C.uint8_t)(unsafe.SliceData(data)), C.size_t(len(data)),
		C.accel_dtype(dtype), shapePtr, C.size_t(len(shape)), &s)
	if s != C.ACCEL_OK {
		err := failed(s)
		runtime.UnlockOSThread()
		return nil, err
	}
	runtime.UnlockOSThread()
	return newTensor(out), nil
}

// ToSlice copies the tensor's elements into a new slice, row-major. T must be the tensor's
// element type (ErrDType otherwise: no conversion happens).
func ToSlice[T Element](t *Tensor) ([]T, error) {
	dtype, err := t.DType()
	if err != nil {
		return nil, err
	}
	if want := DTypeOf[T](); dtype != want {
		return nil, newError(ErrDType, "the tensor holds %s elements, not %s", dtype, want)
	}
	n, err := t.ElementCount()
	if err != nil {
		return nil, err
	}
	out := make([]T, n)
	var zero T
	if err := t.copyOut(unsafe.Pointer(unsafe.SliceData(out)), int(n)*int(unsafe.Sizeof(zero))); err != nil {
		return nil, err
	}
	return out, nil
}

// Bytes copies the tensor's elements as raw bytes, row-major, native byte order.
func (t *Tensor) Bytes() ([]byte, error) {
	size, err := t.DataSize()
	if err != nil {
		return nil, err
	}
	out := make([]byte, size)
	if err := t.copyOut(unsafe.Pointer(unsafe.SliceData(out)), size); err != nil {
		return nil, err
	}
	return out, nil
}

func (t *Tensor) copyOut(buf unsafe.Pointer, capacity int) error {
	var size C.size_t
	return do(t.ref(), "Tensor", func(p *C.accel_tensor) C.accel_status {
		return C.accel_tensor_to_data(p, buf, C.size_t(capacity), &size)
	})
}

// query runs one of the tensor's queries with its handle held.
func query[T any, R any](h *handle[T], kind string, f func(p T, out *R) C.accel_status) (R, error) {
	var out R
	p, err := h.acquire(kind)
	if err != nil {
		return out, err
	}
	defer h.release()
	err = call(func() C.accel_status { return f(p, &out) })
	return out, err
}

// DType is the element type.
func (t *Tensor) DType() (DType, error) {
	d, err := query(t.ref(), "Tensor", func(p *C.accel_tensor, out *C.accel_dtype) C.accel_status {
		return C.accel_tensor_dtype(p, out)
	})
	return DType(d), err
}

// DimCount is the number of dimensions (0 for a scalar).
func (t *Tensor) DimCount() (int, error) {
	n, err := query(t.ref(), "Tensor", func(p *C.accel_tensor, out *C.size_t) C.accel_status {
		return C.accel_tensor_dim_count(p, out)
	})
	return int(n), err
}

// Shape is the size of every dimension (empty for a scalar).
func (t *Tensor) Shape() ([]int64, error) {
	p, err := t.ref().acquire("Tensor")
	if err != nil {
		return nil, err
	}
	defer t.h.release()
	var dims [MaxDims]int64
	var count C.size_t
	err = call(func() C.accel_status {
		return C.accel_tensor_shape(p, (*C.int64_t)(unsafe.Pointer(&dims[0])), MaxDims, &count)
	})
	if err != nil {
		return nil, err
	}
	return append([]int64{}, dims[:count]...), nil
}

// ElementCount is the number of elements.
func (t *Tensor) ElementCount() (int64, error) {
	h := t.ref()
	p, err := h.acquire("Tensor")
	if err != nil {
		return 0, err
	}
	var n C.int64_t
	runtime.LockOSThread() // call's steps written out, as in fromData
	s := C.accel_tensor_element_count(p, &n)
	h.release()
	if s != C.ACCEL_OK {
		err = failed(s)
	}
	runtime.UnlockOSThread()
	return int64(n), err
}

// DataSize is the size of the elements in bytes.
func (t *Tensor) DataSize() (int, error) {
	n, err := query(t.ref(), "Tensor", func(p *C.accel_tensor, out *C.size_t) C.accel_status {
		return C.accel_tensor_data_size(p, out)
	})
	return int(n), err
}

// Float64 is the value of a one-element tensor as a float64 (ErrShape for more elements).
func (t *Tensor) Float64() (float64, error) {
	v, err := query(t.ref(), "Tensor", func(p *C.accel_tensor, out *C.double) C.accel_status {
		return C.accel_tensor_item_f64(p, out)
	})
	return float64(v), err
}

// Int64 is the value of a one-element integer or bool tensor (ErrDType for floating point).
func (t *Tensor) Int64() (int64, error) {
	v, err := query(t.ref(), "Tensor", func(p *C.accel_tensor, out *C.int64_t) C.accel_status {
		return C.accel_tensor_item_i64(p, out)
	})
	return int64(v), err
}

// WrapTorch makes a Tensor that shares an existing LibTorch tensor's storage, given as a pointer
// to an at::Tensor of the very LibTorch libaccel links (as gotch holds them). Anything else is
// undefined behaviour: this is the one call that trusts its argument.
func WrapTorch(torchTensor unsafe.Pointer) (*Tensor, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	if torchTensor == nil {
		return nil, newError(ErrInvalidArgument, "WrapTorch: nil at::Tensor pointer")
	}
	var out *C.accel_tensor
	if err := call(func() C.accel_status { return C.accel_tensor_wrap_torch(torchTensor, &out) }); err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// SetRequiresGrad sets whether autograd records operations on t (PyTorch's requires_grad_), so
// that a tensor made from data can be lent to a model as a parameter. An autograd leaf only.
func (t *Tensor) SetRequiresGrad(on bool) error {
	_, err := query(t.ref(), "Tensor", func(p *C.accel_tensor, _ *struct{}) C.accel_status {
		return C.accel_tensor_set_requires_grad(p, C.bool(on))
	})
	return err
}

// CheckTorch reports whether a program's own LibTorch (as gotch links it) is the very build
// libaccel runs on: version as its headers say ("2.11.0"), cxx11ABI its _GLIBCXX_USE_CXX11_ABI
// (-1 when unknown), cpuAllocator the address of c10::GetCPUAllocator as the program sees it (nil
// when unknown). A mismatch is ErrUnsupported naming both builds. Check before WrapTorch.
func CheckTorch(version string, cxx11ABI int32, cpuAllocator unsafe.Pointer) error {
	if err := checkVersion(); err != nil {
		return err
	}
	c, free, err := cString(version, "version")
	if err != nil {
		return err
	}
	defer free()
	return call(func() C.accel_status { return C.accel_torch_check(c, C.int32_t(cxx11ABI), cpuAllocator) })
}

// BorrowTorch is the at::Tensor* inside t, valid until t is closed.
func (t *Tensor) BorrowTorch() (unsafe.Pointer, error) {
	return query(t.ref(), "Tensor", func(p *C.accel_tensor, out *unsafe.Pointer) C.accel_status {
		return C.accel_tensor_borrow_torch(p, out)
	})
}

// Close frees the tensor. Idempotent; safe from any goroutine, also while a call using it runs
// (the tensor is freed when that call returns). It returns nil: the library's free cannot fail.
func (t *Tensor) Close() error {
	h := t.ref()
	if h == nil {
		return nil
	}
	// handle.close with the tensor's free called directly: the hottest close skips destroy's
	// type switch.
	for {
		s := atomic.LoadInt64(&h.state)
		if s&openBit == 0 {
			return nil
		}
		if atomic.CompareAndSwapInt64(&h.state, s, s&^openBit) {
			if s == openBit { // no call running
				C.accel_tensor_free(h.ptr)
			}
			return nil
		}
	}
}

// closeAll closes every tensor (nil entries too).
func closeAll(tensors []*Tensor) {
	for _, t := range tensors {
		t.Close()
	}
}

// tensorList takes the tensors out of a library-owned list and frees the list.
func tensorList(list *C.accel_tensor_list) ([]*Tensor, error) {
	defer C.accel_tensor_list_free(list)
	var count C.size_t
	if err := call(func() C.accel_status { return C.accel_tensor_list_count(list, &count) }); err != nil {
		return nil, err
	}
	out := make([]*Tensor, 0, int(count))
	for i := C.size_t(0); i < count; i++ {
		var p *C.accel_tensor
		if err := call(func() C.accel_status { return C.accel_tensor_list_get(list, i, &p) }); err != nil {
			closeAll(out)
			return nil, err
		}
		out = append(out, newTensor(p))
	}
	return out, nil
}

// rawTensors holds every tensor for one call: their pointers, and a release for all of them.
func rawTensors(tensors []*Tensor) ([]*C.accel_tensor, func(), error) {
	raw := make([]*C.accel_tensor, len(tensors))
	held := 0
	releaseAll := func() {
		for _, t := range tensors[:held] {
			t.h.release()
		}
	}
	for i, t := range tensors {
		p, err := t.ref().acquire("Tensor")
		if err != nil {
			releaseAll()
			e := err.(*Error)
			return nil, nil, newError(e.Status, "tensor %d: %s", i, e.Message)
		}
		raw[i] = p
		held++
	}
	return raw, releaseAll, nil
}
