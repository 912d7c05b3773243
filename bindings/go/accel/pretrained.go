package accel

// #include "shim.h"
import "C"

import (
	"strconv"
	"strings"
	"unsafe"
)

// PretrainedOptions are the options of LoadPretrained. The zero value is transformers'
// from_pretrained default: not strict, no base model prefix, any shape mismatch an error.
type PretrainedOptions struct {
	// Strict makes anything missing, unexpected or mismatched an error (ErrInvalidArgument, or
	// ErrShape for shapes). Without it, missing tensors keep their initialisation and checkpoint
	// tensors the model lacks are left (the fine-tune of a new head).
	Strict bool
	// BaseModelPrefix is transformers' base_model_prefix ("bert"), decided once per load: a
	// checkpoint of the base model ("encoder.x") loads into a model holding it under the prefix
	// ("bert.encoder.x"), and a task checkpoint ("bert.x") into the base model ("x"). Empty:
	// none.
	BaseModelPrefix string
	// IgnoreMismatchedSizes (not Strict): a tensor of another shape keeps the model's and is
	// reported in LoadReport.Mismatched; otherwise any shape mismatch is ErrShape.
	IgnoreMismatchedSizes bool
	// ModelName names the model in the report's messages ("BertForSequenceClassification");
	// empty: "the model".
	ModelName string
	// ArchitectureMatches says the checkpoint was made for this very architecture
	// (transformers' config.architectures): unexpected tensors are then a warning, otherwise
	// information.
	ArchitectureMatches bool
}

// spec is the options as accel_load_pretrained reads them ("strict=true base_model_prefix=bert"),
// only those not at their default. A text value cannot hold a separator of that form (space,
// comma, tab, newline): it is ErrInvalidArgument here rather than another option there.
func (o PretrainedOptions) spec() (string, error) {
	var pairs []string
	flag := func(key string, on bool) {
		if on {
			pairs = append(pairs, key+"="+strconv.FormatBool(on))
		}
	}
	text := func(key, value string) error {
		if value == "" {
			return nil
		}
		if strings.ContainsAny(value, " ,\t\n") {
			return newError(ErrInvalidArgument, "load option %s: %q holds a space, comma, tab or newline", key, value)
		}
		pairs = append(pairs, key+"="+value)
		return nil
	}
	flag("strict", o.Strict)
	if err := text("base_model_prefix", o.BaseModelPrefix); err != nil {
		return "", err
	}
	flag("ignore_mismatched_sizes", o.IgnoreMismatchedSizes)
	if err := text("model_name", o.ModelName); err != nil {
		return "", err
	}
	flag("architecture_matches", o.ArchitectureMatches)
	return strings.Join(pairs, " "), nil
}

// LoadReport is what LoadPretrained found and did, as transformers reports it.
type LoadReport struct {
	// Missing are the model's tensors no checkpoint tensor filled, Unexpected the checkpoint's
	// tensors not used, Mismatched those left for their shape (IgnoreMismatchedSizes): each
	// sorted, in the checkpoint's naming (transformers' keys).
	Missing, Unexpected, Mismatched []string
	// Warnings are transformers' WARNING messages (its default verbosity), each starting with
	// "WARNING: "; Text is every message, the INFO ones ("INFO: ") too, in transformers' order.
	Warnings, Text string
}

// LoadPretrained loads a pretrained checkpoint into the model as Hugging Face transformers'
// from_pretrained does: from a safetensors file, a model.safetensors.index.json, or a directory
// holding either (as LoadCheckpointInModel). Floating checkpoint tensors are cast to the model's
// dtype (fp16 and bf16 into fp32 and back); a floating tensor for an integer one, or the other
// way, is ErrDType. Tensors that share storage (tied weights) count as loaded when one of them
// is. An unreadable file is ErrIO. On any error found before the tensors' bytes are read
// (files, headers, dtypes, the plan) the model is unchanged; a read failing midway is ErrIO
// saying the model is partly loaded.
func (m *Model) LoadPretrained(path string, opts PretrainedOptions) (LoadReport, error) {
	spec, err := opts.spec()
	if err != nil {
		return LoadReport{}, err
	}
	var report *C.accel_load_report
	err = m.withStrings([]string{path, spec}, func(p *C.accel_model, c []*C.char) C.accel_status {
		return C.accel_load_pretrained(p, c[0], c[1], &report)
	})
	if err != nil {
		return LoadReport{}, err
	}
	return readReport(report)
}

