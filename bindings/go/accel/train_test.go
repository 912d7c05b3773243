package accel_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// regression is y = x · [1, -2, 0.5] + 0.25 on 256 fixed points, as a dataset from tensors.
func regression(t testing.TB) *accel.Dataset {
	const n = 256
	xs := make([]float32, 0, n*3)
	ys := make([]float32, 0, n)
	for i := 0; i < n; i++ {
		a, b, c := float32(i%7)/7, float32(i%5)/5-0.5, float32(i%3)-1
		xs = append(xs, a, b, c)
		ys = append(ys, a-2*b+0.5*c+0.25)
	}
	x := must(accel.FromSlice(xs, n, 3))
	y := must(accel.FromSlice(ys, n, 1))
	defer x.Close()
	defer y.Close()
	return must(accel.DatasetFromTensors(x, y))
}

func TestAnAcceleratorTrainsAlone(t *testing.T) {
	begin(t)
	cfg := must(accel.NewConfig())
	ok(t, cfg.Set("gradient_accumulation_steps", 2))
	acc := must(accel.New(cfg))
	cfg.Close()
	defer acc.Close()
	if must(acc.ProcessIndex()) != 0 || must(acc.NumProcesses()) != 1 || !must(acc.IsMainProcess()) ||
		!must(acc.IsLocalMainProcess()) || must(acc.LocalProcessIndex()) != 0 {
		t.Fatal("a process alone is rank 0 of 1")
	}
	device, dist, mp := must(acc.Device()), must(acc.DistributedType()), must(acc.MixedPrecision())
	if device != "cpu" || dist != accel.DistributedNo || mp != accel.PrecisionNo {
		t.Fatalf("device %s, %v, %v", device, dist, mp)
	}
	if text := must(acc.EffectiveConfig()); !strings.Contains(text, "gradient_accumulation_steps: 2") {
		t.Fatalf("effective config:\n%s", text)
	}
	_, err := accel.New(nil)
	wantStatus(t, err, accel.ErrState) // one accelerator per process
	ok(t, acc.SetSeed(3, false))

	data := regression(t)
	defer data.Close()
	loader := must(accel.NewDataLoader(acc, data))
	defer loader.Close()
	ok(t, loader.Set("batch_size", 16))
	ok(t, loader.Set("shuffle", true))
	model := linearModel(t, 3, 1)
	defer model.Close()
	opt := must(accel.NewOptimizer(model, "adam"))
	defer opt.Close()
	ok(t, opt.Set("lr", 0.05))
	sched := must(accel.NewScheduler(opt, "constant"))
	defer sched.Close()
	ok(t, acc.Prepare(model, opt, sched, loader))
	ok(t, acc.Prepare(model)) // twice is a no-op

	var first, last float64
	syncs := 0
	for epoch := int64(0); epoch < 15; epoch++ {
		ok(t, loader.SetEpoch(epoch))
		var sum float64
		for batch, err := range loader.All() {
			ok(t, err)
			ok(t, acc.Accumulate())
			if must(acc.SyncGradients()) {
				syncs++
			}
			loss := must(model.Call("training_step", batch...))
			ok(t, acc.Backward(loss))
			norm := must(acc.ClipGradNorm(model, 10, 2))
			if norm < 0 {
				t.Fatalf("gradient norm %v", norm)
			}
			ok(t, acc.ClipGradValue(model, 5))
			ok(t, opt.Step())
			ok(t, sched.Step())
			ok(t, opt.ZeroGrad())
			sum += must(loss.Float64())
			loss.Close()
		}
		if epoch == 0 {
			first = sum
		}
		last = sum
	}
	if !(last < first/20) {
		t.Fatalf("the loss did not fall: %v -> %v", first, last)
	}
	if syncs != 15*8 {
		t.Fatalf("%d of 240 micro-steps synchronised, want 120", syncs)
	}
	w := must(accel.ToSlice[float32](must(model.Tensor("fc.weight"))))
	for i, want := range []float32{1, -2, 0.5} {
		if d := w[i] - want; d > 0.25 || d < -0.25 {
			t.Fatalf("weights %v, want about [1 -2 0.5]", w)
		}
	}

	// Accelerate's save_model, loaded into a fresh model.
	dir := t.TempDir()
	ok(t, acc.SaveModel(model, dir, ""))
	fresh := linearModel(t, 3, 1)
	defer fresh.Close()
	ok(t, accel.LoadCheckpointInModel(fresh, dir))
	if got := must(accel.ToSlice[float32](must(fresh.Tensor("fc.weight")))); !slices.Equal(got, w) {
		t.Fatalf("loaded %v, saved %v", got, w)
	}
	other := linearModel(t, 4, 1)
	defer other.Close()
	wantStatus(t, accel.LoadCheckpointInModel(other, dir), accel.ErrShape, "fc.weight")

	order := []string{}
	ok(t, acc.MainProcessFirst(func() error { order = append(order, "inside"); return nil }))
	boom := errors.New("boom")
	if err := acc.MainProcessFirst(func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("MainProcessFirst returned %v", err)
	}
	if len(order) != 1 {
		t.Fatal("MainProcessFirst did not run its function")
	}
	ok(t, acc.Print("printed by the main process"))
	ok(t, acc.WaitForEveryone())
	wantStatus(t, acc.Backward(nil), accel.ErrInvalidArgument)
	wantStatus(t, acc.Prepare(nil), accel.ErrInvalidArgument)
	var missing *accel.Model
	wantStatus(t, acc.Prepare(missing), accel.ErrInvalidArgument, "nil *accel.Model")
}

