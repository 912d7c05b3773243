package accel

// #include "shim.h"
import "C"

import (
	"iter"
	"unsafe"
)

// DataLoader gives this process its shard of every global batch, as Accelerate's prepared
// DataLoader (accel.h, "Dataloaders"): batch i of the epoch's (seeded) order goes to rank
// i mod P, the last round is evened out, and 1 process x 64 sees what 2 x 32 see together.
//
// Options (Set, between epochs): batch_size (1), shuffle (false), seed (0, or the configuration's
// data_seed), drop_last (false), num_workers (0), prefetch_factor (2), split_batches,
// even_batches, device_placement, group_by_length (false), dispatch_batches ("auto": true for a
// stream, the only kind of dataset dispatched; see DatasetFromStream).
//
// group_by_length (a dataset with a ragged field, DatasetFromRaggedFunc): the Hugging Face
// Trainer's length grouping. The epoch's order (shuffled or not) is cut into megabatches of
// global batches, each sorted by the first ragged field's length, longest first, and the batch
// of the longest sample comes first (an out-of-memory shows at once); every sample still comes
// once per epoch, and 1 process x 64 and 2 x 32 see the same global batches. It calls the
// dataset's lengths function for every sample once, at the dataloader's first Next.
//
// Padding options of ragged fields: Set sets them for every ragged field, SetField for one.
//
//	pad_value           the value of padding rows (0); a number
//	padding_side        "right" (default) or "left": where the padding goes
//	pad_to_multiple_of  the padded length is rounded up to a multiple of it (1)
//	max_length          the longest a sample may be: a length, or "none" (default)
//	truncation          false (default): a sample above max_length fails Next with ErrShape
//	                    naming the sample and the field; true: its first max_length rows are kept
//	mask                the field added after the dataset's fields for this ragged field:
//	                    "attention_mask" (default; I64 [batch, padded length], 1 on a sample's
//	                    rows, 0 on padding), "lengths" (I64 [batch], the lengths kept), or "none"
//
// Padding options on a dataset without a ragged field, or SetField on a fixed field, are
// ErrInvalidArgument.
type DataLoader struct {
	h    *handle[*C.accel_dataloader]
	slot *failureSlot // the dataset's callback failures (nil unless a function dataset)
}

func (l *DataLoader) ref() *handle[*C.accel_dataloader] {
	if l == nil {
		return nil
	}
	return l.h.orUnopened()
}

// Batch is one batch: a tensor per dataset field, in the dataset's order, then the field each
// ragged field adds (its attention mask or lengths, unless its mask option is "none").
type Batch []*Tensor

// Close closes every tensor of the batch.
func (b Batch) Close() error { closeAll(b); return nil }

// NewDataLoader makes a dataloader over ds for this accelerator's process. It keeps the
// dataset alive.
func NewDataLoader(acc *Accelerator, ds *Dataset) (*DataLoader, error) {
	a, err := acc.ref().acquire("Accelerator")
	if err != nil {
		return nil, err
	}
	defer acc.h.release()
	d, err := ds.ref().acquire("Dataset")
	if err != nil {
		return nil, err
	}
	defer ds.h.release()
	var out *C.accel_dataloader
	if err := call(func() C.accel_status { return C.accel_dataloader_new(a, d, &out) }); err != nil {
		return nil, err
	}
	l := &DataLoader{slot: ds.slot}
	l.h = newHandle(l, out)
	return l, nil
}

// Set sets an option (see DataLoader); an epoch in progress ends. An unknown key or a bad value
// is ErrInvalidArgument naming the key and what it allows.
func (l *DataLoader) Set(key string, value any) error {
	return use(l.ref(), "DataLoader", func(p *C.accel_dataloader) error {
		return setOption(key, value, func(k, v *C.char) C.accel_status { return C.accel_dataloader_set(p, k, v) })
	})
}

// SetField sets a padding option (see DataLoader) of the ragged field field alone, over what
// Set gave every ragged field; an epoch in progress ends. A field that is out of range or not
// ragged, an unknown key or a bad value is ErrInvalidArgument.
func (l *DataLoader) SetField(field int, key string, value any) error {
	if field < 0 {
		return newError(ErrInvalidArgument, "DataLoader.SetField: field %d is negative", field)
	}
	return use(l.ref(), "DataLoader", func(p *C.accel_dataloader) error {
		return setOption(key, value, func(k, v *C.char) C.accel_status {
			return C.accel_dataloader_set_field(p, C.size_t(field), k, v)
		})
	})
}

// Next is the next batch of the epoch; ok is false at the end of the epoch (the following call
// starts the next one). The caller closes the batch. When the dataset's function failed, the
// error's Cause is its error and the next call starts the epoch again (a stream's goes on from
// the batch that failed). Over a stream with dispatch_batches, Next is a collective: every
// process calls it together.
func (l *DataLoader) Next() (batch Batch, ok bool, err error) {
	p, err := l.ref().acquire("DataLoader")
	if err != nil {
		return nil, false, err
	}
	defer l.h.release()
	var fields [8]*C.accel_tensor
	var count C.size_t
	err = call(func() C.accel_status {
		return C.accel_dataloader_next(p, &fields[0], C.size_t(len(fields)), &count)
	})
	if e, small := err.(*Error); small && e.Status == ErrBufferTooSmall {
		more := make([]*C.accel_tensor, int(count))
		err = call(func() C.accel_status {
			return C.accel_dataloader_next(p, &more[0], C.size_t(len(more)), &count)
		})
		return l.batch(more, count, err)
	}
	return l.batch(fields[:], count, err)
}

