package accel

// #include "shim.h"
import "C"

import (
	"runtime"
	"unsafe"
)

// Model is a TorchScript module: loaded from an archive, or built here from layers (each
// initialised as the matching torch.nn layer) and methods in TorchScript source (accel.h,
// "Models").
type Model struct {
	h *handle[*C.accel_model]
}

func (m *Model) ref() *handle[*C.accel_model] {
	if m == nil {
		return nil
	}
	return m.h.orUnopened()
}

func newModel(p *C.accel_model) *Model {
	m := &Model{}
	m.h = newHandle(m, p)
	return m
}

// NewModel is an empty model, in train mode, to add layers and methods to.
func NewModel() (*Model, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	var out *C.accel_model
	if err := call(func() C.accel_status { return C.accel_model_new(&out) }); err != nil {
		return nil, err
	}
	return newModel(out), nil
}

// NewEmptyModel returns an empty model whose layers are built without their weights (Accelerate's
// init_empty_weights): each parameter AddLayer makes has a shape and a dtype on LibTorch's meta
// device and no memory; buffers too with includeBuffers, else they are made on the CPU as usual.
// LoadPretrained or LoadCheckpointInModel then fills each tensor in place, read straight from the
// file; a tensor a not-strict load lacks gets its layer's initialisation. Until then whatever
// needs a tensor's values (Tensor, Call, Prepare, an optimizer step, saving) is ErrState naming
// it.
func NewEmptyModel(includeBuffers bool) (*Model, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	var out *C.accel_model
	if err := call(func() C.accel_status {
		return C.accel_model_new_empty(C.bool(includeBuffers), &out)
	}); err != nil {
		return nil, err
	}
	return newModel(out), nil
}

// LoadTorchScript loads a TorchScript archive (torch.jit.save, SaveTorchScript). An unreadable
// or invalid file is ErrIO naming it.
func LoadTorchScript(path string) (*Model, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	cpath, free, err := cString(path, "the path")
	if err != nil {
		return nil, err
	}
	defer free()
	var out *C.accel_model
	if err := call(func() C.accel_status { return C.accel_model_load_torchscript(cpath, &out) }); err != nil {
		return nil, err
	}
	return newModel(out), nil
}

// withStrings runs f with the model's handle and strs as C text.
func (m *Model) withStrings(strs []string, f func(p *C.accel_model, c []*C.char) C.accel_status) error {
	p, err := m.ref().acquire("Model")
	if err != nil {
		return err
	}
	defer m.h.release()
	cs := make([]*C.char, len(strs))
	for i, s := range strs {
		c, free, err := cString(s, "an argument")
		if err != nil {
			return err
		}
		defer free()
		cs[i] = c
	}
	return call(func() C.accel_status { return f(p, cs) })
}

// AddLayer adds layer name of kind ("linear", "conv2d", "batch_norm2d", "layer_norm",
// "embedding") with options spec ("in_features=784 out_features=10"). Add layers before the
// methods that use them.
//
// Deprecated: use Add and a layer struct (LinearOptions, Conv2dOptions, ...), which names every
// option; removed in 0.4.
func (m *Model) AddLayer(name, kind, spec string) error { return m.addLayer(name, kind, spec) }

func (m *Model) addLayer(name, kind, spec string) error {
	return m.withStrings([]string{name, kind, spec}, func(p *C.accel_model, c []*C.char) C.accel_status {
		return C.accel_model_add_layer(p, c[0], c[1], c[2])
	})
}

// AddParameter lends the caller's tensor to the model as parameter name ("fc1.weight"), no
// copy: the model's tensor is the caller's, and training changes it in place (accel.h, "Models
// of the host's own tensors"). It must be a floating-point autograd leaf that requires grad
// (Tensor.SetRequiresGrad), share memory with no other lent tensor, and sit on the model's
// device. The model keeps its own reference: the caller may close t afterwards.
func (m *Model) AddParameter(name string, t *Tensor) error {
	return m.lend(name, t, func(p *C.accel_model, c *C.char, raw *C.accel_tensor) C.accel_status {
		return C.accel_model_add_parameter(p, c, raw)
	})
}

// AddBuffer lends the caller's tensor as buffer name: saved and copied from rank 0, not trained.
func (m *Model) AddBuffer(name string, t *Tensor) error {
	return m.lend(name, t, func(p *C.accel_model, c *C.char, raw *C.accel_tensor) C.accel_status {
		return C.accel_model_add_buffer(p, c, raw)
	})
}

func (m *Model) lend(name string, t *Tensor, f func(*C.accel_model, *C.char, *C.accel_tensor) C.accel_status) error {
	raw, release, err := rawTensors([]*Tensor{t})
	if err != nil {
		return err
	}
	defer release()
	return m.withStrings([]string{name}, func(p *C.accel_model, c []*C.char) C.accel_status {
		return f(p, c[0], raw[0])
	})
}