func TestCollectivesAloneAreTheIdentity(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	x := must(accel.FromSlice([]float32{1, 2, 3, 4}, 2, 2))
	defer x.Close()
	check := func(what string, got *accel.Tensor, err error, want []float32) {
		t.Helper()
		ok(t, err)
		defer got.Close()
		if v := must(accel.ToSlice[float32](got)); !slices.Equal(v, want) {
			t.Fatalf("%s gave %v, want %v", what, v, want)
		}
	}
	g, err := acc.Gather(x)
	check("gather", g, err, []float32{1, 2, 3, 4})
	g, err = acc.GatherForMetrics(x)
	check("gather_for_metrics", g, err, []float32{1, 2, 3, 4})
	g, err = acc.Reduce(x, accel.Sum)
	check("reduce sum", g, err, []float32{1, 2, 3, 4})
	g, err = acc.Reduce(x, accel.Max)
	check("reduce max", g, err, []float32{1, 2, 3, 4})
	g, err = acc.Reduce(x, accel.Min)
	check("reduce min", g, err, []float32{1, 2, 3, 4})
	g, err = acc.Reduce(x, accel.Mean)
	check("reduce mean", g, err, []float32{1, 2, 3, 4})
	g, err = acc.Broadcast(x, 0)
	check("broadcast", g, err, []float32{1, 2, 3, 4})
	g, err = acc.PadAcrossProcesses(x, 0, -1, false)
	check("pad", g, err, []float32{1, 2, 3, 4})
	objs := must(acc.GatherObject([]byte("only me")))
	if len(objs) != 1 || string(objs[0]) != "only me" {
		t.Fatalf("gather_object %q", objs)
	}
	objs = must(acc.GatherObject(nil))
	if len(objs) != 1 || len(objs[0]) != 0 {
		t.Fatalf("gather_object of nothing %q", objs)
	}
	_, err = acc.Broadcast(x, 3)
	wantStatus(t, err, accel.ErrInvalidArgument)
	_, err = acc.Gather(nil)
	wantStatus(t, err, accel.ErrInvalidArgument)
	b := must(accel.FromSlice([]bool{true}))
	defer b.Close()
	_, err = acc.Reduce(b, accel.Sum)
	wantStatus(t, err, accel.ErrDType)
}

