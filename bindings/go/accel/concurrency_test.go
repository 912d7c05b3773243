package accel_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// squares fills sample i with x = [i, i*i] (f32) and y = i (i64).
func squares(calls *atomic.Int64) func(int64, [][]byte) error {
	return func(i int64, fields [][]byte) error {
		calls.Add(1)
		binary.NativeEndian.PutUint32(fields[0][0:], math.Float32bits(float32(i)))
		binary.NativeEndian.PutUint32(fields[0][4:], math.Float32bits(float32(i*i)))
		binary.NativeEndian.PutUint64(fields[1], uint64(i))
		return nil
	}
}

var squareFields = []accel.Field{{DType: accel.F32, Shape: []int64{2}}, {DType: accel.I64}}

// funcLoader is a dataloader over a function dataset of n samples with squareFields, batches of
// batch on workers threads. The dataset handle is closed at once: the loader keeps it.
func funcLoader(t *testing.T, acc *accel.Accelerator, n int64, fn func(int64, [][]byte) error, batch, workers int) *accel.DataLoader {
	t.Helper()
	data := must(accel.DatasetFromFunc(n, squareFields, fn))
	loader := must(accel.NewDataLoader(acc, data))
	data.Close()
	ok(t, loader.Set("batch_size", batch))
	ok(t, loader.Set("num_workers", workers))
	return loader
}

func TestFunctionDatasetsFillSamplesOnWorkers(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	var calls atomic.Int64
	loader := funcLoader(t, acc, 100, squares(&calls), 10, 3)
	defer loader.Close()
	ok(t, loader.Set("shuffle", true))
	seen := map[int64]bool{}
	for batch, err := range loader.All() {
		ok(t, err)
		x := must(accel.ToSlice[float32](batch[0]))
		y := must(accel.ToSlice[int64](batch[1]))
		for r, i := range y {
			if x[2*r] != float32(i) || x[2*r+1] != float32(i*i) {
				t.Fatalf("sample %d came as %v", i, x[2*r:2*r+2])
			}
			seen[i] = true
		}
	}
	if len(seen) != 100 || calls.Load() != 100 {
		t.Fatalf("%d distinct samples, %d calls", len(seen), calls.Load())
	}
	_, err := accel.DatasetFromFunc(10, nil, squares(&calls))
	wantStatus(t, err, accel.ErrInvalidArgument)
	_, err = accel.DatasetFromFunc(10, []accel.Field{{DType: accel.DType(77)}}, squares(&calls))
	wantStatus(t, err, accel.ErrDType, "77")
}

var errBadSample = errors.New("sample 13 is unreadable")

func TestAFunctionErrorComesBackFromNext(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	var calls atomic.Int64
	fill := squares(&calls)
	loader := funcLoader(t, acc, 40, func(i int64, f [][]byte) error {
		if i == 13 {
			return errBadSample
		}
		return fill(i, f)
	}, 4, 0)
	defer loader.Close()
	batches := 0
	var last error
	for _, err := range loader.All() {
		if err != nil {
			last = err
			break
		}
		batches++
	}
	wantStatus(t, last, accel.ErrCallback)
	if !errors.Is(last, errBadSample) || !strings.Contains(last.Error(), "sample 13 is unreadable") {
		t.Fatalf("the function's error is not the cause: %v", last)
	}
	if batches != 3 {
		t.Fatalf("%d batches before the failing one", batches)
	}
	// The next iteration starts the epoch again and fails at the same sample.
	batch, more, err := loader.Next()
	ok(t, err)
	if !more || must(accel.ToSlice[int64](batch[1]))[0] != 0 {
		t.Fatal("the epoch did not start again")
	}
	batch.Close()
}

func TestAPanicInADatasetFunctionOnAWorkerThreadIsAnError(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	var calls atomic.Int64
	fill := squares(&calls)
	loader := funcLoader(t, acc, 64, func(i int64, f [][]byte) error {
		if i == 37 {
			var m map[string]int
			m["boom"] = 1 // a real runtime panic: assignment to a nil map
		}
		return fill(i, f)
	}, 8, 2)
	defer loader.Close()
	var failure error
	for _, err := range loader.All() {
		if err != nil {
			failure = err
		}
	}
	wantStatus(t, failure, accel.ErrCallback)
	var p *accel.PanicError
	if !errors.As(failure, &p) || !strings.Contains(fmt.Sprint(p.Value), "nil map") {
		t.Fatalf("want the panic as the cause, got %v", failure)
	}
	var re runtime.Error
	if !errors.As(failure, &re) {
		t.Fatal("the runtime.Error the function panicked with is not reachable with errors.As")
	}
	if !strings.Contains(string(p.Stack), "concurrency_test.go") {
		t.Fatalf("the stack does not show where it panicked:\n%s", p.Stack)
	}
}

