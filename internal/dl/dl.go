// Package dl opens shared libraries at run time and finds them by a search
// that records every attempt. Shoal's native back ends (OpenBLAS in nn,
// CUDA in gpu) are loaded this way so that the binary has no link-time
// dependency on them: a machine without the library gets an error listing
// every path tried, never a failure to start.
//
// Open, Sym and Close need cgo; without it Open returns ErrNoCgo. Search
// and its plan are plain Go.
package dl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrNoCgo is returned by Open in a build without cgo, which has no dlopen.
var ErrNoCgo = errors.New("dl: built without cgo (CGO_ENABLED=0), so no library can be loaded")

// Search is where to look for a library.
type Search struct {
	// Env is the value of an environment variable pointing at the library:
	// a file, a directory holding one of Names, or "".
	Env string
	// Names are the file names (sonames) tried in Env's directory, through
	// the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache), and
	// in each of Dirs, in this order.
	Names []string
	// Dirs are searched after the loader.
	Dirs []string
	// NoLoader leaves out the dynamic loader's search by bare name.
	NoLoader bool
	// Refuse, if set, rejects a path before it is tried (e.g. a CUDA stub
	// library) and says why; the refusal is recorded as an attempt.
	Refuse func(path string) string
}

// Candidate is one dlopen argument: an absolute path, or a bare soname for
// the dynamic loader to find. Name is the entry of Search.Names it came
// from ("" for Search.Env given as a file).
type Candidate struct {
	Arg, Name string
}

// Attempt is one library a search tried and why it was not used.
type Attempt struct {
	Path string // the dlopen argument: a path, or a soname for the loader
	Err  string // dlopen's or dlsym's message, or why the library was refused
}

// Plan returns the dlopen arguments in the order to try them, and the
// directories that held none of the names (reported, not tried). exists
// says whether a file is there; directory candidates that do not exist are
// left out, so the error of a failed search lists what was really tried.
func (s Search) Plan(exists func(string) bool) (cands []Candidate, empty []string) {
	seen := map[string]bool{}
	add := func(c Candidate) {
		if !seen[c.Arg] {
			seen[c.Arg] = true
			cands = append(cands, c)
		}
	}
	inDir := func(dir string) bool {
		found := false
		for _, name := range s.Names {
			if p := filepath.Join(dir, name); exists(p) {
				add(Candidate{p, name})
				found = true
			}
		}
		return found
	}
	if s.Env != "" {
		if fi, err := os.Stat(s.Env); err == nil && fi.IsDir() {
			if !inDir(s.Env) {
				empty = append(empty, s.Env)
			}
		} else {
			// A file (or a missing path: dlopen says why it fails).
			add(Candidate{s.Env, ""})
		}
	}
	if !s.NoLoader {
		for _, name := range s.Names {
			add(Candidate{name, name})
		}
	}
	for _, dir := range s.Dirs {
		if !inDir(dir) {
			empty = append(empty, dir)
		}
	}
	return cands, empty
}

// Find tries the plan in order with open and returns the first value it
// accepts, with the attempts that failed before it. When none is accepted
// it returns every attempt and the empty directories in a *NotFoundError.
func Find[T any](s Search, exists func(string) bool, open func(Candidate) (T, error)) (T, []Attempt, error) {
	cands, empty := s.Plan(exists)
	var tried []Attempt
	for _, c := range cands {
		if s.Refuse != nil {
			if why := s.Refuse(c.Arg); why != "" {
				tried = append(tried, Attempt{Path: c.Arg, Err: why})
				continue
			}
		}
		v, err := open(c)
		if err == nil {
			return v, tried, nil
		}
		// dlerror starts with the path already.
		tried = append(tried, Attempt{Path: c.Arg, Err: strings.TrimPrefix(err.Error(), c.Arg+": ")})
	}
	var zero T
	return zero, tried, &NotFoundError{Tried: tried, Empty: empty, Names: s.Names}
}

// NotFoundError is the error of a search that found no usable library.
type NotFoundError struct {
	Tried []Attempt // every library tried, in order
	Empty []string  // the directories searched that held none of the names
	Names []string  // the names looked for in Empty
}

func (e *NotFoundError) Error() string {
	var b strings.Builder
	b.WriteString("no usable library; tried:")
	e.write(&b)
	return b.String()
}

// write lists the attempts and empty directories, one per line.
func (e *NotFoundError) write(b *strings.Builder) {
	for _, a := range e.Tried {
		fmt.Fprintf(b, "\n  %s: %s", a.Path, a.Err)
	}
	if len(e.Tried) == 0 {
		b.WriteString(" nothing")
	}
	if len(e.Empty) > 0 {
		what := "candidate"
		if len(e.Names) > 0 {
			what = strings.Join(e.Names, " or ")
		}
		fmt.Fprintf(b, "\n  no %s in: %s", what, strings.Join(e.Empty, ", "))
	}
}

// List returns the attempts and empty directories as Error does, without
// the first line, for callers that write their own.
func (e *NotFoundError) List() string {
	var b strings.Builder
	e.write(&b)
	return b.String()
}

// FileExists reports whether p is a file (or a link to one): the exists of
// Plan and Find on the real file system.
func FileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}
