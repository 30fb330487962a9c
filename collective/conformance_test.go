package collective_test

import (
	"testing"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/collective/collectivetest"
)

// TestMemConformance runs the transport conformance suite on NewMemGroup.
func TestMemConformance(t *testing.T) {
	collectivetest.Conformance(t, func(t *testing.T, n int) []collective.Transport {
		return collective.NewMemGroup(n)
	})
}
