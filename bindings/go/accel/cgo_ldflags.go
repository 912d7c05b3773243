//go:build accel_nopkgconfig

package accel

// Built with -tags accel_nopkgconfig: no pkg-config; the header and the library are found
// through CGO_CFLAGS (-I<prefix>/include) and CGO_LDFLAGS (-L<prefix>/lib), or the system paths.

// #cgo LDFLAGS: -laccel
import "C"
