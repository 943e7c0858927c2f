package bspa

/*
#include <bspa/bspa.h>
*/
import "C"

import "errors"

// Status is a bspa status code; its category is Status / 100.
type Status int32

const (
	StatusOK              Status = C.BSPA_OK
	StatusInvalidArgument Status = C.BSPA_ERR_INVALID_ARGUMENT
	StatusNullPointer     Status = C.BSPA_ERR_NULL_POINTER
	StatusOutOfRange      Status = C.BSPA_ERR_OUT_OF_RANGE
	StatusShapeMismatch   Status = C.BSPA_ERR_SHAPE_MISMATCH
	StatusDtypeMismatch   Status = C.BSPA_ERR_DTYPE_MISMATCH
	StatusDeviceMismatch  Status = C.BSPA_ERR_DEVICE_MISMATCH
	StatusBufferTooSmall  Status = C.BSPA_ERR_BUFFER_TOO_SMALL
	StatusInvalidState    Status = C.BSPA_ERR_INVALID_STATE
	StatusNotSupported    Status = C.BSPA_ERR_NOT_SUPPORTED
	StatusNoDevice        Status = C.BSPA_ERR_NO_DEVICE
	StatusOutOfPages      Status = C.BSPA_ERR_OUT_OF_PAGES
	StatusOutOfMemory     Status = C.BSPA_ERR_OUT_OF_MEMORY
	StatusCUDA            Status = C.BSPA_ERR_CUDA
	StatusVersion         Status = C.BSPA_ERR_VERSION
	StatusInternal        Status = C.BSPA_ERR_INTERNAL
)

// String is the status's C name, e.g. "BSPA_ERR_OUT_OF_PAGES".
func (s Status) String() string { return C.GoString(C.bspa_status_string(C.bspa_status(s))) }

// Category: 1 invalid argument, 2 not supported, 3 resource, 4 CUDA, 5 version, 9 internal.
func (s Status) Category() int { return int(s) / 100 }

// Error is a failed bspa call: its status and the library's message, which names the
// argument and the bad value.
type Error struct {
	Status  Status
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Status.String()
	}
	return e.Status.String() + ": " + e.Message
}

// Is makes errors.Is(err, bspa.ErrOutOfPages) true for every error of that status, and
// the category sentinels match a whole category: errors.Is(err, bspa.ErrInvalidArgument)
// for every 1xx status (a shape mismatch is an invalid argument), ErrNotSupported for
// every 2xx, ErrResource for every 3xx, as Python's exception classes do.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case *Error:
		if t.Message != "" {
			return false
		}
		if t == ErrInvalidArgument || t == ErrNotSupported {
			return e.Status.Category() == t.Status.Category()
		}
		return t.Status == e.Status
	case *categoryError:
		return e.Status.Category() == t.category
	}
	return false
}

// categoryError is a sentinel for a category that has no status of its own.
type categoryError struct {
	category int
	name     string
}

func (c *categoryError) Error() string { return "bspa: " + c.name }

// ErrResource matches every 3xx status (ErrOutOfPages, ErrOutOfMemory).
var ErrResource error = &categoryError{3, "a resource ran out (any 3xx status)"}

// Sentinels for errors.Is, one per status; ErrInvalidArgument and ErrNotSupported also
// match their whole category (see Error.Is).
var (
	ErrInvalidArgument = &Error{Status: StatusInvalidArgument}
	ErrNullPointer     = &Error{Status: StatusNullPointer}
	ErrOutOfRange      = &Error{Status: StatusOutOfRange}
	ErrShapeMismatch   = &Error{Status: StatusShapeMismatch}
	ErrDtypeMismatch   = &Error{Status: StatusDtypeMismatch}
	ErrDeviceMismatch  = &Error{Status: StatusDeviceMismatch}
	ErrBufferTooSmall  = &Error{Status: StatusBufferTooSmall}
	ErrInvalidState    = &Error{Status: StatusInvalidState}
	ErrNotSupported    = &Error{Status: StatusNotSupported}
	ErrNoDevice        = &Error{Status: StatusNoDevice}
	ErrOutOfPages      = &Error{Status: StatusOutOfPages}
	ErrOutOfMemory     = &Error{Status: StatusOutOfMemory}
	ErrCUDA            = &Error{Status: StatusCUDA}
	ErrVersion         = &Error{Status: StatusVersion}
	ErrInternal        = &Error{Status: StatusInternal}
)

// ErrClosed is returned by calls on a closed handle (or on one whose pool was closed).
var ErrClosed = errors.New("bspa: use of a closed handle")

// argError is an error found on the Go side before calling the library.
func argError(status Status, message string) error { return &Error{Status: status, Message: message} }
