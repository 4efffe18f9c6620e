package dsv4

// The C shims live in shim.c (shim.h); the public headers come from the source tree (or CGO_CFLAGS).

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#cgo LDFLAGS: -ldl
*/
import "C"
