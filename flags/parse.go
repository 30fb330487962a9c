package flags

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// ErrUsage marks a command-line mistake already explained on the flag
// set's output (the command exits 2).
var ErrUsage = errors.New("usage")

// NewFlagSet returns a flag set of `shoal name` that reports errors
// instead of exiting, its usage headed by synopsis.
func NewFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: shoal %s [flags]\n\n%s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
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

// ParseOnly parses fs's flags: -h is flag.ErrHelp, a bad flag ErrUsage
// (the flag package has printed why).
func ParseOnly(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return ErrUsage
	}
	return nil
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
