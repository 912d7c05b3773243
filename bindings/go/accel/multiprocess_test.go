package accel_test

// Real processes over real sockets: the examples and a training loop of this package under
// `accel launch -n 2`, and one process x 64 against two x 32. This test binary is also the rank
// program: TestMain runs runRole when ACCEL_GO_ROLE is set.

import (
	"bufio"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

const mlpSource = `
def forward(self, x):
    return self.fc2.forward(torch.relu(self.fc1.forward(x)))

def training_step(self, x, y):
    return torch.cross_entropy_loss(self.forward(x), y.long())
`

// run runs a command and returns its combined output, failing the test when it exits non-zero.
func run(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	return string(out)
}

func launch(t *testing.T, n int, program string, args ...string) *exec.Cmd {
	return exec.Command(accelCLI(t), append([]string{"launch", "-n", strconv.Itoa(n), program}, args...)...)
}

// self launches this test binary in a role.
func self(t *testing.T, n int, role string, env ...string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := launch(t, n, exe)
	cmd.Env = append(append(os.Environ(), "ACCEL_GO_ROLE="+role), env...)
	return cmd
}

func expectLine(t *testing.T, output, line string) {
	t.Helper()
	if !slices.Contains(strings.Split(output, "\n"), line) {
		t.Fatalf("no line %q in:\n%s", line, output)
	}
}

func TestCollectivesExampleOnTwoRanks(t *testing.T) {
	out := run(t, launch(t, 2, buildExample(t, "collectives")))
	for _, line := range []string{
		"rank 0 of 2 (local rank 0) on cpu, main process",
		"rank 1 of 2 (local rank 1) on cpu",
		"distributed type MULTI_CPU, mixed precision no, libaccel 0.2.4",
		"gather                   shape [4] values 0 1 10 11",
		"pad + gather             shape [4] values 1 -1 1 1",
		"reduce sum of rank+1     shape [] values 3",
		"reduce mean of rank+1    shape [] values 1.5",
		"broadcast from last rank shape [3] values 3.5 4.5 5.5",
		`gather_object[0]       "hello from rank 0"`,
		`gather_object[1]       "hello from rank 1"`,
	} {
		expectLine(t, out, line)
	}
}

// valuesAfter is the number after key in every line that has it ("loss 0.9495" -> 0.9495).
func valuesAfter(output, key string) []float64 {
	var values []float64
	for _, line := range strings.Split(output, "\n") {
		_, rest, found := strings.Cut(line, key)
		if !found {
			continue
		}
		if fields := strings.Fields(rest); len(fields) > 0 {
			if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
				values = append(values, v)
			}
		}
	}
	return values
}

func TestTrainingExampleOnTwoRanks(t *testing.T) {
	out := run(t, launch(t, 2, buildExample(t, "train_fashion_mnist"), "--max-steps", "300"))
	losses := valuesAfter(out, " loss ")
	if len(losses) != 3 || !(losses[2] < losses[0]) {
		t.Fatalf("the loss does not fall at steps 100, 200, 300:\n%s", out)
	}
	if acc := valuesAfter(out, "test accuracy "); len(acc) != 1 || acc[0] < 0.7 {
		t.Fatalf("test accuracy below 0.7 after 300 steps:\n%s", out)
	}
}

// The C and the Go example, one process: the same losses and the same test result. Both log
// their setup and progress lines: the C example to standard error ("INFO: "), the Go example
// through slog.Default() ("<date> <time> INFO ", then " rank=0").
func TestTrainingExampleMatchesTheCExample(t *testing.T) {
	dir := os.Getenv("ACCEL_C_EXAMPLES_DIR")
	if dir == "" {
		dir = filepath.Join(repoRoot(t), "build/bin")
	}
	goExample := buildExample(t, "train_fashion_mnist")
	args := []string{"--max-steps", "200", "--workers", "0"}
	fromC := run(t, exec.Command(filepath.Join(dir, "train_fashion_mnist"), args...))
	fromGo := run(t, exec.Command(goExample, args...))
	slogged := regexp.MustCompile(`^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d INFO (.*) rank=0$`)
	// Everything but the timings: what precedes " samples/s" and " after ", and the loss value.
	keep := func(out string) (lines []string, logged int) {
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if m := slogged.FindStringSubmatch(l); m != nil {
				l = m[1]
				logged++
			} else if rest, found := strings.CutPrefix(l, "INFO: "); found {
				l = rest
				logged++
			}
			l, _, _ = strings.Cut(l, " samples/s")
			l, _, _ = strings.Cut(l, " after ")
			if head, tail, found := strings.Cut(l, " loss "); found {
				l = head + " loss " + strings.Fields(tail)[0]
			}
			lines = append(lines, l)
		}
		return lines, logged
	}
	a, loggedC := keep(fromC)
	b, loggedGo := keep(fromGo)
	if !slices.Equal(a, b) || len(a) != 4 || loggedC != 3 || loggedGo != 3 {
		t.Fatalf("C:\n%s\nGo:\n%s", fromC, fromGo)
	}
}