func TestCloseRacesWithARunningDataLoader(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	var calls atomic.Int64
	fill := squares(&calls)
	slow := func(i int64, f [][]byte) error {
		time.Sleep(200 * time.Microsecond)
		return fill(i, f)
	}
	for round := 0; round < 20; round++ {
		loader := funcLoader(t, acc, 1<<20, slow, 4, 2)
		done := make(chan error)
		go func() {
			var last error
			for {
				batch, more, err := loader.Next()
				if err != nil || !more {
					last = err
					break
				}
				batch.Close()
			}
			done <- last
		}()
		time.Sleep(time.Duration(round) * time.Millisecond)
		loader.Close() // from another goroutine, while Next runs
		err := <-done
		wantStatus(t, err, accel.ErrState, "after Close")
		// Once the running Next returned, the loader is freed: its workers call no more.
		settled := calls.Load()
		time.Sleep(20 * time.Millisecond)
		if calls.Load() != settled {
			t.Fatal("the dataset function ran after its dataloader was closed")
		}
	}
}

// 10,000 failing calls from 64 goroutines at once: each returns its own message, never another
// call's. The message is per OS thread in the library, and goroutines move between threads.
func TestEveryFailingCallGetsItsOwnMessage(t *testing.T) {
	begin(t)
	cfg := must(accel.NewConfig())
	defer cfg.Close()
	const goroutines, calls = 64, 157 // 64 x 157 = 10,048
	var wrong atomic.Int64
	var firstWrong atomic.Value
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := 0; c < calls; c++ {
				key := fmt.Sprintf("no_such_key_g%d_c%d", g, c)
				var err error
				status := accel.ErrConfig
				switch c % 3 {
				case 0:
					err = cfg.Set(key, 1)
				case 1:
					_, err = cfg.Get(key)
				default: // the tensor calls' own path (no closure; see fromData)
					status = accel.ErrInvalidArgument
					_, err = accel.FromSlice([]float32{1}, int64(g+1), int64(c+1))
					key = fmt.Sprintf("need %d bytes", 4*(g+1)*(c+1))
				}
				var e *accel.Error
				if !errors.As(err, &e) || e.Status != status || !namesKey(e.Message, key) {
					if wrong.Add(1) == 1 {
						firstWrong.Store(fmt.Sprintf("%s: %v", key, err))
					}
				}
				if c%16 == 0 {
					runtime.Gosched() // move between threads more often
				}
			}
		}()
	}
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Fatalf("%d of %d calls got another message; first: %v", n, goroutines*calls, firstWrong.Load())
	}
}

// namesKey reports whether message names key itself (not a longer key that starts with it).
func namesKey(message, key string) bool {
	for rest := message; ; {
		at := strings.Index(rest, key)
		if at < 0 {
			return false
		}
		rest = rest[at+len(key):]
		if rest == "" || !(rest[0] >= '0' && rest[0] <= '9' || rest[0] == '_') {
			return true
		}
	}
}

// ---- ragged fields: text of any length, padded per batch --------------------------------------

// corpusFields: sample i is its tokens 100*i + j for j < its length (ragged, i64) and its label
// i (i64).
var corpusFields = []accel.Field{accel.RaggedField(accel.I64), {DType: accel.I64}}

// corpus is a ragged dataset of len(lens) samples with corpusFields; lengths and fill check that
// the library asks for what the fields declare.
func corpus(lens []int64) (*accel.Dataset, error) {
	return accel.DatasetFromRaggedFunc(int64(len(lens)), corpusFields,
		func(i int64, lengths []int64) error {
			if len(lengths) != 2 {
				return fmt.Errorf("lengths of %d fields", len(lengths))
			}
			lengths[0] = lens[i]
			return nil
		},
		func(i int64, fields [][]byte) error {
			if len(fields) != 2 || len(fields[0]) != 8*int(lens[i]) || len(fields[1]) != 8 {
				return fmt.Errorf("sample %d: buffers of %d fields, %d and %d bytes", i, len(fields),
					len(fields[0]), len(fields[1]))
			}
			for j := int64(0); j < lens[i]; j++ {
				binary.NativeEndian.PutUint64(fields[0][8*j:], uint64(100*i+j))
			}
			binary.NativeEndian.PutUint64(fields[1], uint64(i))
			return nil
		})
}

