package accel

import (
	"runtime"
	"testing"
	"time"
)

// A handle the program forgot to Close is freed once unreachable: for a function dataset the
// chain is AddCleanup -> accel_dataset_free -> the library's release -> the cgo.Handle deleted.
func TestCleanupsFreeForgottenHandles(t *testing.T) {
	before := liveBoxes.Load()
	fields := []Field{{DType: U8}}
	for i := 0; i < 10; i++ {
		if _, err := DatasetFromFunc(4, fields, func(int64, [][]byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if liveBoxes.Load() != before+10 {
		t.Fatalf("%d boxes live, want %d", liveBoxes.Load(), before+10)
	}
	deadline := time.Now().Add(10 * time.Second)
	for liveBoxes.Load() != before {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 10 forgotten datasets were never freed", liveBoxes.Load()-before)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// Close wins over the cleanup: a closed handle is freed once, by Close.
func TestCloseStopsTheCleanup(t *testing.T) {
	before := liveBoxes.Load()
	d, err := DatasetFromFunc(4, []Field{{DType: U8}}, func(int64, [][]byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	d.Close()
	if liveBoxes.Load() != before {
		t.Fatal("Close did not release the dataset's function")
	}
	d = nil
	runtime.GC()
	runtime.GC() // a second free would crash or corrupt here
}

// Forgotten tensors are freed by their block's cleanup once the block is unreachable; closed
// ones were freed by Close and are not freed again (a double free would crash here).
func TestBlockCleanupsFreeForgottenTensors(t *testing.T) {
	const n = 3 * tensorBlockSize
	closed := make([]func() bool, 0, n) // the handles' state, which does not keep a block alive
	for i := 0; i < n; i++ {
		x, err := FromSlice([]float32{float32(i)})
		if err != nil {
			t.Fatal(err)
		}
		closed = append(closed, x.h.closed)
		if i%2 == 0 {
			x.Close()
		}
	}
	// Move on to a new block: the last one filled above is no longer the current one.
	for i := 0; i < tensorBlockSize; i++ {
		x, err := FromSlice([]float32{0})
		if err != nil {
			t.Fatal(err)
		}
		x.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		open := 0
		for _, c := range closed {
			if !c() {
				open++
			}
		}
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d forgotten tensors were never freed", open, n/2)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

func TestVersionRange(t *testing.T) {
	for _, v := range []uint32{200, 201, 299} {
		if err := versionInRange(v); err != nil {
			t.Fatalf("%d refused: %v", v, err)
		}
	}
	for _, v := range []uint32{100, 199, 300, 10000} {
		if err := versionInRange(v); err == nil {
			t.Fatalf("%d accepted", v)
		}
	}
	err := versionInRange(300).(*Error)
	if err.Status != ErrUnsupported || err.Message != "libaccel 0.3.0 is loaded; package accel supports [0.2.0, 0.3.0)" {
		t.Fatalf("message %q", err.Message)
	}
}