// The two ranks also split work between them, stop on a trigger one of them raised, share a
// stream and log through slog (in this launch rather than one of their own: every launch costs a
// rendezvous).
func TestTwoRanksTrainAndAgree(t *testing.T) {
	out := run(t, self(t, 2, "train"))
	// The logger (rankLogs): a main-process message once, every rank's once with its rank, the
	// in-order rounds in rank order although rank 1 comes first, the debug message dropped.
	count := func(line string) int { return strings.Count(out, line+"\n") }
	if n := count(`level=INFO msg="once per job" rank=0`); n != 1 || strings.Count(out, "once per job") != 1 {
		t.Fatalf("the main process's message written %d times:\n%s", n, out)
	}
	for rank := range 2 {
		if n := count(fmt.Sprintf(`level=WARN msg="every rank" rank=%d processes=2`, rank)); n != 1 {
			t.Fatalf("rank %d's message written %d times:\n%s", rank, n, out)
		}
	}
	for round := range 3 {
		first := strings.Index(out, fmt.Sprintf(`msg="round %d" rank=0 processes=2`, round))
		second := strings.Index(out, fmt.Sprintf(`msg="round %d" rank=1 processes=2`, round))
		if first < 0 || second < first {
			t.Fatalf("round %d is not in rank order:\n%s", round, out)
		}
	}
	if strings.Contains(out, "hidden below info") {
		t.Fatalf("a debug message passed the info level:\n%s", out)
	}
	expectLine(t, out, "rank 0: the loss fell, parameters equal on every rank")
	expectLine(t, out, "rank 1: the loss fell, parameters equal on every rank")
	expectLine(t, out, "rank 0: 3 steps in JoinUnevenInputs, parameters equal on every rank")
	expectLine(t, out, "rank 1: 2 steps in JoinUnevenInputs, parameters equal on every rank")
	expectLine(t, out, `rank 0: split [0 1] padded [0 1], ["a" "b"] padded ["a" "b"], rows [0 1] padded [0 1]`)
	expectLine(t, out, `rank 1: split [2] padded [2 2], ["c"] padded ["c" "c"], rows [2] padded [2 2]`)
	expectLine(t, out, `rank 0: map padded id [0 1] len [5 6]`)
	expectLine(t, out, `rank 1: map padded id [2 2] len [7 7]`)
	expectLine(t, out, `rank 0: Rand after SetSeed: true, device-specific: true`)
	expectLine(t, out, `rank 1: Rand after SetSeed: true, device-specific: true`)
	expectLine(t, out, "rank 0: trigger set by rank 1: true, then false")
	expectLine(t, out, "rank 1: trigger set by rank 1: true, then false")
	// Accelerate's sharding of an IterableDataset: global batch i to rank i mod 2, the last one
	// completed from the first. Dispatched, the main process alone reads the stream.
	expectLine(t, out, "rank 0: stream of 5, dispatch_batches true: [[0] [2] [4]], read here: true")
	expectLine(t, out, "rank 1: stream of 5, dispatch_batches true: [[1] [3] [0]], read here: false")
	expectLine(t, out, "rank 0: stream of 5, dispatch_batches false: [[0] [2] [4]], read here: true")
	expectLine(t, out, "rank 1: stream of 5, dispatch_batches false: [[1] [3] [0]], read here: true")
}

