package accel_test

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// TestEmptyModelIsFilledByALoad builds a linear layer without its weights (NewEmptyModel), checks
// that reading a tensor is ErrState until a load fills it, then loads a safetensors file written
// here byte by byte: fc.weight (F32 2x2 = 1,2,3,4) and fc.bias (F32 [2] = 5,6).
func TestEmptyModelIsFilledByALoad(t *testing.T) {
	begin(t)
	header := `{"fc.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},` +
		`"fc.bias":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}}`
	var data []byte
	data = binary.LittleEndian.AppendUint64(data, uint64(len(header)))
	data = append(data, header...)
	for _, f := range []float32{1, 2, 3, 4, 5, 6} {
		data = binary.LittleEndian.AppendUint32(data, math.Float32bits(f))
	}
	path := filepath.Join(t.TempDir(), "model.safetensors")
	ok(t, os.WriteFile(path, data, 0o644))

	m := must(accel.NewEmptyModel(false))
	defer m.Close()
	ok(t, m.AddLayer("fc", "linear", "in_features=2 out_features=2"))
	if n := must(m.ParameterElementCount()); n != 6 {
		t.Fatalf("ParameterElementCount %d, want 6", n)
	}
	_, err := m.Tensor("fc.weight")
	wantStatus(t, err, accel.ErrState, "'fc.weight'", "still empty")

	ok(t, accel.LoadCheckpointInModel(m, path))
	if got := values(t, m, "fc.weight"); !slices.Equal(got, []float32{1, 2, 3, 4}) {
		t.Fatalf("fc.weight %v, want the checkpoint's 1,2,3,4", got)
	}
	if got := values(t, m, "fc.bias"); !slices.Equal(got, []float32{5, 6}) {
		t.Fatalf("fc.bias %v, want the checkpoint's 5,6", got)
	}
}