func TestSplitAndTriggerInAWorldOfOne(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	all := func(n int) []int {
		indices := make([]int, n)
		for i := range indices {
			indices[i] = i
		}
		return indices
	}
	// One process takes everything, unpadded; 100 indices need a second call (64 fit the first).
	for _, n := range []int{0, 1, 5, 64, 100} {
		for _, pad := range []bool{false, true} {
			if got := must(acc.SplitBetweenProcesses(n, pad)); !slices.Equal(got, all(n)) {
				t.Fatalf("split of %d (padding %v) gave %v", n, pad, got)
			}
		}
	}
	_, err := acc.SplitBetweenProcesses(-1, false)
	wantStatus(t, err, accel.ErrInvalidArgument)
	prompts := []string{"a", "b", "c"}
	if got := must(accel.SplitSlice(acc, prompts, true)); !slices.Equal(got, prompts) {
		t.Fatalf("SplitSlice gave %q", got)
	}
	columns := must(accel.SplitMap(acc, map[string][]string{"p": prompts, "q": prompts}, true))
	if len(columns) != 2 || !slices.Equal(columns["q"], prompts) {
		t.Fatalf("SplitMap gave %q", columns)
	}
	_, err = accel.SplitMap(acc, map[string][]int{"a": {1}, "b": {1, 2}}, false)
	wantStatus(t, err, accel.ErrInvalidArgument, "same length")
	x := must(accel.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 3, 2))
	defer x.Close()
	mine := must(acc.SplitTensorBetweenProcesses(x, true))
	if s := must(mine.Shape()); !slices.Equal(s, []int64{3, 2}) {
		t.Fatalf("split tensor shape %v", s)
	}
	if v := must(accel.TakeSlice[float32](mine, nil)); !slices.Equal(v, []float32{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("split tensor %v", v)
	}
	scalar := must(accel.Scalar(float32(1)))
	defer scalar.Close()
	_, err = acc.SplitTensorBetweenProcesses(scalar, false)
	wantStatus(t, err, accel.ErrShape)
	_, err = acc.SplitTensorBetweenProcesses(nil, false)
	wantStatus(t, err, accel.ErrInvalidArgument, "nil *accel.Tensor")

	if stop := must(acc.CheckTrigger()); stop {
		t.Fatal("a trigger nobody set")
	}
	ok(t, acc.SetTrigger())
	if stop := must(acc.CheckTrigger()); !stop {
		t.Fatal("the trigger set was not seen")
	}
	if stop := must(acc.CheckTrigger()); stop {
		t.Fatal("the check did not lower the trigger")
	}
	// From another goroutine (a watchdog, a signal handler's goroutine).
	done := make(chan error)
	go func() { done <- acc.SetTrigger() }()
	ok(t, <-done)
	if stop := must(acc.CheckTrigger()); !stop {
		t.Fatal("the trigger set on another goroutine was not seen")
	}
	var none *accel.Accelerator
	wantStatus(t, none.SetTrigger(), accel.ErrInvalidArgument, "nil *accel.Accelerator")
	_, err = none.SplitBetweenProcesses(3, false)
	wantStatus(t, err, accel.ErrInvalidArgument)
	_, err = accel.SplitSlice(none, prompts, false)
	wantStatus(t, err, accel.ErrInvalidArgument)
	acc.Close()
	_, err = acc.CheckTrigger()
	wantStatus(t, err, accel.ErrState, "after Close")
}