func paramsOf(t *testing.T, path string) map[string][]float64 {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	params := map[string][]float64{}
	scanner := bufio.NewScanner(f)
	scanner.Buffer(nil, 1<<20)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		for _, w := range fields[1:] {
			v, err := strconv.ParseFloat(w, 64)
			if err != nil {
				t.Fatal(err)
			}
			params[fields[0]] = append(params[fields[0]], v)
		}
	}
	return params
}

// expectClose fails unless the parameters in files a and b (4 tensors) are within tolerance x
// each tensor's largest value.
func expectClose(t *testing.T, a, b map[string][]float64, tolerance float64, what string) {
	t.Helper()
	if len(a) != 4 || len(b) != 4 {
		t.Fatalf("%d and %d parameters written", len(a), len(b))
	}
	for name, x := range a {
		y := b[name]
		if len(x) != len(y) {
			t.Fatalf("%s: %d vs %d values", name, len(x), len(y))
		}
		scale, worst := 0.0, 0.0
		for i := range x {
			scale = math.Max(scale, math.Abs(x[i]))
			worst = math.Max(worst, math.Abs(x[i]-y[i]))
		}
		if worst > tolerance*scale {
			t.Fatalf("%s: %s differ by %g (scale %g)", name, what, worst, scale)
		}
	}
}

func TestOneBy64EqualsTwoBy32(t *testing.T) {
	dir := t.TempDir()
	one, two := filepath.Join(dir, "1x64.txt"), filepath.Join(dir, "2x32.txt")
	run(t, self(t, 1, "equiv", "ACCEL_GO_BATCH=64", "ACCEL_GO_OUT="+one))
	run(t, self(t, 2, "equiv", "ACCEL_GO_BATCH=32", "ACCEL_GO_OUT="+two))
	expectClose(t, paramsOf(t, one), paramsOf(t, two), 1e-5, "1 x 64 and 2 x 32")
}

// ZeRO stage 2 chosen through Config (each rank steps and keeps the gradients of the parameters
// it owns) trains to what stage 0 does, with AdamW on two ranks.
func TestZeroStageTwoFromTheConfigEqualsStageZero(t *testing.T) {
	dir := t.TempDir()
	plain, sharded := filepath.Join(dir, "stage0.txt"), filepath.Join(dir, "stage2.txt")
	env := []string{"ACCEL_GO_BATCH=32", "ACCEL_GO_OPTIMIZER=adamw"}
	run(t, self(t, 2, "equiv", append(env, "ACCEL_GO_OUT="+plain)...))
	state := filepath.Join(dir, "state")
	run(t, self(t, 2, "equiv", append(env, "ACCEL_GO_OUT="+sharded, "ACCEL_GO_ZERO_STAGE=2",
		"ACCEL_GO_STATE_DIR="+state)...))
	expectClose(t, paramsOf(t, plain), paramsOf(t, sharded), 1e-6, "stage 0 and stage 2")
	// The job was sharded: each rank saved its own part of the optimizer state.
	for rank := range 2 {
		part := filepath.Join(state, fmt.Sprintf("optimizer_0.rank_%d.safetensors", rank))
		if _, err := os.Stat(part); err != nil {
			t.Fatalf("no optimizer part of rank %d: %v", rank, err)
		}
	}
}

// ---- the ranks ---------------------------------------------------------------------------

func runRole(role string) error {
	switch role {
	case "train":
		return rankTrain()
	case "equiv":
		return rankEquiv()
	case "step_tools":
		return rankStepTools() // steptools_multiprocess_test.go
	case "context":
		return rankContext() // context_test.go
	}
	return fmt.Errorf("unknown role %q", role)
}

func mlp(hidden, inputs, outputs int) (*accel.Model, error) {
	m, err := accel.NewModel()
	if err != nil {
		return nil, err
	}
	for _, layer := range [][3]string{
		{"fc1", "linear", fmt.Sprintf("in_features=%d out_features=%d", inputs, hidden)},
		{"fc2", "linear", fmt.Sprintf("in_features=%d out_features=%d", hidden, outputs)},
	} {
		if err := m.AddLayer(layer[0], layer[1], layer[2]); err != nil {
			return nil, err
		}
	}
	return m, m.Define(mlpSource)
}

