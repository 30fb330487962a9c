package flags

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// ErrUsage marks a command-line mistake already explained on the flag
// set's output (the command exits 2).
var ErrUsage = errors.New("usage")

// NewFlagSet returns a flag set of `shoal name` that reports errors
// instead of exiting, its usage headed by synopsis and its flags listed
// by Section.
func NewFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: shoal %s [flags]\n\n%s\n", name, synopsis)
		printFlags(fs, stderr)
	}
	return fs
}

// Parse parses args and refuses positional arguments.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := ParseOnly(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "shoal %s: unexpected argument %q (flags start with --)\n", fs.Name(), fs.Arg(0))
		return ErrUsage
	}
	return nil
}

// ParseArgs parses fs's flags and wants exactly n arguments after them,
// named by what ("one address HOST:PORT"); otherwise it says so on fs's
// output and returns ErrUsage.
func ParseArgs(fs *flag.FlagSet, args []string, n int, what string) error {
	if err := ParseOnly(fs, args); err != nil {
		return err
	}
	if fs.NArg() != n {
		fmt.Fprintf(fs.Output(), "shoal %s: want %s after the flags, got %d argument(s)\n", fs.Name(), what, fs.NArg())
		return ErrUsage
	}
	return nil
}

// ParseOnly parses fs's flags: -h prints the usage and is flag.ErrHelp;
// a bad flag is ErrUsage, after the flag package's line saying why, the
// flag meant when the name is close to one (a misspelling), and where the
// whole list is, not the list itself.
func ParseOnly(fs *flag.FlagSet, args []string) error {
	usage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		usage()
		return err
	}
	const undefined = "flag provided but not defined: -"
	if name, ok := strings.CutPrefix(err.Error(), undefined); ok {
		if near := nearest(fs, strings.TrimLeft(name, "-")); near != "" {
			fmt.Fprintf(fs.Output(), "did you mean --%s?\n", near)
		}
	}
	fmt.Fprintf(fs.Output(), "shoal %s -h lists every flag\n", fs.Name())
	return ErrUsage
}

// nearest is the flag of fs whose name is closest to name, within an
// edit distance of 2 (or that name is a prefix of), or "".
func nearest(fs *flag.FlagSet, name string) string {
	best, bestD := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		d := editDistance(name, f.Name)
		if strings.HasPrefix(f.Name, name) && len(name) >= 3 {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = f.Name, d
		}
	})
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// render is a group's flags as a child's argv: every flag, in name
// order, with the value of the group that register registered.
func render(register func(*flag.FlagSet)) []string {
	var args []string
	visit(register, func(fl *flag.Flag) { args = append(args, "--"+fl.Name+"="+fl.Value.String()) })
	return args
}

// visit registers a group on a scratch flag set and calls fn for each of
// its flags in name order.
func visit(register func(*flag.FlagSet), fn func(*flag.Flag)) {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	register(fs)
	fs.VisitAll(fn)
}
