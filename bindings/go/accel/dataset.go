package accel

// #include "shim.h"
import "C"

import "unsafe"

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
// (empty for one value per sample). In a dataset of DatasetFromRaggedFunc or DatasetFromStream,
// Shape[0] may be Ragged: see RaggedField.
type Field struct {
	DType DType
	Shape []int64
}

// Ragged, as a Field's first dimension, is a dimension that varies from sample to sample (the
// tokens of a sentence): only the first dimension of a field may be ragged, and only in
// DatasetFromRaggedFunc and DatasetFromStream.
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
	dtypes, dimCounts, dimsPtr, err := cFields(name, fields)
	if err != nil {
		return nil, err
	}
	state.slot = &failureSlot{}
	box := newBox(state)
	var out *C.accel_dataset
	err = call(func() C.accel_status {
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

// cFields is fields as the library's flat arrays: the dtypes, the dimension counts, and every
// field's dimensions one after the other (nil when there are none).
func cFields(name string, fields []Field) ([]C.accel_dtype, []C.size_t, *C.int64_t, error) {
	if len(fields) == 0 {
		return nil, nil, nil, newError(ErrInvalidArgument, "%s: no fields", name)
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
	return dtypes, dimCounts, dimsPtr, nil
}

// DatasetFromStream is a stream: a dataset with no known length, read in order (PyTorch's
// IterableDataset: the records of a file or a socket, generated data). next writes sample
// position of epoch epoch into s, with one s.Set per field, and returns true; at the end of the
// stream it returns false and writes nothing. Positions come in order, 0, 1, 2, ...; position 0
// means start again from the beginning: every epoch does, and so does a dataloader that resumes
// at a saved position (SetPosition, SkipFirstBatches) or goes on after a failure, which reads
// the samples before that position again and drops them. A field may be Ragged (RaggedField):
// its length is the number of rows Set is given, and batches are padded and masked as those of
// DatasetFromRaggedFunc.
//
// next is never called on two goroutines at once. With num_workers 0 it runs on the goroutine
// that calls Next; otherwise on the dataloader's reading thread, which reads up to num_workers x
// prefetch_factor global batches ahead: state next shares with other goroutines needs
// synchronizing. An error or a panic in next, or a sample it returns with a field unwritten,
// fails the Next that needed the sample with an *Error of Status ErrCallback whose Cause is
// next's error (a *PanicError for a panic). The dataloader's Position stays after the batches
// already returned, and the following Next reads the stream again from position 0 up to there
// and goes on: nothing is lost or repeated. next must not call the dataloader it produces for,
// nor an accelerator, model, optimizer or scheduler (ErrState).
//
// A dataloader shards a stream as Accelerate does (its option dispatch_batches, true by default
// for a stream). With dispatch_batches the main process alone reads the stream (next is called
// there only) and sends every process its share of each global batch: Next is then a
// collective, which every process calls together. Without it every process reads the whole
// stream and keeps its share of each global batch. The last global batch is dropped with
// drop_last, else completed with samples from the start of the epoch (even_batches does not
// apply). SampleCount and BatchCount are -1, and so is Remainder until the last batch;
// group_by_length is ErrUnsupported.
func DatasetFromStream(fields []Field, next func(epoch, position int64, s *Sample) (bool, error)) (*Dataset, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	if next == nil {
		return nil, newError(ErrInvalidArgument, "DatasetFromStream: nil function")
	}
	dtypes, dimCounts, dims, err := cFields("DatasetFromStream", fields)
	if err != nil {
		return nil, err
	}
	state := &streamState{next: next, slot: &failureSlot{}}
	for _, f := range fields {
		state.dtypes = append(state.dtypes, f.DType)
	}
	box := newBox(state)
	var out *C.accel_dataset
	err = call(func() C.accel_status {
		return C.goaccel_dataset_from_stream(C.size_t(len(fields)), &dtypes[0], &dimCounts[0], dims, box, &out)
	})
	if err != nil {
		freeBox(box) // the library never calls back after a failed registration
		return nil, err
	}
	return newDataset(out, state.slot), nil
}

// Sample is the sample a stream function writes (DatasetFromStream). It is valid only during
// the call that received it, on that call's goroutine.
type Sample struct {
	p      *C.accel_sample // nil once the stream function returned
	dtypes []DType
}

// Set writes field field of the sample; the library copies data. data is one of
//
//   - a []T or a T of an Element type (float32, int64, uint8, bool, ...): T must be the field's
//     DType (ErrDType otherwise; no conversion happens);
//   - a []byte or a string: the raw elements of any DType, native byte order (F16 and BF16 fields
//     take these only).
//
// A fixed field takes exactly one sample of it (the product of its Shape's elements); a ragged
// field any whole number of rows (the product of Shape[1:]), its length, 0 included. A wrong
// size is ErrShape naming the sample and the field; a field out of range, or data of another
// type, ErrInvalidArgument. Setting a field again replaces it. After the stream function
// returned, Set fails with ErrState.
func (s *Sample) Set(field int, data any) error {
	if s == nil || s.p == nil {
		return newError(ErrState, "Sample.Set outside the stream function call that received the sample")
	}
	if field < 0 || field >= len(s.dtypes) {
		return newError(ErrInvalidArgument, "Sample.Set: field %d is out of range: the dataset has %d fields",
			field, len(s.dtypes))
	}
	var ptr unsafe.Pointer
	var size int
	var dtype DType // of typed data; raw bytes are -1
	switch v := data.(type) {
	case []byte:
		ptr, size, dtype = unsafe.Pointer(unsafe.SliceData(v)), len(v), -1
	case string:
		ptr, size, dtype = unsafe.Pointer(unsafe.StringData(v)), len(v), -1
	case []float32:
		ptr, size, dtype = elementBytes(v)
	case []float64:
		ptr, size, dtype = elementBytes(v)
	case []int64:
		ptr, size, dtype = elementBytes(v)
	case []int32:
		ptr, size, dtype = elementBytes(v)
	case []int16:
		ptr, size, dtype = elementBytes(v)
	case []int8:
		ptr, size, dtype = elementBytes(v)
	case []bool:
		ptr, size, dtype = elementBytes(v)
	case float32:
		ptr, size, dtype = elementBytes([]float32{v})
	case float64:
		ptr, size, dtype = elementBytes([]float64{v})
	case int64:
		ptr, size, dtype = elementBytes([]int64{v})
	case int32:
		ptr, size, dtype = elementBytes([]int32{v})
	case int16:
		ptr, size, dtype = elementBytes([]int16{v})
	case int8:
		ptr, size, dtype = elementBytes([]int8{v})
	case uint8:
		ptr, size, dtype = elementBytes([]uint8{v})
	case bool:
		ptr, size, dtype = elementBytes([]bool{v})
	default:
		return newError(ErrInvalidArgument,
			"Sample.Set: field %d: a %T is neither []byte, string, nor a slice or a value of an Element type", field, data)
	}
	if want := s.dtypes[field]; dtype != -1 && dtype != want {
		return newError(ErrDType, "Sample.Set: field %d holds %s elements, not %s (a %T)", field, want, dtype, data)
	}
	if size == 0 {
		ptr = nil
	}
	// Go memory without Go pointers, read (copied) during the call only.
	return call(func() C.accel_status { return C.accel_sample_set_field(s.p, C.size_t(field), ptr, C.size_t(size)) })
}

// elementBytes is the memory of v: where, how many bytes, and their DType.
func elementBytes[T Element](v []T) (unsafe.Pointer, int, DType) {
	var zero T
	return unsafe.Pointer(unsafe.SliceData(v)), len(v) * int(unsafe.Sizeof(zero)), DTypeOf[T]()
}

// DatasetFromTextLines is a stream (see DatasetFromStream) of the lines of the text file at
// path, read lazily and again from the start each epoch: one sample per line, one ragged U8
// field holding the line's bytes without its newline (nor a carriage return before it). A
// batch pads the lines as any ragged field (pad_value, mask, max_length, ...). An unreadable
// file is ErrIO naming it.
func DatasetFromTextLines(path string) (*Dataset, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	p, free, err := cString(path, "the path")
	if err != nil {
		return nil, err
	}
	defer free()
	var out *C.accel_dataset
	if err := call(func() C.accel_status { return C.accel_dataset_from_text_lines(p, &out) }); err != nil {
		return nil, err
	}
	return newDataset(out, nil), nil
}

// SampleCount is the number of samples; -1 for a stream (DatasetFromStream,
// DatasetFromTextLines), whose length is unknown.
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