// parametersAgree checks that every parameter is equal on every rank, bit for bit.
func parametersAgree(acc *accel.Accelerator, model *accel.Model) error {
	names, err := model.TensorNames()
	if err != nil {
		return err
	}
	for _, name := range names {
		mine, err := model.Tensor(name)
		if err != nil {
			return err
		}
		values, err := accel.ToSlice[float32](mine)
		mine.Close()
		if err != nil {
			return err
		}
		flat, err := accel.FromSlice(values, 1, int64(len(values)))
		if err != nil {
			return err
		}
		all, err := acc.Gather(flat)
		flat.Close()
		if err != nil {
			return err
		}
		every, err := accel.ToSlice[float32](all)
		all.Close()
		if err != nil {
			return err
		}
		n := len(values)
		world, err := acc.NumProcesses()
		if err != nil {
			return err
		}
		for r := 1; r < world; r++ {
			if !slices.Equal(every[r*n:(r+1)*n], every[:n]) {
				return fmt.Errorf("%s differs between rank 0 and rank %d", name, r)
			}
		}
	}
	return nil
}

// rankTrain: 300 steps of an MLP on Fashion-MNIST with a prefetching loader; the loss falls and
// the replicas stay identical.
func rankTrain() error {
	acc, err := accel.New(nil)
	if err != nil {
		return err
	}
	defer acc.Close()
	rank, err := acc.ProcessIndex()
	if err != nil {
		return err
	}
	if err := rankLogs(acc, rank); err != nil {
		return err
	}
	if err := acc.SetSeed(5, false); err != nil {
		return err
	}
	model, err := mlp(64, 784, 10)
	if err != nil {
		return err
	}
	opt, err := accel.NewOptimizer(model, "adamw")
	if err != nil {
		return err
	}
	if err := opt.Set("lr", 2e-3); err != nil {
		return err
	}
	data, err := accel.DatasetFromIDX(fashionMNIST+"/train-images-idx3-ubyte.gz", fashionMNIST+"/train-labels-idx1-ubyte.gz")
	if err != nil {
		return err
	}
	loader, err := accel.NewDataLoader(acc, data)
	if err != nil {
		return err
	}
	// Open to the end: joinUneven's even_batches override sets every prepared dataloader's, and
	// a closed one (Close, or the cleanup of one no longer reachable) refuses it with ErrState.
	defer loader.Close()
	for _, o := range [][2]any{{"batch_size", 32}, {"shuffle", true}, {"num_workers", 1}} {
		if err := loader.Set(o[0].(string), o[1]); err != nil {
			return err
		}
	}
	if err := acc.Prepare(model, opt, loader); err != nil {
		return err
	}
	var first, last float64
	step := 0
	for batch, err := range loader.All() {
		if err != nil {
			return err
		}
		if step == 300 {
			break
		}
		value, err := mlpStep(acc, model, opt, batch)
		if err != nil {
			return err
		}
		if step < 20 {
			first += value / 20
		} else if step >= 280 {
			last += value / 20
		}
		step++
	}
	if !(last < 0.7*first) {
		return fmt.Errorf("rank %d: the loss did not fall: %.4f -> %.4f", rank, first, last)
	}
	if err := parametersAgree(acc, model); err != nil {
		return err
	}
	fmt.Printf("rank %d: the loss fell, parameters equal on every rank\n", rank)
	if err := joinUneven(acc, rank, model, opt); err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	if err := splitAndTrigger(acc, rank); err != nil {
		return err
	}
	for _, dispatch := range []bool{true, false} {
		if err := streamShards(acc, rank, dispatch); err != nil {
			return err
		}
	}
	return acc.WaitForEveryone()
}

// rankLogs logs, through a slog text handler on standard output, a main-process message, a
// message of every rank, three rounds in rank order (the later rank made to come first, so that
// only the order puts rank 0 first) and a debug message below the default level.
func rankLogs(acc *accel.Accelerator, rank int) error {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelDebug, // the accelerator's info level alone drops the debug message
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	if err := acc.SetLogger(logger); err != nil {
		return err
	}
	if err := acc.Info("once per job"); err != nil {
		return err
	}
	if err := acc.Warn("every rank", accel.AllProcesses()); err != nil {
		return err
	}
	for round := range 3 {
		time.Sleep(time.Duration(1-rank) * 50 * time.Millisecond)
		if err := acc.Info(fmt.Sprintf("round %d", round), accel.InOrder()); err != nil {
			return err
		}
	}
	return acc.Debug("hidden below info", accel.AllProcesses())
}

