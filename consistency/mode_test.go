package consistency

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestModes(t *testing.T) {
	for _, tc := range []struct {
		name        string
		mode        Mode
		servers     bool
		synchronous [3]bool // for staleness bounds 0, 1, 2
	}{
		{"async", Async, true, [3]bool{false, false, false}},
		{"sync", Sync, true, [3]bool{true, true, true}},
		{"ssp", SSP, true, [3]bool{true, false, false}},
		{"ring", Ring, false, [3]bool{true, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.name, tc.mode.String())
			got, err := Parse(tc.name)
			require.NoError(t, err)
			assert.Equal(t, tc.mode, got)
			assert.Equal(t, tc.servers, tc.mode.UsesServers())
			for s, want := range tc.synchronous {
				assert.Equal(t, want, tc.mode.Synchronous(int64(s)), "staleness bound %d", s)
			}

			b, err := json.Marshal(map[string]Mode{"mode": tc.mode})
			require.NoError(t, err)
			assert.Equal(t, `{"mode":"`+tc.name+`"}`, string(b))
			var back struct{ Mode Mode }
			require.NoError(t, json.Unmarshal(b, &back))
			assert.Equal(t, tc.mode, back.Mode)
		})
	}
}

func TestAll(t *testing.T) {
	var names []string
	for _, m := range All() {
		names = append(names, m.String())
	}
	assert.Equal(t, []string{"async", "sync", "ssp", "ring"}, names)
}

func TestModeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want string
	}{
		{"unknown", "gossip", `mode "gossip": unknown (want async, sync, ssp or ring)`},
		{"empty", "", `mode "": unknown`},
		{"case matters", "Sync", `mode "Sync": unknown`},
		{"overlap is not a mode", "async-overlap", `mode "async-overlap": unknown`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.in)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			var m Mode
			err = json.Unmarshal([]byte(`"`+tc.in+`"`), &m)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestNoMode(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode Mode
	}{
		{"zero", 0},
		{"past the last", Ring + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Contains(t, tc.mode.String(), "Mode(")
			assert.False(t, tc.mode.UsesServers())
			assert.False(t, tc.mode.Synchronous(0))
			_, err := json.Marshal(tc.mode)
			assert.ErrorContains(t, err, "not a mode")
		})
	}
}
