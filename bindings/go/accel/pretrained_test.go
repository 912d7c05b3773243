package accel_test

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// writeBaseCheckpoint writes, byte by byte, the safetensors file of a base model (no "bert."
// prefix): encoder.weight (F16 2x2 = 1,2,3,4), pooler.weight (F32 [2]) and
// embeddings.position_ids (I64 [3]).
func writeBaseCheckpoint(t *testing.T) string {
	t.Helper()
	header := `{"encoder.weight":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]},` +
		`"pooler.weight":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},` +
		`"embeddings.position_ids":{"dtype":"I64","shape":[3],"data_offsets":[16,40]}}`
	var data []byte
	data = binary.LittleEndian.AppendUint64(data, uint64(len(header)))
	data = append(data, header...)
	for _, half := range []uint16{0x3C00, 0x4000, 0x4200, 0x4400} { // fp16 1, 2, 3, 4
		data = binary.LittleEndian.AppendUint16(data, half)
	}
	for _, f := range []uint32{0x3F000000, 0x3F000000} { // fp32 0.5, 0.5
		data = binary.LittleEndian.AppendUint32(data, f)
	}
	for _, i := range []uint64{0, 1, 2} {
		data = binary.LittleEndian.AppendUint64(data, i)
	}
	path := filepath.Join(t.TempDir(), "model.safetensors")
	ok(t, os.WriteFile(path, data, 0o644))
	return path
}

// classifierModel is a task model of the program's own tensors: the base model under "bert."
// (bert.encoder.weight, 2x2 zeros) and a new head (classifier.weight, 1x2 = 9,9).
func classifierModel(t *testing.T) *accel.Model {
	t.Helper()
	m := must(accel.NewModel())
	t.Cleanup(func() { m.Close() })
	for _, p := range []struct {
		name   string
		values []float32
		shape  []int64
	}{{"bert.encoder.weight", []float32{0, 0, 0, 0}, []int64{2, 2}}, {"classifier.weight", []float32{9, 9}, []int64{1, 2}}} {
		w := must(accel.FromSlice(p.values, p.shape...))
		ok(t, w.SetRequiresGrad(true))
		ok(t, m.AddParameter(p.name, w))
		ok(t, w.Close())
	}
	return m
}

func values(t *testing.T, m *accel.Model, name string) []float32 {
	t.Helper()
	w := must(m.Tensor(name))
	defer w.Close()
	return must(accel.ToSlice[float32](w))
}

func TestLoadPretrainedAsTransformersDoes(t *testing.T) {
	begin(t)
	path := writeBaseCheckpoint(t)

	m := classifierModel(t)
	report := must(m.LoadPretrained(path, accel.PretrainedOptions{
		BaseModelPrefix: "bert",
		ModelName:       "BertForSequenceClassification",
	}))
	if got := values(t, m, "bert.encoder.weight"); !slices.Equal(got, []float32{1, 2, 3, 4}) {
		t.Fatalf("bert.encoder.weight %v, want the checkpoint's fp16 1,2,3,4", got)
	}
	if got := values(t, m, "classifier.weight"); !slices.Equal(got, []float32{9, 9}) {
		t.Fatalf("classifier.weight %v, want its own 9,9", got)
	}
	if !slices.Equal(report.Missing, []string{"classifier.weight"}) {
		t.Fatalf("missing %q", report.Missing)
	}
	if !slices.Equal(report.Unexpected, []string{"embeddings.position_ids", "pooler.weight"}) {
		t.Fatalf("unexpected %q", report.Unexpected)
	}
	if len(report.Mismatched) != 0 {
		t.Fatalf("mismatched %q", report.Mismatched)
	}
	if !strings.Contains(report.Warnings, "WARNING: Some weights of BertForSequenceClassification were not initialized") {
		t.Fatalf("warnings %q", report.Warnings)
	}
	// The unexpected tensors are information unless the checkpoint is of this architecture.
	if strings.Contains(report.Warnings, "INFO: ") || !strings.Contains(report.Text, "INFO: Some weights of the model checkpoint") ||
		!strings.Contains(report.Text, report.Warnings) {
		t.Fatalf("warnings %q, text %q", report.Warnings, report.Text)
	}
	same := classifierModel(t)
	report = must(same.LoadPretrained(path, accel.PretrainedOptions{BaseModelPrefix: "bert", ArchitectureMatches: true}))
	if !strings.Contains(report.Warnings, "WARNING: Some weights of the model checkpoint") || report.Text != report.Warnings {
		t.Fatalf("with the architecture matching: warnings %q, text %q", report.Warnings, report.Text)
	}

	// Strict: an error, and the model unchanged.
	strict := classifierModel(t)
	_, err := strict.LoadPretrained(path, accel.PretrainedOptions{Strict: true, BaseModelPrefix: "bert"})
	wantStatus(t, err, accel.ErrInvalidArgument, "classifier.weight")
	if got := values(t, strict, "bert.encoder.weight"); !slices.Equal(got, []float32{0, 0, 0, 0}) {
		t.Fatalf("a failed strict load changed bert.encoder.weight to %v", got)
	}
	if got := values(t, strict, "classifier.weight"); !slices.Equal(got, []float32{9, 9}) {
		t.Fatalf("a failed strict load changed classifier.weight to %v", got)
	}

	// A tensor of another shape: ErrShape, or kept and reported with IgnoreMismatchedSizes.
	narrow := must(accel.NewModel())
	defer narrow.Close()
	w := must(accel.FromSlice([]float32{7, 7}, 1, 2))
	defer w.Close()
	ok(t, w.SetRequiresGrad(true))
	ok(t, narrow.AddParameter("bert.encoder.weight", w))
	_, err = narrow.LoadPretrained(path, accel.PretrainedOptions{BaseModelPrefix: "bert"})
	wantStatus(t, err, accel.ErrShape)
	report = must(narrow.LoadPretrained(path, accel.PretrainedOptions{BaseModelPrefix: "bert", IgnoreMismatchedSizes: true}))
	if !slices.Equal(report.Mismatched, []string{"encoder.weight"}) || !strings.Contains(report.Warnings, "shapes did not match") {
		t.Fatalf("mismatched %q, warnings %q", report.Mismatched, report.Warnings)
	}
	if got := values(t, narrow, "bert.encoder.weight"); !slices.Equal(got, []float32{7, 7}) {
		t.Fatalf("a mismatched tensor changed to %v", got)
	}

	missing := filepath.Join(t.TempDir(), "none.safetensors")
	_, err = strict.LoadPretrained(missing, accel.PretrainedOptions{})
	wantStatus(t, err, accel.ErrIO, "none.safetensors")
	// A text option cannot carry another option in.
	_, err = strict.LoadPretrained(path, accel.PretrainedOptions{ModelName: "x,strict=true"})
	wantStatus(t, err, accel.ErrInvalidArgument, "model_name")
	closed := classifierModel(t)
	ok(t, closed.Close())
	_, err = closed.LoadPretrained(path, accel.PretrainedOptions{})
	wantStatus(t, err, accel.ErrState, "after Close")
}

