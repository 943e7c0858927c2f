// Package bspa is the Go binding of libbspa: a paged KV cache with prefix caching and
// block-sparse prefill attention for LLM inference.
//
// Import path: github.com/bspa-project/bspa/bindings/go (bindings/go/README.md says how to
// resolve it to a checkout). Handles (Pool, Sequence, Layout, Batch) have Close methods and
// finalizers. Errors are *Error values that errors.Is matches against the sentinels
// (ErrOutOfPages, ...; ErrInvalidArgument, ErrNotSupported and ErrResource match a whole
// category).
// Thread safety follows the C header: a Pool and its Sequences may be used from any
// goroutine; a Layout is immutable; a Batch is used by one goroutine at a time.
//
// Steady state: Pool.NewReusableBatch sizes one Batch from BatchOptions limits and
// Batch.Plan re-plans it every step, allocating nothing per step (DeviceAllocationCounts).
//
// Bring-your-own cache: PrefillPaged (Tensors) and PrefillPagedF32 (host slices) run the
// same attention over caller-owned pages; PrefillWorkspaceBytes sizes their optional
// workspace.
//
// Build: the package links libbspa through pkg-config. After a system install (README,
// "Installing": cmake --install to /usr/local, ldconfig) nothing needs setting; for another
// prefix set PKG_CONFIG_PATH=<prefix>/lib/pkgconfig and CGO_LDFLAGS=-Wl,-rpath,<prefix>/lib.
package bspa

/*
#cgo pkg-config: bspa
#include <stdlib.h>
#include <bspa/bspa.h>

// The header's version, compiled into this package, for the load-time ABI check.
static uint32_t go_header_abi_version(void) { return BSPA_ABI_VERSION; }
*/
import "C"

import (
	"fmt"
	"runtime"
)

// ABIVersion is the ABI version of the header this package was built against.
const ABIVersion = uint32(C.BSPA_ABI_VERSION)

// abiErr is set when the loaded library has another ABI version: every constructor
// returns it, so nothing runs on a mismatched library.
var abiErr = checkABI()

func checkABI() error {
	loaded := uint32(C.bspa_abi_version())
	built := uint32(C.go_header_abi_version())
	if loaded != built {
		return &Error{Status: StatusVersion, Message: fmt.Sprintf(
			"libbspa has ABI version %d, this package was built for %d: rebuild against the library it loads",
			loaded, built)}
	}
	return nil
}

// CheckABI reports whether the loaded libbspa has the ABI this package was built for.
func CheckABI() error { return abiErr }

// Version is the loaded library's version, e.g. "0.1.0".
func Version() string { return C.GoString(C.bspa_version_string()) }

// BuildInfo says what the loaded library was compiled with (backends, CUDA arches, dtypes).
func BuildInfo() string { return C.GoString(C.bspa_build_info()) }

// CUDADeviceCount is the number of visible GPUs (0 without a GPU, a driver, or CUDA support).
func CUDADeviceCount() (int, error) {
	var n C.int32_t
	err := call(func() C.bspa_status { return C.bspa_device_count(C.kDLCUDA, &n) })
	return int(n), err
}

// call runs one C call and turns its status into an error. The OS thread is locked
// across the call and the read of the thread-local message, so both happen on the same
// thread.
func call(f func() C.bspa_status) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	status := f()
	if status == C.BSPA_OK {
		return nil
	}
	return &Error{Status: Status(status), Message: C.GoString(C.bspa_last_error())}
}
