package gpu

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestVisibleFollowsCUDAVisibleDevices(t *testing.T) {
	inv := Inventory{GPUs: []GPU{{Index: 0, UUID: "GPU-aaaa1111"}, {Index: 1, UUID: "GPU-abcd2222"}, {Index: 2, UUID: "GPU-cccc3333"}}}
	idx := func(gs []GPU) []int {
		out := []int{}
		for _, g := range gs {
			out = append(out, g.Index)
		}
		return out
	}
	cases := []struct {
		env  string
		set  bool
		want []int
		note string
	}{
		{"", false, []int{0, 1, 2}, ""},
		{"", true, []int{}, ""},
		{"2,0", true, []int{2, 0}, ""},
		{" 1 ", true, []int{1}, ""},
		{"GPU-c,1", true, []int{2, 1}, ""},
		{"0,7,1", true, []int{0}, `entry "7" is not a GPU index here (3 GPU(s))`},
		{"GPU-a,0", true, []int{}, `entry "GPU-a" matches 2 GPUs' UUIDs`},
		{"1,GPU-zz", true, []int{1}, `entry "GPU-zz" matches no GPU's UUID`},
		{"0,0", true, []int{0}, `names GPU 0 twice; CUDA may refuse the list`},
		{"MIG-xyz", true, []int{}, "is a MIG instance"},
		{"GPU-", true, []int{}, "is neither an index nor a GPU UUID"},
		{"nvidia0", true, []int{}, "is neither an index nor a GPU UUID"},
	}
	for _, c := range cases {
		got, note := inv.Visible(c.env, c.set)
		assert.Equal(t, c.want, idx(got), "CUDA_VISIBLE_DEVICES=%q", c.env)
		if c.note == "" {
			assert.Empty(t, note, c.env)
		} else {
			assert.Contains(t, note, c.note, c.env)
		}
	}
}
