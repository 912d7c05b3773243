//go:build !race

package accel_test

// raceDetector: whether this test binary was built with -race (go test -race sets the tag).
const raceDetector = false
