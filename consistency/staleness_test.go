package consistency

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStalenessStats(t *testing.T) {
	for _, tc := range []struct {
		name         string
		h            Staleness
		pushes       int64
		mean         float64
		worst        int64
		p50, p95     int64
		fresh        float64
		str          string
		sortedAsJSON string // object keys in string order, as map[int64]int64 encodes
	}{
		{name: "nil", h: nil, worst: -1, p50: -1, p95: -1, str: "", sortedAsJSON: "null"},
		{name: "empty", h: Staleness{}, worst: -1, p50: -1, p95: -1, str: "", sortedAsJSON: "{}"},
		{name: "all fresh", h: Staleness{0: 300}, pushes: 300, mean: 0, worst: 0, p50: 0, p95: 0, fresh: 1,
			str: "0:300", sortedAsJSON: `{"0":300}`},
		{name: "spread", h: Staleness{0: 7, 1: 18, 12: 2, 2: 106, 3: 982, 4: 84, 5: 1}, pushes: 1200,
			mean: (18 + 24 + 212 + 2946 + 336 + 5) / 1200.0, worst: 12, p50: 3, p95: 4, fresh: 7 / 1200.0,
			str: "0:7 1:18 2:106 3:982 4:84 5:1 12:2", sortedAsJSON: `{"0":7,"1":18,"12":2,"2":106,"3":982,"4":84,"5":1}`},
		{name: "none fresh", h: Staleness{1: 1, 3: 3}, pushes: 4, mean: 2.5, worst: 3, p50: 3, p95: 3, fresh: 0,
			str: "1:1 3:3", sortedAsJSON: `{"1":1,"3":3}`},
		{name: "zero and negative counts count for nothing", h: Staleness{0: 0, 1: 2, 9: 0, -1: 5, 2: -3}, pushes: 2, mean: 1, worst: 1,
			p50: 1, p95: 1, fresh: 0, str: "1:2", sortedAsJSON: `{"-1":5,"0":0,"1":2,"2":-3,"9":0}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.pushes, tc.h.Pushes())
			assert.InDelta(t, tc.mean, tc.h.Mean(), 1e-12)
			assert.Equal(t, tc.worst, tc.h.Worst())
			assert.Equal(t, tc.p50, tc.h.Quantile(0.5))
			assert.Equal(t, tc.p95, tc.h.Quantile(0.95))
			assert.InDelta(t, tc.fresh, tc.h.Fresh(), 1e-12)
			assert.Equal(t, tc.str, tc.h.String())

			b, err := json.Marshal(tc.h)
			require.NoError(t, err)
			assert.Equal(t, tc.sortedAsJSON, string(b))
			// The encoding is the one the --json output and results
			// files used before there was a type: map[int64]int64's, and
			// map[string]int64's with decimal keys.
			old, err := json.Marshal(map[int64]int64(tc.h))
			require.NoError(t, err)
			assert.Equal(t, string(old), string(b))
		})
	}
}

func TestStalenessDecodesResultsKeys(t *testing.T) {
	in := `{"0":99,"1":1748,"2":20,"5":4,"6":5}`
	var h Staleness
	require.NoError(t, json.Unmarshal([]byte(in), &h))
	assert.Equal(t, Staleness{0: 99, 1: 1748, 2: 20, 5: 4, 6: 5}, h)
	out, err := json.Marshal(h)
	require.NoError(t, err)
	assert.Equal(t, in, string(out))
	// A results file's map[string]int64 with the same counts writes the
	// same bytes.
	asStrings, err := json.Marshal(map[string]int64{"0": 99, "1": 1748, "2": 20, "5": 4, "6": 5})
	require.NoError(t, err)
	assert.Equal(t, string(asStrings), string(out))
}

func TestStalenessAddMerge(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start Staleness
		adds  []int64
		merge []Staleness
		want  Staleness
	}{
		{name: "add to nil", adds: []int64{0, 2, 2}, want: Staleness{0: 1, 2: 2}},
		{name: "merge into nil", merge: []Staleness{{1: 3}, nil, {1: 1, 4: 2}}, want: Staleness{1: 4, 4: 2}},
		{name: "merge nothing leaves nil", merge: []Staleness{nil, {}}, want: nil},
		{name: "add then merge", start: Staleness{0: 5}, adds: []int64{0}, merge: []Staleness{{0: 1, 7: 1}}, want: Staleness{0: 7, 7: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.start
			for _, s := range tc.adds {
				h.Add(s)
			}
			for _, o := range tc.merge {
				h.Merge(o)
			}
			assert.Equal(t, tc.want, h)
		})
	}
}
