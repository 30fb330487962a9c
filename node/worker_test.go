package node

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/nn"
)

// TestAWorkerRefusesServersOfOtherLocalSteps: a worker of H local steps
// and servers that apply another H (0: gradients) would train on
// silently wrong (a gradient through the outer optimizer, or a
// pseudo-gradient through the gradients'); the worker refuses them.
func TestAWorkerRefusesServersOfOtherLocalSteps(t *testing.T) {
	model, err := nn.New(nn.Spec{Arch: "mlp", Hidden: []int{8}}, nn.NewCPU())
	require.NoError(t, err)
	info := client.Info{Mode: consistency.Sync, Workers: 2}
	for _, tn := range model.Layout().Tensors {
		info.Tensors = append(info.Tensors, client.Tensor{Name: tn.Name, Shape: tn.Shape, Offset: tn.Offset})
	}
	cases := []struct {
		name          string
		worker, shard int
		err           string
	}{
		{"both 10", 10, 10, ""},
		{"both none", 0, 0, ""},
		{"worker only", 10, 0, "--local-steps 10: the servers apply pushes of 0 local steps (0: gradients); start both with the same --local-steps"},
		{"servers only", 0, 10, "--local-steps 0: the servers apply pushes of 10 local steps"},
		{"different", 5, 10, "--local-steps 5: the servers apply pushes of 10 local steps"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := &psWorker{WorkerConfig: &WorkerConfig{ID: cluster.Identity{WorldSize: 2}, Model: model, Loop: Loop{Mode: consistency.Sync, LocalSteps: tc.worker}}}
			in := info
			in.LocalSteps = tc.shard
			err := w.check(in)
			if tc.err == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
		})
	}
}

// TestAWorkerRefusesServersOfOtherFragments: a worker and servers that
// cut the vector into different fragments would count different
// exchanges on the shards' clock; the worker refuses them, naming both
// (0 and 1 are both the whole vector).
func TestAWorkerRefusesServersOfOtherFragments(t *testing.T) {
	model, err := nn.New(nn.Spec{Arch: "mlp", Hidden: []int{8}}, nn.NewCPU())
	require.NoError(t, err)
	info := client.Info{Mode: consistency.Sync, Workers: 2, LocalSteps: 10}
	for _, tn := range model.Layout().Tensors {
		info.Tensors = append(info.Tensors, client.Tensor{Name: tn.Name, Shape: tn.Shape, Offset: tn.Offset})
	}
	cases := []struct {
		name          string
		worker, shard int
		err           string
	}{
		{"both 5", 5, 5, ""},
		{"0 and 1", 1, 0, ""},
		{"worker only", 5, 0, "--fragments 5: the servers synchronise 1 fragment(s) (0 or 1: the whole vector); start both with the same --fragments"},
		{"servers only", 0, 2, "--fragments 0: the servers synchronise 2 fragment(s)"},
		{"different", 2, 5, "--fragments 2: the servers synchronise 5 fragment(s)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := &psWorker{WorkerConfig: &WorkerConfig{ID: cluster.Identity{WorldSize: 2}, Model: model, Loop: Loop{Mode: consistency.Sync, LocalSteps: 10, Fragments: tc.worker}}}
			in := info
			in.Fragments = tc.shard
			err := w.check(in)
			if tc.err == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
		})
	}
}
