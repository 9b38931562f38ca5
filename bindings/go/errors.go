package tpurt

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Code is a tpu_status code (the TensorFlow status codes).
type Code int

// The status codes; 0 is OK and never appears in an *Error.
const (
	CodeCancelled          Code = 1
	CodeUnknown            Code = 2
	CodeInvalidArgument    Code = 3
	CodeDeadlineExceeded   Code = 4
	CodeNotFound           Code = 5
	CodeAlreadyExists      Code = 6
	CodePermissionDenied   Code = 7
	CodeResourceExhausted  Code = 8
	CodeFailedPrecondition Code = 9
	CodeAborted            Code = 10
	CodeOutOfRange         Code = 11
	CodeUnimplemented      Code = 12
	CodeInternal           Code = 13
	CodeUnavailable        Code = 14
	CodeDataLoss           Code = 15
	CodeUnauthenticated    Code = 16
)

// Error is a failed tpurt call: the status code and the library's message.
type Error struct {
	Code    Code
	Message string
}

// Sentinels for errors.Is: each matches every *Error with the same Code.
var (
	ErrCancelled          = &Error{Code: CodeCancelled}
	ErrUnknown            = &Error{Code: CodeUnknown}
	ErrInvalidArgument    = &Error{Code: CodeInvalidArgument}
	ErrDeadlineExceeded   = &Error{Code: CodeDeadlineExceeded}
	ErrNotFound           = &Error{Code: CodeNotFound}
	ErrAlreadyExists      = &Error{Code: CodeAlreadyExists}
	ErrPermissionDenied   = &Error{Code: CodePermissionDenied}
	ErrResourceExhausted  = &Error{Code: CodeResourceExhausted}
	ErrFailedPrecondition = &Error{Code: CodeFailedPrecondition}
	ErrAborted            = &Error{Code: CodeAborted}
	ErrOutOfRange         = &Error{Code: CodeOutOfRange}
	ErrUnimplemented      = &Error{Code: CodeUnimplemented}
	ErrInternal           = &Error{Code: CodeInternal}
	ErrUnavailable        = &Error{Code: CodeUnavailable}
	ErrDataLoss           = &Error{Code: CodeDataLoss}
	ErrUnauthenticated    = &Error{Code: CodeUnauthenticated}
)

// String is the library's name of the code, e.g. "DEADLINE_EXCEEDED".
func (c Code) String() string { return RawStatusName(TpurtStatus(c)) }

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code.String()
	}
	return e.Code.String() + ": " + e.Message
}

// Is makes errors.Is(err, ErrX) match on the code alone.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

func newError(code Code, format string, args ...interface{}) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

const panicPrefix = "tpurt:"

// fromPanic turns the SWIG layer's "tpurt:<code>:<message>" panic into an *Error;
// any other panic value becomes an error naming it (code UNKNOWN).
func fromPanic(r interface{}) error {
	text := fmt.Sprint(r)
	if err, ok := r.(error); ok {
		text = err.Error()
	}
	if rest := strings.TrimPrefix(text, panicPrefix); rest != text {
		if colon := strings.IndexByte(rest, ':'); colon > 0 {
			if code, err := strconv.Atoi(rest[:colon]); err == nil {
				return &Error{Code: Code(code), Message: rest[colon+1:]}
			}
		}
	}
	return &Error{Code: CodeUnknown, Message: "panic: " + text}
}

// recoverInto is deferred by every wrapper: a library failure becomes *err.
func recoverInto(err *error) {
	if r := recover(); r != nil {
		*err = fromPanic(r)
	}
}

// try runs one SWIG call and returns its panic as an error.
func try[T any](call func() T) (result T, err error) {
	defer recoverInto(&err)
	return call(), nil
}

func try0(call func()) (err error) {
	defer recoverInto(&err)
	call()
	return nil
}

// codeOf is the status a Go error reports to the library: its *Error code, else UNKNOWN.
func codeOf(err error) (Code, string) {
	var e *Error
	if errors.As(err, &e) && e.Code != 0 {
		return e.Code, e.Message
	}
	return CodeUnknown, err.Error()
}