// LoadPretrainedMapped is LoadPretrained with the checkpoint's names mapped first, as
// transformers' key_mapping: mapName gets each checkpoint tensor's name (once, in name order,
// before any byte is read, on the calling goroutine) and returns the model's name for it and
// true, or false to leave it unused (reported as unexpected under its own name). The new names
// then follow every rule of LoadPretrained, BaseModelPrefix included, and the report uses them.
//
// Each failure leaves the model unchanged: a panic in mapName, or a name that is empty or holds a
// NUL byte, is ErrCallback whose Cause says what (a *PanicError for a panic); a name longer than
// 4095 bytes is ErrCallback naming the checkpoint tensor; two tensors given one name are
// ErrInvalidArgument naming both.
func (m *Model) LoadPretrainedMapped(path string, opts PretrainedOptions, mapName func(string) (string, bool)) (LoadReport, error) {
	if mapName == nil {
		return LoadReport{}, newError(ErrInvalidArgument, "LoadPretrainedMapped: mapName is nil")
	}
	spec, err := opts.spec()
	if err != nil {
		return LoadReport{}, err
	}
	state := &nameMapState{fn: mapName}
	box := newBox(state)
	defer freeBox(box) // the library keeps it for this call only
	var report *C.accel_load_report
	err = m.withStrings([]string{path, spec}, func(p *C.accel_model, c []*C.char) C.accel_status {
		return C.goaccel_load_pretrained_mapped(p, c[0], c[1], box, &report)
	})
	if err != nil {
		return LoadReport{}, state.slot.take(err)
	}
	return readReport(report)
}

// nameMapState is what LoadPretrainedMapped's callback needs.
type nameMapState struct {
	fn   func(string) (string, bool)
	slot failureSlot
}

//export goaccelNameMap
func goaccelNameMap(name *C.char, out *C.char, capacity C.size_t, userData unsafe.Pointer) C.int32_t {
	state := boxValue(userData).(*nameMapState)
	return state.slot.run(func() error {
		checkpointName := C.GoString(name)
		mapped, ok := state.fn(checkpointName)
		switch {
		case !ok:
			mapped = "" // the library's "leave it unused"
		case mapped == "":
			return newError(ErrInvalidArgument, "the name map's name for %q is empty (false leaves it unused)", checkpointName)
		case strings.IndexByte(mapped, 0) >= 0:
			return newError(ErrInvalidArgument, "the name map's name for %q holds a NUL byte", checkpointName)
		}
		// With its NUL; a name that does not fit goes without it, and the library names it.
		buf := unsafe.Slice((*byte)(unsafe.Pointer(out)), int(capacity))
		if n := copy(buf, mapped); n < len(buf) {
			buf[n] = 0
		}
		return nil
	})
}

// readReport reads and frees a load report.
func readReport(report *C.accel_load_report) (LoadReport, error) {
	defer C.accel_load_report_free(report)
	var out LoadReport
	var err error
	for _, k := range []struct {
		kind string
		into *[]string
	}{{"missing", &out.Missing}, {"unexpected", &out.Unexpected}, {"mismatched", &out.Mismatched}} {
		if *k.into, err = reportKeys(report, k.kind); err != nil {
			return LoadReport{}, err
		}
	}
	for _, t := range []struct {
		warningsOnly bool
		into         *string
	}{{true, &out.Warnings}, {false, &out.Text}} {
		*t.into, err = readText(func(buf *C.char, capacity C.size_t, size *C.size_t) C.accel_status {
			return C.accel_load_report_text(report, C.bool(t.warningsOnly), buf, capacity, size)
		})
		if err != nil {
			return LoadReport{}, err
		}
	}
	return out, nil
}

// reportKeys are the names of one kind ("missing", "unexpected", "mismatched") in a report.
func reportKeys(report *C.accel_load_report, kind string) ([]string, error) {
	ckind, free, err := cString(kind, "the kind")
	if err != nil {
		return nil, err
	}
	defer free()
	var list *C.accel_bytes_list
	if err := call(func() C.accel_status { return C.accel_load_report_keys(report, ckind, &list) }); err != nil {
		return nil, err
	}
	entries, err := takeBytesList(list)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = string(e)
	}
	return names, nil
}
