//go:build !accel_nopkgconfig

package accel

// The default: compiler and linker flags from `pkg-config accel` (PKG_CONFIG_PATH finds an
// install outside the system prefix, e.g. <prefix>/lib/pkgconfig).

// #cgo pkg-config: accel
import "C"
