package ps

import (
	"fmt"
	"math"

	"github.com/shoalml/shoal/optim"
)

// MaxMagnitude is the largest magnitude a shard lets any weight or
// optimizer state value reach: 2^100 (about 1.3e30), far inside float32's
// range (3.4e38), so that no accepted update, however its rounding falls,
// can make one ±Inf or NaN. A push that could take any past it is refused
// whole. Training that works sits many orders of magnitude below it; a
// gradient that gets near is an attack or a run that has diverged, and is
// better refused by name than applied.
const MaxMagnitude = 0x1p100

// unbound forgets what is known of the chunk's magnitudes (its values or
// state were replaced), so the next check measures them.
func (ch *chunk) unbound() { ch.maxValue, ch.maxState = math.Inf(1), math.Inf(1) }

// checkGrowthLocked refuses, changing nothing, an update from in whose
// gradient is at most gmax in magnitude when it could take a weight or an
// optimizer state value of some chunk past MaxMagnitude.
//
// Each chunk keeps bounds on its magnitudes that every step carries
// forward (optim.StepBound), so the check costs nothing per float while
// they stay far inside the limit; only when they no longer prove the
// update safe does it measure the chunk (one read of its values and
// state) and decide on the exact maxima.
func (s *Server) checkGrowthLocked(in Push, gmax float64) error {
	for i := range s.chunks {
		ch := &s.chunks[i]
		if _, _, peak := ch.opt.StepBound(ch.maxValue, ch.maxState, gmax); peak <= MaxMagnitude {
			continue
		}
		ch.maxValue, ch.maxState = optim.MaxAbs(ch.buf.data), ch.opt.StateMaxAbs()
		if _, _, peak := ch.opt.StepBound(ch.maxValue, ch.maxState, gmax); !(peak <= MaxMagnitude) {
			at, g := largest(in.Grads)
			return refuse(RejectedMagnitude, fmt.Errorf("%w: push for step %d from worker %d: its gradient reaches %v (at index %d), which could take chunk %v's weights (now at most %.3g in magnitude) or optimizer state (%.3g) past %.3g; refused whole, nothing changed",
				ErrInvalidArgument, in.Step, in.WorkerID, g, vectorIndex(at, in.Ranges), ch.r, ch.maxValue, ch.maxState, float64(MaxMagnitude)))
		}
	}
	return nil
}

// largest returns the index and value of g's element of largest
// magnitude, for messages.
func largest(g []float32) (int, float32) {
	if len(g) == 0 {
		return 0, 0
	}
	at := 0
	for i, v := range g {
		if math.Abs(float64(v)) > math.Abs(float64(g[at])) {
			at = i
		}
	}
	return at, g[at]
}