// In a world of one join is off: fn runs and its error comes back, the end runs whatever fn
// does (another join opens after it), a join inside a join is ErrState.
func TestJoinUnevenInputsInAWorldOfOne(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	for _, even := range []accel.EvenBatches{accel.EvenBatchesKeep, accel.EvenBatchesOff, accel.EvenBatchesOn} {
		ran := false
		ok(t, acc.JoinUnevenInputs(even, func() error { ran = true; return nil }))
		if !ran {
			t.Fatalf("JoinUnevenInputs(%d) did not run fn", even)
		}
	}
	// A loop inside, on a model with buffers (refused only with join on, i.e. several ranks).
	data := regression(t)
	defer data.Close()
	loader := must(accel.NewDataLoader(acc, data))
	defer loader.Close()
	ok(t, loader.Set("batch_size", 100))
	model := linearModel(t, 3, 1)
	defer model.Close()
	ok(t, model.AddLayer("bn", "batch_norm2d", "num_features=2")) // unused: its buffers count
	opt := must(accel.NewOptimizer(model, "sgd"))
	defer opt.Close()
	ok(t, acc.Prepare(model, opt, loader))
	steps := 0
	ok(t, acc.JoinUnevenInputs(accel.EvenBatchesOff, func() error {
		for batch, err := range loader.All() {
			if err != nil {
				return err
			}
			loss, err := model.Call("training_step", batch...)
			if err != nil {
				return err
			}
			err = acc.Backward(loss)
			loss.Close()
			if err != nil {
				return err
			}
			if err := opt.Step(); err != nil {
				return err
			}
			if err := opt.ZeroGrad(); err != nil {
				return err
			}
			steps++
		}
		return nil
	}))
	if steps != 3 {
		t.Fatalf("%d steps of 100 out of 256 samples", steps)
	}

	boom := errors.New("boom")
	if err := acc.JoinUnevenInputs(accel.EvenBatchesKeep, func() error { return boom }); err != boom {
		t.Fatalf("JoinUnevenInputs returned %v, want fn's error as it was", err)
	}
	// Nested: the inner begin is refused, the outer still ends.
	err := acc.JoinUnevenInputs(accel.EvenBatchesOff, func() error {
		return acc.JoinUnevenInputs(accel.EvenBatchesKeep, func() error { return nil })
	})
	wantStatus(t, err, accel.ErrState, "already open")
	// A panic goes on after the end.
	func() {
		defer func() {
			if r := recover(); r != "in the loop" {
				t.Fatalf("recovered %v", r)
			}
		}()
		_ = acc.JoinUnevenInputs(accel.EvenBatchesKeep, func() error { panic("in the loop") })
		t.Fatal("the panic did not go on")
	}()
	wantStatus(t, acc.JoinUnevenInputs(accel.EvenBatches(2), func() error { return nil }), accel.ErrInvalidArgument)
	wantStatus(t, acc.JoinUnevenInputs(accel.EvenBatchesKeep, nil), accel.ErrInvalidArgument)
	ok(t, acc.JoinUnevenInputs(accel.EvenBatchesKeep, func() error { return nil })) // the last one ended
	var none *accel.Accelerator
	wantStatus(t, none.JoinUnevenInputs(accel.EvenBatchesKeep, func() error { return nil }), accel.ErrInvalidArgument)
}

func TestIDXDatasetsAndTheirErrors(t *testing.T) {
	begin(t)
	train := must(accel.DatasetFromIDX(fashionMNIST+"/train-images-idx3-ubyte.gz", fashionMNIST+"/train-labels-idx1-ubyte.gz"))
	defer train.Close()
	if n := must(train.SampleCount()); n != 60000 {
		t.Fatalf("%d training samples", n)
	}
	if n := must(train.FieldCount()); n != 2 {
		t.Fatalf("%d fields", n)
	}
	_, err := accel.DatasetFromIDX(filepath.Join(t.TempDir(), "missing.gz"))
	wantStatus(t, err, accel.ErrIO, "missing.gz")
	corrupt := filepath.Join(t.TempDir(), "corrupt-idx1-ubyte")
	ok(t, os.WriteFile(corrupt, []byte{0, 0, 9, 9, 0, 0, 0, 1}, 0o644))
	_, err = accel.DatasetFromIDX(corrupt)
	wantStatus(t, err, accel.ErrIO, "corrupt-idx1-ubyte")
	_, err = accel.DatasetFromIDX(fashionMNIST+"/train-images-idx3-ubyte.gz", fashionMNIST+"/t10k-labels-idx1-ubyte.gz")
	wantStatus(t, err, accel.ErrShape)
	_, err = accel.DatasetFromIDX()
	wantStatus(t, err, accel.ErrInvalidArgument)
}

