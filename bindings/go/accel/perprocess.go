package accel

// #include "shim.h"
import "C"

// scoped runs fn between begin and end with the accelerator's handle held for the whole block
// (a Close meanwhile frees it after the end): the end runs also when fn fails or panics (the
// panic then goes on after it). fn's error comes first; the end's when fn succeeded.
func (a *Accelerator) scoped(what string, begin, end func(p *C.accel_accelerator) C.accel_status, fn func() error) error {
	if fn == nil {
		return newError(ErrInvalidArgument, "%s: the function is nil", what)
	}
	return use(a.ref(), "Accelerator", func(p *C.accel_accelerator) (err error) {
		if err := call(func() C.accel_status { return begin(p) }); err != nil {
			return err
		}
		defer func() {
			if ended := call(func() C.accel_status { return end(p) }); err == nil {
				err = ended
			}
		}()
		return fn()
	})
}

// LocalMainProcessFirst runs f on each machine's local main process first and on the machine's
// other processes once it is done (Accelerate's local_main_process_first: a download or a cache
// that each machine makes once). A collective, every rank calls it; the others wait even when f
// fails or panics (f's error comes first; a panic goes on after).
func (a *Accelerator) LocalMainProcessFirst(f func() error) error {
	return a.scoped("LocalMainProcessFirst", func(p *C.accel_accelerator) C.accel_status {
		return C.accel_local_main_process_first_begin(p)
	}, func(p *C.accel_accelerator) C.accel_status { return C.accel_local_main_process_first_end(p) }, f)
}

// IsLastProcess reports whether this is the last process, rank NumProcesses-1 (Accelerate's
// is_last_process).
func (a *Accelerator) IsLastProcess() (bool, error) {
	if err := a.placed(); err != nil {
		return false, err
	}
	return a.isLast, nil
}

// onlyIf runs f when here is true and returns its error; nil on the other processes. Not a
// collective.
func (a *Accelerator) onlyIf(what string, here func() bool, f func() error) error {
	if f == nil {
		return newError(ErrInvalidArgument, "%s: the function is nil", what)
	}
	if err := a.placed(); err != nil {
		return err
	}
	if !here() {
		return nil
	}
	return f()
}

// OnMainProcess runs f on the main process only (Accelerate's on_main_process) and returns its
// error; the other processes return nil at once. Not a collective.
func (a *Accelerator) OnMainProcess(f func() error) error {
	return a.onlyIf("OnMainProcess", func() bool { return a.isMain }, f)
}

// OnLocalMainProcess runs f on each machine's local main process only (Accelerate's
// on_local_main_process).
func (a *Accelerator) OnLocalMainProcess(f func() error) error {
	return a.onlyIf("OnLocalMainProcess", func() bool { return a.isLocalMain }, f)
}

// OnLastProcess runs f on the last process only (Accelerate's on_last_process).
func (a *Accelerator) OnLastProcess(f func() error) error {
	return a.onlyIf("OnLastProcess", func() bool { return a.isLast }, f)
}

// OnProcess runs f on the process of global rank processIndex only (Accelerate's
// on_process(process_index=...)); a rank no process has runs it nowhere.
func (a *Accelerator) OnProcess(processIndex int, f func() error) error {
	return a.onlyIf("OnProcess", func() bool { return a.processIndex == processIndex }, f)
}
