package accel

// #include "shim.h"
import "C"

// InferDeviceMap is Accelerate's infer_auto_device_map (accel_infer_device_map): where each
// module's weights go, "cpu" or "disk", as "module.path=cpu" / "=disk" lines in Accelerate's
// order, the root named "" (a model that fits whole is one line, "=cpu"). options are key=value
// pairs separated by spaces or ';': max_memory (required: "cpu:SIZE" and "disk", e.g.
// "max_memory=cpu:200MB,disk"), no_split_module_classes ("Block,Attention"),
// fallback_allocation. A map that needs disk when max_memory names none is ErrOutOfMemory; a
// malformed option is ErrInvalidArgument.
func (m *Model) InferDeviceMap(options string) ([]string, error) {
	var list *C.accel_bytes_list
	err := m.withStrings([]string{options}, func(p *C.accel_model, c []*C.char) C.accel_status {
		return C.accel_infer_device_map(p, c[0], &list)
	})
	if err != nil {
		return nil, err
	}
	entries, err := takeBytesList(list)
	if err != nil {
		return nil, err
	}
	lines := make([]string, len(entries))
	for i, e := range entries {
		lines[i] = string(e)
	}
	return lines, nil
}

// Dispatch is Accelerate's load_checkpoint_and_dispatch with disk offload on the CPU
// (accel_dispatch_model): the tensors mapped to "cpu" are loaded from checkpoint (a safetensors
// file, a sharded index or a directory) once; those mapped to "disk" are read from the file just
// before each forward of their module and dropped after it. deviceMap is InferDeviceMap's lines
// (joined by newlines, spaces or ';') or its options, from which the map is computed. Inference
// only: afterwards optimizers, Prepare, saves and loads of every weight refuse the model
// (ErrState). Errors found before anything is read (ErrIO, ErrInvalidArgument, ErrShape,
// ErrDType, ErrUnsupported, ErrState) leave the model unchanged.
func (m *Model) Dispatch(checkpoint, deviceMap string) error {
	return m.withStrings([]string{checkpoint, deviceMap}, func(p *C.accel_model, c []*C.char) C.accel_status {
		return C.accel_dispatch_model(p, c[0], c[1])
	})
}