// corpusLoader is a dataloader over corpus(lens) with options set in order (key, value, ...).
func corpusLoader(t *testing.T, acc *accel.Accelerator, lens []int64, options ...any) *accel.DataLoader {
	t.Helper()
	data := must(corpus(lens))
	loader := must(accel.NewDataLoader(acc, data))
	data.Close()
	for i := 0; i < len(options); i += 2 {
		ok(t, loader.Set(options[i].(string), options[i+1]))
	}
	return loader
}

// int64Batch is the next batch's shapes and i64 values (more false at the end of the epoch).
func int64Batch(t *testing.T, loader *accel.DataLoader) (shapes, values [][]int64, more bool, err error) {
	t.Helper()
	batch, more, err := loader.Next()
	if err != nil || !more {
		return nil, nil, more, err
	}
	defer batch.Close()
	for _, field := range batch {
		shapes = append(shapes, must(field.Shape()))
		values = append(values, must(accel.ToSlice[int64](field)))
	}
	return shapes, values, true, nil
}

// wantBatch checks the next batch field by field: the shape and the values of each (a nil
// want skips that field).
func wantBatch(t *testing.T, loader *accel.DataLoader, shapes, values [][]int64) {
	t.Helper()
	gotShapes, gotValues, more, err := int64Batch(t, loader)
	ok(t, err)
	if !more {
		t.Fatal("the epoch ended early")
	}
	if len(gotShapes) != len(shapes) {
		t.Fatalf("%d fields, want %d", len(gotShapes), len(shapes))
	}
	for f := range shapes {
		if shapes[f] != nil && !slices.Equal(gotShapes[f], shapes[f]) {
			t.Fatalf("field %d: shape %v, want %v", f, gotShapes[f], shapes[f])
		}
		if values[f] != nil && !slices.Equal(gotValues[f], values[f]) {
			t.Fatalf("field %d: %v, want %v", f, gotValues[f], values[f])
		}
	}
}

func TestRaggedBatchesArePaddedToTheLongestWithAMask(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	loader := corpusLoader(t, acc, []int64{2, 0, 3, 1, 4}, "batch_size", 3)
	defer loader.Close()
	if n := must(loader.FieldCount()); n != 3 {
		t.Fatalf("%d fields: want tokens, label, the tokens' attention mask", n)
	}
	wantBatch(t, loader,
		[][]int64{{3, 3}, {3}, {3, 3}},
		[][]int64{{0, 1, 0, 0, 0, 0, 200, 201, 202}, {0, 1, 2}, {1, 1, 0, 0, 0, 0, 1, 1, 1}})
	// The short last batch: padded to its own longest.
	wantBatch(t, loader,
		[][]int64{{2, 4}, {2}, {2, 4}},
		[][]int64{{300, 0, 0, 0, 400, 401, 402, 403}, {3, 4}, {1, 0, 0, 0, 1, 1, 1, 1}})
	if _, _, more, err := int64Batch(t, loader); err != nil || more {
		t.Fatalf("a third batch of 5 samples in 3s: %v %v", more, err)
	}

	// Left padding with -1 to a multiple of 4, and the lengths instead of the mask.
	ok(t, loader.SetField(0, "padding_side", "left"))
	ok(t, loader.Set("pad_value", -1))
	ok(t, loader.Set("pad_to_multiple_of", 4))
	ok(t, loader.SetField(0, "mask", "lengths"))
	ok(t, loader.SetEpoch(0))
	wantBatch(t, loader,
		[][]int64{{3, 4}, {3}, {3}},
		[][]int64{{-1, -1, 0, 1, -1, -1, -1, -1, -1, 200, 201, 202}, {0, 1, 2}, {2, 0, 3}})
	ok(t, loader.Set("mask", "none"))
	if n := must(loader.FieldCount()); n != 2 {
		t.Fatalf("%d fields with mask none", n)
	}
	wantBatch(t, loader, [][]int64{{3, 4}, {3}}, [][]int64{nil, {0, 1, 2}})

	wantStatus(t, loader.SetField(1, "pad_value", 0), accel.ErrInvalidArgument, "field 1 is not ragged")
	wantStatus(t, loader.SetField(2, "pad_value", 0), accel.ErrInvalidArgument)
	wantStatus(t, loader.SetField(-1, "pad_value", 0), accel.ErrInvalidArgument, "negative")
	wantStatus(t, loader.Set("padding_side", "centre"), accel.ErrInvalidArgument, "allowed: right, left")
	wantStatus(t, loader.SetField(0, "mask", "bitmap"), accel.ErrInvalidArgument, "mask")

	// Padding options need a ragged field; group_by_length too.
	data := regression(t)
	defer data.Close()
	fixed := must(accel.NewDataLoader(acc, data))
	defer fixed.Close()
	wantStatus(t, fixed.Set("max_length", 4), accel.ErrInvalidArgument, "this dataset has none")
	wantStatus(t, fixed.Set("group_by_length", true), accel.ErrInvalidArgument, "group_by_length")
	wantStatus(t, fixed.SetField(0, "pad_value", 1), accel.ErrInvalidArgument)
	loader.Close()
	wantStatus(t, loader.SetField(0, "pad_value", 1), accel.ErrState, "after Close")
}

