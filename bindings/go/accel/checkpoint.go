package accel

// #include "shim.h"
import "C"

import "io"

// Stateful is a program object saved with every checkpoint (Accelerate's
// register_for_checkpointing): SaveState writes its bytes on the main process during SaveState,
// LoadState gets them back on every process during LoadState. Both run on the goroutine that
// called save or load and may use the models, optimizers and schedulers, but not SaveState or
// LoadState. An error or a panic fails the save or load with ErrCallback, with it as the Cause.
type Stateful interface {
	SaveState(w io.Writer) error
	LoadState(data []byte) error
}

// RegisterForCheckpointing adds obj to every later checkpoint. Register the same objects in the
// same order before loading: the order is the checkpoint's.
func (a *Accelerator) RegisterForCheckpointing(obj Stateful) error {
	if obj == nil {
		return newError(ErrInvalidArgument, "RegisterForCheckpointing: nil object")
	}
	box := newBox(&checkpointState{obj: obj, slot: a.slot})
	err := a.do(func(p *C.accel_accelerator) C.accel_status {
		return C.goaccel_register_for_checkpointing(p, box)
	})
	if err != nil {
		freeBox(box) // never called back after a failed registration
	}
	return err
}

// stateCall runs save_state or load_state; an empty dir lets the project settings decide.
func (a *Accelerator) stateCall(dir string, f func(p *C.accel_accelerator, dir *C.char) C.accel_status) error {
	cdir, free, err := optionalCString(dir, "the directory")
	if err != nil {
		return err
	}
	defer free()
	err = a.do(func(p *C.accel_accelerator) C.accel_status { return f(p, cdir) })
	return a.slot.resolve(err)
}

// SaveState is Accelerate's save_state into dir: every prepared object, the random states and
// the registered objects, with a manifest of sizes and checksums, written aside and renamed into
// place when complete. An empty dir uses the project settings (project_dir with
// automatic_checkpoint_naming). With several machines and the configuration's save_on_each_node,
// each machine's local main process writes its own copy (no shared directory needed). A
// collective.
func (a *Accelerator) SaveState(dir string) error {
	return a.stateCall(dir, func(p *C.accel_accelerator, d *C.char) C.accel_status { return C.accel_save_state(p, d) })
}

// LoadState restores a SaveState directory (verified first) into the prepared and registered
// objects; an empty dir loads the project's newest checkpoint. A collective.
func (a *Accelerator) LoadState(dir string) error {
	return a.stateCall(dir, func(p *C.accel_accelerator, d *C.char) C.accel_status { return C.accel_load_state(p, d) })
}

// SaveModel is Accelerate's save_model: model's parameters and buffers as safetensors in dir
// (model.safetensors, or shards above maxShardSize, "10GB" when empty). Only the main process
// writes; every process returns once it is written.
func (a *Accelerator) SaveModel(model *Model, dir, maxShardSize string) error {
	cdir, free, err := cString(dir, "the directory")
	if err != nil {
		return err
	}
	defer free()
	shard, freeShard, err := optionalCString(maxShardSize, "the shard size")
	if err != nil {
		return err
	}
	defer freeShard()
	return use(model.ref(), "Model", func(m *C.accel_model) error {
		return a.do(func(p *C.accel_accelerator) C.accel_status { return C.accel_save_model(p, m, cdir, shard) })
	})
}
