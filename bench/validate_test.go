package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/results.json from fabricateSmall()")

const testdataResults = "testdata/results.json"

func marshalResults(t testing.TB, r *Results) []byte {
	t.Helper()
	b, err := json.MarshalIndent(r, "", "  ")
	require.NoError(t, err)
	return append(b, '\n')
}

// The committed example is the fabricated one, so that the schema is
// tested against a real file that the Go types produce.
func TestTestdataIsFabricated(t *testing.T) {
	want := marshalResults(t, fabricateSmall())
	if *update {
		require.NoError(t, os.WriteFile(testdataResults, want, 0o644))
	}
	got, err := os.ReadFile(testdataResults)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "testdata/results.json is stale: go test ./bench -run TestTestdataIsFabricated -update")
}

func TestValidateAcceptsGoodDocuments(t *testing.T) {
	file, err := os.ReadFile(testdataResults)
	require.NoError(t, err)
	tests := []struct {
		name string
		data []byte
	}{
		{name: "testdata", data: file},
		{name: "full fixture", data: marshalResults(t, fabricate())},
		{name: "no runs", data: marshalResults(t, &Results{
			Schema: SchemaVersion, Command: []string{"shoal", "bench", "train"}, Revision: "unknown",
			Machine: Machine{OS: "linux", Arch: "amd64", CPUs: 1}, Runs: []Record{},
		})},
		{name: "unknown optional fields", data: mutate(t, file, func(doc map[string]any) {
			doc["new_top_level"] = map[string]any{"x": 1}
			run(doc, 0)["energy_joules"] = 12.5
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.NoError(t, Validate(tt.data))
		})
	}
}

func TestValidateRejects(t *testing.T) {
	file, err := os.ReadFile(testdataResults)
	require.NoError(t, err)
	var fixture Results
	require.NoError(t, json.Unmarshal(file, &fixture))
	id := func(i int) string { return fixture.Runs[i].ID }
	ringW4 := -1
	for i, r := range fixture.Runs {
		if r.Mode == "ring" && r.Workers == 4 && ringW4 < 0 {
			ringW4 = i
		}
	}
	require.GreaterOrEqual(t, ringW4, 0)

	tests := []struct {
		name   string
		mutate func(doc map[string]any)
		want   Problem // Message is a substring
	}{
		{
			name:   "missing field",
			mutate: func(doc map[string]any) { delete(run(doc, 2), "samples_per_sec") },
			want:   Problem{Run: 2, ID: id(2), Field: "samples_per_sec", Message: "missing (required)"},
		},
		{
			name: "missing nested field",
			mutate: func(doc map[string]any) {
				delete(run(doc, 1)["step_time"].(map[string]any)["pull"].(map[string]any), "p95")
			},
			want: Problem{Run: 1, ID: id(1), Field: "step_time.pull.p95", Message: "missing (required)"},
		},
		{
			name:   "wrong type",
			mutate: func(doc map[string]any) { run(doc, 1)["workers"] = "four" },
			want:   Problem{Run: 1, ID: id(1), Field: "workers", Message: "got string, want integer"},
		},
		{
			name:   "fractional integer",
			mutate: func(doc map[string]any) { run(doc, 1)["steps"] = 10.5 },
			want:   Problem{Run: 1, ID: id(1), Field: "steps", Message: "got number, want integer"},
		},
		{
			name:   "bad mode",
			mutate: func(doc map[string]any) { run(doc, 0)["mode"] = "allreduce" },
			want:   Problem{Run: 0, ID: id(0), Field: "mode", Message: "value must be one of 'async', 'async-overlap', 'sync', 'ssp', 'ring', 'ddp'"},
		},
		{
			name:   "wrong schema version",
			mutate: func(doc map[string]any) { doc["schema"] = "shoal.bench.train/v0" },
			want:   Problem{Run: -1, Field: "schema", Message: "value must be 'shoal.bench.train/v1'"},
		},
		{
			name:   "missing document field",
			mutate: func(doc map[string]any) { delete(doc["machine"].(map[string]any), "cpus") },
			want:   Problem{Run: -1, Field: "machine.cpus", Message: "missing (required)"},
		},
		{
			name:   "started is not a time",
			mutate: func(doc map[string]any) { doc["started"] = "yesterday" },
			want:   Problem{Run: -1, Field: "started", Message: "date-time"},
		},
		{
			name:   "negative ratio",
			mutate: func(doc map[string]any) { run(doc, 0)["comm"].(map[string]any)["ratio"] = -0.5 },
			want:   Problem{Run: 0, ID: id(0), Field: "comm.ratio", Message: "minimum: got -0.5, want 0"},
		},
		{
			name:   "accuracy above 1",
			mutate: func(doc map[string]any) { run(doc, 3)["test_accuracy"] = 97.5 },
			want:   Problem{Run: 3, ID: id(3), Field: "test_accuracy", Message: "want one of: value must be -1; or maximum: got 97.5, want 1"},
		},
		{
			name:   "curve point out of range",
			mutate: func(doc map[string]any) { run(doc, 0)["curve"].([]any)[2].(map[string]any)["accuracy"] = 1.2 },
			want:   Problem{Run: 0, ID: id(0), Field: "curve[2].accuracy", Message: "maximum: got 1.2, want 1"},
		},
		{
			name:   "staleness key not a number",
			mutate: func(doc map[string]any) { run(doc, 1)["staleness"].(map[string]any)["two"] = 3 },
			want:   Problem{Run: 1, ID: id(1), Field: "staleness", Message: "invalid propertyName 'two'"},
		},
		{
			name:   "ring with servers",
			mutate: func(doc map[string]any) { run(doc, ringW4)["servers"] = 2 },
			want:   Problem{Run: ringW4, ID: id(ringW4), Field: "servers", Message: "value must be 0"},
		},
		{
			name:   "duplicate id",
			mutate: func(doc map[string]any) { run(doc, 1)["id"] = id(0) },
			want:   Problem{Run: 1, ID: id(0), Field: "id", Message: "duplicate: runs[0] has the same id"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(mutate(t, file, tt.mutate))
			require.Error(t, err)
			var verr *ValidationError
			require.ErrorAs(t, err, &verr)
			require.Len(t, verr.Problems, 1, "%v", err)
			got := verr.Problems[0]
			assert.Equal(t, tt.want.Run, got.Run, "run")
			assert.Equal(t, tt.want.ID, got.ID, "id")
			assert.Equal(t, tt.want.Field, got.Field, "field")
			assert.Contains(t, got.Message, tt.want.Message)
			// The message names the record and the field.
			if tt.want.Run >= 0 {
				assert.Contains(t, err.Error(), "runs["+strconv.Itoa(tt.want.Run)+"] (id \""+tt.want.ID+"\"): "+tt.want.Field+": ")
			} else {
				assert.Contains(t, err.Error(), "document: "+tt.want.Field+": ")
			}
		})
	}
}

func TestValidateListsEveryProblem(t *testing.T) {
	file, err := os.ReadFile(testdataResults)
	require.NoError(t, err)
	data := mutate(t, file, func(doc map[string]any) {
		run(doc, 0)["mode"] = "bogus"
		run(doc, 4)["batch"] = 0
		doc["revision"] = ""
	})
	err = Validate(data)
	var verr *ValidationError
	require.ErrorAs(t, err, &verr)
	require.Len(t, verr.Problems, 3, "%v", err)
	// Document problems first, then by record.
	assert.Equal(t, []int{-1, 0, 4}, []int{verr.Problems[0].Run, verr.Problems[1].Run, verr.Problems[2].Run})
	assert.Equal(t, 4, strings.Count(err.Error(), "\n")+1, "a heading and one line per problem:\n%v", err)
}

func TestValidateNotJSON(t *testing.T) {
	for _, data := range []string{"", "{", `{"schema": "x"} trailing`} {
		err := Validate([]byte(data))
		require.Error(t, err, "%q", data)
		var verr *ValidationError
		assert.False(t, errors.As(err, &verr), "%q: not JSON is not a schema problem", data)
		assert.Contains(t, err.Error(), "not JSON")
	}
	var verr *ValidationError
	require.ErrorAs(t, Validate([]byte(`[]`)), &verr)
	assert.Equal(t, "got array, want object", verr.Problems[0].Message)
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	want := fabricate()

	t.Run("newer optional fields load", func(t *testing.T) {
		data := mutate(t, marshalResults(t, want), func(doc map[string]any) {
			doc["harness_version"] = "v2"
			run(doc, 0)["gpu"] = map[string]any{"name": "H100"}
		})
		path := filepath.Join(dir, "results.json")
		require.NoError(t, os.WriteFile(path, data, 0o644))
		got, err := Load(path)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	})
	t.Run("invalid", func(t *testing.T) {
		data := mutate(t, marshalResults(t, want), func(doc map[string]any) { delete(run(doc, 5), "model") })
		path := filepath.Join(dir, "bad.json")
		require.NoError(t, os.WriteFile(path, data, 0o644))
		_, err := Load(path)
		var verr *ValidationError
		require.ErrorAs(t, err, &verr)
		assert.Contains(t, err.Error(), path)
		assert.Contains(t, err.Error(), `runs[5] (id "`+want.Runs[5].ID+`"): model: missing (required)`)
	})
	t.Run("missing file", func(t *testing.T) {
		_, err := Load(filepath.Join(dir, "nope.json"))
		assert.ErrorIs(t, err, fs.ErrNotExist)
	})
}

func FuzzValidate(f *testing.F) {
	file, err := os.ReadFile(testdataResults)
	require.NoError(f, err)
	f.Add(file)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"schema":"shoal.bench.train/v1","runs":[{"id":"a"},{"id":"a"}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		err := Validate(data)
		var verr *ValidationError
		if errors.As(err, &verr) {
			require.NotEmpty(t, verr.Problems)
			for _, p := range verr.Problems {
				require.NotEmpty(t, p.Message)
			}
		}
		if err == nil {
			// A valid document is an object with the required fields.
			var r Results
			if json.Unmarshal(data, &r) == nil {
				require.Equal(t, SchemaVersion, r.Schema)
			}
		}
	})
}

// mutate decodes a document, lets f change it and encodes it again.
func mutate(t *testing.T, data []byte, f func(doc map[string]any)) []byte {
	t.Helper()
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&doc))
	f(doc)
	out, err := json.Marshal(doc)
	require.NoError(t, err)
	return out
}

func run(doc map[string]any, i int) map[string]any {
	return doc["runs"].([]any)[i].(map[string]any)
}