func TestRaggedAboveMaxLengthIsAnErrorNamingTheSampleUnlessTruncated(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	loader := corpusLoader(t, acc, []int64{2, 5, 1}, "batch_size", 1, "max_length", 3)
	defer loader.Close()
	wantBatch(t, loader, [][]int64{{1, 2}, nil, nil}, [][]int64{{0, 1}, {0}, nil})
	_, _, _, err := int64Batch(t, loader)
	e := wantStatus(t, err, accel.ErrShape, "sample 1, field 0 has length 5, above max_length 3")
	if e.Cause != nil {
		t.Fatalf("a library error with a cause: %v", e.Cause)
	}
	// Nothing lost: the epoch starts again from its first sample.
	wantBatch(t, loader, [][]int64{{1, 2}, nil, nil}, [][]int64{{0, 1}, {0}, nil})

	ok(t, loader.Set("truncation", true))
	ok(t, loader.Set("batch_size", 3))
	wantBatch(t, loader,
		[][]int64{{3, 3}, {3}, {3, 3}},
		[][]int64{{0, 1, 0, 100, 101, 102, 200, 0, 0}, {0, 1, 2}, {1, 1, 0, 1, 1, 1, 1, 0, 0}})
	ok(t, loader.SetField(0, "padding_side", "left"))
	ok(t, loader.SetField(0, "mask", "lengths"))
	wantBatch(t, loader,
		[][]int64{{3, 3}, {3}, {3}},
		[][]int64{{0, 0, 1, 100, 101, 102, 0, 0, 200}, {0, 1, 2}, {2, 3, 1}})
	ok(t, loader.Set("max_length", "none"))
	wantBatch(t, loader, [][]int64{{3, 5}, nil, nil}, [][]int64{nil, nil, {2, 5, 1}})
}

var errNoText = errors.New("sample 2 has no text")