func TestTextLinesAreAStreamOfRaggedBytes(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	path := filepath.Join(t.TempDir(), "lines.txt")
	ok(t, os.WriteFile(path, []byte("first\r\n\nthird\nlast"), 0o644))
	data := must(accel.DatasetFromTextLines(path))
	if n := must(data.SampleCount()); n != -1 {
		t.Fatalf("%d lines known in advance, want -1 (a stream)", n)
	}
	loader := must(accel.NewDataLoader(acc, data))
	data.Close()
	defer loader.Close()
	ok(t, loader.Set("batch_size", 3))
	ok(t, loader.Set("pad_value", '.'))
	if n := must(loader.BatchCount()); n != -1 {
		t.Fatalf("%d batches, want -1 (a stream)", n)
	}
	// The lines without their newline (nor the carriage return before it), padded, with a mask.
	for epoch := 0; epoch < 2; epoch++ {
		var lines []string
		var masks [][]int64
		for batch, err := range loader.All() {
			ok(t, err)
			shape := must(batch[0].Shape())
			text := must(accel.ToSlice[uint8](batch[0]))
			mask := must(accel.ToSlice[int64](batch[1]))
			for r := int64(0); r < shape[0]; r++ {
				lines = append(lines, string(text[r*shape[1]:(r+1)*shape[1]]))
				masks = append(masks, mask[r*shape[1]:(r+1)*shape[1]])
			}
		}
		if want := []string{"first", ".....", "third", "last"}; !slices.Equal(lines, want) {
			t.Fatalf("epoch %d: lines %q, want %q", epoch, lines, want)
		}
		if !slices.Equal(masks[1], []int64{0, 0, 0, 0, 0}) || !slices.Equal(masks[3], []int64{1, 1, 1, 1}) {
			t.Fatalf("epoch %d: masks %v", epoch, masks)
		}
	}
	_, err := accel.DatasetFromTextLines(path + ".missing")
	wantStatus(t, err, accel.ErrIO, "lines.txt.missing")
	_, err = accel.DatasetFromTextLines("a\x00b")
	wantStatus(t, err, accel.ErrInvalidArgument, "NUL")
}

func TestDataLoaderOptionsPositionsAndStop(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	data := regression(t) // 256 samples
	defer data.Close()
	loader := must(accel.NewDataLoader(acc, data))
	defer loader.Close()
	ok(t, loader.Set("batch_size", 100))
	if n := must(loader.BatchCount()); n != 3 {
		t.Fatalf("%d batches of 100 in 256", n)
	}
	if n := must(loader.FieldCount()); n != 2 {
		t.Fatalf("%d fields", n)
	}
	if r := must(loader.Remainder()); r != 56 {
		t.Fatalf("remainder %d", r)
	}
	wantStatus(t, loader.Set("batch_size", 0), accel.ErrInvalidArgument, "batch_size")
	wantStatus(t, loader.Set("colour", "blue"), accel.ErrInvalidArgument, "colour")

	batch, more, err := loader.Next()
	ok(t, err)
	if !more || len(batch) != 2 {
		t.Fatal("no first batch")
	}
	if s := must(batch[0].Shape()); !slices.Equal(s, []int64{100, 3}) {
		t.Fatalf("batch shape %v", s)
	}
	batch.Close()
	if epoch, samples, err := loader.Position(); err != nil || epoch != 0 || samples != 100 {
		t.Fatalf("position %d %d %v", epoch, samples, err)
	}
	if end := must(loader.EndOfEpoch()); end {
		t.Fatal("end of epoch after one batch of three")
	}
	count := 0
	for batch, err := range loader.All() {
		ok(t, err)
		count++
		if last := must(loader.EndOfEpoch()); last != (count == 2) {
			t.Fatalf("end of epoch %v at batch %d", last, count)
		}
		_ = batch
	}
	if count != 2 {
		t.Fatalf("the rest of the epoch had %d batches", count)
	}
	if e := must(loader.Epoch()); e != 1 {
		t.Fatalf("epoch %d after a whole pass", e)
	}
	ok(t, loader.SetPosition(0, 200))
	batch, _, err = loader.Next()
	ok(t, err)
	if s := must(batch[0].Shape()); s[0] != 56 {
		t.Fatalf("from sample 200 the batch has %d rows", s[0])
	}
	batch.Close()
	ok(t, loader.SetEpoch(0))
	ok(t, loader.SkipFirstBatches(2))
	count = 0
	for _, err := range loader.All() {
		ok(t, err)
		count++
	}
	if count != 1 {
		t.Fatalf("after skipping 2 of 3 batches %d came", count)
	}

	// Batches from All are closed when the body returns; those from Next are the caller's.
	var kept accel.Batch
	for batch, err := range loader.All() {
		ok(t, err)
		kept = batch
		break
	}
	_, err = kept[0].Shape()
	wantStatus(t, err, accel.ErrState, "after Close")

	ok(t, loader.Stop())
	ok(t, loader.Stop()) // idempotent
	_, _, err = loader.Next()
	wantStatus(t, err, accel.ErrState)
	loader.Close()
	_, err = loader.BatchCount()
	wantStatus(t, err, accel.ErrState, "after Close")
	_, err = accel.NewDataLoader(nil, data)
	wantStatus(t, err, accel.ErrInvalidArgument, "nil *accel.Accelerator")
}