// A name map renames the checkpoint's tensors before the base model prefix rule; what it leaves
// unused is unexpected under its own name.
func TestLoadPretrainedMappedRenamesBeforeThePrefixRule(t *testing.T) {
	path := writeBaseCheckpoint(t)
	m := classifierModel(t)
	var asked []string
	report, err := m.LoadPretrainedMapped(path, accel.PretrainedOptions{BaseModelPrefix: "bert"},
		func(name string) (string, bool) {
			asked = append(asked, name)
			if !strings.HasPrefix(name, "encoder.") {
				return "", false
			}
			return "bert." + name, true // a task checkpoint's name
		})
	ok(t, err)
	if want := []string{"embeddings.position_ids", "encoder.weight", "pooler.weight"}; !slices.Equal(asked, want) {
		t.Fatalf("asked %v, want %v", asked, want)
	}
	if got := values(t, m, "bert.encoder.weight"); !slices.Equal(got, []float32{1, 2, 3, 4}) {
		t.Fatalf("bert.encoder.weight = %v", got)
	}
	if want := []string{"embeddings.position_ids", "pooler.weight"}; !slices.Equal(report.Unexpected, want) {
		t.Fatalf("unexpected %v, want %v", report.Unexpected, want)
	}
	if want := []string{"classifier.weight"}; !slices.Equal(report.Missing, want) {
		t.Fatalf("missing %v, want %v", report.Missing, want)
	}
}

func TestLoadPretrainedMappedFailuresLeaveTheModelUnchanged(t *testing.T) {
	path := writeBaseCheckpoint(t)
	m := classifierModel(t)
	opts := accel.PretrainedOptions{BaseModelPrefix: "bert"}
	unchanged := func(what string) {
		t.Helper()
		if got := values(t, m, "bert.encoder.weight"); !slices.Equal(got, []float32{0, 0, 0, 0}) {
			t.Fatalf("%s: bert.encoder.weight = %v", what, got)
		}
	}
	_, err := m.LoadPretrainedMapped(path, opts, func(string) (string, bool) { return "encoder.weight", true })
	wantStatus(t, err, accel.ErrInvalidArgument, "one name, 'encoder.weight'")
	unchanged("two names mapped to one")
	_, err = m.LoadPretrainedMapped(path, opts, func(string) (string, bool) { return strings.Repeat("n", 5000), true })
	wantStatus(t, err, accel.ErrCallback, "longer than 4095 bytes")
	unchanged("a name too long")
	_, err = m.LoadPretrainedMapped(path, opts, func(string) (string, bool) { return "", true })
	wantStatus(t, err, accel.ErrCallback)
	if !strings.Contains(err.Error(), `name for "embeddings.position_ids" is empty`) {
		t.Fatalf("err = %v, want its cause to say the name is empty", err)
	}
	unchanged("an empty name")
	// A panic on the last name is ErrCallback with the *PanicError as its Cause.
	_, err = m.LoadPretrainedMapped(path, opts, func(name string) (string, bool) {
		if name == "pooler.weight" {
			panic("no pooler here")
		}
		return name, true
	})
	wantStatus(t, err, accel.ErrCallback)
	var p *accel.PanicError
	if !errors.As(err, &p) || p.Value != "no pooler here" {
		t.Fatalf("err = %v, want the map's panic as its cause", err)
	}
	unchanged("a panicking map")
	_, err = m.LoadPretrainedMapped(path, opts, nil)
	wantStatus(t, err, accel.ErrInvalidArgument, "mapName is nil")
}