// A lengths function's error or panic, and a length the library refuses, end the epoch with a
// clear error; the next Next starts it again. The declarations are checked when the dataset is made.
func TestRaggedLengthFailuresAndDeclarations(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	// An error to return, a string to panic with, or a length to report for sample 2. A plain
	// variable: with num_workers 0 the functions run on the goroutine that calls Next.
	var failWith any
	lens := []int64{2, 4, 1}
	fill := func(i int64, fields [][]byte) error {
		binary.NativeEndian.PutUint64(fields[1], uint64(i))
		return nil
	}
	data := must(accel.DatasetFromRaggedFunc(3, corpusFields, func(i int64, lengths []int64) error {
		lengths[0] = lens[i]
		if i == 2 {
			switch v := failWith.(type) {
			case error:
				return v
			case string:
				panic(v)
			case int64:
				lengths[0] = v
			}
		}
		return nil
	}, fill))
	loader := must(accel.NewDataLoader(acc, data))
	data.Close()
	defer loader.Close()
	ok(t, loader.Set("batch_size", 3))

	failWith = errNoText
	_, _, _, err := int64Batch(t, loader)
	wantStatus(t, err, accel.ErrCallback, "length callback")
	if !errors.Is(err, errNoText) {
		t.Fatalf("the lengths function's error is not the cause: %v", err)
	}
	failWith = "no tokeniser"
	_, _, _, err = int64Batch(t, loader)
	var p *accel.PanicError
	if wantStatus(t, err, accel.ErrCallback); !errors.As(err, &p) || p.Value != "no tokeniser" {
		t.Fatalf("want the panic as the cause, got %v", err)
	}
	failWith = int64(-4)
	_, _, _, err = int64Batch(t, loader)
	wantStatus(t, err, accel.ErrShape, "sample 2, field 0: the length callback reported -4")
	failWith = int64(1)
	wantBatch(t, loader, [][]int64{{3, 4}, nil, {3, 4}}, [][]int64{nil, {0, 1, 2}, nil})

	// A fill error on a ragged dataset comes back as DatasetFromFunc's do.
	data = must(accel.DatasetFromRaggedFunc(3, corpusFields,
		func(i int64, lengths []int64) error { lengths[0] = 1; return nil },
		func(i int64, fields [][]byte) error { return errBadSample }))
	failing := must(accel.NewDataLoader(acc, data))
	data.Close()
	defer failing.Close()
	_, _, _, err = int64Batch(t, failing)
	wantStatus(t, err, accel.ErrCallback)
	if !errors.Is(err, errBadSample) {
		t.Fatalf("the fill function's error is not the cause: %v", err)
	}

	noop := func(int64, [][]byte) error { return nil }
	_, err = accel.DatasetFromRaggedFunc(3, corpusFields, nil, noop)
	wantStatus(t, err, accel.ErrInvalidArgument, "field 0 is ragged")
	_, err = accel.DatasetFromRaggedFunc(3, corpusFields, func(int64, []int64) error { return nil }, nil)
	wantStatus(t, err, accel.ErrInvalidArgument, "nil fill")
	_, err = accel.DatasetFromFunc(3, corpusFields, noop)
	wantStatus(t, err, accel.ErrShape, "DatasetFromRaggedFunc")
	_, err = accel.DatasetFromRaggedFunc(3, []accel.Field{{DType: accel.F32, Shape: []int64{2, accel.Ragged}}},
		func(int64, []int64) error { return nil }, noop)
	wantStatus(t, err, accel.ErrShape)
	// Without a ragged field it is DatasetFromFunc, and lengths may be nil.
	plain := must(accel.DatasetFromRaggedFunc(3, squareFields, nil, squares(new(atomic.Int64))))
	defer plain.Close()
	if n := must(plain.FieldCount()); n != 2 {
		t.Fatalf("%d fields", n)
	}
	if f := accel.RaggedField(accel.F32, 80); !f.IsRagged() || !slices.Equal(f.Shape, []int64{accel.Ragged, 80}) {
		t.Fatalf("RaggedField(F32, 80) = %+v", f)
	}
	if squareFields[0].IsRagged() || squareFields[1].IsRagged() {
		t.Fatal("a fixed field reported ragged")
	}
}

// group_by_length on worker threads: every sample once per epoch, the longest batch first, and
// far less padding than a random order.
func TestRaggedLengthGroupingGivesEverySampleOnce(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	lens := make([]int64, 64)
	real := int64(0)
	for i := range lens {
		lens[i] = int64(i*37) % 23
		real += lens[i]
	}
	loader := corpusLoader(t, acc, lens, "batch_size", 4, "shuffle", true, "seed", 5,
		"group_by_length", true, "num_workers", 2)
	defer loader.Close()
	for epoch := 0; epoch < 2; epoch++ {
		var seen []int64
		padded, batches := int64(0), 0
		for batch, err := range loader.All() {
			ok(t, err)
			shape := must(batch[0].Shape())
			if batches == 0 && shape[1] != 22 {
				t.Fatalf("epoch %d: the first batch is padded to %d, not the longest, 22", epoch, shape[1])
			}
			batches++
			padded += shape[0] * shape[1]
			labels := must(accel.ToSlice[int64](batch[1]))
			tokens := must(accel.ToSlice[int64](batch[0]))
			mask := must(accel.ToSlice[int64](batch[2]))
			for r, i := range labels {
				for j := int64(0); j < shape[1]; j++ {
					want, wantMask := int64(0), int64(0)
					if j < lens[i] {
						want, wantMask = 100*i+j, 1
					}
					if tokens[int64(r)*shape[1]+j] != want || mask[int64(r)*shape[1]+j] != wantMask {
						t.Fatalf("sample %d, row %d: token %d mask %d", i, j,
							tokens[int64(r)*shape[1]+j], mask[int64(r)*shape[1]+j])
					}
				}
			}
			seen = append(seen, labels...)
		}
		slices.Sort(seen)
		if len(seen) != 64 || len(slices.Compact(seen)) != 64 {
			t.Fatalf("epoch %d: %d samples, not each of 64 once", epoch, len(seen))
		}
		if padded >= real+real/4 {
			t.Fatalf("epoch %d: %d padded tokens for %d real ones", epoch, padded, real)
		}
	}
}

