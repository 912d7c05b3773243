package accel_test

// The helpers around the training step in one process: FindExecutableBatchSize, NoSync,
// LocalSGD, the per-process helpers and ClipGradValue.

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// accelerateSizes is accelerate/tests/test_memory_utils.py's sequence from 128 down to 8.
var accelerateSizes = []int64{128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41, 36, 32, 28, 25, 22, 19, 17, 15, 13, 11, 9, 8}

func TestFindExecutableBatchSizeTriesAcceleratesSizes(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	var tried []int64
	size := must(acc.FindExecutableBatchSize(accel.DefaultStartingBatchSize, func(n int64) error {
		tried = append(tried, n)
		if n > 8 {
			return accel.ErrOutOfMemory // the sentinel itself is out of memory
		}
		return nil
	}))
	if size != 8 || !slices.Equal(tried, accelerateSizes) {
		t.Fatalf("size %d after %v", size, tried)
	}

	// A library call that runs out of memory (LibTorch cannot allocate 256 TiB) returns an error
	// of that status, which the search takes as it is or wrapped.
	m := must(accel.NewModel())
	defer m.Close()
	ok(t, m.Define("def big(self, x):\n    return torch.empty(1 << 46) + x.sum()\n"))
	x := must(accel.FromSlice([]float32{1}, 1))
	defer x.Close()
	tried = nil
	size = must(acc.FindExecutableBatchSize(10, func(n int64) error {
		tried = append(tried, n)
		if n <= 8 {
			return nil
		}
		y, err := m.Call("big", x)
		y.Close()
		if n == 9 {
			return fmt.Errorf("try at %d: %w", n, err)
		}
		return err
	}))
	if size != 8 || !slices.Equal(tried, []int64{10, 9, 8}) {
		t.Fatalf("with the library's out of memory: size %d after %v", size, tried)
	}
}

func TestFindExecutableBatchSizeReturnsOtherErrorsAsTheyAre(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	boom := errors.New("boom")
	var tried []int64
	_, err := acc.FindExecutableBatchSize(64, func(n int64) error {
		tried = append(tried, n)
		if n > 60 {
			return accel.ErrOutOfMemory
		}
		return boom
	})
	if err != boom || !slices.Equal(tried, []int64{64, 57}) {
		t.Fatalf("got %v after %v, want boom itself after [64 57]", err, tried)
	}
	// A library error other than out of memory comes back as the very *accel.Error.
	m := linearModel(t, 3, 2)
	defer m.Close()
	short := must(accel.FromSlice([]float32{1, 2}, 1, 2))
	defer short.Close()
	var inner error
	_, err = acc.FindExecutableBatchSize(16, func(int64) error {
		_, inner = m.Call("forward", short)
		return inner
	})
	if inner == nil || err != inner {
		t.Fatalf("got %v, want the model call's own error %v", err, inner)
	}
	wantStatus(t, err, accel.ErrShape)
	// A panic stops the search as an ErrCallback whose cause is the panic, not a crash.
	_, err = acc.FindExecutableBatchSize(16, func(int64) error { panic("no batch today") })
	e := wantStatus(t, err, accel.ErrCallback, "batch size 16")
	var p *accel.PanicError
	if !errors.As(e, &p) || p.Value != "no batch today" {
		t.Fatalf("cause %v, want the panic", e.Cause)
	}
	// Nothing fits, or a start of 0: Accelerate's error.
	tried = nil
	_, err = acc.FindExecutableBatchSize(3, func(n int64) error {
		tried = append(tried, n)
		return accel.ErrOutOfMemory
	})
	wantStatus(t, err, accel.ErrOutOfMemory, "No executable batch size found, reached zero.")
	if !slices.Equal(tried, []int64{3, 2, 1}) {
		t.Fatalf("tried %v", tried)
	}
	tried = nil
	_, err = acc.FindExecutableBatchSize(0, func(n int64) error {
		tried = append(tried, n)
		return nil
	})
	wantStatus(t, err, accel.ErrOutOfMemory, "No executable batch size found, reached zero.")
	if len(tried) != 0 {
		t.Fatalf("a start of 0 tried %v", tried)
	}
	_, err = acc.FindExecutableBatchSize(8, nil)
	wantStatus(t, err, accel.ErrInvalidArgument)
	ok(t, acc.Close())
	_, err = acc.FindExecutableBatchSize(8, func(int64) error { return nil })
	wantStatus(t, err, accel.ErrState)
}