// joinUneven trains the role's model (its only prepared model, no buffers) under
// JoinUnevenInputs on 10 samples, 2 per rank and step, even_batches off: rank 0 makes 3 steps
// while rank 1, done after 2, answers its gradient all-reduce; then rank 1 takes rank 0's
// parameters, and the prepared dataloaders have their even_batches back.
func joinUneven(acc *accel.Accelerator, rank int, model *accel.Model, opt *accel.Optimizer) error {
	params := func() ([]float32, error) {
		names, err := model.TensorNames()
		if err != nil {
			return nil, err
		}
		var all []float32
		for _, name := range names {
			values, err := accel.TakeSlice[float32](model.Tensor(name))
			if err != nil {
				return nil, err
			}
			all = append(all, values...)
		}
		return all, nil
	}
	pixels := make([]uint8, 10*784)
	for i := range pixels {
		pixels[i] = uint8(i * 37 % 255)
	}
	labels := []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	x, err := accel.FromSlice(pixels, 10, 784)
	if err != nil {
		return err
	}
	defer x.Close()
	y, err := accel.FromSlice(labels, 10)
	if err != nil {
		return err
	}
	defer y.Close()
	data, err := accel.DatasetFromTensors(x, y)
	if err != nil {
		return err
	}
	defer data.Close()
	loader, err := accel.NewDataLoader(acc, data)
	if err != nil {
		return err
	}
	defer loader.Close()
	if err := loader.Set("batch_size", 2); err != nil {
		return err
	}
	if err := acc.Prepare(loader); err != nil {
		return err
	}
	steps := 0
	var beforeEnd []float32
	err = acc.JoinUnevenInputs(accel.EvenBatchesOff, func() error {
		for batch, err := range loader.All() {
			if err != nil {
				return err
			}
			// No Reduce of the loss here: rank 1, joined, would not answer it.
			loss, err := mlpLocalStep(acc, model, opt, batch)
			if err != nil {
				return err
			}
			loss.Close()
			steps++
		}
		var err error
		beforeEnd, err = params()
		return err
	})
	if err != nil {
		return err
	}
	if steps != 3-rank {
		return fmt.Errorf("%d steps in the join", steps)
	}
	after, err := params()
	if err != nil {
		return err
	}
	// Rank 0 trained longest and keeps its parameters; rank 1 takes them.
	if kept := slices.Equal(after, beforeEnd); kept != (rank == 0) {
		return fmt.Errorf("the parameters kept at the end of the join: %v", kept)
	}
	if err := parametersAgree(acc, model); err != nil {
		return err
	}
	// The override ended with the join: even batches again (3 per rank, the last padded).
	if n, err := loader.BatchCount(); err != nil || n != 3 {
		return fmt.Errorf("%d batches after the join (%v): even_batches not restored", n, err)
	}
	fmt.Printf("rank %d: %d steps in JoinUnevenInputs, parameters equal on every rank\n", rank, steps)
	return nil
}

// streamShards prints the labels this rank gets from a stream of 5 samples (label = position)
// in batches of 1, and whether its stream function ran here. Dispatched, on the main process's
// reading thread (num_workers 1); not dispatched, on this goroutine.
func streamShards(acc *accel.Accelerator, rank int, dispatch bool) error {
	var read atomic.Bool
	data, err := accel.DatasetFromStream([]accel.Field{{DType: accel.I64}},
		func(epoch, position int64, s *accel.Sample) (bool, error) {
			read.Store(true)
			if position >= 5 {
				return false, nil
			}
			return true, s.Set(0, position)
		})
	if err != nil {
		return err
	}
	loader, err := accel.NewDataLoader(acc, data)
	data.Close()
	if err != nil {
		return err
	}
	defer loader.Close()
	workers := 0
	if dispatch {
		workers = 1
	}
	for _, o := range [][2]any{{"batch_size", 1}, {"dispatch_batches", dispatch}, {"num_workers", workers}} {
		if err := loader.Set(o[0].(string), o[1]); err != nil {
			return err
		}
	}
	var labels [][]int64
	for batch, err := range loader.All() {
		if err != nil {
			return err
		}
		values, err := accel.ToSlice[int64](batch[0])
		if err != nil {
			return err
		}
		labels = append(labels, values)
	}
	fmt.Printf("rank %d: stream of 5, dispatch_batches %v: %v, read here: %v\n", rank, dispatch, labels, read.Load())
	return nil
}