// ---- streams: samples read in order, of no known length ---------------------------------------

// tokenStream is a stream of length samples with corpusFields: sample p of epoch e holds the
// tokens 100*p + j for j < p%4 and the label 1000*e + p. It fails once at each position of
// failures: an error to return, or a string to panic with. Atomics: with num_workers > 0 the
// function runs on the dataloader's reading thread.
type tokenStream struct {
	length   int64
	failures sync.Map // position -> error or string, removed when used
	restarts atomic.Int64
}

var errStreamBroken = errors.New("the stream broke")

func (s *tokenStream) next(epoch, position int64, sample *accel.Sample) (bool, error) {
	if position == 0 {
		s.restarts.Add(1)
	}
	if failure, found := s.failures.LoadAndDelete(position); found {
		if err, isErr := failure.(error); isErr {
			return false, err
		}
		panic(failure)
	}
	if position >= s.length {
		return false, nil
	}
	tokens := make([]int64, position%4)
	for j := range tokens {
		tokens[j] = 100*position + int64(j)
	}
	if err := sample.Set(0, tokens); err != nil {
		return false, err
	}
	return true, sample.Set(1, 1000*epoch+position)
}

// streamLoader is a dataloader over s with options set in order (key, value, ...).
func streamLoader(t *testing.T, acc *accel.Accelerator, s *tokenStream, options ...any) *accel.DataLoader {
	t.Helper()
	data := must(accel.DatasetFromStream(corpusFields, s.next))
	if n := must(data.SampleCount()); n != -1 {
		t.Fatalf("a stream of %d samples, want -1 (unknown)", n)
	}
	loader := must(accel.NewDataLoader(acc, data))
	data.Close()
	for i := 0; i < len(options); i += 2 {
		ok(t, loader.Set(options[i].(string), options[i+1]))
	}
	return loader
}

func TestStreamBatchesArePaddedAndEachEpochRestartsTheStream(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	for _, workers := range []int{0, 2} {
		s := &tokenStream{length: 7}
		loader := streamLoader(t, acc, s, "batch_size", 3, "num_workers", workers)
		if n := must(loader.BatchCount()); n != -1 {
			t.Fatalf("%d batches of a stream, want -1 (unknown)", n)
		}
		if n := must(loader.FieldCount()); n != 3 {
			t.Fatalf("%d fields: want tokens, label, the tokens' attention mask", n)
		}
		// Lengths 0, 1, 2 | 3, 0, 1 | 2: each batch padded to its own longest.
		wantBatch(t, loader,
			[][]int64{{3, 2}, {3}, {3, 2}},
			[][]int64{{0, 0, 100, 0, 200, 201}, {0, 1, 2}, {0, 0, 1, 0, 1, 1}})
		wantBatch(t, loader,
			[][]int64{{3, 3}, {3}, {3, 3}},
			[][]int64{{300, 301, 302, 0, 0, 0, 500, 0, 0}, {3, 4, 5}, {1, 1, 1, 0, 0, 0, 1, 0, 0}})
		if end, r := must(loader.EndOfEpoch()), must(loader.Remainder()); end || r != -1 {
			t.Fatalf("workers %d: before the last batch: end of epoch %v, remainder %d (want -1: unknown)",
				workers, end, r)
		}
		wantBatch(t, loader, [][]int64{{1, 2}, {1}, {1, 2}}, [][]int64{{600, 601}, {6}, {1, 1}})
		if end := must(loader.EndOfEpoch()); !end {
			t.Fatalf("workers %d: the last batch is not the end of the epoch", workers)
		}
		if r := must(loader.Remainder()); r != 1 {
			t.Fatalf("workers %d: remainder %d at the last batch, want 1", workers, r)
		}
		if _, _, more, err := int64Batch(t, loader); err != nil || more {
			t.Fatalf("workers %d: a fourth batch of 7 samples in 3s: %v %v", workers, more, err)
		}
		// Epoch 1 reads the stream again from position 0.
		wantBatch(t, loader, [][]int64{nil, {3}, nil}, [][]int64{nil, {1000, 1001, 1002}, nil})
		if e, n := must2(loader.Position()); e != 1 || n != 3 {
			t.Fatalf("workers %d: position (%d, %d), want (1, 3)", workers, e, n)
		}
		if n := s.restarts.Load(); n != 2 {
			t.Fatalf("workers %d: the stream started %d times in two epochs", workers, n)
		}
		loader.Close()
	}
}

