package collective

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// layoutOf groups ranks by host id, hosts in the order of their lowest
// rank, and finds the cross-host ring of a rank's local index; hosts of
// different sizes have none.
func TestLayoutOf(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hosts []string
		rank  int
		want  hostLayout
	}{
		{"one rank", []string{"a"}, 0, hostLayout{hosts: 1, perHost: 1, local: []int{0}, cross: []int{0}}},
		{"2x2 in runs", []string{"a", "a", "b", "b"}, 3, hostLayout{hosts: 2, perHost: 2, local: []int{2, 3}, cross: []int{1, 3}}},
		{"2x3 dealt round-robin", []string{"a", "b", "a", "b", "a", "b"}, 4, hostLayout{hosts: 2, perHost: 3, local: []int{0, 2, 4}, cross: []int{4, 5}}},
		{"hosts ordered by lowest rank", []string{"z", "y", "z", "y"}, 1, hostLayout{hosts: 2, perHost: 2, local: []int{1, 3}, cross: []int{0, 1}}},
		{"one a host", []string{"a", "b", "c"}, 2, hostLayout{hosts: 3, perHost: 1, local: []int{2}, cross: []int{0, 1, 2}}},
		{"3+3+2", []string{"a", "a", "a", "b", "b", "b", "c", "c"}, 6, hostLayout{hosts: 3, perHost: 0, local: []int{6, 7}}},
		{"2+1, the big host last", []string{"a", "b", "b"}, 0, hostLayout{hosts: 2, perHost: 0, local: []int{0}}},
	} {
		got := layoutOf(func(r int) string { return tc.hosts[r] }, len(tc.hosts), tc.rank)
		assert.Equal(t, tc.want, got, tc.name)
	}
}