// splitAndTrigger prints this rank's share of 3 items (indices, a slice, a tensor's rows), plain
// and padded, and what two trigger checks see after rank 1 raised its trigger.
func splitAndTrigger(acc *accel.Accelerator, rank int) error {
	split, err := acc.SplitBetweenProcesses(3, false)
	if err != nil {
		return err
	}
	padded, err := acc.SplitBetweenProcesses(3, true)
	if err != nil {
		return err
	}
	items := []string{"a", "b", "c"}
	mine, err := accel.SplitSlice(acc, items, false)
	if err != nil {
		return err
	}
	minePadded, err := accel.SplitSlice(acc, items, true)
	if err != nil {
		return err
	}
	rows, err := accel.FromSlice([]int64{0, 1, 2}, 3, 1)
	if err != nil {
		return err
	}
	defer rows.Close()
	myRows, err := accel.TakeSlice[int64](acc.SplitTensorBetweenProcesses(rows, false))
	if err != nil {
		return err
	}
	myPaddedRows, err := accel.TakeSlice[int64](acc.SplitTensorBetweenProcesses(rows, true))
	if err != nil {
		return err
	}
	fmt.Printf("rank %d: split %v padded %v, %q padded %q, rows %v padded %v\n", rank, split, padded,
		mine, minePadded, myRows, myPaddedRows)
	columns, err := accel.SplitMap(acc, map[string][]int{"id": {0, 1, 2}, "len": {5, 6, 7}}, true)
	if err != nil {
		return err
	}
	fmt.Printf("rank %d: map padded id %v len %v\n", rank, columns["id"], columns["len"])
	// SetSeed seeds the Go generator: a PCG of (seed, 0) on every rank, (seed + rank, 0) apart.
	if err := acc.SetSeed(1234, false); err != nil {
		return err
	}
	same := acc.Rand().Uint64() == rand.New(rand.NewPCG(1234, 0)).Uint64()
	if err := acc.SetSeed(1234, true); err != nil {
		return err
	}
	apart := acc.Rand().Uint64() == rand.New(rand.NewPCG(1234+uint64(rank), 0)).Uint64()
	fmt.Printf("rank %d: Rand after SetSeed: %v, device-specific: %v\n", rank, same, apart)

	if rank == 1 {
		if err := acc.SetTrigger(); err != nil {
			return err
		}
	}
	first, err := acc.CheckTrigger()
	if err != nil {
		return err
	}
	second, err := acc.CheckTrigger()
	if err != nil {
		return err
	}
	fmt.Printf("rank %d: trigger set by rank 1: %v, then %v\n", rank, first, second)
	return nil
}

// mlpStep trains on one batch of images scaled to [0, 1]; it returns the loss averaged over ranks.
func mlpStep(acc *accel.Accelerator, model *accel.Model, opt *accel.Optimizer, batch accel.Batch) (float64, error) {
	loss, err := mlpLocalStep(acc, model, opt, batch)
	if err != nil {
		return 0, err
	}
	defer loss.Close()
	mean, err := acc.Reduce(loss, accel.Mean)
	if err != nil {
		return 0, err
	}
	defer mean.Close()
	return mean.Float64()
}

// mlpLocalStep is mlpStep without the loss's reduction (no collective but the gradients'):
// it returns this rank's loss.
func mlpLocalStep(acc *accel.Accelerator, model *accel.Model, opt *accel.Optimizer, batch accel.Batch) (*accel.Tensor, error) {
	pixels, err := accel.ToSlice[uint8](batch[0])
	if err != nil {
		return nil, err
	}
	scaled := make([]float32, len(pixels))
	for i, p := range pixels {
		scaled[i] = float32(p) / 255
	}
	x, err := accel.FromSlice(scaled, int64(len(pixels)/784), 784)
	if err != nil {
		return nil, err
	}
	defer x.Close()
	if err := acc.Accumulate(); err != nil {
		return nil, err
	}
	loss, err := model.Call("training_step", x, batch[1])
	if err != nil {
		return nil, err
	}
	err = acc.Backward(loss)
	if err == nil {
		err = opt.Step()
	}
	if err == nil {
		err = opt.ZeroGrad()
	}
	if err != nil {
		loss.Close()
		return nil, err
	}
	return loss, nil
}

