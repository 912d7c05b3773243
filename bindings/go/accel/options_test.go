package accel_test

// The option structs give what the keys give, and refuse what the keys refuse.

import (
	"errors"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// shapes is every tensor of the model by name, with its shape.
func shapes(t *testing.T, m *accel.Model) map[string][]int64 {
	out := map[string][]int64{}
	for _, name := range must(m.TensorNames()) {
		tensor := must(m.Tensor(name))
		out[name] = must(tensor.Shape())
		tensor.Close()
	}
	return out
}

func lrs(t *testing.T, s *accel.Scheduler, o *accel.Optimizer, n int) []float64 {
	var out []float64
	for range n {
		ok(t, o.Step())
		ok(t, s.Step())
		out = append(out, must(s.LR()))
	}
	return out
}

func TestOptionStructsGiveWhatTheKeysGive(t *testing.T) {
	begin(t)
	typed, keyed := must(accel.NewModel()), must(accel.NewModel())
	defer typed.Close()
	defer keyed.Close()
	ok(t, typed.Add("conv", accel.Conv2dOptions{InChannels: 1, OutChannels: 4, KernelSize: 3, Bias: accel.Ptr(false)}))
	ok(t, typed.Add("fc", accel.LinearOptions{InFeatures: 6, OutFeatures: 2}))
	ok(t, typed.Add("norm", accel.LayerNormOptions{NormalizedShape: 2, Eps: accel.Ptr(1e-6)}))
	ok(t, keyed.AddLayer("conv", "conv2d", "in_channels=1 out_channels=4 kernel_size=3 bias=false")) //nolint:staticcheck // the key form, compared
	ok(t, keyed.AddLayer("fc", "linear", "in_features=6 out_features=2"))                            //nolint:staticcheck
	ok(t, keyed.AddLayer("norm", "layer_norm", "normalized_shape=2 eps=1e-6"))                       //nolint:staticcheck
	if a, b := shapes(t, typed), shapes(t, keyed); len(a) != len(b) || len(a) == 0 {
		t.Fatalf("typed layers %v, keyed %v", a, b)
	} else {
		for name, shape := range b {
			if !slices.Equal(a[name], shape) {
				t.Fatalf("%s: typed %v, keyed %v", name, a[name], shape)
			}
		}
	}

	opt := must(accel.NewOptimizerWith(typed, accel.AdamWOptions{LR: accel.Ptr(0.1), WeightDecay: accel.Ptr(0.0)}))
	defer opt.Close()
	if lr := must(opt.LR()); lr != 0.1 {
		t.Fatalf("LR %v, want 0.1", lr)
	}
	keyedOpt := must(accel.NewOptimizer(keyed, "adamw")) //nolint:staticcheck // the key form, compared
	defer keyedOpt.Close()
	ok(t, keyedOpt.Set("lr", 0.1))
	cycle := must(accel.NewSchedulerWith(opt, accel.OneCycleSchedule{
		MaxLR: 0.5, TotalSteps: 8, AnnealStrategy: accel.Ptr(accel.AnnealStrategyLinear),
		CycleMomentum: accel.Ptr(false),
	}))
	defer cycle.Close()
	keyedCycle := must(accel.NewScheduler(keyedOpt, "one_cycle")) //nolint:staticcheck
	defer keyedCycle.Close()
	for _, kv := range [][2]any{{"max_lr", 0.5}, {"total_steps", 8}, {"anneal_strategy", "linear"}, {"cycle_momentum", false}} {
		ok(t, keyedCycle.Set(kv[0].(string), kv[1]))
	}
	if a, b := lrs(t, cycle, opt, 7), lrs(t, keyedCycle, keyedOpt, 7); !slices.Equal(a, b) {
		t.Fatalf("one_cycle typed %v, keyed %v", a, b)
	}
}

func TestDataLoaderOptionsAndTheirRefusals(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	x := must(accel.FromSlice(make([]float32, 10), 10))
	defer x.Close()
	ds := must(accel.DatasetFromTensors(x))
	defer ds.Close()
	loader := must(accel.NewDataLoaderWith(acc, ds, accel.DataLoaderOptions{
		BatchSize: accel.Ptr(4), DropLast: accel.Ptr(true), Shuffle: accel.Ptr(false),
	}))
	defer loader.Close()
	if n := must(loader.BatchCount()); n != 2 {
		t.Fatalf("10 samples in batches of 4, the last dropped: %d batches, want 2", n)
	}
	ok(t, loader.SetOptions(accel.DataLoaderOptions{DropLast: accel.Ptr(false)}))
	if n := must(loader.BatchCount()); n != 3 {
		t.Fatalf("with drop_last false: %d batches, want 3", n)
	}
	_, err := accel.NewDataLoaderWith(acc, ds, accel.DataLoaderOptions{BatchSize: accel.Ptr(0)})
	if !errors.Is(err, accel.ErrInvalidArgument) || !strings.Contains(err.Error(), "batch_size") {
		t.Fatalf("batch_size 0: want ErrInvalidArgument naming batch_size, got %v", err)
	}
	m := must(accel.NewModel())
	defer m.Close()
	if err := m.Add("fc", accel.LinearOptions{OutFeatures: 3}); err == nil || !strings.Contains(err.Error(), "in_features") {
		t.Fatalf("a linear layer without in_features: want an error naming it, got %v", err)
	}
	if _, err := accel.NewOptimizerWith(m, nil); !errors.Is(err, accel.ErrInvalidArgument) {
		t.Fatalf("nil options: want ErrInvalidArgument, got %v", err)
	}
}

// The spellings issue 53 replaced still work and are marked as Go marks them: a "Deprecated:"
// paragraph naming the replacement, which gopls, staticcheck and pkg.go.dev report.
func TestDeprecatedSpellingsSayWhatReplacesThem(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	files := []*ast.File{}
	for _, f := range pkgs["accel"].Files {
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, "github.com/libaccel/libaccel/bindings/go/accel")
	if err != nil {
		t.Fatal(err)
	}
	deprecated := map[string]string{}
	note := func(name, text string) {
		if i := strings.Index(text, "Deprecated: "); i >= 0 {
			deprecated[name] = text[i:]
		}
	}
	for _, f := range p.Funcs {
		note(f.Name, f.Doc)
	}
	for _, ty := range p.Types {
		for _, f := range ty.Funcs {
			note(f.Name, f.Doc)
		}
		for _, m := range ty.Methods {
			note(ty.Name+"."+m.Name, m.Doc)
		}
	}
	want := map[string]string{
		"NewOptimizer": "NewOptimizerWith", "NewScheduler": "NewSchedulerWith", "Model.AddLayer": "use Add",
	}
	for name, replacement := range want {
		if !strings.Contains(deprecated[name], replacement) {
			t.Errorf("%s: want a Deprecated: paragraph naming %s, got %q", name, replacement, deprecated[name])
		}
	}
	for name := range deprecated {
		if _, ok := want[name]; !ok {
			t.Errorf("%s is deprecated but not in this test's list", name)
		}
	}
}
