package ps

import (
	"fmt"
	"strings"

	"github.com/shoalml/shoal/shard"
)

// Streaming fragments (Config.Fragments; Streaming DiLoCo, Douillard et
// al. 2025). The vector is cut into F fragments of whole rows of the plan
// (shard.Plan.Fragment), so this shard owns a run of consecutive chunks
// of each: fragment f is its chunks fragLo[f] to fragLo[f+1]−1. A push
// carries one fragment's chunks, exactly; which one it is follows from
// its ranges. The shard's clock counts fragment exchanges: in sync mode
// exchange e (the barrier's step e) is fragment e mod F, the staggered
// schedule every worker follows, and a push of another fragment for it is
// refused; in async mode each fragment's pseudo-gradient is applied as it
// arrives. The outer optimizer's state is per chunk, so each fragment
// has its own.

// validateFragments checks Fragments against the rest of c.
func (c Config) validateFragments() error {
	switch {
	case c.Fragments == 0 || c.Fragments == 1:
		return nil
	case c.Fragments < 0 || c.Fragments > shard.MaxFragments:
		return fmt.Errorf("fragments %d: want 1..%d (0: one)", c.Fragments, shard.MaxFragments)
	case c.LocalSteps == 0:
		return fmt.Errorf("fragments %d: fragments are synchronised every LocalSteps steps, and this shard applies gradients (no local steps)", c.Fragments)
	case c.LocalSteps%c.Fragments != 0:
		return fmt.Errorf("fragments %d with %d local steps: want a divisor of the local steps (one fragment every local-steps/fragments steps)", c.Fragments, c.LocalSteps)
	case c.Journal:
		return fmt.Errorf("fragments %d: the journal records whole-share updates; fragments are not journalled (leave out the journal)", c.Fragments)
	case c.Update.Rule == UpdateDCASGD:
		return fmt.Errorf("fragments %d: the update rule dcasgd corrects the whole share; use average or staleness", c.Fragments)
	}
	return c.Plan.CheckFragments(c.Fragments)
}

// fragments is Config.Fragments with 0 as 1.
func (c Config) fragments() int { return max(c.Fragments, 1) }

// initFragments computes fragLo from the plan; s.chunks are in place.
func (s *Server) initFragments() error {
	f := s.cfg.fragments()
	s.fragLo = make([]int, f+1)
	if f == 1 {
		s.fragLo[1] = len(s.chunks)
		return nil
	}
	p := s.cfg.Plan
	for i := range f {
		lo, hi, err := p.FragmentChunks(f, i)
		if err != nil {
			return err
		}
		// The plan's chunks lo..hi-1 are whole rows: this shard's are
		// lo/Servers … hi/Servers−1 of its own.
		s.fragLo[i], s.fragLo[i+1] = lo/p.Servers, hi/p.Servers
	}
	return nil
}

// fragmentFloats is the floats this shard owns of fragment f.
func (s *Server) fragmentFloats(f int) int {
	return s.chunkEnd(s.fragLo[f+1]-1) - s.chunkAt[s.fragLo[f]]
}

// chunkEnd is where chunk i's floats end in the share.
func (s *Server) chunkEnd(i int) int { return s.chunkAt[i] + s.chunks[i].r.Len }

// fragmentOf returns the fragment in's ranges (validated, of total floats)
// cover exactly, or why they cover none: with one fragment, the whole
// share.
func (s *Server) fragmentOf(in Push, total int) (int, error) {
	f := s.cfg.fragments()
	if f == 1 {
		if total != s.floats {
			return 0, fmt.Errorf("%w: push covers %d floats, the shard owns %d: push every owned chunk (this shard takes no fragments)", ErrInvalidArgument, total, s.floats)
		}
		return 0, nil
	}
	first, last := in.Ranges[0].Off, in.Ranges[len(in.Ranges)-1].End()
	for i := range f {
		lo, hi := s.fragLo[i], s.fragLo[i+1]
		if first == s.chunks[lo].r.Off && last == s.chunks[hi-1].r.End() && total == s.fragmentFloats(i) {
			return i, nil
		}
	}
	var want []string
	for i := range min(f, 4) {
		lo, hi := s.fragLo[i], s.fragLo[i+1]
		want = append(want, fmt.Sprintf("fragment %d: %d floats from %d to %d", i, s.fragmentFloats(i), s.chunks[lo].r.Off, s.chunks[hi-1].r.End()))
	}
	if f > 4 {
		want = append(want, "…")
	}
	return 0, fmt.Errorf("%w: push covers %d floats from %d to %d, which is no fragment of this shard's %d (%s): push one fragment's chunks, exactly; workers and servers take the same number of fragments",
		ErrInvalidArgument, total, first, last, f, strings.Join(want, ", "))
}

// fragmentReader is read limited to fragment f's chunks (read itself
// with one fragment, or nil).
func (s *Server) fragmentReader(f int, read ChunkReader) ChunkReader {
	if read == nil || s.cfg.fragments() == 1 {
		return read
	}
	lo, hi := s.chunks[s.fragLo[f]].r.Off, s.chunks[s.fragLo[f+1]-1].r.End()
	return func(res PushResult, c ChunkRead) {
		if c.Range.Off >= lo && c.Range.End() <= hi {
			read(res, c)
		}
	}
}

// fragmentAt is the fragment whose share begins at vector offset off (0
// where none does).
func (s *Server) fragmentAt(off int) int {
	for i := range s.cfg.fragments() {
		if s.chunks[s.fragLo[i]].r.Off == off {
			return i
		}
	}
	return 0
}
