package consistency

import "fmt"

// Mode is how the workers agree on the weights. The zero Mode is none of
// them: a Config that leaves it unset fails validation.
type Mode uint8

// The modes. Async, Sync and SSP go through parameter servers; Ring has
// none.
const (
	// Async is Downpour SGD: every push is applied at once.
	Async Mode = iota + 1
	// Sync averages the pushes of a step and applies them once; pulls for
	// the next step wait for it.
	Sync
	// SSP is bounded staleness: pushes are applied at once, scaled by
	// 1/workers, and a pull waits while its step is more than the bound s
	// ahead of the slowest worker. s = 0 is Sync.
	SSP
	// Ring averages each step's gradients by allreduce among the workers,
	// with no server: every worker applies the same update.
	Ring
)

// All lists the modes in the order help texts list them.
func All() []Mode { return []Mode{Async, Sync, SSP, Ring} }

// Parse returns the Mode that String names.
func Parse(s string) (Mode, error) {
	for _, m := range All() {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("mode %q: unknown (want %s, %s, %s or %s)", s, Async, Sync, SSP, Ring)
}

// names are the modes' names, by Mode.
var names = [...]string{Async: "async", Sync: "sync", SSP: "ssp", Ring: "ring"}

// String is the mode's name in flags, JSON and results: "async", "sync",
// "ssp" or "ring"; "Mode(n)" for a value that is no mode.
func (m Mode) String() string {
	if !m.valid() {
		return fmt.Sprintf("Mode(%d)", uint8(m))
	}
	return names[m]
}

func (m Mode) valid() bool { return m >= Async && m <= Ring }

// MarshalText writes the name, so that JSON and flags carry "async",
// "sync", "ssp" or "ring"; a value that is no mode is an error.
func (m Mode) MarshalText() ([]byte, error) {
	if !m.valid() {
		return nil, fmt.Errorf("mode %d: not a mode", uint8(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText parses a name as Parse does.
func (m *Mode) UnmarshalText(b []byte) error {
	p, err := Parse(string(b))
	if err != nil {
		return err
	}
	*m = p
	return nil
}

// UsesServers reports whether the mode goes through parameter servers:
// Async, Sync and SSP do, Ring does not.
func (m Mode) UsesServers() bool { return m == Async || m == Sync || m == SSP }

// Synchronous reports whether, under the staleness bound s (SSP's; the
// other modes ignore it), every worker's step waits for every other
// worker's previous one, so the weights take one update per step: Sync,
// Ring, and SSP with s = 0.
func (m Mode) Synchronous(s int64) bool {
	return m == Sync || m == Ring || (m == SSP && s == 0)
}
