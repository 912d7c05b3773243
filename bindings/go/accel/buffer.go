package accel

// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"strconv"
	"unsafe"
)

// readText reads a text result through the library's buffer convention: a first try into a
// buffer that fits most results, a second one with the size the library asked for.
func readText(f func(buf *C.char, capacity C.size_t, size *C.size_t) C.accel_status) (string, error) {
	buf := make([]byte, 256)
	for {
		var size C.size_t
		err := call(func() C.accel_status {
			return f((*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &size)
		})
		if errors.Is(err, ErrBufferTooSmall) && int(size) > len(buf) {
			buf = make([]byte, int(size))
			continue
		}
		if err != nil {
			return "", err
		}
		if size == 0 {
			return "", nil
		}
		return string(buf[:size-1]), nil // size counts the terminating NUL
	}
}

// cString is s as C text for the duration of one call (freed by the returned function). Text
// with a NUL byte inside cannot cross the interface.
func cString(s, what string) (*C.char, func(), error) {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return nil, nil, newError(ErrInvalidArgument, "%s contains a NUL byte: %q", what, s)
		}
	}
	p := C.CString(s)
	return p, func() { C.free(unsafe.Pointer(p)) }, nil
}

// optionalCString is cString, or NULL for "" (the library's default: a project directory, the
// default shard size, Accelerate's default configuration file).
func optionalCString(s, what string) (*C.char, func(), error) {
	if s == "" {
		return nil, func() {}, nil
	}
	return cString(s, what)
}

// optionText writes an option value as the library reads it ("0.001", "true", "64"): in the C
// locale's format, which strconv always uses.
func optionText(value any) (string, error) {
	switch v := value.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int:
		return strconv.FormatInt(int64(v), 10), nil
	case int32:
		return strconv.FormatInt(int64(v), 10), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case uint:
		return strconv.FormatUint(uint64(v), 10), nil
	case uint32:
		return strconv.FormatUint(uint64(v), 10), nil
	case uint64:
		return strconv.FormatUint(v, 10), nil
	case float32:
		return strconv.FormatFloat(float64(v), 'g', -1, 32), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	case fmt.Stringer:
		return v.String(), nil
	}
	return "", newError(ErrInvalidArgument, "an option value must be a string, bool, integer or float, not %T", value)
}

// setOption is the one path of every key/value setter (config, optimizer, scheduler, dataloader).
func setOption(key string, value any, set func(key, value *C.char) C.accel_status) error {
	text, err := optionText(value)
	if err != nil {
		return err
	}
	k, freeKey, err := cString(key, "the key")
	if err != nil {
		return err
	}
	defer freeKey()
	v, freeValue, err := cString(text, "the value of "+key)
	if err != nil {
		return err
	}
	defer freeValue()
	return call(func() C.accel_status { return set(k, v) })
}

// takeBytesList copies the entries of a list the library returned, and frees the list.
func takeBytesList(list *C.accel_bytes_list) ([][]byte, error) {
	defer C.accel_bytes_list_free(list)
	var count C.size_t
	if err := call(func() C.accel_status { return C.accel_bytes_list_count(list, &count) }); err != nil {
		return nil, err
	}
	out := make([][]byte, int(count))
	for i := range out {
		var data unsafe.Pointer
		var size C.size_t
		if err := call(func() C.accel_status { return C.accel_bytes_list_get(list, C.size_t(i), &data, &size) }); err != nil {
			return nil, err
		}
		out[i] = append([]byte{}, unsafe.Slice((*byte)(data), int(size))...)
	}
	return out, nil
}