func (l *DataLoader) batch(fields []*C.accel_tensor, count C.size_t, err error) (Batch, bool, error) {
	if err != nil {
		return nil, false, l.slot.resolve(err)
	}
	if count == 0 {
		return nil, false, nil
	}
	batch := make(Batch, int(count))
	for i := range batch {
		batch[i] = newTensor(fields[i])
	}
	return batch, true, nil
}

// All iterates over the rest of the epoch:
//
//	for batch, err := range loader.All() {
//		if err != nil { return err }
//		...
//	}
//
// The batch's tensors are closed when the loop body returns (use Next to keep them). After an
// error the iteration ends; the next iteration starts the epoch again.
func (l *DataLoader) All() iter.Seq2[Batch, error] {
	return func(yield func(Batch, error) bool) {
		for {
			batch, ok, err := l.Next()
			if err != nil {
				yield(nil, err)
				return
			}
			if !ok {
				return
			}
			more := yield(batch, nil)
			batch.Close()
			if !more {
				return
			}
		}
	}
}

// FieldCount is the number of tensors per batch.
func (l *DataLoader) FieldCount() (int, error) {
	n, err := query(l.ref(), "DataLoader", func(p *C.accel_dataloader, out *C.size_t) C.accel_status {
		return C.accel_dataloader_field_count(p, out)
	})
	return int(n), err
}

// BatchCount is the number of batches this process gets in a whole epoch; -1 for a stream
// (DatasetFromStream, DatasetFromTextLines), whose length is unknown.
func (l *DataLoader) BatchCount() (int64, error) {
	n, err := query(l.ref(), "DataLoader", func(p *C.accel_dataloader, out *C.int64_t) C.accel_status {
		return C.accel_dataloader_batch_count(p, out)
	})
	return int64(n), err
}

// SetEpoch sets the epoch the next iteration uses (its shuffle); an epoch in progress ends.
func (l *DataLoader) SetEpoch(epoch int64) error {
	return do(l.ref(), "DataLoader", func(p *C.accel_dataloader) C.accel_status {
		return C.accel_dataloader_set_epoch(p, C.int64_t(epoch))
	})
}

// Epoch is the current epoch (it advances after each complete pass).
func (l *DataLoader) Epoch() (int64, error) {
	n, err := query(l.ref(), "DataLoader", func(p *C.accel_dataloader, out *C.int64_t) C.accel_status {
		return C.accel_dataloader_epoch(p, out)
	})
	return int64(n), err
}

// EndOfEpoch reports whether the last batch of the epoch is in use (Accelerate's
// end_of_dataloader).
func (l *DataLoader) EndOfEpoch() (bool, error) {
	v, err := query(l.ref(), "DataLoader", func(p *C.accel_dataloader, out *C.bool) C.accel_status {
		return C.accel_dataloader_end_of_epoch(p, out)
	})
	return bool(v), err
}

// Remainder is how many samples of the last global step are real rather than padding: for a
// map-style dataset the sample count mod the global batch size (-1 with drop_last); for a stream
// -1 until its last global batch is in use (EndOfEpoch), then that batch's real samples.
func (l *DataLoader) Remainder() (int64, error) {
	n, err := query(l.ref(), "DataLoader", func(p *C.accel_dataloader, out *C.int64_t) C.accel_status {
		return C.accel_dataloader_remainder(p, out)
	})
	return int64(n), err
}

// SkipFirstBatches makes the next iteration skip this process's first n batches (n global
// steps): a resume in the middle of an epoch.
func (l *DataLoader) SkipFirstBatches(n int64) error {
	return do(l.ref(), "DataLoader", func(p *C.accel_dataloader) C.accel_status {
		return C.accel_dataloader_skip_first_batches(p, C.int64_t(n))
	})
}

// Position is the global sample cursor: the epoch and how many of its samples all processes
// together have consumed. Save it to resume exactly, even with another number of processes.
func (l *DataLoader) Position() (epoch, samples int64, err error) {
	var e, s C.int64_t
	err = do(l.ref(), "DataLoader", func(p *C.accel_dataloader) C.accel_status {
		return C.accel_dataloader_position(p, &e, &s)
	})
	return int64(e), int64(s), err
}

// SetPosition continues at a saved cursor: the next iteration starts samples into epoch.
func (l *DataLoader) SetPosition(epoch, samples int64) error {
	return do(l.ref(), "DataLoader", func(p *C.accel_dataloader) C.accel_status {
		return C.accel_dataloader_set_position(p, C.int64_t(epoch), C.int64_t(samples))
	})
}

// Stop stops the worker threads and releases the dataset; every later call but Close fails
// with ErrState. It waits for the sample functions already running (at most one per worker).
// A prepared dataloader stays in the checkpoints with its cursor as it was. Idempotent.
func (l *DataLoader) Stop() error {
	return do(l.ref(), "DataLoader", func(p *C.accel_dataloader) C.accel_status { return C.accel_dataloader_close(p) })
}

// Close stops the workers and frees the dataloader. Idempotent; safe from any goroutine, also
// while Next runs on another one (the dataloader is freed when that call returns, and later
// calls fail with ErrState). Must not be called from the dataset's own function.
func (l *DataLoader) Close() error { return l.ref().close() }

func (l *DataLoader) preparable() (unsafe.Pointer, func(), error) {
	return prepared(l.ref(), "DataLoader", func(p *C.accel_dataloader) unsafe.Pointer { return unsafe.Pointer(p) })
}