// must2 is must for a call of two results.
func must2[A, B any](a A, b B, err error) (A, B) {
	if err != nil {
		cur.Helper()
		cur.Fatal(err)
	}
	return a, b
}

// A failing stream function fails the Next that needed the sample; the position stays after
// the batches returned, and the next Next reads the stream again up to there and goes on.
func TestAStreamFailingMidEpochGoesOnFromTheBatchThatFailed(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	for _, workers := range []int{0, 1} {
		s := &tokenStream{length: 7}
		s.failures.Store(int64(4), errStreamBroken)
		s.failures.Store(int64(6), "no more records")
		loader := streamLoader(t, acc, s, "batch_size", 3, "num_workers", workers)
		wantBatch(t, loader, [][]int64{nil, nil, nil}, [][]int64{nil, {0, 1, 2}, nil})

		_, _, _, err := int64Batch(t, loader)
		wantStatus(t, err, accel.ErrCallback, "for sample 4 of epoch 0")
		if !errors.Is(err, errStreamBroken) {
			t.Fatalf("workers %d: the stream function's error is not the cause: %v", workers, err)
		}
		if e, n := must2(loader.Position()); e != 0 || n != 3 {
			t.Fatalf("workers %d: position (%d, %d) after the failure, want (0, 3)", workers, e, n)
		}
		wantBatch(t, loader, [][]int64{nil, nil, nil}, [][]int64{nil, {3, 4, 5}, nil})
		if n := s.restarts.Load(); n != 2 {
			t.Fatalf("workers %d: the stream started %d times, want again after the failure", workers, n)
		}

		_, _, _, err = int64Batch(t, loader)
		var p *accel.PanicError
		if wantStatus(t, err, accel.ErrCallback, "for sample 6"); !errors.As(err, &p) || p.Value != "no more records" {
			t.Fatalf("workers %d: want the panic as the cause, got %v", workers, err)
		}
		if e, n := must2(loader.Position()); e != 0 || n != 6 {
			t.Fatalf("workers %d: position (%d, %d) after the panic, want (0, 6)", workers, e, n)
		}
		wantBatch(t, loader, [][]int64{nil, nil, nil}, [][]int64{nil, {6}, nil})
		if _, _, more, err := int64Batch(t, loader); err != nil || more {
			t.Fatalf("workers %d: a batch after the last: %v %v", workers, more, err)
		}
		loader.Close()
	}
}