// Forward runs the caller's own forward of a model of lent tensors: rank 0's buffers are copied
// to every rank first (a collective when the model has buffers) and f runs under the
// accelerator's mixed precision. The goroutine stays on one OS thread meanwhile: LibTorch's
// autocast state is per thread.
func (m *Model) Forward(f func() error) error {
	p, err := m.ref().acquire("Model")
	if err != nil {
		return err
	}
	defer m.h.release()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := call(func() C.accel_status { return C.accel_model_forward_begin(p) }); err != nil {
		return err
	}
	ferr := f()
	if err := call(func() C.accel_status { return C.accel_model_forward_end(p) }); err != nil && ferr == nil {
		return err
	}
	return ferr
}

// Define compiles TorchScript source defining methods (forward, training_step, ...). Source
// that does not compile is ErrInvalidArgument with TorchScript's message, and defines nothing.
func (m *Model) Define(source string) error {
	return m.withStrings([]string{source}, func(p *C.accel_model, c []*C.char) C.accel_status {
		return C.accel_model_define(p, c[0])
	})
}

// CallAll calls method once with inputs and returns every result (a tensor, or the entries of
// a returned tuple or list), with autograd history: a loss can go to Backward. For a prepared
// model it runs under the accelerator's mixed precision; with buffers and several processes it
// is a collective.
func (m *Model) CallAll(method string, inputs ...*Tensor) ([]*Tensor, error) {
	raw, release, err := rawTensors(inputs)
	if err != nil {
		return nil, err
	}
	defer release()
	var inputsPtr **C.accel_tensor
	if len(raw) > 0 {
		inputsPtr = &raw[0]
	}
	var list *C.accel_tensor_list
	err = m.withStrings([]string{method}, func(p *C.accel_model, c []*C.char) C.accel_status {
		return C.accel_model_call(p, c[0], inputsPtr, C.size_t(len(raw)), &list)
	})
	if err != nil {
		return nil, err
	}
	return tensorList(list)
}

// Call calls a method that returns one tensor (a loss, logits).
func (m *Model) Call(method string, inputs ...*Tensor) (*Tensor, error) {
	out, err := m.CallAll(method, inputs...)
	if err != nil {
		return nil, err
	}
	if len(out) != 1 {
		closeAll(out)
		return nil, newError(ErrInvalidArgument, "%s returned %d tensors, not one (use CallAll)", method, len(out))
	}
	return out[0], nil
}

// Train switches between train mode (dropout active, batch-norm statistics updated) and eval
// mode.
func (m *Model) Train(training bool) error {
	return do(m.ref(), "Model", func(p *C.accel_model) C.accel_status { return C.accel_model_train(p, C.bool(training)) })
}

// ParameterElementCount is the total number of parameter elements.
func (m *Model) ParameterElementCount() (int64, error) {
	n, err := query(m.ref(), "Model", func(p *C.accel_model, out *C.int64_t) C.accel_status {
		return C.accel_model_parameter_element_count(p, out)
	})
	return int64(n), err
}

// TensorNames are the names of the parameters ("fc1.weight") then the buffers
// ("bn.running_mean"), in registration order.
func (m *Model) TensorNames() ([]string, error) {
	p, err := m.ref().acquire("Model")
	if err != nil {
		return nil, err
	}
	defer m.h.release()
	var count C.size_t
	if err := call(func() C.accel_status { return C.accel_model_tensor_count(p, &count) }); err != nil {
		return nil, err
	}
	names := make([]string, int(count))
	for i := range names {
		names[i], err = readText(func(buf *C.char, capacity C.size_t, size *C.size_t) C.accel_status {
			return C.accel_model_tensor_name(p, C.size_t(i), buf, capacity, size)
		})
		if err != nil {
			return nil, err
		}
	}
	return names, nil
}

// Tensor is a copy of parameter or buffer name, detached from autograd. An unknown name is
// ErrInvalidArgument.
func (m *Model) Tensor(name string) (*Tensor, error) {
	var out *C.accel_tensor
	err := m.withStrings([]string{name}, func(p *C.accel_model, c []*C.char) C.accel_status {
		return C.accel_model_tensor(p, c[0], &out)
	})
	if err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// SaveTorchScript saves the model as a TorchScript archive.
func (m *Model) SaveTorchScript(path string) error {
	return m.withStrings([]string{path}, func(p *C.accel_model, c []*C.char) C.accel_status {
		return C.accel_model_save_torchscript(p, c[0])
	})
}

// LoadCheckpointInModel is Accelerate's load_checkpoint_in_model: weights from a safetensors
// file, a model.safetensors.index.json, or a directory holding either. Names, shapes and dtypes
// must match (ErrShape lists what does not, and the model is unchanged).
func LoadCheckpointInModel(m *Model, path string) error {
	return m.withStrings([]string{path}, func(p *C.accel_model, c []*C.char) C.accel_status {
		return C.accel_load_checkpoint_in_model(p, c[0])
	})
}

// Close frees the model handle (optimizers over it, and the accelerator once prepared, keep the
// model). Idempotent; safe from any goroutine.
func (m *Model) Close() error { return m.ref().close() }

func (m *Model) preparable() (unsafe.Pointer, func(), error) {
	return prepared(m.ref(), "Model", func(p *C.accel_model) unsafe.Pointer { return unsafe.Pointer(p) })
}
