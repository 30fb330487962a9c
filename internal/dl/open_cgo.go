//go:build cgo

package dl

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

// shoal_copy_err copies the calling thread's dlerror() into err (dlerror is
// per thread, so it must be read in the same C call as the failure).
static void shoal_copy_err(char *err, size_t n) {
	const char *e = dlerror();
	size_t i = 0;
	if (e == NULL) e = "unknown error";
	for (; i + 1 < n && e[i] != 0; i++) err[i] = e[i];
	err[i] = 0;
}

static void *shoal_dlopen(const char *path, char *err, size_t n) {
	void *h;
	dlerror();
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) shoal_copy_err(err, n);
	return h;
}

static void *shoal_dlsym(void *h, const char *name, char *err, size_t n) {
	void *p;
	dlerror();
	p = dlsym(h, name);
	if (p == NULL) shoal_copy_err(err, n);
	return p;
}

static void shoal_dlclose(void *h) { dlclose(h); }

// shoal_dladdr_path returns the file of the object that holds sym.
static const char *shoal_dladdr_path(void *sym) {
	Dl_info info;
	if (dladdr(sym, &info) == 0) return NULL;
	return info.dli_fname;
}
*/
import "C"

import (
	"errors"
	"path/filepath"
	"unsafe"
)

// Lib is a library opened with dlopen(RTLD_NOW | RTLD_LOCAL).
type Lib struct {
	h    unsafe.Pointer
	arg  string
	path string
}

// Open dlopens arg (a path, or a soname for the dynamic loader's search).
// The error is dlerror's message.
func Open(arg string) (*Lib, error) {
	var errBuf [512]C.char
	h := C.shoal_dlopen(cString(arg), &errBuf[0], C.size_t(len(errBuf)))
	if h == nil {
		return nil, errors.New(C.GoString(&errBuf[0]))
	}
	return &Lib{h: h, arg: arg}, nil
}

// Sym returns the address of the symbol name, or dlerror's message.
func (l *Lib) Sym(name string) (unsafe.Pointer, error) {
	var errBuf [512]C.char
	p := C.shoal_dlsym(l.h, cString(name), &errBuf[0], C.size_t(len(errBuf)))
	if p == nil {
		return nil, errors.New(C.GoString(&errBuf[0]))
	}
	return p, nil
}

// Path returns the file the library was loaded from, links resolved: sym
// is any symbol resolved from it. It falls back to Open's argument.
func (l *Lib) Path(sym unsafe.Pointer) string {
	p := l.arg
	if sym != nil {
		if f := C.shoal_dladdr_path(sym); f != nil {
			p = C.GoString(f)
		}
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	return p
}

// Close dlcloses the library. Symbols resolved from it must not be used
// after.
func (l *Lib) Close() { C.shoal_dlclose(l.h) }

// cString returns s NUL-terminated in Go memory, for C calls that do not
// keep it (dlopen and dlsym copy their arguments); it saves including
// <stdlib.h> for C.CString's free.
func cString(s string) *C.char {
	b := append([]byte(s), 0)
	return (*C.char)(unsafe.Pointer(&b[0]))
}