// Sample.Set checks the field, the size and the element type; a wrong size is the library's
// ErrShape naming the sample and the field.
func TestStreamSampleSetChecksWhatItIsGiven(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	// Frames of two f32 values (ragged) and an i64 label. With num_workers 0 the function runs on
	// this goroutine: plain variables.
	fields := []accel.Field{accel.RaggedField(accel.F32, 2), {DType: accel.I64}}
	var setErrs []error
	var kept *accel.Sample
	data := must(accel.DatasetFromStream(fields, func(epoch, position int64, s *accel.Sample) (bool, error) {
		switch position {
		case 0:
			kept = s
			setErrs = []error{
				s.Set(1, []byte{1, 2, 3, 4}),
				s.Set(0, []float32{1, 2, 3}),
				s.Set(1, int32(5)),
				s.Set(0, []int64{1, 2}),
				s.Set(2, int64(0)),
				s.Set(-1, int64(0)),
				s.Set(1, 5),
			}
			// Raw bytes of any element type; a field set again is replaced.
			label := make([]byte, 8)
			binary.NativeEndian.PutUint64(label, 77)
			if err := s.Set(1, label); err != nil {
				return false, err
			}
			if err := s.Set(0, []float32{9}); err == nil {
				return false, errors.New("half a frame accepted")
			}
			return true, s.Set(0, []float32{1, 2, 3, 4})
		case 1: // the wrong size, returned: the cause of the ErrCallback
			return true, s.Set(1, []byte{1, 2, 3, 4})
		case 2: // an empty frame sequence and the label
			if err := s.Set(0, []float32{}); err != nil {
				return false, err
			}
			return true, s.Set(1, int64(2))
		}
		return false, nil
	}))
	loader := must(accel.NewDataLoader(acc, data))
	data.Close()
	defer loader.Close()

	batch, more, err := loader.Next()
	ok(t, err)
	if !more {
		t.Fatal("no first batch")
	}
	if shape, v := must(batch[0].Shape()), must(accel.ToSlice[float32](batch[0])); !slices.Equal(shape, []int64{1, 2, 2}) ||
		!slices.Equal(v, []float32{1, 2, 3, 4}) {
		t.Fatalf("frames %v %v", shape, v)
	}
	if v := must(accel.ToSlice[int64](batch[1])); !slices.Equal(v, []int64{77}) {
		t.Fatalf("the label set from raw bytes is %v", v)
	}
	batch.Close()
	wantStatus(t, setErrs[0], accel.ErrShape, "sample 0, field 1: 4 bytes given, and one sample of the field is 8 bytes")
	wantStatus(t, setErrs[1], accel.ErrShape, "sample 0, field 0: 12 bytes given, not a whole number of rows of 8 bytes")
	wantStatus(t, setErrs[2], accel.ErrDType, "field 1 holds i64 elements, not i32")
	wantStatus(t, setErrs[3], accel.ErrDType, "field 0 holds f32 elements, not i64")
	wantStatus(t, setErrs[4], accel.ErrInvalidArgument, "field 2 is out of range")
	wantStatus(t, setErrs[5], accel.ErrInvalidArgument, "field -1 is out of range")
	wantStatus(t, setErrs[6], accel.ErrInvalidArgument, "a int is neither")
	wantStatus(t, kept.Set(1, int64(1)), accel.ErrState, "outside the stream function")

	_, _, err = loader.Next()
	wantStatus(t, err, accel.ErrCallback, "for sample 1 of epoch 0")
	if !errors.Is(err, accel.ErrShape) || !strings.Contains(err.Error(), "sample 1, field 1: 4 bytes given") {
		t.Fatalf("the wrong size is not the cause: %v", err)
	}
	// The batch of sample 1 is still to come: it fails again (the function fails every time).
	_, _, err = loader.Next()
	wantStatus(t, err, accel.ErrCallback)

	// A field left unwritten fails the sample; no Go error is the cause.
	data = must(accel.DatasetFromStream(fields, func(epoch, position int64, s *accel.Sample) (bool, error) {
		return true, s.Set(0, []float32{1, 2})
	}))
	unwritten := must(accel.NewDataLoader(acc, data))
	data.Close()
	defer unwritten.Close()
	_, _, err = unwritten.Next()
	if e := wantStatus(t, err, accel.ErrCallback, "without writing field 1"); e.Cause != nil {
		t.Fatalf("a cause for a library failure: %v", e.Cause)
	}
	wantStatus(t, unwritten.Set("group_by_length", true), accel.ErrUnsupported)

	noop := func(int64, int64, *accel.Sample) (bool, error) { return false, nil }
	_, err = accel.DatasetFromStream(fields, nil)
	wantStatus(t, err, accel.ErrInvalidArgument, "nil function")
	_, err = accel.DatasetFromStream(nil, noop)
	wantStatus(t, err, accel.ErrInvalidArgument, "no fields")
	_, err = accel.DatasetFromStream([]accel.Field{{DType: accel.F32, Shape: []int64{2, accel.Ragged}}}, noop)
	wantStatus(t, err, accel.ErrShape)
}
