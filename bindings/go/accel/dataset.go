package accel

// #include "shim.h"
import "C"

// Dataset is a number of samples with one or more fields (images, labels, ...); a sample is one
// row of every field. Dataloaders keep their dataset alive: Close it once they are made.
type Dataset struct {
	h *handle[*C.accel_dataset]
	// The failures of a function dataset's callback, shared with its dataloaders (nil otherwise).
	slot *failureSlot
}

func (d *Dataset) ref() *handle[*C.accel_dataset] {
	if d == nil {
		return nil
	}
	return d.h.orUnopened()
}

func newDataset(p *C.accel_dataset, slot *failureSlot) *Dataset {
	d := &Dataset{slot: slot}
	d.h = newHandle(d, p)
	return d
}

// DatasetFromTensors is a dataset over tensors in memory: field i is tensors[i], samples along
// dimension 0 (which must agree, ErrShape otherwise). The dataset takes its own reference: the
// tensors may be closed afterwards.
func DatasetFromTensors(tensors ...*Tensor) (*Dataset, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	if len(tensors) == 0 {
		return nil, newError(ErrInvalidArgument, "DatasetFromTensors: no tensors")
	}
	raw, release, err := rawTensors(tensors)
	if err != nil {
		return nil, err
	}
	defer release()
	var out *C.accel_dataset
	err = call(func() C.accel_status {
		return C.accel_dataset_from_tensors(&raw[0], C.size_t(len(raw)), &out)
	})
	if err != nil {
		return nil, err
	}
	return newDataset(out, nil), nil
}

// DatasetFromIDX reads IDX files (the MNIST family, plain or gzip-compressed), one field per
// file, each in the file's own element type and shape: Fashion-MNIST's images are U8 [N, 28, 28],
// its labels U8 [N]. A missing, truncated or corrupt file is ErrIO naming it.
func DatasetFromIDX(paths ...string) (*Dataset, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, newError(ErrInvalidArgument, "DatasetFromIDX: no files")
	}
	cpaths := make([]*C.char, len(paths))
	for i, path := range paths {
		p, free, err := cString(path, "the path")
		if err != nil {
			return nil, err
		}
		defer free()
		cpaths[i] = p
	}
	var out *C.accel_dataset
	err := call(func() C.accel_status {
		return C.accel_dataset_from_idx(&cpaths[0], C.size_t(len(cpaths)), &out)
	})
	if err != nil {
		return nil, err
	}
	return newDataset(out, nil), nil
}

// Field describes one field of a function dataset: its element type and its per-sample shape
// (empty for one value per sample). In a dataset of DatasetFromRaggedFunc, Shape[0] may be
// Ragged: see RaggedField.
type Field struct {
	DType DType
	Shape []int64
}

// Ragged, as a Field's first dimension, is a dimension that varies from sample to sample (the
// tokens of a sentence): only the first dimension of a field may be ragged, and only in
// DatasetFromRaggedFunc.
const Ragged int64 = C.ACCEL_RAGGED

// RaggedField is a field of dtype whose first dimension is Ragged and whose other dimensions are
// rest: RaggedField(accel.I64) for a sequence of token ids, RaggedField(accel.F32, 80) for a
// sequence of 80-value frames.
func RaggedField(dtype DType, rest ...int64) Field {
	return Field{DType: dtype, Shape: append([]int64{Ragged}, rest...)}
}

// IsRagged reports whether the field's first dimension is Ragged.
func (f Field) IsRagged() bool { return len(f.Shape) > 0 && f.Shape[0] == Ragged }

// DatasetFromFunc is a dataset of count samples that fn produces. For sample index, fn fills
// fields[f] (exactly the bytes of field f: its per-sample shape in its DType, row-major, native
// byte order) and returns nil. The slices are the library's memory, valid during the call only.
//
// With num_workers 0 fn runs on the goroutine that calls Next; otherwise on the dataloader's
// worker threads, several at once for different indices: it must be safe for concurrent use.
// An error or a panic in fn ends the epoch: Next returns an *Error with Status ErrCallback whose
// Cause is fn's error (a *PanicError for a panic); the following Next starts the epoch again.
// fn must not call the dataloader it produces for, nor an accelerator, model, optimizer or
// scheduler (ErrState: they may be waiting for fn). Its fields must have fixed shapes: a Ragged
// one is ErrShape (use DatasetFromRaggedFunc).
func DatasetFromFunc(count int64, fields []Field, fn func(index int64, fields [][]byte) error) (*Dataset, error) {
	if fn == nil {
		return nil, newError(ErrInvalidArgument, "DatasetFromFunc: nil function")
	}
	for i, f := range fields {
		if f.IsRagged() {
			return nil, newError(ErrShape, "DatasetFromFunc: field %d is ragged: use DatasetFromRaggedFunc", i)
		}
	}
	return datasetFromFunc("DatasetFromFunc", count, fields, &sampleState{fn: fn})
}