// counter is a program object saved with every checkpoint.
type counter struct {
	value    []byte
	failSave error
	panicked bool
	kept     io.Writer
}

func (c *counter) SaveState(w io.Writer) error {
	if c.failSave != nil {
		return c.failSave
	}
	c.kept = w
	_, err := w.Write(c.value)
	return err
}

func (c *counter) LoadState(data []byte) error {
	if c.panicked {
		panic("cannot load")
	}
	c.value = data
	return nil
}

func TestCheckpointsCarryRegisteredObjects(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	model := linearModel(t, 3, 1)
	defer model.Close()
	opt := must(accel.NewOptimizer(model, "sgd"))
	defer opt.Close()
	ok(t, acc.Prepare(model, opt))
	state := &counter{value: []byte("step 41")}
	ok(t, acc.RegisterForCheckpointing(state))
	wantStatus(t, acc.RegisterForCheckpointing(nil), accel.ErrInvalidArgument)

	dir := filepath.Join(t.TempDir(), "ckpt")
	ok(t, acc.SaveState(dir))
	_, err := state.kept.Write([]byte("too late"))
	wantStatus(t, err, accel.ErrState, "after its SaveState returned")
	before := must(accel.ToSlice[float32](must(model.Tensor("fc.weight"))))
	state.value = []byte("changed")
	x := must(accel.FromSlice([]float32{1, 2, 3}, 1, 3))
	y := must(accel.FromSlice([]float32{9}, 1, 1))
	loss := must(model.Call("training_step", x, y))
	ok(t, acc.Backward(loss))
	ok(t, opt.Step())
	ok(t, acc.LoadState(dir))
	if !bytes.Equal(state.value, []byte("step 41")) {
		t.Fatalf("the registered object came back as %q", state.value)
	}
	if after := must(accel.ToSlice[float32](must(model.Tensor("fc.weight")))); !slices.Equal(after, before) {
		t.Fatalf("weights %v after load, %v saved", after, before)
	}

	// A failing save: its error comes back as the Cause, and no checkpoint is written.
	full := errors.New("disk full")
	state.failSave = full
	failed := filepath.Join(t.TempDir(), "failed")
	err = acc.SaveState(failed)
	wantStatus(t, err, accel.ErrCallback)
	if !errors.Is(err, full) {
		t.Fatalf("the save's error is not the cause: %v", err)
	}
	if _, statErr := os.Stat(failed); !os.IsNotExist(statErr) {
		t.Fatal("a failed save left a checkpoint")
	}
	state.failSave = nil

	// A panicking load: a *PanicError, not a crash.
	state.panicked = true
	err = acc.LoadState(dir)
	wantStatus(t, err, accel.ErrCallback)
	var p *accel.PanicError
	if !errors.As(err, &p) || p.Value != "cannot load" || len(p.Stack) == 0 {
		t.Fatalf("want the panic as the cause, got %v", err)
	}
	state.panicked = false
	wantStatus(t, acc.LoadState(filepath.Join(t.TempDir(), "none")), accel.ErrIO)
}

// A model of the caller's own tensors (accel.h, "Models of the host's own tensors"): what Go can
// check without a LibTorch of its own (gotch) to compute a forward with.
func TestModelsOfTheCallersOwnTensors(t *testing.T) {
	w := must(accel.FromSlice([]float32{1, 2, 3}, 3))
	defer w.Close()
	model := must(accel.NewModel())
	defer model.Close()
	wantStatus(t, model.AddParameter("fc.weight", w), accel.ErrInvalidArgument, "does not require grad")
	ok(t, w.SetRequiresGrad(true))
	ok(t, model.AddParameter("fc.weight", w))
	wantStatus(t, model.AddBuffer("fc.copy", w), accel.ErrInvalidArgument, "requires grad")
	names := must(model.TensorNames())
	if len(names) != 1 || names[0] != "fc.weight" {
		t.Fatalf("names %v", names)
	}
	ran := false
	ok(t, model.Forward(func() error { ran = true; return nil }))
	if !ran {
		t.Fatal("Forward did not run its function")
	}
	wantStatus(t, accel.CheckTorch("0.1.0", -1, nil), accel.ErrUnsupported, "built against LibTorch 0.1.0")
}