// panicValue runs f and returns what it panicked with (nil: it returned).
func panicValue(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

func TestNoSyncBlocksNestAndPassOnTheirFunctionsFailures(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	m := linearModel(t, 3, 2)
	defer m.Close()
	depth := 0
	ok(t, acc.NoSync(m, func() error {
		depth++
		return acc.NoSync(m, func() error { depth++; return nil })
	}))
	boom := errors.New("boom")
	if err := acc.NoSync(m, func() error { return boom }); err != boom {
		t.Fatalf("NoSync returned %v, want fn's error", err)
	}
	if v := panicValue(func() { acc.NoSync(m, func() error { panic("inside no_sync") }) }); v != "inside no_sync" {
		t.Fatalf("the panic came out as %v", v)
	}
	// Every block ended: one more opens and closes cleanly.
	ok(t, acc.NoSync(m, func() error { depth++; return nil }))
	if depth != 3 {
		t.Fatalf("the blocks ran %d times", depth)
	}
	wantStatus(t, acc.NoSync(nil, func() error { return nil }), accel.ErrInvalidArgument)
	wantStatus(t, acc.NoSync(m, nil), accel.ErrInvalidArgument)
}

func TestLocalSGDInOneProcessCountsStepsAndAveragesNothing(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	m := linearModel(t, 3, 2)
	defer m.Close()
	_, err := accel.NewLocalSGD(acc, m, 0)
	wantStatus(t, err, accel.ErrInvalidArgument)
	l := must(accel.NewLocalSGD(acc, m, 4))
	defer l.Close()
	wantStatus(t, l.Set("outer_optimizer", "adam"), accel.ErrInvalidArgument, "adam")
	ok(t, l.Set("outer_optimizer", "nesterov"))
	ok(t, l.Set("outer_lr", 0.5))
	for range 9 {
		ok(t, l.Step())
	}
	wantStatus(t, l.Set("outer_lr", 1), accel.ErrState) // options are fixed once it has stepped
	ok(t, l.End())
	ok(t, l.End()) // a second end does nothing
	if n := must(l.AverageCount()); n != 0 {
		t.Fatalf("%d averages with one process", n)
	}
	wantStatus(t, l.Step(), accel.ErrState) // ended
	ok(t, l.Close())
	ok(t, l.Close())
	wantStatus(t, l.Step(), accel.ErrState, "after Close")

	// The block form ends it; a failure or a panic inside stops it without averaging.
	steps := 0
	ok(t, acc.LocalSGD(m, 2, func(l *accel.LocalSGD) error {
		for range 5 {
			if err := l.Step(); err != nil {
				return err
			}
			steps++
		}
		return nil
	}))
	boom := errors.New("boom")
	var kept *accel.LocalSGD
	if err := acc.LocalSGD(m, 2, func(l *accel.LocalSGD) error { kept = l; return boom }); err != boom {
		t.Fatalf("LocalSGD returned %v, want fn's error", err)
	}
	wantStatus(t, kept.Step(), accel.ErrState, "after Close")
	if v := panicValue(func() { acc.LocalSGD(m, 2, func(*accel.LocalSGD) error { panic("inside") }) }); v != "inside" {
		t.Fatalf("the panic came out as %v", v)
	}
	wantStatus(t, acc.LocalSGD(m, 0, func(*accel.LocalSGD) error { return nil }), accel.ErrInvalidArgument)
	// Every LocalSGD ended its no_sync: a NoSync block still pairs up.
	ok(t, acc.NoSync(m, func() error { return nil }))
	if steps != 5 {
		t.Fatalf("%d steps in the block", steps)
	}
}

func TestTheOnlyProcessIsMainLocalMainAndLast(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	if !must(acc.IsLastProcess()) {
		t.Fatal("the only process is not the last")
	}
	var ran []string
	mark := func(name string) func() error {
		return func() error { ran = append(ran, name); return nil }
	}
	ok(t, acc.OnMainProcess(mark("main")))
	ok(t, acc.OnLocalMainProcess(mark("local main")))
	ok(t, acc.OnLastProcess(mark("last")))
	ok(t, acc.OnProcess(0, mark("process 0")))
	ok(t, acc.OnProcess(1, mark("process 1")))
	ok(t, acc.LocalMainProcessFirst(mark("local main first")))
	ok(t, acc.MainProcessFirst(mark("main first")))
	want := []string{"main", "local main", "last", "process 0", "local main first", "main first"}
	if !slices.Equal(ran, want) {
		t.Fatalf("ran %v, want %v", ran, want)
	}
	boom := errors.New("boom")
	for name, f := range map[string]func(func() error) error{
		"OnMainProcess":         acc.OnMainProcess,
		"OnLocalMainProcess":    acc.OnLocalMainProcess,
		"OnLastProcess":         acc.OnLastProcess,
		"LocalMainProcessFirst": acc.LocalMainProcessFirst,
	} {
		if err := f(func() error { return boom }); err != boom {
			t.Fatalf("%s returned %v, want f's error", name, err)
		}
		wantStatus(t, f(nil), accel.ErrInvalidArgument, name)
	}
	// local_main_process_first's end runs after a panic: a second block begins and ends.
	dir := t.TempDir()
	if v := panicValue(func() { acc.LocalMainProcessFirst(func() error { panic("first") }) }); v != "first" {
		t.Fatalf("the panic came out as %v", v)
	}
	ok(t, acc.LocalMainProcessFirst(func() error {
		return os.WriteFile(filepath.Join(dir, "cache"), []byte("made once"), 0o644)
	}))
	ok(t, acc.Close())
	_, err := acc.IsLastProcess()
	wantStatus(t, err, accel.ErrState)
	wantStatus(t, acc.OnMainProcess(mark("closed")), accel.ErrState)
	wantStatus(t, acc.LocalMainProcessFirst(mark("closed")), accel.ErrState)
}

// gradSource reads a linear layer's gradients back, weight then bias, flat.
const gradSource = `
def loss(self, x):
    return self.fc.forward(x).sum()

def grads(self):
    w = self.fc.weight.grad
    b = self.fc.bias.grad
    assert w is not None
    assert b is not None
    return torch.cat([w.reshape(-1), b.reshape(-1)])
`

func TestClipGradValueClampsEveryGradient(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	m := must(accel.NewModel())
	defer m.Close()
	ok(t, m.AddLayer("fc", "linear", "in_features=3 out_features=2"))
	ok(t, m.Define(gradSource))
	ok(t, acc.Prepare(m))
	// d loss / d weight is x on each row, d loss / d bias is 1: [0.001 0.2 -3] twice, [1 1].
	x := must(accel.FromSlice([]float32{0.001, 0.2, -3}, 1, 3))
	defer x.Close()
	loss := must(m.Call("loss", x))
	defer loss.Close()
	ok(t, acc.Backward(loss))
	before := must(accel.TakeSlice[float32](m.Call("grads")))
	if !slices.Equal(before, []float32{0.001, 0.2, -3, 0.001, 0.2, -3, 1, 1}) {
		t.Fatalf("gradients before clipping %v", before)
	}
	// The largest magnitude, from clip_grad_norm's infinity norm with nothing to clip.
	if norm := must(acc.ClipGradNorm(m, 1e30, math.Inf(1))); norm != 3 {
		t.Fatalf("max |gradient| %v before clipping", norm)
	}
	ok(t, acc.ClipGradValue(m, 0.5))
	after := must(accel.TakeSlice[float32](m.Call("grads")))
	if want := []float32{0.001, 0.2, -0.5, 0.001, 0.2, -0.5, 0.5, 0.5}; !slices.Equal(after, want) {
		t.Fatalf("gradients after clipping to 0.5: %v, want %v", after, want)
	}
	if norm := must(acc.ClipGradNorm(m, 1e30, math.Inf(1))); norm != 0.5 {
		t.Fatalf("max |gradient| %v after clipping to 0.5", norm)
	}
	wantStatus(t, acc.ClipGradValue(nil, 0.5), accel.ErrInvalidArgument)
}

// The configuration keys of Accelerate's GradientAccumulationPlugin and DataLoaderConfiguration,
// and save_on_each_node, that Config's documentation names.
func TestTheStepConfigurationKeysAreAccepted(t *testing.T) {
	begin(t)
	cfg := must(accel.NewConfig())
	defer cfg.Close()
	for _, kv := range [][2]any{
		{"sync_each_batch", true}, {"sync_with_dataloader", false}, {"adjust_scheduler", true},
		{"data_seed", 5}, {"use_seedable_sampler", true}, {"save_on_each_node", true},
	} {
		ok(t, cfg.Set(kv[0].(string), kv[1]))
		if got := must(cfg.Get(kv[0].(string))); got != fmt.Sprint(kv[1]) {
			t.Fatalf("%s = %q after Set(%v)", kv[0], got, kv[1])
		}
	}
	wantStatus(t, cfg.Set("data_seed", -2), accel.ErrConfig, "data_seed")
	wantStatus(t, cfg.Set("sync_each_batch", "maybe"), accel.ErrConfig, "sync_each_batch")
}
