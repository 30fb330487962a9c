package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDone(t *testing.T) {
	report := func(rank int, kind EventKind, live int) Report {
		return Report{Change: Change{Kind: kind, Member: Member{Meta: Meta{Role: RoleWorker, Rank: rank}}}, Live: live}
	}
	type step struct {
		r       Report
		over    bool
		missing []int
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"every worker left", []step{
			{report(0, EventJoin, 1), false, nil},
			{report(1, EventJoin, 2), false, nil},
			{report(0, EventLeave, 1), false, nil},
			{report(1, EventLeave, 0), true, nil},
		}},
		{"a straggler's death comes last", []step{
			{report(0, EventJoin, 1), false, nil},
			{report(1, EventJoin, 2), false, nil},
			{report(0, EventLeave, 1), false, nil},
			{report(1, EventDead, 0), true, nil},
		}},
		{"every worker died: not a finished run", []step{
			{report(0, EventJoin, 1), false, nil},
			{report(0, EventDead, 0), false, nil},
		}},
		{"one finished before the other came", []step{
			{report(0, EventJoin, 1), false, nil},
			{report(0, EventLeave, 0), true, []int{1}},
			{report(1, EventJoin, 1), false, nil},
			{report(1, EventLeave, 0), true, nil},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Done{Workers: 2}
			for i, s := range tc.steps {
				over, missing := d.Step(s.r)
				assert.Equal(t, s.over, over, "step %d", i)
				assert.Equal(t, s.missing, missing, "step %d", i)
			}
		})
	}
}
