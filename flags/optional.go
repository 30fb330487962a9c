package flags

import (
	"errors"
	"flag"
	"strconv"
)

// optional is a flag's value that knows whether it was given. Unset, it
// holds its default and reads "", so that a launcher's argv (Args)
// passes "not given" on to its child as --name=, which Set takes as
// unset again. A mode that ignores the flag can then refuse it where a
// person gave it, not where a launcher passed its default on, and a
// worker not told its mode can take the servers'.
type optional[T any] struct {
	v      *T
	given  *bool
	def    T
	parse  func(string) (T, error)
	format func(T) string
}

// String is the value given, or "" where none was (also for the zero
// optional the flag package makes to find a flag's zero value).
func (o *optional[T]) String() string {
	if o.given == nil || !*o.given {
		return ""
	}
	return o.format(*o.v)
}

// Set takes s; "" is not given, the default.
func (o *optional[T]) Set(s string) error {
	if s == "" {
		*o.v, *o.given = o.def, false
		return nil
	}
	v, err := o.parse(s)
	if err != nil {
		return err
	}
	*o.v, *o.given = v, true
	return nil
}

// optionalInt64 registers an int64 flag name on fs, def until given,
// with given set when it is. The usage should say the default: the help
// shows none for a value that reads "".
func optionalInt64(fs *flag.FlagSet, v *int64, given *bool, name string, def int64, usage string) {
	*v, *given = def, false
	fs.Var(&optional[int64]{v: v, given: given, def: def,
		parse: func(s string) (int64, error) {
			n, err := strconv.ParseInt(s, 0, 64)
			if err != nil {
				return 0, errors.New("want an integer")
			}
			return n, nil
		},
		format: func(n int64) string { return strconv.FormatInt(n, 10) }}, name, usage)
}

// optionalString registers a string flag name on fs, as optionalInt64.
func optionalString(fs *flag.FlagSet, v *string, given *bool, name, def, usage string) {
	*v, *given = def, false
	fs.Var(&optional[string]{v: v, given: given, def: def,
		parse:  func(s string) (string, error) { return s, nil },
		format: func(s string) string { return s }}, name, usage)
}
