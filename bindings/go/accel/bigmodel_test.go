package accel_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// chainModel is `layers` Linear(width, width) layers l0.., called in a chain by forward.
func chainModel(t *testing.T, layers, width int, empty bool) *accel.Model {
	t.Helper()
	var m *accel.Model
	if empty {
		m = must(accel.NewEmptyModel(false))
	} else {
		m = must(accel.NewModel())
	}
	t.Cleanup(func() { m.Close() })
	body := "def forward(self, x):\n"
	for i := 0; i < layers; i++ {
		ok(t, m.AddLayer(fmt.Sprintf("l%d", i), "linear", fmt.Sprintf("in_features=%d out_features=%d", width, width)))
		body += fmt.Sprintf("    x = self.l%d.forward(x)\n", i)
	}
	ok(t, m.Define(body+"    return x\n"))
	return m
}

// writeModelCheckpoint writes every tensor of m (all F32) as one safetensors file.
func writeModelCheckpoint(t *testing.T, m *accel.Model) string {
	t.Helper()
	var entries []string
	var payload []byte
	for _, name := range must(m.TensorNames()) {
		w := must(m.Tensor(name))
		shape := must(w.Shape())
		vals := must(accel.ToSlice[float32](w))
		ok(t, w.Close())
		dims := make([]string, len(shape))
		for i, d := range shape {
			dims[i] = fmt.Sprint(d)
		}
		entries = append(entries, fmt.Sprintf(`"%s":{"dtype":"F32","shape":[%s],"data_offsets":[%d,%d]}`,
			name, strings.Join(dims, ","), len(payload), len(payload)+4*len(vals)))
		for _, v := range vals {
			payload = binary.LittleEndian.AppendUint32(payload, math.Float32bits(v))
		}
	}
	header := "{" + strings.Join(entries, ",") + "}"
	data := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	data = append(append(data, header...), payload...)
	path := filepath.Join(t.TempDir(), "model.safetensors")
	ok(t, os.WriteFile(path, data, 0o644))
	return path
}

// TestDispatchWithDiskOffloadComputesTheFullModel: 8 Linear(64, 64) layers (16640 bytes each)
// with a cpu budget of 50000 bytes, less room kept for the largest layer, put l2..l7 on disk; the
// dispatched empty model's forward equals the fully loaded model's.
func TestDispatchWithDiskOffloadComputesTheFullModel(t *testing.T) {
	begin(t)
	full := chainModel(t, 8, 64, false)
	path := writeModelCheckpoint(t, full)
	xs := make([]float32, 3*64)
	for i := range xs {
		xs[i] = 0.05*float32((i*37)%101) - 1
	}
	x := must(accel.FromSlice(xs, 3, 64))
	defer x.Close()
	want := must(accel.ToSlice[float32](must(full.Call("forward", x))))

	m := chainModel(t, 8, 64, true)
	options := "max_memory=cpu:50000,disk"
	lines := must(m.InferDeviceMap(options))
	if len(lines) != 8 || lines[0] != "l0=cpu" || lines[1] != "l1=cpu" || !slices.Contains(lines, "l7=disk") {
		t.Fatalf("device map %q, want l0, l1 on cpu and l2..l7 on disk", lines)
	}
	ok(t, m.Dispatch(path, strings.Join(lines, "\n")))
	for i := 0; i < 2; i++ {
		if got := must(accel.ToSlice[float32](must(m.Call("forward", x)))); !slices.Equal(got, want) {
			t.Fatalf("call %d: the dispatched model's output differs from the full model's", i)
		}
	}
	_, err := m.Tensor("l7.weight")
	wantStatus(t, err, accel.ErrState, "'l7.weight' is offloaded to disk")
	wantStatus(t, m.Dispatch(path, options), accel.ErrState)

	// No disk and too little cpu: out of memory, naming the budget.
	_, err = chainModel(t, 8, 64, true).InferDeviceMap("max_memory=cpu:50000")
	wantStatus(t, err, accel.ErrOutOfMemory, "cpu 50000 bytes and no disk")
	_, err = full.InferDeviceMap("max_memory=cpu:lots")
	wantStatus(t, err, accel.ErrInvalidArgument)
}