// DatasetFromRaggedFunc is a dataset of count samples whose fields may be ragged (text: token ids
// of any length; see RaggedField). For sample index, lengths first writes lengths[f], the length
// of sample index's first dimension, for every ragged field f (len(lengths) is len(fields); the
// entries of fixed fields are ignored); a length is at least 0. Then fill fills the sample as in
// DatasetFromFunc, where fields[f] of a ragged field holds exactly lengths[f] rows:
// lengths[f] x the bytes of one row (the product of Shape[1:] times DType.Size()); a length of 0
// gives an empty slice. Both slices are the library's memory, valid during the call only.
//
// lengths may be called more than once for an index (before every fill, and with the
// dataloader's group_by_length once for every sample before the first epoch): it must give the
// same answer each time. lengths may be nil only when no field is ragged. Both functions follow
// DatasetFromFunc's rules: they run on the dataloader's worker threads with num_workers > 0,
// concurrently for different indices, and an error or a panic in either ends the epoch with an
// ErrCallback whose Cause is that error (a *PanicError for a panic).
//
// A batch pads each ragged field to its longest sample and, after the dataset's fields, adds one
// field per ragged field: an attention mask (I64 [batch, padded length], 1 on a sample's rows, 0
// on padding) by default. The dataloader's padding options choose the pad value and side, the
// multiple, the maximum length and the added field (see DataLoader).
func DatasetFromRaggedFunc(count int64, fields []Field, lengths func(index int64, lengths []int64) error,
	fill func(index int64, fields [][]byte) error) (*Dataset, error) {
	if fill == nil {
		return nil, newError(ErrInvalidArgument, "DatasetFromRaggedFunc: nil fill function")
	}
	if lengths == nil {
		for i, f := range fields {
			if f.IsRagged() {
				return nil, newError(ErrInvalidArgument,
					"DatasetFromRaggedFunc: field %d is ragged and the lengths function is nil", i)
			}
		}
	}
	return datasetFromFunc("DatasetFromRaggedFunc", count, fields, &sampleState{fn: fill, lengths: lengths})
}

// datasetFromFunc registers a function dataset: the ragged form when state has a lengths function.
func datasetFromFunc(name string, count int64, fields []Field, state *sampleState) (*Dataset, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	if len(fields) == 0 {
		return nil, newError(ErrInvalidArgument, "%s: no fields", name)
	}
	dtypes := make([]C.accel_dtype, len(fields))
	dimCounts := make([]C.size_t, len(fields))
	dims := []C.int64_t{}
	for i, f := range fields {
		dtypes[i] = C.accel_dtype(f.DType)
		dimCounts[i] = C.size_t(len(f.Shape))
		for _, d := range f.Shape {
			dims = append(dims, C.int64_t(d))
		}
	}
	var dimsPtr *C.int64_t
	if len(dims) > 0 {
		dimsPtr = &dims[0]
	}
	state.slot = &failureSlot{}
	box := newBox(state)
	var out *C.accel_dataset
	err := call(func() C.accel_status {
		if state.lengths != nil {
			return C.goaccel_dataset_from_ragged_callback(C.int64_t(count), C.size_t(len(fields)), &dtypes[0],
				&dimCounts[0], dimsPtr, box, &out)
		}
		return C.goaccel_dataset_from_callback(C.int64_t(count), C.size_t(len(fields)), &dtypes[0],
			&dimCounts[0], dimsPtr, box, &out)
	})
	if err != nil {
		freeBox(box) // the library never calls back after a failed registration
		return nil, err
	}
	return newDataset(out, state.slot), nil
}

// SampleCount is the number of samples.
func (d *Dataset) SampleCount() (int64, error) {
	n, err := query(d.ref(), "Dataset", func(p *C.accel_dataset, out *C.int64_t) C.accel_status {
		return C.accel_dataset_sample_count(p, out)
	})
	return int64(n), err
}

// FieldCount is the number of fields per sample.
func (d *Dataset) FieldCount() (int, error) {
	n, err := query(d.ref(), "Dataset", func(p *C.accel_dataset, out *C.size_t) C.accel_status {
		return C.accel_dataset_field_count(p, out)
	})
	return int(n), err
}

// Close frees the dataset handle; dataloaders made over it keep using it until they are closed.
// Idempotent; safe from any goroutine.
func (d *Dataset) Close() error { return d.ref().close() }
