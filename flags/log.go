package flags

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/shoalml/shoal/consistency"
)

// Log configures the logger on stderr, and when a waiting process says
// what it waits for.
type Log struct {
	Level  string
	Format string
	// Stall: how long a wait for other workers or ranks may last before
	// the waiting process logs what it waits for (0: never).
	Stall time.Duration
}

// Register adds the flags; level is --log-level's default.
func (l *Log) Register(fs *flag.FlagSet, level string) {
	fs.StringVar(&l.Level, "log-level", level, SectionOutput.Usage("log level: debug, info, warn or error"))
	fs.StringVar(&l.Format, "log-format", "text", SectionOutput.Usage("log format: text or json"))
	fs.DurationVar(&l.Stall, "stall-warning", 30*time.Second, SectionOutput.Usage("when a sync barrier, the SSP bound or an allreduce has waited this long, log (once per this interval) which workers or ranks it waits for, for which step, since when; 0: never"))
}

// Logger is the logger the flags describe, writing to w.
func (l *Log) Logger(w io.Writer) (*slog.Logger, error) {
	if l.Stall < 0 {
		return nil, fmt.Errorf("--stall-warning %v: want >= 0 (0: never)", l.Stall)
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(l.Level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", l.Level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch l.Format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", l.Format)
}

// WritableFile checks, before any work, that flag's file path can be
// written when the run ends: its folder exists and takes a new file, and
// the path is not a folder. Finding out after hours of training loses the
// weights.
func WritableFile(flag, path string) error {
	if path == "" {
		return nil
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s %s: is a directory, want a file path", flag, path)
	}
	if err := writeProbe(filepath.Dir(path)); err != nil {
		return fmt.Errorf("%s %s: cannot write there: %w", flag, path, err)
	}
	return nil
}

// WritableDir checks that flag's folder exists, or can be made, and takes
// new files.
func WritableDir(flag, dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%s %s: %w", flag, dir, err)
	}
	if err := writeProbe(dir); err != nil {
		return fmt.Errorf("%s %s: cannot write there: %w", flag, dir, err)
	}
	return nil
}

// writeProbe creates a file in dir and removes it.
func writeProbe(dir string) error {
	f, err := os.CreateTemp(dir, ".shoal-write-check-*")
	if err != nil {
		return err
	}
	name := f.Name()
	return errors.Join(f.Close(), os.Remove(name))
}

// Recordable refuses --record-pushes (when set) for a mode whose pushes
// no replay follows.
func Recordable(flag string, mode consistency.Mode) error {
	if flag != "" && mode != consistency.Async && mode != consistency.SSP {
		return fmt.Errorf("--record-pushes: only async and ssp runs are recorded (have --mode %s): their order of pushes is what a replay follows", mode)
	}
	return nil
}
