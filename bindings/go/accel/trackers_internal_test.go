package accel

import "testing"

// The accelerator keeps its trackers until it is freed, and then releases them; a refused
// AddTracker releases its tracker at once.
func TestTrackersAreReleasedWithTheAccelerator(t *testing.T) {
	before := liveBoxes.Load()
	acc, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	log := TrackerFunc(func(*Values, int64) error { return nil })
	for _, name := range []string{"a", "b"} {
		if err := acc.AddTracker(name, log); err != nil {
			t.Fatal(err)
		}
	}
	if err := acc.AddTracker("csv", log); err == nil {
		t.Fatal("a tracker named after log_with's csv was added")
	}
	if got := liveBoxes.Load() - before; got != 2 {
		t.Fatalf("%d trackers held, want 2", got)
	}
	acc.Close()
	if got := liveBoxes.Load() - before; got != 0 {
		t.Fatalf("%d trackers still held after Close", got)
	}
}