// rankEquiv: 20 SGD steps on fixed data, no dropout, no shuffle: the parameters depend only on
// the global batch, not on how many processes share it.
func rankEquiv() error {
	batch, err := strconv.Atoi(os.Getenv("ACCEL_GO_BATCH"))
	if err != nil {
		return fmt.Errorf("ACCEL_GO_BATCH: %v", err)
	}
	// ACCEL_GO_ZERO_STAGE: the job's sharding, chosen through the configuration as a program
	// would (Accelerate's DeepSpeed keys).
	var cfg *accel.Config
	if stage := os.Getenv("ACCEL_GO_ZERO_STAGE"); stage != "" {
		if cfg, err = accel.NewConfig(); err != nil {
			return err
		}
		defer cfg.Close()
		if err := cfg.Set("distributed_type", "DEEPSPEED"); err != nil {
			return err
		}
		if err := cfg.Set("deepspeed_config", "{zero_stage: "+stage+"}"); err != nil {
			return err
		}
	}
	acc, err := accel.New(cfg)
	if err != nil {
		return err
	}
	defer acc.Close()
	if dist, err := acc.DistributedType(); err != nil {
		return err
	} else if cfg != nil && dist != accel.DistributedDeepSpeed {
		return fmt.Errorf("distributed type %v under DeepSpeed's configuration", dist)
	}
	if err := acc.SetSeed(11, false); err != nil {
		return err
	}
	const n = 64 * 20
	xs := make([]float32, n*8)
	for i := range xs {
		xs[i] = float32(i*7919%1000)/500 - 1
	}
	ys := make([]int64, n)
	for i := range ys {
		ys[i] = int64(i * 31 % 4)
	}
	x, err := accel.FromSlice(xs, n, 8)
	if err != nil {
		return err
	}
	y, err := accel.FromSlice(ys, n)
	if err != nil {
		return err
	}
	data, err := accel.DatasetFromTensors(x, y)
	if err != nil {
		return err
	}
	loader, err := accel.NewDataLoader(acc, data)
	if err != nil {
		return err
	}
	if err := loader.Set("batch_size", batch); err != nil {
		return err
	}
	model, err := mlp(16, 8, 4)
	if err != nil {
		return err
	}
	kind, lr := "sgd", 0.1
	if os.Getenv("ACCEL_GO_OPTIMIZER") == "adamw" {
		kind, lr = "adamw", 0.01
	}
	opt, err := accel.NewOptimizer(model, kind)
	if err != nil {
		return err
	}
	if err := opt.Set("lr", lr); err != nil {
		return err
	}
	if err := acc.Prepare(model, opt, loader); err != nil {
		return err
	}
	for b, err := range loader.All() {
		if err != nil {
			return err
		}
		if err := acc.Accumulate(); err != nil {
			return err
		}
		loss, err := model.Call("training_step", b...)
		if err != nil {
			return err
		}
		err = acc.Backward(loss)
		loss.Close()
		if err == nil {
			err = opt.Step()
		}
		if err == nil {
			err = opt.ZeroGrad()
		}
		if err != nil {
			return err
		}
	}
	if dir := os.Getenv("ACCEL_GO_STATE_DIR"); dir != "" {
		if err := acc.SaveState(dir); err != nil {
			return err
		}
	}
	if main, err := acc.IsMainProcess(); err != nil {
		return err
	} else if main {
		var text strings.Builder
		names, err := model.TensorNames()
		if err != nil {
			return err
		}
		for _, name := range names {
			t, err := model.Tensor(name)
			if err != nil {
				return err
			}
			values, err := accel.ToSlice[float32](t)
			t.Close()
			if err != nil {
				return err
			}
			text.WriteString(name)
			for _, v := range values {
				text.WriteString(" " + strconv.FormatFloat(float64(v), 'e', -1, 32))
			}
			text.WriteString("\n")
		}
		if err := os.WriteFile(os.Getenv("ACCEL_GO_OUT"), []byte(text.String()), 0o644); err != nil {
			return err
		}
	}
	return acc.WaitForEveryone()
}
