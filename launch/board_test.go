package launch

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/shoalml/shoal/worker"
)

// A worker process of rank 1 (under mpirun) prints its own epochs; its
// board waited for rank 0's, so its bar stayed up for the whole run.
func TestOwnBoardPrintsTheEpochsOfAnyRank(t *testing.T) {
	var out strings.Builder
	update := OwnBoard(&out, true)
	for e := range 2 {
		update(worker.Progress{Rank: 1, Epoch: e, Epochs: 2, Step: 5, EpochSteps: 10, Samples: 50, LossSum: 25, Correct: 10, Elapsed: time.Second})
		update(worker.Progress{Rank: 1, Epoch: e, Epochs: 2, Step: 10, EpochSteps: 10, Samples: 100, LossSum: 40, Correct: 30, Elapsed: 2 * time.Second, EpochDone: true})
	}
	got := out.String()
	assert.Contains(t, got, "epoch 1/2  loss 0.4000  accuracy  30.00%")
	assert.Contains(t, got, "epoch 2/2  loss 0.4000  accuracy  30.00%")
	assert.Contains(t, got, "50%  loss 0.5000  accuracy  20.00%  epoch ends in 1s", "the bar, with its time estimate")
	assert.True(t, strings.HasSuffix(got, "\n"), "the last epoch's line ends the output: no bar left to glue the next line to")
}
