package accel

import "testing"

// The accelerator keeps its trackers (and its log sink, which New installs) until it is freed,
// and then releases them; a refused AddTracker releases its tracker at once.
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
	if got := liveBoxes.Load() - before; got != 3 {
		acc.Close()
		t.Fatalf("%d callback boxes held, want 3 (two trackers and the log sink)", got)
	}
	acc.Close()
	if got := liveBoxes.Load() - before; got != 0 {
		t.Fatalf("%d callback boxes still held after Close", got)
	}
}
